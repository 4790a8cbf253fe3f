"""Writing a model folder that transformers loads: the tokenizer beside the weights, no pointer to
foreign code, ordinary permissions. Used by ``extend --apply`` and ``--repair``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from embscope.models.model import LoadedModel

#: how a patched model is written: ``full`` (a transformers folder), ``rows`` (the new rows only),
#: ``auto`` (full when the whole model loads)
MODES = ("auto", "full", "rows")


def hf_tokenizer(model: "LoadedModel", ext, config: dict):
    """``PreTrainedTokenizerFast`` over the extended tokenizer, with the model's special tokens."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    from embscope.models.chat_template import read_chat_template

    specials = {}
    for key in ("bos", "eos", "pad", "unk"):
        i = config.get(f"{key}_token_id")
        i = i[0] if isinstance(i, list) and i else i
        if isinstance(i, int) and 0 <= i < ext.get_vocab_size(True):
            specials[f"{key}_token"] = ext.id_to_token(i)
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(ext.to_str()), **specials)
    template = read_chat_template(model)
    if template:
        tok.chat_template = template
    return tok


def drop_auto_map(folder: Path) -> None:
    """Remove ``auto_map`` (which tells transformers to import code from the folder or a hub repo)
    from every JSON file written: the extended model loads with the library's own classes only."""
    for path in folder.glob("*.json"):
        try:
            data = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError, RecursionError):  # RecursionError: nested past any real file
            continue
        if isinstance(data, dict) and "auto_map" in data:
            del data["auto_map"]
            path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", "utf-8")


def make_readable(folder: Path) -> None:
    """Temporary folders are created private (0700); the result is an ordinary folder (0755/0644)."""
    os.chmod(folder, 0o755)
    for f in folder.rglob("*"):
        os.chmod(f, 0o755 if f.is_dir() else 0o644)
