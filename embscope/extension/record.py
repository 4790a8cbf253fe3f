"""The extension section's record: what :func:`~embscope.extension.suggest` found, as ``summary.json``
holds it (``sections.extension``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from embscope.corpus.backend import EngineRecord
from embscope.corpus.stream import CorpusRead
from embscope.extension.bpb import BitsPerByte
from embscope.extension.diagnostics import StrategyRecord
from embscope.extension.evaluate import ScorePlan
from embscope.records import Record
from embscope.tokenizer.tokenization_check import TokenizationCheck


@dataclass
class ExtensionRecord(Record):
    """Savings and initialisation diagnostics of the chosen extension terms."""

    #: model name
    model: str
    #: the domain corpus
    corpus: str
    #: texts read from it
    corpus_texts: int
    #: candidate terms found (rows of candidates.parquet)
    candidates: int
    #: terms added (the best ``--top`` by estimated savings, less ``terms_skipped``)
    top_n: int
    #: how the new tokens are written: ``merges`` (BPE), ``pieces`` (Unigram), ``vocab``
    #: (WordPiece) or ``added`` (HF added tokens, ``--as added``)
    form: str
    #: space-prefixed twins added with them (``--as added`` only)
    space_twins_added: int
    #: intermediate tokens of the terms' merge chains (BPE; they get rows like the terms)
    intermediates: int
    #: new tokens in all (terms + intermediates + twins)
    tokens_added: int
    #: merges appended to the BPE merge list
    merges_added: int
    #: terms of the top ``--top`` not added, {term: why}
    terms_skipped: dict[str, str]
    #: corpus tokens before extension
    corpus_tokens: int
    #: corpus tokens after (measured by re-tokenising)
    corpus_tokens_after: int
    #: corpus_tokens − corpus_tokens_after; higher is better
    tokens_saved: int
    #: tokens_saved / corpus_tokens
    saved_fraction: float
    #: Σ frequency × (pieces − 1) over the terms added (the ranking's estimate)
    estimated_savings: int
    #: what the written tokenizer changes, on the whole corpus and on general text:
    #: {corpus, general: {texts, new_tokens, cut (new tokens that start or end inside an old
    #: token; 0 for merges), not_their_pieces, round_trip_failures, examples}}
    tokenization_check: TokenizationCheck
    #: longest multi-word term, in words
    max_ngram: int
    #: least occurrences of a term
    min_freq: int
    #: input and output matrices are one
    tied: bool
    #: {strategy: its rows' diagnostics and measured figures}; the recommended strategy first, then by score
    strategies: dict[str, StrategyRecord] = field(default_factory=dict)
    #: what the disturbance (kl, new-token mass) was measured on, or why it was not
    kl_note: str | None = None
    #: the strategy ``--init auto`` / ``--apply-init auto`` writes (lowest score, disturbance bounded)
    recommended: str | None = None
    #: why, with the figures that decided it
    recommended_why: str | None = None
    #: what fidelity and bits per byte were measured on, or why they were not
    fidelity_note: str | None = None
    #: the original model + tokenizer on the held-out corpus sample: {bits_per_byte,
    #: bits_per_byte_se, tokens_per_byte, bytes, texts, texts_changed, source}
    bits_per_byte_original: BitsPerByte | None = None
    #: the same on general text (source: UDHR English)
    general_bits_per_byte_original: BitsPerByte | None = None
    #: new tokens per byte of the held-out corpus sample (ρ of the score's reading part)
    new_tokens_per_byte: float | None = None
    #: the measuring stages: {corpus_bytes, screen_bytes, confirmed, screened, not_scored}
    score_plan: ScorePlan | None = None
    #: said plainly when every strategy makes general text worse than the original model
    general_note: str | None = None
    #: the work distil may do inside --init auto, 10¹² multiply-adds (null: no limit, or distil
    #: named / not in auto)
    distil_work_budget: float | None = None
    #: the work distil's fit needs on these contexts, 10¹² multiply-adds (tokens × parameters,
    #: backward passes counted twice; null without the whole model)
    distil_work: float | None = None
    #: precision of the measuring forward passes: float32, or bfloat16 (autocast, where faster)
    precision: str | None = None
    #: strategies of ``auto`` that could not run here, {name: reason}
    skipped_strategies: dict[str, str] = field(default_factory=dict)
    #: new terms GloVe knows (omp approximates those; the rest keep their subword mean)
    omp_known_terms: int | None = None
    #: what was read: files_read, texts, bytes, skipped {reason: count}, per_file, ignored_files,
    #: capped_languages (cut by sample_bytes), lang_source
    corpus_report: CorpusRead | None = None
    #: where the corpus passes ran
    engine: EngineRecord | None = None
    #: how the new tokens were picked: ``terms`` (the best words, each with its merge chain) or
    #: ``merges`` (continued BPE on the corpus: ``candidates`` then counts its distinct words,
    #: ``top_n`` the merges learned, ``estimated_savings`` the sum of their pairs' counts)
    method: str = "terms"
    #: the most rows the tokenizer could grow by (``--rows``; null: no bound beyond ``--top``)
    rows: int | None = None
    #: why ``--method merges`` stopped: ``rows`` (the bound) or ``min_freq`` (no pair occurs that often)
    merges_stopped: str | None = None
    #: words of the corpus (letter-and-mark runs, dictionary words in no-space scripts:
    #: :mod:`embscope.text.words`) the term count read
    corpus_words: int | None = None
    #: of those, the words the model's pre-tokenizer cuts into several pre-tokens (GPT-2, Llama 3
    #: and Qwen2 regexes cut Devanagari at vowel signs; SentencePiece-style models cut none). No
    #: merge joins two pre-tokens: such words are never written as merges (``terms_skipped``),
    #: only as added tokens (``--as added``)
    words_split: int | None = None
    #: words_split / corpus_words; lower is better for an extension by merges
    words_split_share: float | None = None
