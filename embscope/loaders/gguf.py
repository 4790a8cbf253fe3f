"""GGUF files (llama.cpp): metadata, the tokenizer, and dequantised ``token_embd``/``output``.

GGUF stores quantised blocks (Q8_0, Q4_K, …); :func:`gguf.quants.dequantize` turns them back into
float32. The tensor shape GGUF lists is ``[d, V]`` (fastest axis first); the array is ``(V, d)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from embscope.errors import ModelFileError


def open_gguf(path: Path):
    """A ``gguf.GGUFReader`` (memory-mapped), with a clear error for files that are not GGUF."""
    import gguf

    path = Path(path)
    try:
        with path.open("rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise ModelFileError(f"cannot open {path}: {exc.strerror}") from None
    if magic != b"GGUF":
        raise ModelFileError(f"{path.name} is not a GGUF file (magic {magic!r}); pass a .gguf model file")
    try:
        return gguf.GGUFReader(str(path), "r")
    except Exception as exc:
        raise ModelFileError(f"{path.name} is a damaged GGUF file ({type(exc).__name__}: {exc}); re-download it") from None


def metadata(reader) -> dict[str, Any]:
    """Scalar and short-array metadata as plain Python values (the big tokenizer arrays skipped)."""
    meta: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if key.startswith("tokenizer.ggml.") and key not in ("tokenizer.ggml.model", "tokenizer.ggml.pre"):
            continue
        if key.startswith("GGUF."):
            continue
        try:
            meta[key] = field.contents()
        except Exception:  # unknown value types: skip rather than fail
            continue
    return meta


def read_matrices(reader, *, where: str):
    """Return ``(embed, output_or_None, names, dtype)`` as float32 numpy arrays of shape (V, d)."""
    import numpy as np
    from gguf.quants import dequantize

    tensors = {t.name: t for t in reader.tensors}
    if "token_embd.weight" not in tensors:
        raise ModelFileError(f"{where} has no token_embd.weight tensor; it is not a language-model GGUF "
                             "(or a split file: pass the first part)")

    def load(t):
        arr = dequantize(t.data, t.tensor_type)
        rows = int(t.shape[-1]) if len(t.shape) > 1 else 1
        return np.ascontiguousarray(arr.reshape(rows, -1), dtype=np.float32)

    embed = load(tensors["token_embd.weight"])
    out = load(tensors["output.weight"]) if "output.weight" in tensors else None
    names = {"embed": "token_embd.weight", "output": "output.weight" if out is not None else None}
    return embed, out, names, tensors["token_embd.weight"].tensor_type.name


def gguf_vocabulary(path: Path, *, name: str):
    """The tokenizer stored in a GGUF file, through transformers' GGUF tokenizer converter."""
    from transformers import AutoTokenizer

    from embscope.tokenizers import HFVocabulary

    path = Path(path)
    try:
        tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    except Exception as exc:
        raise ModelFileError(f"cannot read the tokenizer inside {path.name}: {exc}") from None
    return HFVocabulary(tok.backend_tokenizer, name)
