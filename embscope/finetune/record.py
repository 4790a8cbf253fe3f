"""The pre-fine-tune check's record (``summary.json`` → ``sections.finetune``) and its findings.

A finding has a stable code (:data:`CODES`, documented in :mod:`embscope.finetune.findings`), a
severity (:data:`SEVERITIES`, lowest first), the ids it concerns and a one-line fix; ``diff`` reports
its own codes with the same record (:mod:`embscope.delta.findings`). This module imports nothing
heavy: ``summary.json`` is read through it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from embscope.records import Record

#: severities, lowest first
SEVERITIES = ("info", "warning", "error")
#: the check's finding codes, in the order findings of one severity are listed
CODES = ("untrained-used", "special-row-untrained", "pad-is-eos", "pad-in-labels", "double-bos",
         "id-beyond-matrix", "added-in-padding", "exceeds-context", "no-labels", "unknown-tokens",
         "no-chat-template", "render-refused", "render-failed", "prompt-not-prefix", "unmapped-roles",
         "trainer-drops", "unreadable-records", "ignored-fields")
#: ids listed per finding
MAX_IDS = 50


@dataclass
class Finding(Record):
    """One hazard (``findings.parquet`` has one row per finding)."""

    #: stable code (see :mod:`embscope.finetune.findings`)
    code: str
    #: error, warning or info
    severity: str
    #: what is wrong, in one line
    message: str
    #: the row ids concerned (at most 50), most used first
    ids: list[int] = field(default_factory=list)
    #: their token strings (raw, untrusted: escape before display)
    tokens: list[str] = field(default_factory=list)
    #: occurrences (tokens or examples, see ``message``)
    count: int = 0
    #: a few example indices (0-based record positions in the data)
    examples: list[int] = field(default_factory=list)
    #: the fix, in one line
    fix: str = ""
    #: per id of ``ids``: occurrences as an input (the input row's gradient)
    input_counts: list[int] = field(default_factory=list)
    #: per id of ``ids``: occurrences at a loss position (the output row's softmax target)
    label_counts: list[int] = field(default_factory=list)
    #: the split it was found in (null: the data has no splits, or it holds for every split)
    split: str | None = None


def severity_rank(s: str) -> int:
    """The rank of a severity, lowest first.

    >>> [severity_rank(s) for s in ("info", "warning", "error")]
    [0, 1, 2]
    """
    return SEVERITIES.index(s)


def worst(findings: Sequence[Finding]) -> str | None:
    """The highest severity among ``findings`` (None when there are none)."""
    return max((x.severity for x in findings), key=severity_rank, default=None)


def reaches(findings: Sequence[Finding], severity: str) -> bool:
    """Whether a finding is at ``severity`` or above (``never``: none is) — the CI gate of ``check``
    and ``diff`` (``--fail-on``).

    >>> found = [Finding(code="no-labels", severity="warning", message="...")]
    >>> reaches(found, "error"), reaches(found, "warning"), reaches(found, "never")
    (False, True, False)
    """
    return severity != "never" and any(severity_rank(x.severity) >= severity_rank(severity) for x in findings)


def as_json(findings: Sequence[Finding]) -> list[dict[str, Any]]:
    """``--json``'s findings: every field of each (``code``, ``severity``, ``message``, ``ids``, …)."""
    return [x.to_dict() for x in findings]


@dataclass
class CheckRecord(Record):
    """The pre-fine-tune check (``summary.json`` ``sections.finetune``)."""

    #: the hazards found, errors first (see embscope.finetune.findings for the codes)
    findings: list[Finding]
    #: what was read: {records, files, formats {shape: examples}, rejected {reason: records},
    #: rejected_examples, skipped {reason: count}, ignored_fields {field: records}, labels (KTO)
    #: {desirable, undesirable}, splits {split: records}}
    data: dict[str, Any]
    #: declared special ids: {sources {source: {role: [ids]}}, prefix, suffix (what the tokenizer
    #: adds around a text), adds_from, added_tokens, base_size}
    specials: dict[str, Any]
    #: the chat template, as the renders went: rendered, rendered N of M (K failed or refused),
    #: render failed on all N, render refused: …, none shipped, not needed
    template: str
    #: examples tokenized
    examples: int
    #: of them, conversations rendered by the template
    conversations: int
    #: tokens the data tokenizes to
    tokens: int
    #: UTF-8 bytes of the texts tokenized (rendered conversations and plain texts)
    bytes: int
    #: tokens per sequence: {max, p50, p95, p99, mean}
    lengths: dict[str, Any]
    #: the length limit the sequences must fit (tokens; null when unknown)
    context: int | None
    #: where the limit comes from (--max-length, the trainer's default, the config's context)
    context_from: str
    #: distinct ids the data uses
    distinct_ids: int
    #: the highest severity found (null: nothing found)
    worst: str | None
    #: seconds spent reading, rendering and tokenizing
    seconds: float
    #: the most used ids: [{id, token, count, labels, examples}] (20 at most)
    top_ids: list[dict[str, Any]] = field(default_factory=list)
    #: the trainer profile: {name, title, masks_pad_by_id, chat_loss, completion_only, text_eos}
    trainer: dict[str, Any] = field(default_factory=dict)
    #: the PAD that trainer pads with: {id, token, how, new_token}
    pad: dict[str, Any] = field(default_factory=dict)
    #: which tokenizer the ids follow (tokenizer.json, llama.cpp's pre-tokenizer for a GGUF, …)
    reference: str = ""
    #: sequences trained on (a DPO example gives two: chosen and rejected)
    sequences: int = 0
    #: tokens at a loss position (past the first of each sequence)
    label_tokens: int = 0
    #: per split (data with two or more): {split: {examples, conversations, sequences, tokens,
    #: label_tokens, template, lengths, worst}}
    splits: dict[str, Any] = field(default_factory=dict)
