"""The language measurement's records: what one corpus's measurement read and how
(``summary.json`` → ``sections.languages.corpora``); the figures themselves are ``languages.parquet``."""

from __future__ import annotations

from dataclasses import dataclass

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
    #: the language ids ``--lang`` selected (the reference with them); null: every language read
    selected: list[str] | None = None
    #: the ``--lang`` values that selected them (``set:audit``: audit's default on the shipped UDHR)
    selection: list[str] | None = None
    #: languages the corpus names before it is read (its languages.json, file names), counted when
    #: ``--lang`` selects; null otherwise
    available: int | None = None
