"""One interface over every tokenizer format embscope reads.

A :class:`Vocabulary` answers the questions a vocabulary review asks of a tokenizer, whatever its
format (HF ``tokenizer.json``, tiktoken rank files, sentencepiece ``.model``, GGUF metadata):

- ``len(vocab)``: number of token ids, special tokens included;
- ``token_bytes(i)``: the raw bytes token ``i`` stands for (``None`` for special tokens and ids that
  map to no bytes);
- ``display(i)``: a readable string for token ``i`` (untrusted text: escape it before HTML);
- ``special_ids``, ``byte_ids`` (byte-fallback pieces such as ``<0xE3>``), ``unk_id``;
- ``encode_batch(texts)``: ids per text, no special tokens added, through the fastest batch path
  the backend has (Rust, multi-threaded);
- ``decode(ids)``;
- ``categories()``: one of ``normal, special, byte, unreachable, undecodable`` per id.

Category meanings (the ``category`` column of ``tokens.parquet``):

- ``special``: control tokens (``<|im_start|>``, ``[CLS]``, ``<|reserved_special_token_3|>``).
- ``byte``: byte-fallback pieces (``<0x41>``) of sentencepiece-style vocabularies.
- ``undecodable``: a non-special id whose bytes are not valid UTF-8 on their own (a fragment of a
  multi-byte character, e.g. ``b"\\xe5\\x8f"``). Normal in byte-level BPE; listed apart because
  such rows are learnt only in context.
- ``unreachable``: a non-special token that the tokenizer never emits for its own text
  (``encode(decode([i])) != [i]``), e.g. merges shadowed by others — the rows the Magikarp study
  (Land & Bartolo 2024) calls unreachable.
- ``normal``: everything else.
- ``padding`` is not a tokenizer category: it is given by :mod:`embscope.models.model` to matrix rows past
  the tokenizer's size.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

CATEGORIES = ("normal", "special", "byte", "unreachable", "undecodable", "padding")


class Vocabulary(ABC):
    """Abstract tokenizer view. Subclasses live in :mod:`embscope.tokenizer.load`."""

    #: short name for tables (e.g. ``"gpt2"``, ``"qwen2"``, ``"smollm2-135m"``)
    name: str
    #: which library does the work: ``tokenizers``, ``tiktoken``, ``sentencepiece``
    backend: str
    special_ids: frozenset[int] = frozenset()
    byte_ids: frozenset[int] = frozenset()
    unk_id: int | None = None

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def token_bytes(self, i: int) -> bytes | None: ...

    @abstractmethod
    def display(self, i: int) -> str: ...

    @abstractmethod
    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]: ...

    @abstractmethod
    def decode(self, ids: Sequence[int]) -> str: ...

    def encode(self, text: str) -> list[int]:
        return self.encode_batch([text])[0]

    def all_token_bytes(self) -> list[bytes | None]:
        """:meth:`token_bytes` of every id, computed once per vocabulary (a fresh list each call)."""
        cached = self.__dict__.get("_all_bytes")
        if cached is None:
            cached = self.__dict__["_all_bytes"] = [self.token_bytes(i) for i in range(len(self))]
        return list(cached)

    def displays(self) -> list[str]:
        """:meth:`display` of every id, computed once per vocabulary (1.5 s on a 262k vocabulary;
        a fresh list each call)."""
        cached = self.__dict__.get("_displays")
        if cached is None:
            cached = self.__dict__["_displays"] = [self.display(i) for i in range(len(self))]
        return list(cached)

    def decode_batch(self, batch: Sequence[Sequence[int]]) -> list[str]:
        """:meth:`decode` of each id list (backends with a batch call override this)."""
        return [self.decode(ids) for ids in batch]

    def categories(self) -> list[str]:
        """Category per id (see the module docstring). Computed once, then cached."""
        cached = getattr(self, "_categories", None)
        if cached is None:
            cached = self._compute_categories()
            self._categories = cached
        return cached

    def _compute_categories(self, reachability: bool = True) -> list[str]:
        """``reachability=False``: no token is tested (none is "unreachable"), for a tokenizer whose
        pieces cannot be reached from their own text (a subclass that keeps them normal)."""
        n = len(self)
        cats = ["normal"] * n
        candidates: list[int] = []
        texts: list[str] = []
        raw = self.all_token_bytes()  # computed once per vocabulary, shared with the tables
        for i in range(n):
            if i in self.special_ids:
                cats[i] = "special"
                continue
            if i in self.byte_ids:
                cats[i] = "byte"
                continue
            b = raw[i]
            if b is None:
                cats[i] = "undecodable"
                continue
            try:
                s = b.decode("utf-8")
            except UnicodeDecodeError:
                cats[i] = "undecodable"
                continue
            candidates.append(i)
            texts.append(s)
        # Reachability: a token is reachable when its own text encodes back to exactly it.
        for i, ids in zip(candidates, self.encode_batch(texts) if reachability else ()):
            if ids != [i]:
                cats[i] = "unreachable"
        return cats
