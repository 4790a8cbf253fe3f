"""Tokenizer cost per language: fertility, parity and friends, one row per (tokenizer, language).

Metrics (counts are summed over every text of the language that was read):

- ``fertility`` = tokens / words — Rust et al. 2021, "How Good is Your Tokenizer? On the
  Monolingual Performance of Multilingual Language Models". Words follow
  :mod:`embscope.languages.segment`; each row's ``unit`` names what a word is there: ``word``
  (whitespace, Ethiopic ``፡``), ``syllable`` (Tibetan), ``char`` (Han, kana) or ``cluster`` (Thai,
  Lao, Khmer, Myanmar: a base character with its marks). Example: "human rights"
  → ``[human][ rights]`` = 2 tokens / 2 words = 1.0 with gpt2; gpt2 on Amharic "ሰው፡ልጅ" = 15
  tokens / 2 words = 7.5 (byte-level BPE without Ethiopic merges: ~one token per byte).
  Lower is cheaper; 1.0 is one token per word.
- ``tokens_per_char`` = tokens / characters (code points); ``bytes_per_token`` = UTF-8 bytes /
  tokens (higher = more text per token).
- ``split_word_rate``: share of words split into ≥ 2 tokens when each word is tokenised on its
  own (Rust et al.'s "proportion of continued words"); ``single_token_word_rate`` = share encoded
  as exactly 1 token. Both are frequency-weighted over the words of the first
  :data:`WORD_SAMPLE_BYTES` of each language (:mod:`embscope.languages.wordrates`, which also says
  how tokka-bench's ``continued_word_rate`` differs). A word that follows a space in the text is encoded
  with that leading space when the tokenizer marks spaces in its tokens (``" the"`` is one
  token and differs from ``"the"``: GPT-2-style byte-level BPE); otherwise (sentencepiece
  Metaspace adds its own ``▁``; WordPiece drops spaces) the bare word is encoded.
- ``renyi_efficiency``: Rényi entropy of order α of the language's token distribution / log of the
  vocabulary size (Zouhar et al. 2023; :mod:`embscope.languages.renyi`).
- ``<cost>_lo`` / ``<cost>_hi``: the seeded percentile bootstrap interval of each cost over the
  aligned units (:mod:`embscope.languages.intervals`); null without unit keys.
- ``parity`` = tokens(lang) / tokens(reference) over the aligned units both have — Petrov et al.
  2023, "Language Model Tokenizers Introduce Unfairness Between Languages" (their "premium").
  Example: UDHR article 1 is 33 gpt2 tokens in English and 61 in French → 61 / 33 = 1.85. Sums
  over the shared units, then divides: Σ_u t_L(u) / Σ_u t_ref(u). Null without ``unit`` keys or
  without the reference language; 1.0 for the reference itself.
- ``unk_rate`` = share of tokens that are the unknown token; ``byte_fallback_rate`` = share of
  tokens that are byte-fallback pieces (``<0xE3>``) — both 0 for byte-level BPE, which has
  neither.
- ``roundtrip`` = share of texts with ``decode(encode(text)) == text`` (first
  :data:`ROUNDTRIP_TEXTS` texts per language); below 1 for normalising tokenizers (lower-casing,
  NFKC) or lossy ones.
- ``vocab_utilisation`` = distinct token ids used / vocabulary size.

The counting pass is :mod:`embscope.languages.counting`; the embedding-density columns of the
"double cost" view, :mod:`embscope.languages.density`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embscope.languages.counting import ROUNDTRIP_TEXTS, WORD_SAMPLE_BYTES, count_batches, merge_counts
from embscope.languages.intervals import NO_UNITS, Bootstrap, add_cost_intervals
from embscope.languages.options import LanguageOptions
from embscope.languages.record import CorpusMeasure, TokenizerInfo
from embscope.languages.renyi import ALPHA, renyi_efficiency
from embscope.languages.segment import SEGMENTATION_NOTE, unit_of
from embscope.text.script import CHAR_SCRIPTS
from embscope.languages.wordrates import unit_word_counts, word_rates
from embscope.limits import Limits
from embscope.text.script import label as script_label
from embscope.tokenizer.base import Vocabulary

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable

    import numpy as np
    import polars as pl

    from embscope.corpus.engine import Engine
    from embscope.corpus.readers import ReadOptions


@dataclass
class LanguageResult:
    """Output of :func:`measure`."""

    #: one row per (tokenizer, language); columns in the module doc
    table: "pl.DataFrame"
    #: tokenizers, reference, segmentation note, what was read
    summary: CorpusMeasure
    #: (tokenizer, language) → (V,) token counts
    token_counts: "dict[tuple[str, str], np.ndarray]" = field(default_factory=dict, repr=False)
    #: the per-tokenizer tables: ``tokenizers``, ``language_groups`` and (several tokenizers) ``comparisons``
    tables: "dict[str, pl.DataFrame]" = field(default_factory=dict, repr=False)


@dataclass
class CorpusPass:
    """How :func:`measure` reads the corpus: one pass (:func:`embscope.corpus.engine.run_pass`)."""

    #: where the pass runs (:class:`embscope.corpus.engine.Engine`: one process, local worker
    #: processes, or Ray; every engine gives the same numbers); None: ``Engine()``
    engine: "Engine | None" = None
    #: field names of the records (``ReadOptions(text_field=..., lang_field=...)``); None: defaults
    options: "ReadOptions | None" = None
    #: read at most this many bytes per language (None: all)
    sample_bytes: int | None = None
    #: most texts per batch read from the corpus (encode calls take windows of
    #: :data:`WINDOW_TEXTS` texts, see :func:`_by_language`)
    batch_size: int = 512
    #: languages measured one by one; later ones are measured together as
    #: :data:`~embscope.languages.counting.OTHER` (``summary.languages_folded`` counts them)
    max_languages: int = Limits.languages


@dataclass
class ModelRows:
    """The model behind the density columns (:mod:`embscope.languages.density`), for ``vocabs[0]``;
    no density columns when ``embed`` and ``tokens`` are both None."""

    #: (V, d) embedding matrix of ``vocabs[0]``'s model (torch or numpy)
    embed: Any = None
    #: polars DataFrame with ``token_id``, ``in_norm`` (and maybe ``isolation``, ``flagged``)
    tokens: "pl.DataFrame | None" = None
    #: ``(row ids, graph isolations) -> exact isolations``, for the rows ``tokens`` marks as not
    #: exact (``knn_exact`` false): the averages then use exact search's values
    exact_isolation: "Callable | None" = None


def distinct_names(vocabs: Sequence[Vocabulary]) -> list[Vocabulary]:
    """``vocabs`` with every name unique: a name given twice (two copies of ``tokenizer.json``) gets
    ``#2``, ``#3`` … on its later copies (shallow copies; the tokenizers themselves are shared)."""
    import copy

    seen: dict[str, int] = {}
    out = []
    for v in vocabs:
        n = seen[v.name] = seen.get(v.name, 0) + 1
        if n > 1:
            v = copy.copy(v)
            v.name = f"{v.name}#{n}"
        out.append(v)
    return out


def space_prefix(vocab: Vocabulary) -> bool:
    """Whether words after a space should be encoded with that space (see ``split_word_rate``).

    True when ``" the"`` encodes as one token that differs from ``"the"`` (GPT-2 ``Ġthe``).
    """
    a, b = vocab.encode_batch([" the", "the"])
    return len(a) == 1 and a != b


def measure(vocabs: Sequence[Vocabulary], corpus_path: str | Path, options: LanguageOptions | None = None, *,
            read: CorpusPass | None = None, model: ModelRows | None = None, weights: dict | None = None,
            families: dict | None = None, languages: "frozenset[str] | None" = None) -> LanguageResult:
    """Measure every tokenizer in ``vocabs`` on every language of the corpus, in one pass.

    Args:
        vocabs: tokenizers to compare (``embscope.load_vocabulary("gpt2")`` …).
        corpus_path: folder or file, read by :func:`embscope.corpus.stream.iter_corpus`.
        options: the languages' group (:class:`~embscope.languages.options.LanguageOptions`;
            default: its defaults); it reads ``reference`` (the language parity divides by),
            ``renyi_alpha`` (the order α of ``renyi_efficiency``) and the intervals' ``resamples``,
            ``seed`` and ``level`` (:meth:`~embscope.languages.options.LanguageOptions.bootstrap`).
        read: how the corpus is read (:class:`CorpusPass`: engine, record fields, bytes per
            language, batch size, languages measured one by one; default: its defaults).
        model: the model's rows for the density columns (:class:`ModelRows`; None: no density).
        weights: language → share of a data mix (``tokenizers.mix_tokens_per_unit``).
        families: language → family (``language_groups``); default: the corpus's ``languages.json``.
        languages: measure only these language ids (:mod:`embscope.languages.selection`); None: all.

    Returns:
        :class:`LanguageResult`.

    Example::

        >>> from embscope.models.vocabulary import load_vocabulary
        >>> res = measure([load_vocabulary("gpt2")], "corpora/udhr")  # doctest: +SKIP
        >>> res.table.filter(language="eng")["parity"][0]  # doctest: +SKIP
        1.0
    """
    from embscope.corpus.engine import Engine, run_pass

    options = options if options is not None else LanguageOptions()
    read = read if read is not None else CorpusPass()
    model = model if model is not None else ModelRows()
    reference, renyi_alpha, boot = options.reference, options.renyi_alpha, options.bootstrap()
    sample_bytes, max_languages = read.sample_bytes, read.max_languages
    vocabs = distinct_names(vocabs)
    names = [v.name for v in vocabs]
    engine = read.engine or Engine()
    density = model.tokens is not None or model.embed is not None
    counts, report = run_pass(corpus_path, functools.partial(count_batches, vocabs, max_languages=max_languages,
                                                             unit_tokens=density, keep=languages),
                              functools.partial(merge_counts, max_languages=max_languages),
                              engine=engine, sample_bytes=sample_bytes, batch_size=read.batch_size,
                              options=read.options, description="tokenising corpus")
    acc, langs = counts.acc, counts.langs

    rows = _rows(vocabs, acc, langs, reference, _names(corpus_path), boot, renyi_alpha)
    if density:
        from embscope.languages.density import add_density

        add_density(rows, vocabs[0].name, acc, model.tokens, model.embed, model.exact_isolation, boot)
    import polars as pl

    table = pl.DataFrame(rows, infer_schema_length=None)
    # A column that is null everywhere (parity without parallel text, density without a model)
    # would get Parquet type null; keep every metric a float so the schema never changes.
    table = table.with_columns(pl.col(c).cast(pl.Float64) for c, t in table.schema.items() if t == pl.Null)
    table = table.sort(["tokenizer", "fertility"])
    summary = CorpusMeasure(
        tokenizers=[TokenizerInfo(name=v.name, backend=getattr(v, "backend", "?"), vocab_size=len(v),
                                  space_prefix_for_words=space_prefix(v)) for v in vocabs],
        reference=reference, reference_present=reference in langs, languages=len(langs),
        max_languages=max_languages, languages_folded=len(counts.folded), sample_bytes=sample_bytes,
        segmentation=SEGMENTATION_NOTE, word_sample_bytes=WORD_SAMPLE_BYTES, roundtrip_texts=ROUNDTRIP_TEXTS,
        corpus=report.record(), engine=engine.record(), **_settings(boot, langs, renyi_alpha, languages))
    from embscope.languages.fairness import tokenizer_tables

    extra = tokenizer_tables(vocabs, acc, table, reference, boot, weights=weights,
                             families=families if families is not None else _families(corpus_path), summary=summary)
    counts = {(names[k], lang): a.counts for (k, lang), a in acc.items()}
    return LanguageResult(table=table, summary=summary, token_counts=counts, tables=extra)


def _settings(boot: Bootstrap, langs, renyi_alpha: float, languages=None) -> dict:
    """The statistics' settings recorded in :class:`CorpusMeasure`, and the languages ``--lang`` selected."""
    return dict(bootstrap_resamples=boot.resamples, bootstrap_seed=boot.seed, bootstrap_level=boot.level,
                intervals_null=None if any(la.units for la in langs.values()) else NO_UNITS, renyi_alpha=renyi_alpha,
                selected=sorted(languages) if languages is not None else None)


def _names(corpus_path) -> dict[str, str]:
    """The corpus's language names (:func:`embscope.corpus.names.language_names`); folders only."""
    from embscope.corpus.names import language_names

    paths = [corpus_path] if isinstance(corpus_path, (str, Path)) else list(corpus_path)
    return language_names(*(p for p in paths if Path(p).is_dir()))


def _families(corpus_path) -> dict[str, str]:
    """``{code: family}`` from a corpus folder's ``languages.json`` records that carry a ``family``
    (a list of records, or the shipped UDHR's ``{"languages": [...]}``)."""
    from embscope.corpus.catalog import read_names_file

    paths = [corpus_path] if isinstance(corpus_path, (str, Path)) else list(corpus_path)
    return {d["code"]: str(d["family"]) for p in paths if Path(p).is_dir()
            for d in read_names_file(p) if d.get("family")}


def _rows(vocabs, acc, langs, reference, names: dict[str, str], boot: Bootstrap,
          renyi_alpha: float = ALPHA) -> list[dict]:
    import numpy as np

    rows = []
    per_unit_words = {lang: unit_word_counts(la.word_texts, la.word_units) for lang, la in langs.items()}
    for k, vocab in enumerate(vocabs):
        prefix = space_prefix(vocab)
        ref = acc.get((k, reference))
        byte_ids = np.fromiter(sorted(vocab.byte_ids), dtype=np.int64) if vocab.byte_ids else None
        for lang in sorted(langs):
            a = acc.get((k, lang))
            la = langs[lang]
            if a is None:
                continue
            script = script_label(la.script)
            parity = units = None
            if ref is not None and a.units and ref.units:
                shared = a.units.keys() & ref.units.keys()
                if shared:
                    units = len(shared)
                    parity = sum(a.units[u] for u in shared) / max(1, sum(ref.units[u] for u in shared))
            split, single, word_sums = word_rates(vocab, per_unit_words[lang], prefix)
            tok = max(a.tokens, 1)
            unk = int(a.counts[vocab.unk_id]) if vocab.unk_id is not None and vocab.unk_id < len(a.counts) else 0
            fallback = int(a.counts[byte_ids].sum()) if byte_ids is not None else 0
            rows.append({
                "tokenizer": vocab.name,
                "language": lang,
                "language_name": names.get(lang),
                "script": script,
                "segmentation": "characters" if script in CHAR_SCRIPTS else "words",
                "unit": unit_of(script),
                "texts": a.texts,
                "words": la.words,
                "chars": la.chars,
                "bytes": la.bytes,
                "tokens": a.tokens,
                "fertility": a.tokens / la.words if la.words else None,
                "tokens_per_char": a.tokens / la.chars if la.chars else None,
                "bytes_per_token": la.bytes / a.tokens if a.tokens else None,
                "split_word_rate": split,
                "single_token_word_rate": single,
                "parity": parity,
                "parity_units": units,
                "unk_rate": unk / tok,
                "byte_fallback_rate": fallback / tok,
                "roundtrip": a.rt_ok / a.rt_n if a.rt_n else None,
                "vocab_utilisation": int(np.count_nonzero(a.counts)) / len(vocab),
                "renyi_efficiency": renyi_efficiency(a.counts, len(vocab), renyi_alpha),
            })
            add_cost_intervals(rows[-1], a, la, ref, boot, word_sums)
    return rows
