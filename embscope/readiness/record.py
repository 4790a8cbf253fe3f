"""The pre-fine-tune check's record (``summary.json`` → ``sections.readiness``) and its findings.

A finding has a stable code (:data:`CODES`, documented in :mod:`embscope.readiness.findings`), a
severity (:data:`SEVERITIES`, lowest first), the ids it concerns and a one-line fix; ``diff`` reports
its own codes with the same record (:mod:`embscope.changes.findings`). This module imports nothing
heavy: ``summary.json`` is read through it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from embscope.corpus.conversations import DataRead
from embscope.records import LIVE, Record

#: severities, lowest first
SEVERITIES = ("info", "warning", "error")
#: the check's finding codes, in the order findings of one severity are listed
CODES = ("untrained-used", "special-row-untrained", "pad-is-eos", "pad-in-labels", "double-bos",
         "id-beyond-matrix", "added-in-padding", "exceeds-context", "no-labels", "unknown-tokens",
         "no-chat-template", "render-refused", "render-failed", "prompt-not-prefix", "unmapped-roles",
         "trainer-drops", "unreadable-records", "ignored-fields")
#: ids listed per finding
MAX_IDS = 50
#: the findings about under-trained (or zero) rows the data uses: what ``--repair`` re-initialises
#: when they are errors
ROW_CODES = ("untrained-used", "special-row-untrained", "added-in-padding")


@dataclass
class Finding(Record):
    """One hazard (``findings.parquet`` has one row per finding)."""

    #: stable code (see :mod:`embscope.readiness.findings`)
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
    #: rows (token ids) it concerns, all of them (``ids`` lists the first 50); null for a finding
    #: about records, sequences or the template rather than rows
    rows: int | None = None


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
class LengthStats(Record):
    """Tokens per sequence."""

    #: the longest sequence
    max: int
    #: percentiles (numpy's linear interpolation, truncated to an integer)
    p50: int
    p95: int
    p99: int
    #: the mean, to one decimal
    mean: float


@dataclass
class TopId(Record):
    """One of the ids the data uses most."""

    #: row id
    id: int
    #: its token string (raw, untrusted)
    token: str
    #: occurrences in the data
    count: int
    #: occurrences at a loss position
    labels: int
    #: examples it occurs in
    examples: int


@dataclass
class TrainerRecord(Record):
    """The trainer profile the check followed (:data:`embscope.readiness.trainers.TRAINERS`)."""

    #: the ``--trainer`` name
    name: str
    #: the library and what of it the profile follows
    title: str
    #: the collator masks every label equal to the pad id (by id), not only the padding
    masks_pad_by_id: bool
    #: loss positions of a conversation: ``all``, ``assistant-content`` or ``assistant-turns``
    chat_loss: str
    #: prompt-completion, preference and KTO examples: only the completion is in the loss
    completion_only: bool
    #: plain texts and string completions get the EOS appended before tokenizing
    text_eos: bool


@dataclass
class PadChoice(Record):
    """The PAD the trainer will pad with (:func:`embscope.readiness.trainers.choose_pad`)."""

    #: its id (null: there is none, the trainer needs one set)
    id: int | None
    #: its token string
    token: str | None
    #: how it was chosen (``--pad-token``, ``tokenizer_config.json``, ``the EOS (no PAD declared)``, …)
    how: str
    #: the trainer adds a token of its own that has no row yet (Unsloth's last resort)
    new_token: bool = False


@dataclass
class SpecialIds(Record):
    """The special ids the model declares, per source, and what the tokenizer adds around a text
    (read by :func:`embscope.readiness.specials.special_ids`)."""

    #: {source: {role: [ids]}} (``config.json`` → {"eos": [2]}); roles a source does not declare are absent
    sources: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    #: ids the tokenizer puts before a text when called with special tokens (``[1]`` for a BOS)
    prefix: list[int] = field(default_factory=list)
    #: ids it puts after (``[2]`` for an EOS)
    suffix: list[int] = field(default_factory=list)
    #: where prefix and suffix come from (``tokenizer.json post-processor``, ``gguf add_bos_token``, …)
    adds_from: str = "none"
    #: tokens the tokenizer adds to its model vocabulary
    added_tokens: int = 0
    #: size of the tokenizer's model vocabulary, without added tokens (null when unknown)
    base_size: int | None = None
    #: those added tokens, ``(id, content, special)`` (not written: ``added_tokens`` counts them)
    added: list[tuple[int, str, bool]] = field(default_factory=list, metadata=LIVE)

    def ids(self, role: str) -> list[int]:
        """Every id any source declares for ``role``, in order of first mention.

        >>> SpecialIds(sources={"config.json": {"eos": [2]}, "tokenizer_config.json": {"eos": [2, 7]}}).ids("eos")
        [2, 7]
        """
        return list(dict.fromkeys(i for s in self.sources.values() for i in s.get(role, ())))

    def record(self) -> "SpecialIds":
        """The declared ids as the check records them: ``added_tokens`` counts ``added``."""
        self.added_tokens = len(self.added)
        return self


@dataclass
class SplitRecord(Record):
    """The figures of one split of the data."""

    #: examples tokenized
    examples: int
    #: of them, conversations rendered by the template
    conversations: int
    #: sequences trained on
    sequences: int
    #: tokens
    tokens: int
    #: tokens at a loss position
    label_tokens: int
    #: the template's status on this split (see ``CheckRecord.template``)
    template: str
    #: tokens per sequence
    lengths: LengthStats
    #: the highest severity found in it (null: nothing)
    worst: str | None


@dataclass
class CheckRecord(Record):
    """The pre-fine-tune check (``summary.json`` ``sections.readiness``)."""

    #: the hazards found, errors first (see embscope.readiness.findings for the codes)
    findings: list[Finding]
    #: what was read: records, files, shapes, what was rejected or skipped and why
    data: DataRead
    #: the declared special ids, and what the tokenizer adds around a text
    specials: SpecialIds
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
    #: tokens per sequence
    lengths: LengthStats
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
    #: the most used ids (20 at most)
    top_ids: list[TopId] = field(default_factory=list)
    #: the trainer profile followed
    trainer: TrainerRecord | None = None
    #: the PAD that trainer pads with
    pad: PadChoice | None = None
    #: which tokenizer the ids follow (tokenizer.json, llama.cpp's pre-tokenizer for a GGUF, …)
    reference: str = ""
    #: sequences trained on (a DPO example gives two: chosen and rejected)
    sequences: int = 0
    #: tokens at a loss position (past the first of each sequence)
    label_tokens: int = 0
    #: per split, for data with two or more
    splits: dict[str, SplitRecord] = field(default_factory=dict)
