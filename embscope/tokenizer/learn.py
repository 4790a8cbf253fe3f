"""Continued BPE: merges learned from a text, starting from the model's own tokenization, appended
after every existing merge.

Each word (one pre-token, as the model's pre-tokenizer cuts it) starts as the pieces the model
gives it. Then, as in BPE training (Sennrich et al. 2016; continued training as in Purason et al.
2025, arXiv 2512.03989), the adjacent pair of pieces with the largest count, Σ over words of the
word's count × the pair's occurrences in it, becomes a new token and is merged everywhere, until
the tokenizer has grown by ``rows`` tokens (every new token is a row, intermediates included) or
no pair occurs ``min_freq`` times. Ties go to the pair whose (left, right) strings sort first.

A pair is never merged when its result is already a token (of the model, an added token, or one
learned earlier: it would make an existing row reachable, or need no row), nor when one side is an
added token or a byte-fallback piece (``<0xNN>``, not text); such pairs are counted in
``skipped``.

Worked example: words {"ab": 5, "abc": 3} whose pieces are [a, b] and [a, b, c]: pair counts
(a, b) 8, (b, c) 3 → merge (a, b) → words [ab], [ab, c]; counts (ab, c) 3 → merge (ab, c).

Why the appended merges keep every old tokenization (see :mod:`embscope.tokenizer.extend`): BPE
applies the lowest-ranked applicable merge first, so every old merge runs before any new one and
each word first reaches its old tokenization; a new merge k can use only tokens that exist at its
turn, so applying merges in rank order to a word is the learning's sequence of merges, and the
written tokenizer tokenizes every training word as the learning left it (:func:`write_merges`
checks that on every word).

Counts are kept incrementally (as HF ``tokenizers``' BPE trainer does): a table of unique words
with their counts, per pair its count and the words holding it, and a heap of counts with stale
entries dropped when popped; a merge touches only the words holding its pair.
"""

from __future__ import annotations

import heapq
import json
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from embscope.errors import SpecError
from embscope.tokenizer.extend import _BYTE_PIECE, NewToken, TokenizerExtension, _next_id, _spec

if TYPE_CHECKING:  # pragma: no cover
    from tokenizers import Tokenizer


@dataclass
class Learned:
    """What :func:`learn_merges` learned."""

    #: the merges, in the order learned (= rank order after the model's merges)
    merges: list[tuple[str, str]]
    #: per merge, the pair's count when it was chosen (weighted by word counts)
    counts: list[int]
    #: every new token, in id order (``kind = "merge"``)
    tokens: list[NewToken]
    #: pairs passed over, {"left right": why} (the first :data:`MAX_SKIPPED`)
    skipped: dict[str, str] = field(default_factory=dict)
    #: why learning stopped: ``rows`` (the budget), or ``min_freq`` (no pair occurs often enough)
    stopped: str = "rows"
    #: per word (as given), its pieces at the end of learning
    final: dict[str, list[str]] = field(default_factory=dict, repr=False)


#: pairs passed over that :attr:`Learned.skipped` lists (the rest are counted, not named)
MAX_SKIPPED = 50


def _unusable(s: str, added: set[str]) -> bool:
    return s in added or bool(_BYTE_PIECE.match(s))


def learn_merges(tok: "Tokenizer", words: Mapping[str, int], *, rows: int, min_freq: int = 2) -> Learned:
    """Continued BPE over ``words`` (pre-token → count), from ``tok``'s tokenization (module docstring).

    Args:
        tok: a BPE ``tokenizers.Tokenizer`` (byte-level or SentencePiece-style).
        words: pre-tokens as the BPE model receives them (``Ġword``, ``▁word``) with their counts.
        rows: the most new tokens.
        min_freq: the least count of a pair merged.

    Example:
        >>> learn_merges(tok, {"Ġkhmer": 9, "Ġkh": 2}, rows=1).merges  # doctest: +SKIP
        [('Ġk', 'h')]
    """
    # long: the learning loop and its incremental counts read best as one piece
    if rows < 1 or min_freq < 1:
        raise SpecError(f"--rows and --min-freq must be at least 1 (got {rows}, {min_freq})")
    spec = _spec(tok)
    model = spec["model"]
    if spec["model"].get("type") != "BPE":
        raise SpecError(f"--method merges learns BPE merges; this tokenizer's model is {model.get('type')} "
                        "(use --method terms)")
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        raise SpecError("this BPE marks word continuations or ends in its pieces; use --method terms")
    vocab: dict[str, int] = model["vocab"]
    added = {a["content"] for a in spec.get("added_tokens") or []}
    byte_level = '"ByteLevel"' in json.dumps([spec.get("pre_tokenizer"), spec.get("decoder")])

    strs: dict[int, str] = {i: s for s, i in vocab.items()}
    known = set(vocab) | added
    next_id = _next_id(spec, len(vocab))
    ok = {i for i, s in strs.items() if not _unusable(s, added)}  # ids a merge may join
    names = list(words)
    seqs: list[list[int]] = []
    freq: list[int] = []
    for w in names:
        seqs.append([t.id for t in tok.model.tokenize(w)])
        freq.append(int(words[w]))

    pair_count: Counter = Counter()
    where: dict[tuple[int, int], set[int]] = defaultdict(set)
    for wi, seq in enumerate(seqs):
        for p in zip(seq, seq[1:]):
            if p[0] in ok and p[1] in ok:
                pair_count[p] += freq[wi]
                where[p].add(wi)
    heap = [(-c, strs[a], strs[b], a, b) for (a, b), c in pair_count.items()]
    heapq.heapify(heap)

    old_ids: dict[int, list[int]] = {}
    learned = Learned(merges=[], counts=[], tokens=[])
    n_skipped = 0
    banned: set[tuple[int, int]] = set()
    while len(learned.tokens) < rows:
        if not heap:
            learned.stopped = "min_freq"
            break
        negc, sa, sb, a, b = heapq.heappop(heap)
        p = (a, b)
        if pair_count.get(p, 0) != -negc or p in banned:
            continue  # stale entry (its count changed and was pushed again) or passed over
        if -negc < min_freq:
            learned.stopped = "min_freq"
            break
        out = sa + sb
        if out in known:
            banned.add(p)
            n_skipped += 1
            if len(learned.skipped) < MAX_SKIPPED:
                learned.skipped[f"{sa} {sb}"] = f"its result {out!r} is already a token"
            continue
        new = next_id
        next_id += 1
        strs[new] = out
        known.add(out)
        ok.add(new)
        old_ids[new] = old_ids.get(a, [a]) + old_ids.get(b, [b])
        learned.merges.append((sa, sb))
        learned.counts.append(-negc)
        learned.tokens.append(NewToken(text=piece_text(out, byte_level), piece=out, id=new,
                                       pieces=old_ids[new], kind="merge"))
        changed: set[tuple[int, int]] = set()
        for wi in list(where.pop(p, ())):
            seq = seqs[wi]
            merged = _merge(seq, a, b, new)
            if len(merged) == len(seq):
                continue
            f = freq[wi]
            for q in zip(seq, seq[1:]):
                if q[0] in ok and q[1] in ok:
                    pair_count[q] -= f
                    changed.add(q)
            for q in zip(merged, merged[1:]):
                if q[0] in ok and q[1] in ok:
                    pair_count[q] += f
                    where[q].add(wi)
                    changed.add(q)
            seqs[wi] = merged
        pair_count.pop(p, None)
        for q in changed:
            c = pair_count.get(q, 0)
            if c <= 0:
                pair_count.pop(q, None)
            elif q not in banned:
                heapq.heappush(heap, (-c, strs[q[0]], strs[q[1]], q[0], q[1]))
    if n_skipped > len(learned.skipped):
        learned.skipped["…"] = f"{n_skipped - len(learned.skipped)} more pairs whose result is already a token"
    learned.final = {w: [strs[i] for i in seq] for w, seq in zip(names, seqs)}
    return learned


def piece_text(piece: str, byte_level: bool) -> str:
    """A piece's text: byte-level pieces decoded (``"Ġcat"`` → ``" cat"``), others as they are."""
    from embscope.tokenizer.extend import _Chains

    return _Chains(vocab={}, added=set(), pairs=set(), next_id=0, byte_level=byte_level).text_of(piece)


def _merge(seq: list[int], a: int, b: int, new: int) -> list[int]:
    """``seq`` with every (a, b), left to right, replaced by ``new``.

    >>> _merge([1, 2, 1, 2, 2], 1, 2, 9), _merge([1, 1, 1], 1, 1, 9)
    ([9, 9, 2], [9, 1])
    """
    out: list[int] = []
    i, n = 0, len(seq)
    while i < n:
        if i + 1 < n and seq[i] == a and seq[i + 1] == b:
            out.append(new)
            i += 2
        else:
            out.append(seq[i])
            i += 1
    return out


def write_merges(tok: "Tokenizer", learned: Learned, *, check: bool = True) -> TokenizerExtension:
    """``tok`` with ``learned``'s merges appended after every existing merge and its tokens added.

    With ``check``, every word the merges were learned from is tokenized by the written tokenizer
    and must come out as the learning left it (so every merge fires, and none is shadowed);
    a :class:`SpecError` says which word did not.
    """
    from tokenizers import Tokenizer

    spec = _spec(tok)
    model = spec["model"]
    merges = model["merges"]
    as_lists = not merges or isinstance(merges[0], list)
    model["vocab"] = {**model["vocab"], **{t.piece: t.id for t in learned.tokens}}
    model["merges"] = list(merges) + [list(p) if as_lists else " ".join(p) for p in learned.merges]
    ext = Tokenizer.from_str(json.dumps(spec, ensure_ascii=False))
    if check:
        for w, pieces in learned.final.items():
            got = [t.value for t in ext.model.tokenize(w)]
            if got != pieces:  # pragma: no cover - never seen; the module docstring says why
                raise SpecError(f"the written tokenizer splits {w!r} as {got}, the learned merges as {pieces}; "
                                "use --method terms")
    return TokenizerExtension(ext, "merges", list(learned.tokens), list(learned.merges), dict(learned.skipped))
