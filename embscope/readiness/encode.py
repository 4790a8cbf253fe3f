"""Training examples → what a check counts: per id, its occurrences as an input and as a label.

The sequences come from :mod:`embscope.readiness.sequences` (rendered and tokenized as the trainer
does it). Counted per id (``np.bincount`` per batch):

- ``counts``: occurrences in the input ids (every position: the input row's gradient);
- ``label_counts``: occurrences at a loss position past the first (the model's shift drops
  position 0): the output row's softmax target. On a tied model both update the same row;
- ``example_counts``: examples holding it;

per example its length; a few example indices for the ids a check asks about. A pass is a map
over batches and an exact reduce (:meth:`Encoded.merge`, in example order), so worker processes
and Ray give the same record as one process (:mod:`embscope.readiness.engine`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from embscope.corpus.shapes import Example
    from embscope.readiness.sequences import Context

#: examples rendered and tokenized per batch
BATCH = 1024
#: example indices kept per id, per hazard
EXAMPLES = 5
#: a template refused on this many conversations in a row, none rendered, is refused for the rest
#: (a template that always runs past its bounds would otherwise cost the deadline per record)
REFUSED_STREAK = 3


def _keep(kept: list[int], more: Iterable[int], n: int = EXAMPLES) -> list[int]:
    for e in more:
        if len(kept) >= n:
            break
        kept.append(e)
    return kept


@dataclass
class Encoded:
    """What the data tokenizes to (one split, or all of it)."""

    #: examples tokenized (or tried: failed renders count)
    examples: int = 0
    #: of them, conversations (rendered by the template)
    conversations: int = 0
    #: sequences trained on (a DPO example has two: chosen and rejected)
    sequences: int = 0
    #: conversations the template rendered
    rendered: int = 0
    #: tokens in all
    tokens: int = 0
    #: UTF-8 bytes of the texts tokenized (rendered conversations and plain texts)
    bytes: int = 0
    #: id → occurrences in the input ids
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: id → occurrences at a loss position (past the first)
    label_counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: id → examples holding it
    example_counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: id → the first few example indices holding it (for the ids asked about)
    where: dict[int, list[int]] = field(default_factory=dict)
    #: tokens per sequence before any cut at the length limit, in order
    lengths: list[int] = field(default_factory=list)
    #: example index per entry of ``lengths``
    indices: list[int] = field(default_factory=list)
    #: loss positions per sequence (past the first), in order
    loss_tokens: list[int] = field(default_factory=list)
    #: error message → examples the template failed on (``raise_exception``, a TemplateError)
    render_failed: Counter = field(default_factory=Counter)
    #: error message → a few example indices
    render_failed_examples: dict[str, list[int]] = field(default_factory=dict)
    #: refusal → examples the template was refused on (past a render bound)
    refused: Counter = field(default_factory=Counter)
    #: refusal → a few example indices
    refused_examples: dict[str, list[int]] = field(default_factory=dict)
    #: conversations left untokenized because there is no template
    untemplated: list[int] = field(default_factory=list)
    #: examples whose ids start with the BOS twice (or would: rendered BOS + tokenizer BOS), by kind
    double_bos: dict[str, list[int]] = field(default_factory=lambda: {"chat": [], "text": []})
    #: examples whose tokenized prompt is not a prefix of prompt + completion (count, a few indices)
    not_prefix: int = 0
    not_prefix_examples: list[int] = field(default_factory=list)
    #: ShareGPT role names TRL hands the template as they are → examples
    raw_roles: Counter = field(default_factory=Counter)
    raw_roles_examples: list[int] = field(default_factory=list)
    raw_roles_n: int = 0
    #: sequences cut at the length limit, and examples left with no loss position by the cut
    truncated: int = 0
    unlabelled: int = 0
    unlabelled_examples: list[int] = field(default_factory=list)
    #: reason → examples the trainer itself drops before training (LLaMA-Factory's role order)
    dropped: Counter = field(default_factory=Counter)
    dropped_examples: list[int] = field(default_factory=list)
    #: label positions the collator masks because their id is the pad id (the EOS when PAD = EOS)
    pad_masked: int = 0
    pad_masked_examples: list[int] = field(default_factory=list)

    def note(self, reason: str, index: int, refused: bool = False) -> None:
        counter, kept = (self.refused, self.refused_examples) if refused else \
            (self.render_failed, self.render_failed_examples)
        counter[reason] += 1
        _keep(kept.setdefault(reason, []), [index])

    @property
    def template(self) -> str:
        """The template's status, in agreement with the renders: ``rendered``, ``rendered N of M
        (K failed)``, ``render failed on all N``, ``render refused: …``, ``none shipped``, ``not
        needed``."""
        failed = sum(self.render_failed.values())
        refused = sum(self.refused.values())
        if self.untemplated:
            return "none shipped"
        if not self.conversations:
            return "not needed"
        if self.rendered == 0 and refused:
            return self.refused.most_common(1)[0][0]
        if self.rendered == 0:
            return f"render failed on all {failed} conversations"
        if failed or refused:
            return f"rendered {self.rendered} of {self.conversations} ({failed + refused} failed or refused)"
        return "rendered"

    def merge(self, other: "Encoded") -> "Encoded":
        """This pass followed by ``other`` (later examples): exact, order-aware."""
        for name in ("examples", "conversations", "sequences", "rendered", "tokens", "bytes", "not_prefix",
                     "truncated", "unlabelled", "pad_masked", "raw_roles_n"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in ("counts", "label_counts", "example_counts"):
            a, b = getattr(self, name), getattr(other, name)
            n = max(len(a), len(b))
            setattr(self, name, _grow(a, n) + _grow(b, n))
        for i, ex in other.where.items():
            _keep(self.where.setdefault(i, []), ex)
        self.lengths += other.lengths
        self.indices += other.indices
        self.loss_tokens += other.loss_tokens
        for mine, theirs in ((self.render_failed, other.render_failed), (self.refused, other.refused),
                             (self.raw_roles, other.raw_roles), (self.dropped, other.dropped)):
            mine.update(theirs)
        for mine, theirs in ((self.render_failed_examples, other.render_failed_examples),
                             (self.refused_examples, other.refused_examples)):
            for k, v in theirs.items():
                _keep(mine.setdefault(k, []), v)
        self.untemplated += other.untemplated
        for k in self.double_bos:
            self.double_bos[k] += other.double_bos[k]
        for name in ("not_prefix_examples", "raw_roles_examples", "unlabelled_examples", "pad_masked_examples",
                     "dropped_examples"):
            _keep(getattr(self, name), getattr(other, name))
        return self

    def record(self, worst: str | None):
        """The figures of this pass (no per-id arrays), with the worst severity found in it."""
        from embscope.readiness.record import SplitRecord

        return SplitRecord(examples=self.examples, conversations=self.conversations, sequences=self.sequences,
                           tokens=self.tokens, label_tokens=int(sum(self.loss_tokens)), template=self.template,
                           lengths=length_stats(self.lengths), worst=worst)


def _grow(a: np.ndarray, n: int) -> np.ndarray:
    return a if len(a) >= n else np.concatenate([a, np.zeros(n - len(a), np.int64)])


def _count(enc: Encoded, built, examples: Sequence["Example"], ctx: "Context", watch: np.ndarray) -> None:
    """Fold one batch's sequences into ``enc``."""
    seqs = built.sequences
    bos = set(ctx.prefix[:1])
    enc.bytes += built.nbytes
    arrays, labels = [], []
    for s in seqs:
        a = np.asarray(s.ids, dtype=np.int64)
        arrays.append(a)
        if s.ids and s.ids[0] in bos and (s.chat or len(ctx.prefix) and s.ids[1:2] == ctx.prefix[:1]):
            enc.double_bos["chat" if s.chat else "text"].append(s.index)
        lab = a[1:] if s.loss is None else a[1:][np.asarray(s.loss[1:], dtype=bool)]
        labels.append(lab)
        enc.loss_tokens.append(int(len(lab)))
        if not len(lab):
            enc.unlabelled += 1
            _keep(enc.unlabelled_examples, [s.index])
        if s.by_id and ctx.pad_id is not None and s.loss is not None:
            masked = int(np.count_nonzero(a[1:] == ctx.pad_id))
            if masked:
                enc.pad_masked += masked
                _keep(enc.pad_masked_examples, [s.index])
        enc.lengths.append(s.length or len(a))
        enc.indices.append(s.index)
    enc.sequences += len(seqs)
    enc.tokens += sum(len(a) for a in arrays)
    enc.truncated += sum(1 for s in seqs if s.cut)
    flat = np.concatenate(arrays) if arrays else np.zeros(0, np.int64)
    if not len(flat):
        return
    top = int(flat.max()) + 1
    n = max(top, len(enc.counts))
    enc.counts, enc.example_counts, enc.label_counts = (_grow(enc.counts, n), _grow(enc.example_counts, n),
                                                        _grow(enc.label_counts, n))
    enc.counts += np.bincount(flat, minlength=n)
    lab = np.concatenate(labels) if labels else np.zeros(0, np.int64)
    if len(lab):
        enc.label_counts += np.bincount(lab, minlength=n)
    # examples holding each id: the distinct (example, id) pairs of the batch, in one np.unique
    owners = np.repeat(np.asarray([s.index for s in seqs], dtype=np.int64), [len(a) for a in arrays])
    pairs = np.unique(owners * n + flat)
    distinct, owner = pairs % n, pairs // n
    enc.example_counts += np.bincount(distinct, minlength=n)
    hot = (distinct >= len(watch)) | watch[np.minimum(distinct, len(watch) - 1)]
    for i, e in zip(distinct[hot].tolist(), owner[hot].tolist()):
        kept = enc.where.setdefault(i, [])
        if len(kept) < EXAMPLES:
            kept.append(e)


def encode_batch(examples: Sequence["Example"], ctx: "Context", watch: np.ndarray,
                 state: dict | None = None) -> Encoded:
    """One batch of examples → its :class:`Encoded` (the map of a pass). ``state`` carries the
    template's refusal streak from batch to batch (one process; workers keep their own)."""
    from embscope.readiness.sequences import build

    state = state if state is not None else {}
    enc = Encoded(counts=np.zeros(len(watch), np.int64), label_counts=np.zeros(len(watch), np.int64),
                  example_counts=np.zeros(len(watch), np.int64))
    todo = []
    for ex in examples:
        enc.examples += 1
        if ex.conversational:
            enc.conversations += 1
            if state.get("refused"):
                enc.note(state["refused"], ex.index, refused=True)
                continue
        todo.append(ex)
    built = build(todo, ctx)
    conv = {ex.index for ex in todo if ex.conversational}
    done = {s.index for s in built.sequences}
    enc.rendered += len(conv & done)
    for ex in todo:  # the refusal streak, in example order
        if ex.index in built.refused:
            state["streak"] = state.get("streak", 0) + 1
            if state["streak"] >= REFUSED_STREAK and not state.get("rendered"):
                state["refused"] = built.refused[ex.index]
        elif ex.index in done and ex.conversational:
            state["rendered"], state["streak"] = True, 0
    for i, why in built.refused.items():
        enc.note(why, i, refused=True)
    for i, why in built.failed.items():
        enc.note(why, i)
    enc.untemplated += built.untemplated
    enc.not_prefix += len(built.not_prefix)
    _keep(enc.not_prefix_examples, built.not_prefix)
    for i, why in built.dropped.items():
        enc.dropped[why] += 1
        _keep(enc.dropped_examples, [i])
    enc.raw_roles_n += len(built.raw_roles)
    for i, roles in built.raw_roles.items():
        enc.raw_roles.update(roles)
        _keep(enc.raw_roles_examples, [i])
    _count(enc, built, todo, ctx, watch)
    return enc


def encode_examples(examples: Iterable["Example"], ctx: "Context", watch: np.ndarray, *,
                    total: int | None = None, by_split: bool = True) -> dict[str | None, Encoded]:
    """Every example, in this process: ``{split: Encoded}`` (one key, None, without splits)."""
    from embscope.progress import track

    out: dict[str | None, Encoded] = {}
    state: dict = {}
    pending: dict[str | None, list] = {}
    for ex in track(examples, total=total, description="rendering and tokenizing the training data"):
        key = ex.split if by_split else None
        pending.setdefault(key, []).append(ex)
        if len(pending[key]) >= BATCH:
            part = encode_batch(pending.pop(key), ctx, watch, state)
            out[key] = out[key].merge(part) if key in out else part
    for key, rest in pending.items():
        part = encode_batch(rest, ctx, watch, state)
        out[key] = out[key].merge(part) if key in out else part
    return out


def length_stats(lengths: Sequence[int]):
    """The max, percentiles and mean of the sequence lengths (tokens).

    >>> length_stats([10, 20, 30, 40])
    LengthStats(max=40, p50=25, p95=38, p99=39, mean=25.0)
    """
    from embscope.readiness.record import LengthStats

    if not lengths:
        return LengthStats(max=0, p50=0, p95=0, p99=0, mean=0.0)
    a = np.asarray(lengths)
    return LengthStats(max=int(a.max()), p50=int(np.percentile(a, 50)), p95=int(np.percentile(a, 95)),
                       p99=int(np.percentile(a, 99)), mean=round(float(a.mean()), 1))
