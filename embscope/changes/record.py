"""The diff's record (``summary.json`` → ``sections.diff``); ``diff.parquet`` has one row per tuned row."""

from __future__ import annotations

from dataclasses import dataclass, field

from embscope.readiness.record import Finding
from embscope.provenance import TreeDigest
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
class Formats(Record):
    """The storage formats of a model's two matrices."""

    #: the input embedding's (``BF16``, ``Q8_0``, …)
    embed: str
    #: the head's; null when tied
    output: str | None


@dataclass
class BaseSide(Record):
    """BASE, as the diff read it."""

    #: the spec as given
    spec: str
    #: short name
    name: str
    #: matrix rows
    rows: int
    #: tokens its tokenizer defines (rows when it has none)
    tokens: int
    #: input and output matrices are one
    tied: bool
    #: the matrices' storage formats
    formats: Formats


@dataclass
class AdapterInfo(Record):
    """A PEFT adapter TUNED was read as (:meth:`embscope.changes.peft.Adapter.describe`)."""

    #: ``LORA``, ``TRAINABLE_TOKENS``, …
    peft_type: str
    #: the adapter config's ``base_model_name_or_path``
    base_model: str | None
    #: what it does to the embedding (``LoRA r=8, scaling 2``, ``modules_to_save (49152 rows)``, …)
    embed: list[str]
    #: what it does to the head
    output: list[str]
    #: the config's ``ensure_weight_tying``
    ensure_weight_tying: bool


@dataclass
class TunedFingerprint(Record):
    """What TUNED's matrices hash to (a checkpoint) or its adapter's files (an adapter)."""

    #: XXH3-128 of the input embedding (a checkpoint)
    embed: str | None = None
    #: of the untied head (a checkpoint)
    output: str | None = None
    #: BLAKE2b of the adapter folder's files (an adapter)
    adapter: TreeDigest | None = None


@dataclass
class TunedSide(Record):
    """TUNED, as the diff read it."""

    #: the spec as given
    spec: str
    #: short name
    name: str
    #: ``model`` (a checkpoint) or ``peft`` (an adapter on BASE)
    kind: str
    #: matrix rows
    rows: int
    #: tokens its tokenizer defines
    tokens: int
    #: input and output matrices are one
    tied: bool
    #: the matrices' storage formats
    formats: Formats
    #: its config's ``tie_word_embeddings`` (null when it states none, and for an adapter)
    tie_word_embeddings: bool | None
    #: the adapter (PEFT type and what it does to each matrix); null for a checkpoint
    adapter: AdapterInfo | None
    #: what its matrices (or adapter files) hash to
    fingerprint: TunedFingerprint
    #: files read for the matrices
    files: list[str] = field(default_factory=list)


@dataclass
class Mover(Record):
    """One of the rows that moved most."""

    #: row id
    id: int
    #: its token string (raw, untrusted)
    token: str
    #: ``input`` or ``output``
    matrix: str
    #: relative change ‖t − r‖/‖r‖ against its reference row
    change: float
    #: a row added past BASE
    new: bool
    #: occurrences in the training data (null without --data)
    used: int | None


@dataclass
class DataUse(Record):
    """The rows the training data uses, against the rows that moved."""

    #: the data read
    paths: list[str]
    #: examples tokenized
    examples: int
    #: tokens
    tokens: int
    #: the chat template's status (as the check's)
    template: str
    #: distinct rows the data uses
    used_rows: int = 0
    #: of them, rows that moved
    used_moved: int = 0
    #: of them, rows that did not move (higher: training missed what it saw)
    used_unmoved: int = 0
    #: rows that moved in any matrix
    moved_rows: int = 0
    #: share of the moved rows the data uses
    moved_used_share: float = 0.0
    #: rows added past BASE that the data uses
    new_used: int = 0


@dataclass
class LanguageDrift(Record):
    """How far the rows one language uses moved (token-weighted)."""

    #: language code
    language: str
    #: its dominant Unicode script
    script: str
    #: tokens its text gave
    tokens: int
    #: distinct rows they use
    distinct: int
    #: token-weighted share of its tokens whose input row moved
    moved_share: float
    #: token-weighted mean relative change of its input rows
    mean_change: float
    #: its most used rows that moved, most used first
    top: list[str] = field(default_factory=list)
    #: its name from the corpus folder's ``languages.json`` (``Vietnamese``); null when it names none
    name: str | None = None


@dataclass
class MapInfo(Record):
    """The diff's 2-D map."""

    #: how the map was made
    method: str
    #: variance share of the two axes
    explained: float


@dataclass
class DiffRecord(Record):
    """What training changed: BASE against TUNED, row by row."""

    #: BASE
    base: BaseSide
    #: TUNED
    tuned: TunedSide
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
    #: the rows that moved most (input matrix, then output), at most 50
    top_movers: list[Mover]
    #: findings, errors first (codes: embscope.changes.findings)
    findings: list[Finding]
    #: the highest severity found (null: nothing found)
    worst: str | None
    #: the rows the training data uses; null without --data
    data: DataUse | None
    #: per language of the languages corpus, most moved first
    languages: list[LanguageDrift] = field(default_factory=list)
    #: the languages corpus (null: none)
    languages_corpus: str | None = None
    #: the 2-D map (null: no input matrix compared)
    map: MapInfo | None = None
    #: seconds per step: {load, floor_<matrix>, pass_<matrix>, data, languages}
    seconds: dict[str, float] = field(default_factory=dict)
