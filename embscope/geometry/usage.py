"""The flagged rows your data uses: which under-trained tokens a corpus and the chat template produce.

A flagged row matters for a fine-tune only if the training data contains its token: then it gets
large, badly scaled gradients (the "untrained tokens found" error some trainers raise, or a NaN
loss). This module tokenizes the user's texts with the model's own tokenizer and counts every
occurrence of a flagged id; separately it renders the model's chat template (GGUF metadata
``tokenizer.chat_template`` or ``tokenizer_config.json``) on a short sample conversation
(system, user, assistant, then the generation prompt) and counts the flagged ids the template
itself inserts — those appear in *every* training example of a chat fine-tune.

Special tokens in the rendered template are recognised by tokenizers that parse them in text
(HF ``tokenizers``); tiktoken's ordinary encoding treats them as text.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from embscope.geometry.records import UsageRecord, UsedRow

if TYPE_CHECKING:  # pragma: no cover
    from embscope.models.model import LoadedModel

#: the sample conversation the chat template is rendered on
SAMPLE_CONVERSATION = (
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "The capital of France is Paris."},
)
#: texts per tokenizer call
BATCH = 512
#: characters per tokenizer call: 512 texts of 1 MiB would be half a gigabyte of text, and the
#: encodings (ids, offsets, token strings: about 70 bytes a token) of it several gigabytes; 1 M
#: characters cost about 70 MB at once
BATCH_CHARS = 1 << 20
#: rows listed in the summary
TOP_N = 50


@dataclass
class Usage:
    """Counts of flagged ids in the corpus and the chat template: the summary's record
    (``summary.json`` ``geometry.usage``, fields documented on
    :class:`~embscope.geometry.records.UsageRecord`) and the per-row counts behind it."""

    #: the summary's record
    record: UsageRecord
    #: row id -> occurrences in the corpus (flagged ids only, zero counts omitted)
    corpus: dict[int, int] = field(default_factory=dict)
    #: row id -> occurrences in the rendered template
    in_template: dict[int, int] = field(default_factory=dict)
    #: flagged ids checked
    flagged_ids: list[int] = field(default_factory=list, repr=False)

    def used_ids(self) -> list[int]:
        """Flagged ids the data produces, most frequent first (template counts break ties)."""
        return _most_used(self.corpus, self.in_template)

    def columns(self, n: int) -> dict[str, list[int | None]]:
        """``corpus_count`` / ``template_count``: counts for flagged rows (0 when unused), None elsewhere."""
        c: list[int | None] = [None] * n
        t: list[int | None] = [None] * n
        for i in self.flagged_ids:
            c[i] = self.corpus.get(i, 0)
            t[i] = self.in_template.get(i, 0)
        return {"corpus_count": c, "template_count": t}


def render_chat_template(model: "LoadedModel") -> tuple[str | None, str]:
    """``(text, status)``: the model's chat template rendered on :data:`SAMPLE_CONVERSATION` in a
    sandboxed Jinja environment (templates are untrusted text), or ``(None, why not)``."""
    from embscope.models.chat_template import RenderRefused, read_chat_template, render, special_token_strings

    template = read_chat_template(model)
    if not template:
        return None, "none shipped"
    names = special_token_strings(model)
    err = ""
    for messages in (list(SAMPLE_CONVERSATION), list(SAMPLE_CONVERSATION[1:])):  # some refuse a system turn
        try:
            text = render(template, messages, add_generation_prompt=True, **names)
            return text, "rendered"
        except RenderRefused as exc:  # too much output, work or time: the template itself, not the turns
            return None, str(exc)
        except Exception as exc:  # noqa: BLE001 - a template that does not render is reported, not fatal
            err = f"{type(exc).__name__}: {str(exc)[:120]}"
    return None, f"render failed: {err}"


def _chunks(texts: Sequence[str]):
    """``(start, end)`` runs of at most :data:`BATCH` texts and :data:`BATCH_CHARS` characters (one
    text may be longer): a tokenizer call's encodings cost far more memory than its text."""
    start, size = 0, 0
    for i, t in enumerate(texts):
        if i > start and (i - start >= BATCH or size + len(t) > BATCH_CHARS):
            yield start, i
            start, size = i, 0
        size += len(t)
    if start < len(texts):
        yield start, len(texts)


def count_ids(model: "LoadedModel", texts: Sequence[str], wanted: np.ndarray) -> tuple[Counter, int]:
    """Occurrences of the ids where ``wanted`` (bool, n_rows) is true, and the total token count."""
    from embscope.progress import track

    counts: Counter = Counter()
    total = 0
    batches = list(_chunks(texts))
    for s, e in track(batches, total=len(batches), description="counting flagged tokens in the corpus", unit="batches"):
        for ids in model.vocab.encode_batch(list(texts[s:e])):
            a = np.asarray(ids, dtype=np.int64)
            total += len(a)
            a = a[(a >= 0) & (a < len(wanted))]
            counts.update(a[wanted[a]].tolist())
    return counts, total


def flagged_usage(model: "LoadedModel", flagged_ids: Sequence[int], texts: Sequence[str], *,
                  reasons: Sequence[str | None] | None = None, chat_template: bool = True) -> Usage:
    """Count the flagged rows ``texts`` (and the rendered chat template) produce."""
    from embscope.errors import VocabError

    if model.vocab is None:
        raise VocabError(f"{model.name} ships no tokenizer, so its corpus usage cannot be counted; "
                         "pass a model with a tokenizer")
    wanted = np.zeros(model.n_rows, dtype=bool)
    ids = [int(i) for i in flagged_ids]
    wanted[ids] = True
    corpus, total = count_ids(model, texts, wanted)
    in_template: Counter = Counter()
    status = "off"
    if chat_template:
        text, status = render_chat_template(model)
        if text is not None:
            in_template, _ = count_ids(model, [text], wanted)
    strings = model.token_strings()
    corpus, in_template = dict(corpus), dict(in_template)
    top = [UsedRow(id=i, token=strings[i], reason=reasons[i] if reasons is not None else None,
                   corpus=corpus.get(i, 0), template=in_template.get(i, 0))
           for i in _most_used(corpus, in_template)[:TOP_N]]
    record = UsageRecord(texts=len(texts), corpus_tokens=total, template=status, flagged_checked=len(ids),
                         flagged_used=len(set(corpus) | set(in_template)), flagged_in_template=len(in_template),
                         occurrences=int(sum(corpus.values())), top=top)
    return Usage(record, corpus=corpus, in_template=in_template, flagged_ids=ids)


def _most_used(corpus: dict[int, int], in_template: dict[int, int]) -> list[int]:
    """The ids either count holds, most frequent in the corpus first (template counts break ties)."""
    return sorted(set(corpus) | set(in_template), key=lambda i: (-corpus.get(i, 0), -in_template.get(i, 0), i))
