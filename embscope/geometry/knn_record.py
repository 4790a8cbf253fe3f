"""How the kNN graph was built (``summary.json`` ``sections.tokens.geometry.knn``), typed to the
last field: the method's details (:func:`embscope.geometry.knn.knn_graph`), exact search's tile plan
(:mod:`embscope.geometry.probe`) and the certified graph's certificate
(:mod:`embscope.geometry.certify`, its join :mod:`embscope.geometry.join`). Each is built by the
part that measures it; the field docs here are the only ones (``docs/schema.md`` lists them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from embscope.records import Record

#: the values ``--knn`` (``knn_method``) accepts: ``auto`` and the methods of
#: :func:`embscope.geometry.knn.knn_graph` (a light module, so the command line lists them without numpy)
METHODS = ("auto", "exact", "certified", "hnsw", "nndescent")


@dataclass
class NnDescentRecord(Record):
    """An NN-descent graph's build (:func:`embscope.geometry.nndescent.nn_descent`)."""

    #: random-projection trees of the initial forest
    trees: int
    #: rows per leaf at most
    leaf: int
    #: local-join passes run
    passes: int
    #: new neighbours each pass inserted
    updates: list[int]
    #: seconds of the forest
    forest_seconds: float
    #: seconds in all
    seconds: float


@dataclass
class TilesRecord(Record):
    """Exact search's tile plan, from GEMM rates measured here (:mod:`embscope.geometry.probe`)."""

    #: dtype of the similarity tiles (``float32``, ``bfloat16``)
    tile_dtype: str
    #: dtype -> the thread count it runs fastest at
    threads: dict[str, int]
    #: estimated seconds of the products (bf16: with the second screen of unsafe rows)
    estimate_seconds: float
    #: share of rows a bf16 screen could not decide, as the estimate assumed
    unsafe_share: float
    #: ``"<dtype>@<threads>"`` -> GFLOPS measured
    gflops: dict[str, float]
    #: seconds the GEMM probe took
    probe_seconds: float


@dataclass
class JoinRecord(Record):
    """The near-duplicate join: every pair of rows at cosine ≥ τ (:mod:`embscope.geometry.join`)."""

    #: width p of the contractive screen (p basis directions and the residual norm)
    width: int
    #: screen threshold on the embedded rows (τ less the rounding margins)
    screen_threshold: float
    #: cosine at or above which a scored candidate is a partner (τ − 2δ)
    accept_threshold: float
    #: candidate pairs the screen passed, scored exactly
    candidates_scored: int
    #: row-block tiles of the screen (each pair of blocks once)
    tiles: int
    #: of those, skipped by the sort on the first coordinate
    tiles_skipped: int
    #: rows with at least one partner at ≥ τ
    rows_with_partner: int
    #: seconds the join took
    seconds: float
    #: {screen width (and dtype when not float32): candidates a row, estimated on a sample} the
    #: width and dtype were chosen by
    estimated_candidates_per_row: dict[str, float] = field(default_factory=dict)
    #: tiles whose candidates were scored as one product of their rows (a collapsed cluster)
    dense_tiles: int = 0
    #: the screen's dtype (``float32``, or ``bfloat16`` where the probe measured it faster)
    screen_dtype: str = "float32"


@dataclass
class CutRecord(Record):
    """One indicator's cut ``median + T·max(1.4826·MAD, floor)`` on its transformed scale, with the
    intervals of its median and MAD (:mod:`embscope.geometry.population`). Null: not finite."""

    #: the cut at the point estimates
    cut: float | None
    #: [low, high] of the cut over the median's and MAD's intervals (rows inside are undecided)
    interval: list[float | None]
    #: what bounds the intervals: ``sample`` or ``sample+population`` (the graph values with the sample's gaps)
    by: str
    #: median over the fit rows (point estimate)
    median: float | None
    #: its interval, [low, high]
    median_interval: list[float | None]
    #: median absolute deviation (point estimate)
    mad: float | None
    #: its interval, [low, high]
    mad_interval: list[float | None]
    #: sample draws in halves A and B
    draws: list[int]
    #: error probability of these intervals (this round's share of 1 − confidence)
    alpha: float


@dataclass
class MeasuredRecord(Record):
    """The base graph against exact search on the sample rows (every one searched exactly): how far
    the figures of rows not searched exactly may be off. Null fields: not measured."""

    #: rows measured
    rows: int
    #: {percentile: knot gap} (exact − graph, cosine units, ≥ 0) at the 50th, 90th, 99th, 100th
    knot_gap: dict[str, float] | None = None
    #: {percentile: isolation gap} (graph − exact, ≥ 0)
    isolation_gap: dict[str, float] | None = None
    #: rows whose knot sits on the other side of the cut in the base graph (the ``family`` count's errors)
    knot_cut_flips: int | None = None
    #: 95 % Clopper–Pearson upper bound of that share
    knot_cut_flip_share_95: float | None = None
    #: share of rows whose nearest row the base graph found (higher is better)
    base_recall_top1: float | None = None
    #: the base graph's tie-aware recall@k (higher is better)
    base_recall_at_k: float | None = None


@dataclass
class CertificateRecord(Record):
    """What the certified graph's decisions rest on (:func:`embscope.geometry.certify.certified_graph`)."""

    #: probability that every cut's interval holds (all rounds together); 1.0 when every row was searched
    confidence: float
    #: sample rounds run (0: exact search of every row instead)
    rounds: int
    #: sample draws, both halves, all rounds
    sample_draws: int
    #: distinct rows drawn
    sample_rows: int
    #: the join's cosine τ = √(1 − 0.2²): a collapsed row has a partner at or above it
    tau: float
    #: the flag threshold, robust sigmas
    threshold: float
    #: {knot, isolation}: the cuts; empty when every row was searched exactly
    cuts: dict[str, CutRecord]
    #: rows searched exactly (their neighbours are exact search's)
    exact_rows: int
    #: {reason: rows searched exactly for it}
    refined: dict[str, int]
    #: rows still inside a cut's interval after the last round (then every row is searched)
    undecided: int
    #: rows flagged by another indicator whose knot reason lies inside the knot cut's interval
    reasons_undecided: int
    #: why every row was searched exactly; null when the certificate held
    fallback: str | None
    #: the near-duplicate join
    join: JoinRecord
    #: {list: certified} for the summary's and report's lists (false: drawn from the rows searched exactly)
    lists: dict[str, bool]
    #: the base graph against exact search on the sample rows; null without a sample
    measured: MeasuredRecord | None
    #: {phase: seconds} (join, base, exact search, all)
    seconds: dict[str, float]
    #: the approximate graph under it (``nndescent``, or ``none (…)`` and why)
    base: str
    #: seconds of its build
    base_seconds: float


@dataclass
class KnnRecord(Record):
    """How the kNN graph was built (:func:`embscope.geometry.knn.knn_graph`)."""

    #: ``exact``, ``certified``, ``hnsw`` or ``nndescent``
    method: str
    #: neighbours per row
    k: int
    #: recall@k against fp32 exact search on the sample rows (1.0 = perfect)
    recall_at_k: float
    #: rows recall was measured on
    recall_rows: int
    #: seconds the build took (the cached build's, when ``cached``)
    seconds: float
    #: read from the kNN cache
    cached: bool = False
    #: where the search ran (cpu, cuda)
    device: str | None = None
    #: dtype of the similarity tiles (float32, float16, bfloat16)
    tile_dtype: str | None = None
    #: why another method than asked for ran
    fallback: str | None = None
    #: seconds spent computing the cache key (the matrix digest)
    key_seconds: float | None = None
    #: HNSW: links per row (M) and the query's candidate list (efSearch)
    hnsw_m: int | None = None
    ef_search: int | None = None
    #: NN-descent: the forest and the passes
    nndescent: NnDescentRecord | None = None
    #: ``auto``: {exact, certified} estimated seconds it chose by (from the GEMM rates measured here)
    estimated_seconds: dict[str, float] | None = None
    #: exact search's tile plan
    tiles: TilesRecord | None = None
    #: rows an approximate index left short of k neighbours, searched exactly
    short_rows_searched: int | None = None
    #: certified graph: what its decisions rest on (:mod:`embscope.geometry.certify`)
    certificate: CertificateRecord | None = None
    #: certified graph: {knot, isolation}: [median, scale] of the robust z (sample estimates)
    knn_fit: dict[str, list[float]] | None = None
