"""Corpus contexts of the new terms, split once into *fit* and *held-out* texts.

A text is held out when ``crc32(text) % HOLD_EVERY == 0`` (one text in four, the same on every
run and every engine). Held-out texts are only ever measured (fidelity, bits per byte); the
strategies that learn from text (``distil``) see only the others. The choice of terms and the
piece counts of ``weighted-subword`` come from the whole corpus: they pick *which* rows to add,
not what the rows hold.

A context is one occurrence of a new term in a text, written in the old vocabulary::

    text  "Typhoid fever, unspecified"            term " unspecified" = [" unspec", "ified"]
    prefix  [start, "Typ", "hoid", " fever", ","]  (other new terms written with their pieces too)
    pieces  [" unspec", "ified"]
    after   the next AFTER old tokens (here none: the text ends)

``start`` is what the tokenizer puts in front of a text (Gemma's ``<bos>``) or, when it adds
nothing, the model's ``bos_token_id``: every sequence has a first token to condition on, and both
tokenizers get the same one.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from tokenizers import Tokenizer

#: one text in HOLD_EVERY is held out (25 %: enough held-out text, most left to fit on)
HOLD_EVERY = 4
#: old tokens after the term whose next-token distributions are compared too
AFTER = 3
#: contexts whose prefix is longer are skipped (corpus lines are short; this bounds the cost)
MAX_PREFIX = 48
#: held-out contexts per term, and in all (the fidelity pass costs one forward per strategy each)
HELD_PER_TERM = 1
HELD_MAX = 64
#: fit contexts per term (``distil``)
FIT_PER_TERM = 1
#: held-out text for bits per byte, in UTF-8 bytes, spread evenly over the held-out texts (the
#: callers pass their plan's size: :mod:`embscope.extension.evaluate`)
BPB_BYTES = 24 * 1024
#: held-out texts kept to draw that sample from (bytes)
HELD_TEXT_BYTES = 1 << 22


def is_held_out(text: str) -> bool:
    """The fixed split: ``crc32(utf-8) % HOLD_EVERY == 0``.

    >>> is_held_out("Typhoid fever, unspecified"), is_held_out("Cholera")
    (False, False)
    """
    return zlib.crc32(text.encode("utf-8")) % HOLD_EVERY == 0


@dataclass
class TermContext:
    """One occurrence of a new term, in old-vocabulary ids."""

    #: index of the term in the extension's term list
    term: int
    #: ids before the term: start token(s), then the text, other new terms as their pieces
    prefix: list[int]
    #: the term's old pieces
    pieces: list[int]
    #: up to :data:`AFTER` old ids that follow the term
    after: list[int]


@dataclass
class Contexts:
    """What :func:`collect` found."""

    #: held-out contexts (measured only)
    held: list[TermContext] = field(default_factory=list)
    #: fit contexts (from the other texts)
    fit: list[TermContext] = field(default_factory=list)
    #: held-out texts for bits per byte, up to :data:`BPB_BYTES`
    texts: list[str] = field(default_factory=list)
    #: texts read, and how many were held out
    n_texts: int = 0
    n_held_texts: int = 0


def start_ids(tok: "Tokenizer", bos_id: int | None) -> list[int]:
    """What the tokenizer puts in front of a text, else ``[bos_id]`` (else nothing)."""
    a = tok.encode("x", add_special_tokens=True).ids
    b = tok.encode("x", add_special_tokens=False).ids
    lead = a[:len(a) - len(b)] if len(a) > len(b) and a[len(a) - len(b):] == b else []
    return lead or ([bos_id] if bos_id is not None else [])


def collect(texts: Iterable[str], ext: "Tokenizer", term_ids: Sequence[int],
            pieces: Sequence[Sequence[int]], start: Sequence[int], *, batch: int = 1024,
            held_per_term: int | None = None, held_max: int | None = None,
            fit_per_term: int | None = None, bpb_bytes: int | None = None) -> Contexts:
    """Contexts of each new term (ids ``term_ids``, pieces ``pieces``) in ``texts``.

    Texts are encoded with the extended tokenizer ``ext``; every new id is then written back as
    its pieces except the one occurrence a context is about. Limits default to the module's
    constants (read at call time).
    """
    held_per_term = HELD_PER_TERM if held_per_term is None else held_per_term
    held_max = HELD_MAX if held_max is None else held_max
    fit_per_term = FIT_PER_TERM if fit_per_term is None else fit_per_term
    bpb_bytes = BPB_BYTES if bpb_bytes is None else bpb_bytes
    index = {int(t): k for k, t in enumerate(term_ids)}
    out = Contexts()
    held_n = [0] * len(term_ids)
    fit_n = [0] * len(term_ids)
    pool: list[str] = []
    pool_left = HELD_TEXT_BYTES
    buf: list[str] = []

    def flush():
        nonlocal pool_left
        for text, enc in zip(buf, ext.encode_batch(buf, add_special_tokens=False)):
            held = is_held_out(text)
            out.n_texts += 1
            out.n_held_texts += held
            if held and pool_left > 0 and text.strip():
                pool.append(text)
                pool_left -= len(text.encode("utf-8"))
            ids = enc.ids
            if not any(i in index for i in ids):
                continue
            old: list[int] = list(start)
            for p, i in enumerate(ids):
                k = index.get(i)
                if k is not None and len(old) <= MAX_PREFIX:
                    counts, cap = (held_n, held_per_term) if held else (fit_n, fit_per_term)
                    if counts[k] < cap and (not held or len(out.held) < held_max):
                        after: list[int] = []
                        for j in ids[p + 1:]:
                            after.extend(pieces[index[j]] if j in index else [j])
                            if len(after) >= AFTER:
                                break
                        (out.held if held else out.fit).append(
                            TermContext(k, list(old), list(pieces[k]), after[:AFTER]))
                        counts[k] += 1
                old.extend(pieces[k] if k is not None else [i])
        buf.clear()

    for text in texts:
        buf.append(text)
        if len(buf) >= batch:
            flush()
    if buf:
        flush()
    out.texts = spread(pool, bpb_bytes)
    return out


def spread(texts: Sequence[str], max_bytes: int) -> list[str]:
    """Texts evenly spaced over ``texts`` (in order) until ``max_bytes`` UTF-8 bytes.

    >>> spread(["aa", "bb", "cc", "dd"], 4)
    ['aa', 'cc']
    """
    sizes = [len(t.encode("utf-8")) for t in texts]
    total = sum(sizes)
    if total <= max_bytes:
        return list(texts)
    step = total / max_bytes
    out, used = [], 0
    for i in range(len(texts)):
        if used >= max_bytes:
            break
        if len(out) < (i + 1) / step or not out:
            out.append(texts[i])
            used += sizes[i]
    return out
