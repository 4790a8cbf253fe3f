"""The geometry scan's summary, typed to the last field (``summary.json`` ``sections.tokens.geometry``).

Each record here is what one part of :func:`embscope.geometry.scan.scan` reports, built by that
part (the verification's by :func:`~embscope.geometry.verify.verify_rows`, the usage's by
:func:`~embscope.geometry.usage.flagged_usage`, the map's by
:func:`~embscope.geometry.layout.umap_layout`); the live objects beside them hold only what the
columns need; the kNN graph's records are in :mod:`embscope.geometry.knn_record`. The field docs
here are the only ones (``docs/schema.md`` lists them). Formulas: :mod:`embscope.geometry.indicators`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from embscope.geometry.knn_record import (CertificateRecord, CutRecord, JoinRecord, KnnRecord,  # noqa: F401
                                          MeasuredRecord, NnDescentRecord, TilesRecord)
from embscope.records import Record

#: rows per list of the summary and the report (the most under-trained normal tokens, the most
#: isolated, the candidates and the cleared rows of the verification); the certified graph proves
#: exactly these lists (:mod:`embscope.geometry.certify_lists`)
TOP_N = 30
#: the ways ``--verify-sample`` picks the rows: the highest scores, or a seeded random sample of
#: all flagged normal rows (whose verified share estimates the precision of every flag)
SAMPLES = ("top", "random")


@dataclass
class FlaggedCounts(Record):
    """How many rows were flagged, and why."""

    #: flagged normal rows (special, byte and padding rows are counted apart)
    normal: int
    #: normal / normal rows (fraction; lower is a better-trained vocabulary)
    normal_share: float
    #: {category: flagged rows}
    by_category: dict[str, int]
    #: {indicator or ``zero``: flagged normal rows it fired on} (a row may count under several;
    #: ``verified``: prompting alone flagged it)
    by_reason: dict[str, int]
    #: rows that are exactly zero (or denormal dust)
    zero_rows: int
    #: normal rows flagged isolated (their own flag, not part of ``normal``)
    isolated: int
    #: normal rows whose knot is a trained family of near-synonyms, not a collapse (not flagged)
    family: int = 0
    #: normal rows whose Magikarp similarity stops short of the unused rows (not flagged)
    drift: int = 0
    #: flagged rows of every category (``flagged`` in tokens.parquet; the rows the map outlines):
    #: ``verified + cleared + candidates``
    total: int = 0
    #: flagged rows prompting confirmed as under-trained (``undertrained_status`` = verified)
    verified: int = 0
    #: flagged rows prompting cleared: the model predicts them, so they are trained (``cleared``)
    cleared: int = 0
    #: flagged rows prompting did not check: indicators only (``candidate``)
    candidates: int = 0
    #: normal rows the indicators flag (the threshold note's count); ``normal`` is this plus the rows
    #: prompting alone flagged (gated rows or special tokens the model cannot produce)
    by_indicators: int = 0
    #: {category: {verified, cleared, candidate: flagged rows}}
    status_by_category: dict[str, dict[str, int]] = field(default_factory=dict)
    #: {category: rows whose isolation passes the threshold} (``isolated`` in tokens.parquet: every
    #: category; ``isolated`` above counts the normal ones), categories with none left out
    isolated_by_category: dict[str, int] = field(default_factory=dict)


@dataclass
class ScoredRow(Record):
    """One of the most under-trained normal tokens."""

    #: row id
    id: int
    #: the token's text (raw, untrusted: escape before display)
    token: str
    #: ``undertrained_score``, robust sigmas (higher: more under-trained)
    score: float
    #: the indicators that fired, joined by ``+``; null when none reached the threshold
    reason: str | None


@dataclass
class IsolatedRow(Record):
    """One of the most isolated normal tokens."""

    #: row id
    id: int
    #: the token's text (raw, untrusted)
    token: str
    #: robust z of the isolation indicator (higher: farther from its neighbours)
    z: float


@dataclass
class ScriptRow(Record):
    """The normal rows of one Unicode script."""

    #: normal rows whose token is in this script
    rows: int
    #: of those, flagged
    flagged: int
    #: flagged / rows (fraction)
    flagged_share: float
    #: mean L2 norm of their rows (the output matrix on untied models)
    mean_norm: float


@dataclass
class ReferenceRecord(Record):
    """The Magikarp reference set of known-unused rows (:mod:`embscope.geometry.reference`)."""

    #: rows in it
    size: int
    #: ``auto`` (found by the rules), ``given`` (``--unused-ids``) or ``none``
    source: str
    #: {rule: rows it found}
    by_source: dict[str, int] = field(default_factory=dict)
    #: what still works without one; null when the set is not empty
    note: str | None = None


@dataclass
class SpecialRow(Record):
    """A special or template token checked where it is used."""

    #: row id
    id: int
    #: the token's text (raw, untrusted)
    token: str
    #: highest p(token | text before it) over its occurrences
    max_prob: float
    #: max_prob below the cut: under-trained, confirmed
    verified: bool
    #: flagged by the indicators
    flagged: bool


@dataclass
class SpecialsInContext(Record):
    """Special and template tokens checked in context (the repetition prompts cannot apply)."""

    #: where the text came from: ``template``, ``data`` or ``template+data``
    source: str
    #: special tokens checked
    checked: int
    #: of those, verified under-trained
    verified: int
    #: one per token checked
    rows: list[SpecialRow] = field(default_factory=list)


@dataclass
class VerdictRow(Record):
    """A row of the verified, candidate or cleared list."""

    #: row id
    id: int
    #: the token's text (raw, untrusted)
    token: str
    #: ``undertrained_score``
    score: float
    #: what fired (``family``/``drift``: a gate stopped the indicator; ``verified``: prompting alone)
    reason: str | None
    #: highest probability the model gave it when asked to produce it; absent when not checked
    max_prob: float | None = None


@dataclass
class VerdictList(Record):
    """One of the lists kept apart: how many rows, and the first of them."""

    #: rows in the list
    count: int
    #: the rows, highest score first (verified: up to 500; candidates, cleared: up to 30)
    rows: list[VerdictRow] = field(default_factory=list)


@dataclass
class VerificationRecord(Record):
    """What prompting the whole model found (``--verify N``, :mod:`embscope.geometry.verify`)."""

    #: flagged rows checked (null when the model could not be loaded)
    n_checked: int | None = None
    #: of those, rows whose max_prob stayed below ``max_prob_cut`` (under-trained, confirmed)
    n_verified_undertrained: int | None = None
    #: n_verified_undertrained / n_checked (higher: the flags hold up)
    precision: float | None = None
    #: 95 % Wilson interval of ``precision``, [low, high]
    precision_ci95: list[float] | None = None
    #: how the rows were picked: ``top`` (highest scores) or ``random`` (a seeded sample of all flags,
    #: whose precision estimates every flag's)
    sample: str = "top"
    #: seed of the random sample and of the controls
    seed: int = 0
    #: flagged normal rows the rows were picked from
    pool: int | None = None
    #: trained control rows checked
    controls_checked: int | None = None
    #: controls whose max_prob stayed below the cut (lower is better)
    controls_failed: int | None = None
    #: prompt names used
    prompts: list[str] = field(default_factory=list)
    #: the max_prob below which a row counts as verified
    max_prob_cut: float = 0.01
    #: where the model ran
    device: str | None = None
    #: seconds spent
    seconds: float | None = None
    #: wall seconds of prompting per row checked (candidates, controls, family rows)
    seconds_per_row: float | None = None
    #: the work budget given, 10¹² multiply-adds (tokens × parameters; null: none)
    work_budget: float | None = None
    #: the work of the rows checked at most, 10¹² multiply-adds (each row's every prompt and step)
    work: float | None = None
    #: the budget left rows unchecked (candidates first, then controls, then family rows)
    stopped_at_budget: bool = False
    #: rows a gate stopped (``family``, ``drift``) that were checked, and of those verified (then flagged)
    family_checked: int | None = None
    family_verified: int | None = None
    #: special and template tokens checked in context; null when the template and data use none
    specials: SpecialsInContext | None = None
    #: precision of the model's body in the forward passes (``float32``, or ``bfloat16`` where this
    #: CPU multiplies it faster; the LM head stays float32); null when not run
    forward_dtype: str | None = None
    #: the most torch threads the forward passes ran on (each pass looks again at what runs fastest
    #: now); null on a GPU or when not run
    threads: int | None = None
    #: rows (and special tokens) whose bf16 max_prob fell within the re-check band around the cut
    #: and were run again in float32, which decided them; 0 when the body ran in float32
    rechecked_float32: int | None = None
    #: why it did not run, or what limited it
    note: str | None = None


@dataclass
class UsedRow(Record):
    """A flagged row the user's data or chat template produces."""

    #: row id
    id: int
    #: the token's text (raw, untrusted)
    token: str
    #: why it is flagged
    reason: str | None
    #: occurrences in the corpus
    corpus: int
    #: occurrences in the rendered chat template
    template: int


@dataclass
class UsageRecord(Record):
    """The flagged rows the user's corpus and the model's chat template produce
    (:mod:`embscope.geometry.usage`)."""

    #: texts tokenized
    texts: int
    #: tokens they gave
    corpus_tokens: int
    #: ``rendered`` or why the template was not used (``none shipped``, ``render failed: …``, ``off``)
    template: str
    #: flagged ids checked
    flagged_checked: int
    #: flagged ids the corpus or template produces (lower is safer)
    flagged_used: int
    #: of those, ids the template itself inserts (in every chat example)
    flagged_in_template: int
    #: occurrences of flagged ids in the corpus
    occurrences: int
    #: the used flagged rows, most used first
    top: list[UsedRow] = field(default_factory=list)


@dataclass
class LayoutRecord(Record):
    """The 2-D map, laid out by UMAP from the kNN graph (:mod:`embscope.geometry.layout`)."""

    #: seconds spent
    seconds: float
    #: optimisation epochs
    n_epochs: int
    #: initial layout: ``spectral`` or ``random``
    init: str
    #: share of each sampled row's k graph neighbours among its k nearest 2-D points (higher is
    #: better); null when not measured
    neighbor_preservation: float | None
    #: rows that share was measured on (placed rows with a placed neighbour)
    preservation_rows: int
    #: graph entries that were no neighbour (id −1, out of range, self, non-finite similarity),
    #: handed to UMAP as "no edge"
    missing_edges: int = 0
    #: rows placed at the mean of their placed neighbours: rows not laid out (above
    #: ``laid_out_rows``) and rows UMAP left non-finite
    placed_by_neighbours: int = 0
    #: rows left off the map (NaN coordinates: no placed neighbour, or no map at all)
    unplaced: int = 0
    #: why there is no map or what limited it; null when nothing to say
    note: str | None = None
    #: peak RSS of the process that laid the map out, bytes (it runs beside the audit's own);
    #: 0 when laid out in the audit's process
    peak_rss: int = 0
    #: rows UMAP laid out (flagged and isolated rows, their neighbours and a sample with theirs,
    #: up to embscope.geometry.layout.MAP_ROWS); null on a map of no rows
    laid_out_rows: int | None = None
    #: neighbour preservation among the rows laid out (their edges to each other); null when every
    #: row was laid out (then it is ``neighbor_preservation``)
    laid_out_preservation: float | None = None


@dataclass
class IndicatorFit(Record):
    """How one indicator's robust z was fitted on the trained rows (:mod:`embscope.geometry.indicators`)."""

    #: ``low`` (norms: small means untrained) or ``high``
    side: str
    #: the trained rows' median on the indicator's own scale (norms: of the norm); null when not finite
    median: float | None
    #: robust scale (1.4826·MAD, floored) on the ``scale_of`` scale; null when not finite
    scale: float | None
    #: what the z is computed on: ``-log(norm)``, ``-log(1-knot)`` or ``value``
    scale_of: str
    #: Magikarp only: the reference (known-unused) rows' median, the drift gate's far end; null elsewhere
    reference_median: float | None = None


@dataclass
class IndicatorRun(Record):
    """What the threshold does on this run's trained rows."""

    #: trained rows the fits and shares are over
    trained_rows: int
    #: share of them flagged
    trained_flagged_share: float
    #: {indicator: share of trained rows at or past the threshold}
    per_indicator_share: dict[str, float]
    #: the share a Gaussian puts past the threshold (one-sided)
    gaussian_tail: float
    #: trained rows a family gate stopped (reason ``family``, not flagged)
    family_unflagged: int
    #: trained rows the drift gate stopped (reason ``drift``, not flagged)
    drift_unflagged: int


@dataclass
class IndicatorsRecord(Record):
    """The robust fits per evidence (null: the indicator does not exist on this model) and the run's shares."""

    #: input-row norm
    in_norm: IndicatorFit
    #: output-row norm (untied models)
    out_norm: IndicatorFit | None = None
    #: Magikarp similarity (with a reference set)
    magikarp: IndicatorFit | None = None
    #: knot: mean cosine to the k nearest rows
    knot: IndicatorFit | None = None
    #: isolation: 1 − cosine to the nearest row
    isolation: IndicatorFit | None = None
    #: the threshold on the trained rows
    run: IndicatorRun | None = None


@dataclass
class GeometryRecord(Record):
    """The geometry scan's summary (:mod:`embscope.geometry.scan`; formulas in
    :mod:`embscope.geometry.indicators`)."""

    #: matrix rows scanned
    rows: int
    #: rows per category
    categories: dict[str, int]
    #: flagged rows, by category and by reason
    flagged: FlaggedCounts
    #: the flag threshold on ``undertrained_score``
    threshold: float
    #: what the threshold means on this run (robust scale, share of trained rows flagged, per indicator)
    threshold_note: str
    #: the indicators' robust fits and the run's shares
    indicators: IndicatorsRecord
    #: the most under-trained normal tokens, highest score first
    top_undertrained: list[ScoredRow]
    #: the most isolated normal tokens
    top_isolated: list[IsolatedRow]
    #: {script: its normal rows} over normal rows, largest first
    per_script: dict[str, ScriptRow]
    #: how the kNN graph was built
    knn: KnnRecord
    #: the Magikarp reference set
    reference: ReferenceRecord
    #: the model's input and output matrices are one
    tied: bool
    #: {knn, indicators, verify, usage, layout} seconds
    timings: dict[str, float]
    #: prompt verification (``--verify N``); null when off
    verification: VerificationRecord | None = None
    #: rows prompting confirmed as under-trained; null when nothing was verified
    verified_undertrained: VerdictList | None = None
    #: flagged rows not checked by prompting (indicators only)
    candidates: VerdictList | None = None
    #: flagged rows the prompting found trained (max_prob ≥ cut); null without verification
    cleared: VerdictList | None = None
    #: the flagged rows the user's corpus and chat template produce; null without a corpus
    usage: UsageRecord | None = None
    #: the 2-D map; null without the map
    layout: LayoutRecord | None = None
