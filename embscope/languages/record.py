"""The language measurement's records: what one corpus's measurement read and how
(``summary.json`` → ``sections.languages.corpora``); the figures themselves are ``languages.parquet``."""

from __future__ import annotations

from dataclasses import dataclass, field

from embscope.corpus.backend import EngineRecord
from embscope.corpus.stream import CorpusRead
from embscope.records import Record


@dataclass
class TokenizerInfo(Record):
    """One tokenizer measured."""

    #: its spec or name
    name: str
    #: ``tokenizers``, ``tiktoken``, ``sentencepiece``, …
    backend: str
    #: tokens it defines
    vocab_size: int
    #: words after a space are encoded with that space (" the" is one token and differs from "the")
    space_prefix_for_words: bool


@dataclass
class CorpusMeasure(Record):
    """How one corpus was measured (:func:`embscope.languages.fertility.measure`)."""

    #: the tokenizers, the model's own first
    tokenizers: list[TokenizerInfo]
    #: the language parity divides by
    reference: str
    #: the corpus holds the reference language (parity is empty without it)
    reference_present: bool
    #: languages measured
    languages: int
    #: languages measured one by one at most (the rest together as ``other``)
    max_languages: int
    #: languages past that bound, measured as ``other``
    languages_folded: int
    #: cap on bytes read per language (null: all)
    sample_bytes: int | None
    #: how words are counted, in words (embscope.languages.segment)
    segmentation: str
    #: bytes per language whose words are tokenised one by one (continued-word rates)
    word_sample_bytes: int
    #: texts per language checked for decode(encode(text)) == text
    roundtrip_texts: int
    #: what was read
    corpus: CorpusRead
    #: where the pass ran
    engine: EngineRecord | None = None
    #: resamples of every ``_lo`` / ``_hi`` interval (percentile bootstrap over aligned units)
    bootstrap_resamples: int | None = None
    #: the seed of the bootstrap's draws (the same seed gives the same intervals)
    bootstrap_seed: int | None = None
    #: the intervals' coverage (0.95: 95 % intervals)
    bootstrap_level: float | None = None
    #: why every interval is null (no unit keys to resample); null when there are intervals
    intervals_null: str | None = None
    #: the order α of ``renyi_efficiency``
    renyi_alpha: float | None = None
    #: aligned units the ``tokenizers`` table's Gini and mix figures average over, per tokenizer
    #: (the units every language of the run has; the languages' own units when they share fewer than half)
    gini_units: dict[str, int] | None = None
    #: languages of ``--weights`` that the corpus does not hold (left out of the mix)
    weights_missing: list[str] | None = None
    #: the model's cost per language (``bits_per_byte``, ``information_parity``): how it was scored;
    #: null when no whole model was given
    model: "ModelCostRecord | None" = None
    #: the language ids ``--lang`` selected (the reference with them); null: every language read
    selected: list[str] | None = None
    #: the ``--lang`` values that selected them (``set:audit``: audit's default on the shipped UDHR)
    selection: list[str] | None = None
    #: languages the corpus names before it is read (its languages.json, file names), counted when
    #: ``--lang`` selects; null otherwise
    available: int | None = None


@dataclass
class ModelCostRecord(Record):
    """How the model scored the aligned units of one corpus
    (:func:`embscope.languages.model_cost.model_cost`): the ``bits_per_byte``,
    ``bits_per_byte_se`` and ``information_parity`` columns of ``languages.parquet``."""

    #: the model
    model: str
    #: the tokenizer whose rows carry the columns (the model's own)
    tokenizer: str
    #: the token every scored text follows (not scored itself)
    start_token: int | None = None
    #: which token that is: ``bos``, else ``eos`` (the model has no BOS)
    start: str | None = None
    #: the languages scored, the reference first
    languages: list[str] = field(default_factory=list)
    #: how they were chosen: ``default`` (the documented default set), ``all`` (every language the
    #: run measures: the run was narrowed to them) or ``corpus`` (its first languages: none of the
    #: default set is in it)
    selection: str = "default"
    #: aligned units scored: the same units in every language that has them
    units: int = 0
    #: aligned units the scored languages hold
    units_available: int = 0
    #: texts scored, over every language
    texts: int = 0
    #: tokens scored, over every language (the start tokens not counted)
    tokens: int = 0
    #: the work budget, 10¹² multiply-adds (tokens × the model's parameters; null: none)
    work_budget: float | None = None
    #: the work done, 10¹² multiply-adds (every position of every sequence, start token included)
    work: float = 0.0
    #: units were left out to stay within the budget
    stopped_at_budget: bool = False
    #: where the forward passes ran (cpu, cuda)
    device: str | None = None
    #: the dtype of the model's body in those passes (the head is float32)
    dtype: str | None = None
    #: the most threads a forward pass ran on (CPU)
    threads: int | None = None
    #: wall seconds of the scoring (forward passes and tokenising)
    seconds: float = 0.0
    #: the estimator of ``bits_per_byte_se``
    se_method: str = ("ratio estimator over units, delta method: sqrt(n/(n-1) * sum_u (y_u - bpb*B_u)^2) / sum_u B_u "
                      "(y_u bits, B_u bytes of unit u; Cochran 1977, 6.3)")
    #: why nothing was scored, when nothing was
    note: str | None = None
    #: units left out in every language because a text of theirs is longer than ``window``
    units_too_long: int = 0
    #: the longest sequence scored, tokens (the start token included): the model's context, at most 8,192
    window: int | None = None
