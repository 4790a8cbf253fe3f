"""Training examples → token ids, exactly as the trainer makes them, and the counts a check needs.

- A conversation is rendered by the model's chat template with ``add_generation_prompt=False``
  (:func:`embscope.models.chat_template.render`, transformers' environment and variables), then
  tokenized without adding special tokens: what ``tokenizer.apply_chat_template(conv,
  tokenize=True)`` returns (it calls the tokenizer with ``add_special_tokens=False``; the
  template writes its own BOS and turn tokens, and added tokens in the rendered text become
  their ids).
- A plain text (``text``, string prompt/completion) is tokenized as ``tokenizer(text)``: the
  tokenizer's own prefix and suffix (BOS, EOS; :mod:`embscope.finetune.specials`) around its ids.

Counted per id: occurrences and the number of examples holding it (``np.bincount`` per batch); per
example its length; a few example indices for the ids a check asks about.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from embscope.corpus.conversations import Example
    from embscope.finetune.specials import SpecialIds
    from embscope.models.model import LoadedModel

#: examples rendered and tokenized per batch
BATCH = 1024
#: example indices kept per id, per hazard
EXAMPLES = 5


@dataclass
class Encoded:
    """What the data tokenizes to."""

    #: examples tokenized
    examples: int = 0
    #: of them, conversations (rendered by the template)
    conversations: int = 0
    #: tokens in all
    tokens: int = 0
    #: UTF-8 bytes of the texts tokenized (rendered conversations and plain texts)
    bytes: int = 0
    #: id → occurrences (length: the largest id seen + 1, at least the row count)
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: id → examples holding it
    example_counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: id → the first few example indices holding it (for the ids asked about)
    where: dict[int, list[int]] = field(default_factory=dict)
    #: tokens per example, in order
    lengths: list[int] = field(default_factory=list)
    #: example index per entry of ``lengths``
    indices: list[int] = field(default_factory=list)
    #: the template's status: ``rendered``, ``none shipped``, ``not needed`` or ``render refused: …``
    template: str = "not needed"
    #: error message → examples the template failed on (``raise_exception``, a TemplateError)
    render_failed: Counter = field(default_factory=Counter)
    #: error message → a few example indices
    render_failed_examples: dict[str, list[int]] = field(default_factory=dict)
    #: conversations left untokenized because there is no template (or it was refused)
    untemplated: list[int] = field(default_factory=list)
    #: examples whose ids start with the BOS twice (or would: rendered BOS + tokenizer BOS), by kind
    double_bos: dict[str, list[int]] = field(default_factory=lambda: {"chat": [], "text": []})

    def note(self, reason: str, index: int) -> None:
        self.render_failed[reason] += 1
        kept = self.render_failed_examples.setdefault(reason, [])
        if len(kept) < EXAMPLES:
            kept.append(index)


def _grow(a: np.ndarray, n: int) -> np.ndarray:
    return a if len(a) >= n else np.concatenate([a, np.zeros(n - len(a), np.int64)])


def encode_examples(model: "LoadedModel", examples: Iterable["Example"], specials: "SpecialIds", *,
                    template: str | None, variables: dict[str, str], watch: np.ndarray,
                    total: int | None = None) -> Encoded:
    """Tokenize every example as the trainer will; keep example indices for the ids where
    ``watch`` (bool, per id) is true and for ids past it."""
    from jinja2.exceptions import TemplateError

    from embscope.models.chat_template import RenderRefused, render
    from embscope.progress import track

    enc = Encoded(counts=np.zeros(model.n_rows, np.int64), example_counts=np.zeros(model.n_rows, np.int64))
    bos = set(specials.prefix[:1])
    refused: str | None = None
    batch_texts: list[str] = []
    batch_meta: list[tuple[int, bool]] = []  # (example index, is a conversation)

    def flush():
        if not batch_texts:
            return
        ids_list = model.vocab.encode_batch(batch_texts)
        enc.bytes += sum(len(t.encode("utf-8")) for t in batch_texts)
        arrays = []
        for (index, chat), ids in zip(batch_meta, ids_list):
            if ids and ids[0] in bos:
                enc.double_bos["chat" if chat else "text"].append(index)
            if not chat:
                ids = [*specials.prefix, *ids, *specials.suffix]
            arrays.append(np.asarray(ids, dtype=np.int64))
        lengths = [len(a) for a in arrays]
        enc.lengths += lengths
        enc.indices += [index for index, _ in batch_meta]
        enc.tokens += sum(lengths)
        flat = np.concatenate(arrays) if arrays else np.zeros(0, np.int64)
        if len(flat):
            top = int(flat.max()) + 1
            if top > len(enc.counts):
                enc.counts, enc.example_counts = _grow(enc.counts, top), _grow(enc.example_counts, top)
            enc.counts += np.bincount(flat, minlength=len(enc.counts))
            uniq = [np.unique(a) for a in arrays]
            distinct = np.concatenate(uniq)
            enc.example_counts += np.bincount(distinct, minlength=len(enc.counts))
            owner = np.repeat([index for index, _ in batch_meta], [len(u) for u in uniq])
            hot = (distinct >= len(watch)) | watch[np.minimum(distinct, len(watch) - 1)]
            for i, e in zip(distinct[hot].tolist(), owner[hot].tolist()):
                kept = enc.where.setdefault(i, [])
                if len(kept) < EXAMPLES:
                    kept.append(e)
        batch_texts.clear()
        batch_meta.clear()

    enc.template = "not needed"
    for ex in track(examples, total=total, description="rendering and tokenizing the training data"):
        enc.examples += 1
        if ex.messages is not None:
            enc.conversations += 1
            if template is None or refused is not None:
                enc.untemplated.append(ex.index)
                enc.template = "none shipped" if template is None else refused
                continue
            try:
                text = render(template, ex.messages, add_generation_prompt=False, **variables)
            except RenderRefused as err:  # the template, not this example: stop rendering it
                refused = str(err)
                enc.template = refused
                enc.untemplated.append(ex.index)
                continue
            except (TemplateError, TypeError, ValueError, KeyError, IndexError, AttributeError,
                    RecursionError, OverflowError) as err:
                enc.note(f"{type(err).__name__}: {str(err)[:160]}", ex.index)
                continue
            enc.template = "rendered"
            batch_texts.append(text)
            batch_meta.append((ex.index, True))
        else:
            batch_texts.append(ex.text)
            batch_meta.append((ex.index, False))
        if len(batch_texts) >= BATCH:
            flush()
    flush()
    return enc


def length_stats(lengths: Sequence[int]) -> dict[str, Any]:
    """``{max, p50, p95, p99, mean}`` of the example lengths (tokens)."""
    if not lengths:
        return {"max": 0, "p50": 0, "p95": 0, "p99": 0, "mean": 0.0}
    a = np.asarray(lengths)
    return {"max": int(a.max()), "p50": int(np.percentile(a, 50)), "p95": int(np.percentile(a, 95)),
            "p99": int(np.percentile(a, 99)), "mean": round(float(a.mean()), 1)}
