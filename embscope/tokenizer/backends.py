"""Vocabulary backends: HF ``tokenizers``, tiktoken rank files, sentencepiece.

Every backend implements :class:`embscope.tokenizer.base.Vocabulary`; build one with
:func:`embscope.tokenizer.load_vocabulary`.

Byte-level BPE (GPT-2 lineage) stores each token as printable characters standing for bytes
(``Ġ`` = space, ``Ċ`` = newline); :func:`bytes_to_unicode` is that table, after Radford et al. 2019
(GPT-2's ``encoder.py``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from functools import lru_cache

from embscope.tokenizer.base import Vocabulary

_BYTE_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
#: every string ``_BYTE_PIECE`` matches (a set lookup per piece beats a regex on 10⁵ pieces)
_BYTE_PIECES = frozenset(f"<0x{h}{l}>" for h in "0123456789ABCDEFabcdef" for l in "0123456789ABCDEFabcdef")


#: categories per tokenizer (class, hash of its JSON and pieces), the last few computed in this process
_CATEGORIES: dict[tuple, list[str]] = {}
#: tokenizers whose categories are kept (a diff holds two, a run rarely more than a few)
_CATEGORIES_KEPT = 8


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """The GPT-2 byte → printable-character table (256 entries).

    Printable Latin-1 bytes map to themselves; the other 68 bytes map to U+0100 onwards, in order.

    >>> bytes_to_unicode()[ord(" ")], bytes_to_unicode()[ord("\\n")]
    ('Ġ', 'Ċ')
    """
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    table = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


@lru_cache(maxsize=1)
def unicode_to_bytes() -> dict[str, int]:
    return {c: b for b, c in bytes_to_unicode().items()}


def display_bytes(b: bytes) -> str:
    """Readable text for raw token bytes: UTF-8 where valid, ``\\xNN`` for stray bytes.

    >>> display_bytes(b"caf\\xc3\\xa9"), display_bytes(b"\\xe5\\x8f")
    ('café', '\\\\xe5\\\\x8f')
    """
    return b.decode("utf-8", errors="backslashreplace")


#: mean characters per text under which a tiktoken batch is encoded in a plain loop
SHORT_TEXT_CHARS = 32


def _threads() -> int:
    return max(1, min(8, os.cpu_count() or 1))


# --------------------------------------------------------------------------------------------
# HF tokenizers
# --------------------------------------------------------------------------------------------


class HFVocabulary(Vocabulary):
    """A ``tokenizers.Tokenizer`` (``tokenizer.json``): BPE, WordPiece, Unigram.

    How a token string maps to bytes depends on the model family, read from the JSON:
    byte-level BPE (``Ġ`` table), sentencepiece-style (``▁`` = space, ``<0xNN>`` byte pieces),
    WordPiece (``##`` continues a word).
    """

    backend = "tokenizers"

    def __init__(self, tok, name: str, spec: dict | None = None, pieces: list[str] | None = None):
        """``spec``: the ``tokenizer.json`` content (vocab and merges may be left out); ``pieces``:
        the token strings by id when the caller has them (GGUF), to skip building them again."""
        # Counting needs every token: a tokenizer.json saved for inference may truncate (MiniLM
        # truncates at 128) or pad; both would corrupt fertility and savings figures.
        tok.no_truncation()
        tok.no_padding()
        self.tok = tok
        self.name = name
        spec = spec if spec is not None else json.loads(tok.to_str())
        model = spec.get("model") or {}
        self.model_type = model.get("type", "")
        blob = json.dumps([spec.get("pre_tokenizer"), spec.get("decoder")])
        self.byte_level = '"ByteLevel"' in blob
        self.metaspace = '"Metaspace"' in blob or "▁" in blob or bool(model.get("byte_fallback"))
        self.wordpiece_prefix = model.get("continuing_subword_prefix") if self.model_type == "WordPiece" else None
        added = spec.get("added_tokens") or []
        self.special_ids = frozenset(a["id"] for a in added if a.get("special"))
        self._size = tok.get_vocab_size(with_added_tokens=True)
        # id → token string; ids can have holes (added tokens placed past the model vocab)
        if pieces is not None and len(pieces) == self._size:
            self._pieces: list[str | None] = list(pieces)
        else:
            self._pieces = [None] * self._size
            for piece, i in tok.get_vocab(with_added_tokens=True).items():
                if 0 <= i < self._size:
                    self._pieces[i] = piece
        self._added = {a["id"]: a["content"] for a in added}
        self.byte_ids = frozenset(i for i, p in enumerate(self._pieces)
                                  if p in _BYTE_PIECES) if self.metaspace else frozenset()
        unk = model.get("unk_token")
        self.unk_id = tok.token_to_id(unk) if isinstance(unk, str) else None

    def __len__(self) -> int:
        return self._size

    def added_tokens(self) -> list[tuple[int, str, bool]]:
        """``(id, content, special)`` of each entry of ``tokenizer.json``'s ``added_tokens``, in
        its order (read at load: no second parse of the JSON)."""
        return [(i, text, i in self.special_ids) for i, text in self._added.items()]

    def piece(self, i: int) -> str | None:
        """The token as the tokenizer stores it (``Ġthe``, ``▁the``, ``##ing``)."""
        return self._pieces[i] if 0 <= i < self._size else None

    def token_bytes(self, i: int) -> bytes | None:
        p = self.piece(i)
        if p is None or i in self.special_ids:
            return None
        if i in self._added:  # user-defined added token: literal text
            return p.encode("utf-8")
        if self.byte_level:
            table = unicode_to_bytes()
            try:
                return bytes(table[c] for c in p)
            except KeyError:
                return p.encode("utf-8")
        if self.metaspace:
            m = _BYTE_PIECE.match(p)
            if m:
                return bytes([int(m.group(1), 16)])
            return p.replace("▁", " ").encode("utf-8")
        if self.wordpiece_prefix and p.startswith(self.wordpiece_prefix):
            return p[len(self.wordpiece_prefix):].encode("utf-8")
        return p.encode("utf-8")

    def display(self, i: int) -> str:
        if i in self.special_ids or i in self._added:
            return self._pieces[i] or ""
        b = self.token_bytes(i)
        if b is None:
            return ""
        if self.wordpiece_prefix and (self._pieces[i] or "").startswith(self.wordpiece_prefix):
            return self._pieces[i] or ""
        return display_bytes(b)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        texts = list(texts)
        fast = getattr(self.tok, "encode_batch_fast", None)
        encs = (fast or self.tok.encode_batch)(texts, add_special_tokens=False)
        return [e.ids for e in encs]

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=False)

    def decode_batch(self, batch: Sequence[Sequence[int]]) -> list[str]:
        return self.tok.decode_batch([list(ids) for ids in batch], skip_special_tokens=False)

    def _compute_categories(self) -> list[str]:
        # The categories follow from the tokenizer alone (its JSON and the pieces read off it), and
        # one process often loads the same tokenizer many times (a training callback's checks, a
        # diff of two folders of one tokenizer): computed once per tokenizer, re-encoding every
        # piece (~1 s on 49,152 tokens) is not repeated.
        import hashlib

        digest = hashlib.sha256(self.tok.to_str().encode("utf-8"))
        digest.update("\0".join(p if p is not None else "\1" for p in self._pieces).encode("utf-8", "surrogatepass"))
        key = (type(self), digest.hexdigest())
        cached = _CATEGORIES.get(key)
        if cached is None:
            # Word-initial and continuation pieces can't be reached from their own text alone
            # (``##ing`` never starts a word; ``▁the`` gains a prefix space), so reachability by
            # re-encoding is not meaningful here: they stay normal, and nothing is re-encoded
            # (Gemma-3's 262,144 pieces: ~1.5 s).
            cats = super()._compute_categories(reachability=not (self.wordpiece_prefix or self.metaspace))
            while len(_CATEGORIES) >= _CATEGORIES_KEPT:
                _CATEGORIES.pop(next(iter(_CATEGORIES)))
            _CATEGORIES[key] = cached = cats
        return list(cached)


# --------------------------------------------------------------------------------------------
# tiktoken
# --------------------------------------------------------------------------------------------


class TiktokenVocabulary(Vocabulary):
    """A ``tiktoken.Encoding``: byte-level BPE ranks plus special tokens.

    Rank files may leave ids unused (cl100k has no id 100256); those ids have no bytes.
    """

    backend = "tiktoken"

    def __init__(self, enc, name: str):
        self.enc = enc
        self.name = name
        self._size = enc.n_vocab
        self.special_ids = frozenset(enc.encode_single_token(s) for s in enc.special_tokens_set)
        self._special_text = {enc.encode_single_token(s): s for s in enc.special_tokens_set}

    def __len__(self) -> int:
        return self._size

    def token_bytes(self, i: int) -> bytes | None:
        if i in self.special_ids:
            return None
        try:
            return self.enc.decode_single_token_bytes(i)
        except KeyError:
            return None

    def display(self, i: int) -> str:
        if i in self._special_text:
            return self._special_text[i]
        b = self.token_bytes(i)
        return "" if b is None else display_bytes(b)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        texts = list(texts)
        if sum(map(len, texts)) < SHORT_TEXT_CHARS * len(texts):
            # single words (per-word rates): tiktoken's batch submits one thread-pool task per text,
            # ~8x slower than a plain loop for texts this short (2,747 words: 0.17 s vs 0.02 s)
            return [self.enc.encode_ordinary(t) for t in texts]
        return self.enc.encode_ordinary_batch(texts, num_threads=_threads())

    def decode(self, ids: Sequence[int]) -> str:
        return self.enc.decode(list(ids))


# --------------------------------------------------------------------------------------------
# sentencepiece
# --------------------------------------------------------------------------------------------


class SentencePieceVocabulary(Vocabulary):
    """A sentencepiece ``.model`` (Llama 2, Mistral v0.1, Gemma). ``▁`` marks a leading space."""

    backend = "sentencepiece"

    def __init__(self, sp, name: str):
        self.sp = sp
        self.name = name
        n = sp.get_piece_size()
        self._size = n
        self.special_ids = frozenset(i for i in range(n) if sp.is_control(i))
        self.byte_ids = frozenset(i for i in range(n) if sp.is_byte(i))
        self.unk_id = sp.unk_id() if sp.unk_id() >= 0 else None

    def __len__(self) -> int:
        return self._size

    def token_bytes(self, i: int) -> bytes | None:
        if i in self.special_ids or self.sp.is_unknown(i):
            return None
        p = self.sp.id_to_piece(i)
        m = _BYTE_PIECE.match(p)
        if m:
            return bytes([int(m.group(1), 16)])
        return p.replace("▁", " ").encode("utf-8")

    def display(self, i: int) -> str:
        if i in self.special_ids or self.sp.is_unknown(i):
            return self.sp.id_to_piece(i)
        b = self.token_bytes(i)
        return "" if b is None else display_bytes(b)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return self.sp.encode(list(texts), num_threads=_threads())

    def decode(self, ids: Sequence[int]) -> str:
        return self.sp.decode(list(ids))

    def _compute_categories(self, reachability: bool = True) -> list[str]:
        # ``▁``-prefixed pieces cannot be reached from their own text: they stay normal, and none
        # is re-encoded to find out
        return super()._compute_categories(reachability=False)
