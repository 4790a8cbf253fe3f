"""What an extended tokenizer changes in texts, token boundary by token boundary.

A new token is *cut* when one of its ends falls inside an old token (added as an HF added token,
" externa" cuts " external" into " externa" + "l"), and *not its pieces* when the old tokens it
covers are not exactly the ids it stands for. Tokens written into the tokenizer's model
(:mod:`embscope.tokenizer.extend`) do neither, by construction; this measures it on real text.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from embscope.records import Record

if TYPE_CHECKING:  # pragma: no cover
    from tokenizers import Tokenizer

    from embscope.tokenizer.extend import TokenizerExtension


@dataclass
class Changes(Record):
    """How the extended tokenizer reads texts compared with the original (:func:`changes`)."""

    #: texts compared
    texts: int = 0
    #: new-token occurrences in them
    new_tokens: int = 0
    #: of those, occurrences that start or end inside an old token (a cut the model never saw)
    cut: int = 0
    #: of those, occurrences that are not exactly the run of old tokens they stand for
    not_their_pieces: int = 0
    #: texts whose decoded ids differ from what the original tokenizer decodes (when checked)
    round_trip_failures: int = 0
    #: a few cuts, ``[[new token, the text around it]]``
    examples: list[list[str]] = field(default_factory=list)

    def add(self, other: "Changes", n_examples: int = 5) -> "Changes":
        """Add ``other``'s counts (and examples, up to ``n_examples``) to this one."""
        for k in ("texts", "new_tokens", "cut", "not_their_pieces", "round_trip_failures"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
        self.examples = (self.examples + other.examples)[:n_examples]
        return self


@dataclass
class GeneralChanges(Changes):
    """:class:`Changes` on general text, with the text's name."""

    #: the general text (UDHR English)
    source: str | None = None


@dataclass
class TokenizationCheck(Record):
    """What the written tokenizer changes, on the whole corpus and on general text."""

    #: the domain corpus
    corpus: Changes
    #: general text (cut: new tokens that start or end inside an old token; 0 for merges)
    general: GeneralChanges


def count_changes(texts: Sequence[str], olds, news, ext: "TokenizerExtension", *, n_examples: int = 5,
                  old: "Tokenizer | None" = None) -> Changes:
    """Compare two tokenizations of ``texts`` (``encode_batch`` results of the original and the
    extended tokenizer), token boundaries by their end offsets in the text.

    A new token is *cut* when one of its ends is not an end of an old token (the added token
    " externa" in " external": it ends inside the old token " external"), and *not its pieces*
    when the old tokens it covers are not exactly the ids it replaces. Written in the model (BPE
    merges) both counts are 0 by construction. End offsets are compared, not starts: byte-level
    pre-tokenizers trim a word's leading space from its start offset, an added token does not.
    With ``old`` (the original tokenizer), texts whose extended ids decode differently from their
    original ids count as round-trip failures.

    >>> # " external" → old [" external"]; added " externa" → [" externa", "l"]: 1 new token, 1 cut
    """
    import bisect

    ids = {t.id: t for t in ext.tokens}
    out = Changes(texts=len(texts))
    for text, a, b in zip(texts, olds, news):
        if old is not None and (ext.tokenizer.decode(b.ids, skip_special_tokens=False)
                                != old.decode(a.ids, skip_special_tokens=False)):
            out.round_trip_failures += 1
        if not any(i in ids for i in b.ids):
            continue
        # every new token replaced by the ids it stands for gives the old ids: none is cut, each is
        # its pieces (decided on ids, since offsets are characters and byte-level tokens can end
        # inside one: a Khmer letter is 3 bytes, 2 tokens)
        if [j for i in b.ids for j in (ids[i].pieces if i in ids else (i,))] == a.ids:
            out.new_tokens += sum(i in ids for i in b.ids)
            continue
        ends = [e for _, e in a.offsets]  # non-decreasing
        have = set(ends)
        prev = 0
        for i, (_, e) in zip(b.ids, b.offsets):
            t = ids.get(i)
            if t is not None:
                out.new_tokens += 1
                if e not in have or (prev and prev not in have):
                    out.cut += 1
                    out.not_their_pieces += 1
                    if len(out.examples) < n_examples:
                        out.examples.append([t.text, text[max(0, prev - 12):e + 12]])
                else:
                    lo, hi = bisect.bisect_right(ends, prev), bisect.bisect_right(ends, e)
                    if a.ids[lo:hi] != t.pieces:
                        out.not_their_pieces += 1
            prev = e
    return out


def changes(old: "Tokenizer", ext: "TokenizerExtension", texts: Iterable[str]) -> Changes:
    """:func:`count_changes` of ``texts`` encoded by both tokenizers, round trips included."""
    texts = list(texts)
    return count_changes(texts, old.encode_batch(texts, add_special_tokens=False),
                         ext.tokenizer.encode_batch(texts, add_special_tokens=False), ext, old=old)
