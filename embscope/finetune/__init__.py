"""Ready to fine-tune? The user's training data, read and tokenized as the trainer will, checked
against the model's vocabulary hazards.

:func:`check_data` reads the data (:mod:`embscope.corpus.conversations`), collects the special ids
from every source (:mod:`~embscope.finetune.specials`), renders and tokenizes each example
(:mod:`~embscope.finetune.encode`) and turns what it finds into findings with stable codes
(:mod:`~embscope.finetune.findings`). It reads only the matrices, the config and the tokenizer
files: no whole-model load.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from embscope.finetune.findings import CODES, SEVERITIES, Finding, find, findings_frame, worst
from embscope.records import Record

if TYPE_CHECKING:  # pragma: no cover
    from embscope.models.model import LoadedModel

__all__ = ["CODES", "SEVERITIES", "CheckRecord", "Finding", "check_data", "findings_frame", "worst"]


@dataclass
class CheckRecord(Record):
    """The pre-fine-tune check (``summary.json`` ``sections.finetune``)."""

    #: the hazards found, errors first (see embscope.finetune.findings for the codes)
    findings: list[Finding]
    #: what was read: {records, files, formats {format: examples}, rejected {reason: records},
    #: rejected_examples, skipped {reason: count}}
    data: dict[str, Any]
    #: declared special ids: {sources {source: {role: [ids]}}, prefix, suffix (what the tokenizer
    #: adds around a text), adds_from, added_tokens, base_size}
    specials: dict[str, Any]
    #: the chat template: rendered, none shipped, not needed, or render refused: …
    template: str
    #: examples tokenized
    examples: int
    #: of them, conversations rendered by the template
    conversations: int
    #: tokens the data tokenizes to
    tokens: int
    #: UTF-8 bytes of the texts tokenized (rendered conversations and plain texts)
    bytes: int
    #: tokens per example: {max, p50, p95, p99, mean}
    lengths: dict[str, Any]
    #: the context the examples must fit (tokens; null when unknown)
    context: int | None
    #: where the context comes from (--max-length, the config's max_position_embeddings, …)
    context_from: str
    #: distinct ids the data uses
    distinct_ids: int
    #: the highest severity found (null: nothing found)
    worst: str | None
    #: seconds spent reading, rendering and tokenizing
    seconds: float
    #: the most used ids: [{id, token, count, examples}] (20 at most)
    top_ids: list[dict[str, Any]] = field(default_factory=list)


def _context(model: "LoadedModel", max_length: int | None) -> tuple[int | None, str]:
    if max_length:
        return int(max_length), "--max-length"
    cfg = model.config
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    for key in ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length"):
        v = text.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v, f"config {key}"
    return None, "unknown"


def check_data(model: "LoadedModel", data: Sequence[str | Path], *, fmt: str | None = None,
               text_field: str = "text", flagged: np.ndarray | None = None, max_length: int | None = None,
               template: str | None = ...) -> CheckRecord:  # type: ignore[assignment]
    """Check ``data`` against ``model`` (see the module docstring).

    Args:
        model: the loaded model (matrices, config, tokenizer).
        data: training-data paths (files, folders, globs).
        fmt: force a record format (``messages``, ``sharegpt``, ``alpaca``, ``prompt-completion``,
            ``text``); default: detected per record.
        flagged: per row, flagged as under-trained by the scan (None: rules that need it are off).
        max_length: the trainer's sequence length (default: the config's context).
        template: the chat template to render with (default: the model's own).
    Returns:
        :class:`CheckRecord`.
    """
    from embscope.corpus.conversations import FORMATS, DataReport, iter_examples
    from embscope.errors import CorpusError, SpecError, VocabError, did_you_mean
    from embscope.finetune.encode import encode_examples, length_stats
    from embscope.finetune.findings import Facts
    from embscope.finetune.specials import special_ids
    from embscope.models.chat_template import read_chat_template, special_token_strings

    if fmt is not None and fmt not in FORMATS:
        raise SpecError(f"unknown --format {fmt!r}{did_you_mean(fmt, FORMATS)}; choose from {', '.join(FORMATS)}")
    if model.vocab is None:
        raise VocabError(f"{model.name} ships no tokenizer, so its training data cannot be tokenized; "
                         "pass a model with a tokenizer")
    t0 = time.perf_counter()
    n = model.n_rows
    sp = special_ids(model)
    if template is ...:
        template = read_chat_template(model)
    names = special_token_strings(model)
    watch = np.zeros(n, dtype=bool)
    if flagged is not None:
        watch |= np.asarray(flagged, dtype=bool)[:n]
    for ids in (sp.ids(r) for r in ("bos", "eos", "pad", "unk")):
        watch[[i for i in ids if 0 <= i < n]] = True
    watch[[i for i, _, _ in sp.added if 0 <= i < n]] = True
    zero = np.zeros(n, dtype=bool)
    step = 8192  # rows per block: a (8192, d) float32 block is at most a few tens of MB
    for a in range(0, n, step):
        zero[a:a + step] = (model.embed[a:a + step].float().abs().amax(dim=1) == 0).cpu().numpy()
        if model.output is not None:
            zero[a:a + step] |= (model.output[a:a + step].float().abs().amax(dim=1) == 0).cpu().numpy()
    report = DataReport()
    enc = encode_examples(model, iter_examples(data, fmt=fmt, text_field=text_field, report=report), sp,
                          template=template, variables=names, watch=watch)
    if enc.examples == 0:
        why = ", ".join(f"{c} {r}" for r, c in [*report.rejected.most_common(3), *report.issues.totals.most_common(2)])
        raise CorpusError(f"{', '.join(map(str, data))} holds no training example ({why or 'no records'}); pass "
                          "jsonl/json/Parquet/Arrow records in the messages, conversations, alpaca, "
                          "prompt/completion or text format")
    context, context_from = _context(model, max_length)
    facts = Facts(model=model, specials=sp, encoded=enc, data=report,
                  flagged=np.asarray(flagged, dtype=bool)[:n] if flagged is not None else None,
                  zero_row=zero, context=context, context_from=context_from, template=template)
    findings = find(facts)
    strings = model.token_strings()
    used = np.flatnonzero(enc.counts)
    top = used[np.argsort(-enc.counts[used], kind="stable")][:20]
    return CheckRecord(
        findings=findings, data=report.to_dict(), specials=sp.to_dict(), template=enc.template,
        examples=enc.examples, conversations=enc.conversations, tokens=enc.tokens, bytes=enc.bytes,
        lengths=length_stats(enc.lengths), context=context, context_from=context_from,
        distinct_ids=int(len(used)), worst=worst(findings), seconds=round(time.perf_counter() - t0, 3),
        top_ids=[{"id": int(i), "token": strings[i] if i < n else f"<id {i}>", "count": int(enc.counts[i]),
                  "examples": int(enc.example_counts[i])} for i in top])
