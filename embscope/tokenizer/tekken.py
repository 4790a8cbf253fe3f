"""Mistral's Tekken tokenizer files (``tekken.json``), read with tiktoken.

A Tekken file holds byte-level BPE ranks (``vocab``: base64 ``token_bytes`` per ``rank``), the
split regex (``config.pattern``) and how many ids the control tokens take first
(``config.default_num_special_tokens``, 1000 in ``tekken_240911.json``). Token id = rank + that
number, and only the first ``default_vocab_size − num_special`` ranks are used — as Mistral's
reference implementation (``mistral_common.tokens.tokenizers.tekken.Tekkenizer``) does.

Worked example: rank 0 (byte ``0x00``) is id 1000; ids 0–999 are control tokens (``<unk>``,
``<s>``, ``[INST]``…), never produced from plain text.
"""

from __future__ import annotations

import base64

from embscope.errors import VocabError
from embscope.tokenizer.backends import TiktokenVocabulary


def is_tekken(spec: dict) -> bool:
    """Whether a parsed JSON file is a Tekken tokenizer (``config.pattern`` and a ``vocab`` list)."""
    return isinstance(spec.get("config"), dict) and "pattern" in spec["config"] and isinstance(spec.get("vocab"), list)


def tekken_vocabulary(spec: dict, name: str) -> TiktokenVocabulary:
    """A :class:`TiktokenVocabulary` for a parsed Tekken file."""
    import tiktoken

    cfg = spec["config"]
    try:
        n_special = int(cfg.get("default_num_special_tokens", len(spec.get("special_tokens") or [])))
        size = int(cfg.get("default_vocab_size", n_special + len(spec["vocab"])))
        n_ranks = size - n_special
        ranks = {base64.b64decode(v["token_bytes"]): int(v["rank"]) + n_special
                 for v in spec["vocab"][:n_ranks]}
    except (KeyError, TypeError, ValueError) as exc:
        raise VocabError(f"{name}: not a valid Tekken file ({exc}); pass Mistral's tekken.json") from None
    listed = [s.get("token_str") for s in spec.get("special_tokens") or []]
    specials = {}
    for i in range(n_special):
        text = listed[i] if i < len(listed) and listed[i] else f"<SPECIAL_{i}>"
        specials.setdefault(text, i)
    enc = tiktoken.Encoding(name=name, pat_str=cfg["pattern"], mergeable_ranks=ranks, special_tokens=specials)
    return TiktokenVocabulary(enc, name)
