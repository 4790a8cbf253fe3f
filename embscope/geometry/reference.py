"""Rows known to be unused: the reference set of the Magikarp indicator.

Magikarp (Land & Bartolo 2024, "Fishing for Magikarp", §3.1 and the per-family lists of
``cohere-ai/magikarp``) compares every row with the mean of rows that the training data can never
have contained. Those are found here, each by its own rule (``source`` names):

``padding``
    matrix rows past the tokenizer (Qwen2: 151 665 tokens, 152 064 rows).
``unused-names``
    placeholder tokens: ``[unused7]``, ``<unused5>``, ``<|reserved_special_token_3|>``,
    ``<|extra_12|>``, ``<|unused_3|>``, ``<madeupword0>``.
``zero-rows``
    rows whose entries are all (near) zero.
``unreachable``
    non-special tokens whose own text never encodes to them (category ``unreachable``).
``unused-utf8-bytes``
    single-byte tokens for bytes that never occur in valid UTF-8: 0xC0, 0xC1 (overlong lead
    bytes) and 0xF5–0xFF (lead bytes past U+10FFFF). In byte-level BPE (GPT-2 style) they are base
    tokens of the alphabet; in byte-fallback vocabularies they are ``<0xC0>`` … pieces. Example:
    GPT-2 ids 177–187 are bytes 0xF5–0xFF.
``duplicate-byte-fallback``
    byte-fallback pieces ``<0xNN>`` for an ASCII byte that also has an ordinary token: text is
    always split into the ordinary token, so the fallback row is never an input (Llama-2's
    ``<0x37>``…``<0x7F>``, Mistral's ``<0x0B>``…``<0x7F>``).

Given ids (``--unused-ids``) replace the discovery. With no reference on a tied model the
Magikarp indicator cannot be computed (Magikarp itself refuses); :func:`no_reference_note` says
which indicators still work.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from embscope.geometry.records import ReferenceRecord

if TYPE_CHECKING:  # pragma: no cover
    from embscope.tokenizer.base import Vocabulary

#: names of placeholder tokens that tokenizers reserve and training data never contains
UNUSED_NAME = re.compile(r"^(<\|reserved_special_token_\d+\|>|\[unused\d+\]|<\|extra_\d+\|>|<unused\d+>"
                         r"|<\|reserved_\d+\|>|<\|unused_?(token_?)?\d+\|>|<madeupword\d+>)$")
#: bytes that valid UTF-8 never contains (RFC 3629 §3)
UNUSED_UTF8_BYTES = frozenset([0xC0, 0xC1, *range(0xF5, 0x100)])
#: discovery rules, in the order they are reported
SOURCES = ("padding", "unused-names", "zero-rows", "unreachable", "unused-utf8-bytes",
           "duplicate-byte-fallback")


@dataclass
class Reference:
    """The rows taken as known-unused for the Magikarp indicator."""

    #: row ids (sorted)
    ids: list[int]
    #: where they came from: ``given``, or the discovery rules that found rows joined by ``+``,
    #: or ``none``
    source: str
    #: rule -> rows it found (a row may be found by several rules)
    by_source: dict[str, int] = field(default_factory=dict)

    def record(self, tied: bool) -> ReferenceRecord:
        """The summary's record (``tied``: which note says what still works without a set)."""
        return ReferenceRecord(size=len(self.ids), source=self.source, by_source=dict(self.by_source),
                               note=None if self.ids else no_reference_note(tied))


def _single_bytes(vocab: "Vocabulary | None", n: int) -> dict[int, int]:
    """id -> byte value for tokens that stand for exactly one byte."""
    out: dict[int, int] = {}
    if vocab is None:
        return out
    for i in range(min(n, len(vocab))):
        b = vocab.token_bytes(i)
        if b is not None and len(b) == 1:
            out[i] = b[0]
    return out


def unused_byte_ids(vocab: "Vocabulary | None", n: int) -> tuple[list[int], list[int]]:
    """``(unused_utf8, duplicate_fallback)`` ids (see the module docstring)."""
    single = _single_bytes(vocab, n)
    unused = sorted(i for i, b in single.items() if b in UNUSED_UTF8_BYTES)
    byte_ids = set(getattr(vocab, "byte_ids", ()) or ())
    ordinary = {b for i, b in single.items() if i not in byte_ids and b < 0x80}
    dup = sorted(i for i in byte_ids if i in single and single[i] < 0x80 and single[i] in ordinary)
    return unused, dup


def discover_reference(categories: Sequence[str], strings: Sequence[str], zero: np.ndarray,
                       vocab: "Vocabulary | None" = None, unused_ids: Sequence[int] | None = None) -> Reference:
    """Find the known-unused rows; ``unused_ids`` overrides discovery."""
    n = len(categories)
    if unused_ids is not None:
        ids = sorted({int(i) for i in unused_ids if 0 <= int(i) < n})
        return Reference(ids, "given" if ids else "none", {"given": len(ids)})
    unused_b, dup_b = unused_byte_ids(vocab, n)
    found: dict[str, set[int]] = {
        "padding": {i for i, c in enumerate(categories) if c == "padding"},
        "unused-names": {i for i, s in enumerate(strings) if s and UNUSED_NAME.match(s)},
        "zero-rows": {int(i) for i in np.flatnonzero(zero)},
        "unreachable": {i for i, c in enumerate(categories) if c == "unreachable"},
        "unused-utf8-bytes": set(unused_b),
        "duplicate-byte-fallback": set(dup_b),
    }
    ids = sorted(set().union(*found.values()))
    source = "+".join(k for k in SOURCES if found[k]) or "none"
    return Reference(ids, source, {k: len(v) for k, v in found.items() if v})


def no_reference_note(tied: bool) -> str:
    """What still works without a reference set (one sentence for the summary and report)."""
    if tied:
        return ("no known-unused rows (no padding, placeholder names, zero rows, unreachable or unused "
                "byte tokens): magikarp_sim cannot be computed on this tied model; the flags rest on the "
                "input-norm and knot indicators (isolation is reported apart). Pass --unused-ids to add it")
    return ("no known-unused rows: magikarp_sim is empty; the input-norm, output-norm and knot indicators "
            "still work (isolation is reported apart). Pass --unused-ids to add it")
