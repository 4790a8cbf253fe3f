"""The diff's record (``summary.json`` → ``sections.diff``); ``diff.parquet`` has one row per tuned row."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from embscope.finetune.record import Finding
from embscope.records import Record


@dataclass
class NoiseFloor(Record):
    """The floor one matrix's rows are judged against (``sections.diff.matrices.<m>.floor``)."""

    #: relative change ‖t − r‖/‖r‖ a row must exceed to count as moved
    floor: float
    #: BASE's storage format of this matrix (``BF16``, ``Q8_0``, …)
    base_format: str
    #: TUNED's storage format of the rows that may differ from BASE
    tuned_format: str
    #: ``tuned descends from base`` (its unchanged rows are BASE's cast to TUNED's format), ``base
    #: descends from tuned`` (BASE is TUNED's source quantised), ``independent`` or ``identical formats``
    lineage: str
    #: share of sampled rows that round-trip bit for bit under that lineage
    exact_share: float
    #: rows measured
    rows: int
    #: the quantile of the per-row error the floor is set at
    quantile: float
    #: the floor is this many times that quantile
    margin: float
    #: 99.9th percentile of ‖rt_B(b) − b‖/‖b‖ (BASE stored in TUNED's format)
    e_base_in_tuned: float
    #: 99.9th percentile of ‖rt_A(t) − t‖/‖t‖ (TUNED stored in BASE's format)
    e_tuned_in_base: float
    #: ``exact`` when both round trips are the formats' own, ``proxy`` when one is approximated
    method: str
    #: the floor for rows added past BASE, judged against their initial rows
    new_floor: float | None = None
    #: where those initial rows come from and how their floor was set
    new_reference: str | None = None


@dataclass
class MatrixDiff(Record):
    """One matrix (the input embedding, or the head when either model is untied)."""

    #: the floor its rows are judged against
    floor: NoiseFloor
    #: rows compared (every row of TUNED's matrix)
    rows: int
    #: rows whose relative change exceeds the floor
    moved: int
    #: moved / rows
    moved_share: float
    #: of the rows added past BASE, those that moved from their initial rows
    new_moved: int
    #: rows with a NaN or an infinity
    nonfinite: int
    #: rows whose norm grew past EXPLODE × the larger of their reference norm and BASE's median row norm
    exploded: int
    #: median relative change of the moved rows (null: none moved)
    median_moved_change: float | None
    #: largest relative change (null: no finite change)
    max_change: float | None
    #: median row norm of BASE's matrix
    base_median_norm: float


@dataclass
class DiffRecord(Record):
    """What training changed: BASE against TUNED, row by row."""

    #: BASE: {spec, name, rows, tokens, tied, formats {embed, output}}
    base: dict[str, Any]
    #: TUNED: {spec, name, kind (model or peft), rows, tokens, tied, formats, tie_word_embeddings (its
    #: config's flag, null when it has none), adapter (PEFT: type and what it does to each matrix), fingerprint}
    tuned: dict[str, Any]
    #: rows both matrices have for the same token (compared with BASE's row)
    shared_rows: int
    #: rows added past BASE's vocabulary (or listed by the extension manifest)
    new_rows: int
    #: what new rows are compared with: ``manifest`` (the rows extend --apply wrote), ``base`` (BASE is the
    #: extended model), ``mean`` (BASE's mean row: no manifest), null without new rows
    new_reference: str | None
    #: the extension manifest read, if any
    manifest: str | None
    #: per matrix: ``input``, and ``output`` when either model is untied
    matrices: dict[str, MatrixDiff]
    #: the rows that moved most (input matrix, then output), at most 50: {id, token, matrix, change, cos,
    #: norm_change, new, used}
    top_movers: list[dict[str, Any]]
    #: findings, errors first (codes: embscope.delta.findings)
    findings: list[Finding]
    #: the highest severity found (null: nothing found)
    worst: str | None
    #: with --data: {paths, examples, tokens, used_rows, used_moved, used_unmoved, moved_rows, moved_used_share,
    #: new_used, template}; null without data
    data: dict[str, Any] | None
    #: per language of the languages corpus: {language, script, tokens, distinct, moved_share (token-weighted
    #: share of its tokens whose input row moved), mean_change (token-weighted mean relative change), top [tokens]}
    languages: list[dict[str, Any]] = field(default_factory=list)
    #: the languages corpus (null: none)
    languages_corpus: str | None = None
    #: the 2-D map: {method, explained (variance share of the two axes)}
    map: dict[str, Any] = field(default_factory=dict)
    #: seconds per step: {load, floor, pass, data, languages}
    seconds: dict[str, float] = field(default_factory=dict)
