"""The languages section: what each language costs each tokenizer, and — with a model — how dense
and how trained the embedding rows its text uses are (the "double cost").

Runs :func:`embscope.languages.fertility.measure` on every corpus; the table has one row per
(tokenizer, language, corpus).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from embscope.corpus.names import language_names
from embscope.languages.record import CorpusMeasure
from embscope.records import Record
from embscope.sections.base import SectionInputs, SectionOutput, section


#: a (tokenizer, language) pair pays "double" when its parity (tokens relative to the reference
#: language on parallel text, Petrov et al. 2023) is at least this
DOUBLE_COST = 2.0


@dataclass
class LanguageCost(Record):
    """What one tokenizer charges the languages of one corpus, in one line: its costliest language by
    parity (tokens for the same content relative to the reference language; the unit a language's
    words are counted in does not enter it)."""

    #: the corpus path
    corpus: str
    #: the tokenizer
    tokenizer: str
    #: languages with a parity besides the reference (those whose text is aligned with the reference's)
    languages: int
    #: the costliest one: its code, and its name where the corpus's ``languages.json`` gives one
    language: str
    name: str | None
    #: its parity (×: tokens relative to the reference language; higher costs more)
    parity: float
    #: languages with a parity of at least :data:`DOUBLE_COST` (pay double or more)
    double: int
    #: the reference language's name where the corpus's ``languages.json`` gives one
    reference_name: str | None = None
    #: the parity's bootstrap interval over the aligned units (null without units)
    parity_lo: float | None = None
    parity_hi: float | None = None
    #: the tokenizer's fairness Gini over the languages and its interval (``tokenizers.parquet``)
    gini: float | None = None
    gini_lo: float | None = None
    gini_hi: float | None = None


@dataclass
class PairVerdicts(Record):
    """How two tokenizers compare over the languages of one corpus (``comparisons.parquet``, summed)."""

    #: the corpus path
    corpus: str
    #: the pair: ratios are tokens of ``tokenizer_b`` / tokens of ``tokenizer_a``
    tokenizer_a: str
    tokenizer_b: str
    #: languages where A is cheaper (the whole interval of the ratio above 1)
    a_cheaper: int
    #: languages where B is cheaper (the whole interval below 1)
    b_cheaper: int
    #: languages whose interval holds 1
    not_distinguishable: int
    #: the median ratio over the languages (below 1: B is cheaper on the typical language)
    median_ratio: float | None = None


@dataclass
class LanguagesRecord(Record):
    """Per-corpus summaries of the language measurements."""

    #: tokenizer names, the model's own first
    tokenizers: list[str]
    #: language that parity divides by
    reference: str
    #: {corpus path: how it was measured and what was read}
    corpora: dict[str, CorpusMeasure] = field(default_factory=dict)
    #: per corpus with parallel text and tokenizer: its costliest language (:class:`LanguageCost`)
    costs: list[LanguageCost] = field(default_factory=list)
    #: per corpus and pair of tokenizers (compare): the languages each one is surely cheaper on
    comparisons: list[PairVerdicts] = field(default_factory=list)


@section("languages", record=LanguagesRecord, tables=("languages", "tokenizers", "language_groups", "comparisons"),
         reads=("vocabs", "model", "languages", "tokens", "corpora"))
def languages_section(inputs: SectionInputs) -> SectionOutput:
    """Fertility, parity and embedding density per language, on every corpus."""
    import polars as pl

    from embscope.languages.fertility import CorpusPass, ModelRows, distinct_names, measure

    if not inputs.languages:
        return SectionOutput(skipped="no corpus given")
    if not inputs.vocabs:
        return SectionOutput(skipped="the model ships no tokenizer")
    opts = inputs.options
    vocabs = distinct_names(inputs.vocabs)
    embed = inputs.model.embed if inputs.model is not None else None
    tables, per_corpus, warnings = [], {}, []
    isolation = _exact_isolation(embed)  # one per run: a row searched for one corpus is not searched again
    weights = None
    if opts.languages.weights:
        from embscope.languages.weights import read_weights

        weights = read_weights(opts.languages.weights)
    extra: dict[str, list] = {}
    spent = 0.0  # the model's scoring work so far (10¹² multiply-adds), against one budget for the run
    for corpus in inputs.languages:
        specs, keep, available = _selection(opts, corpus, inputs.corpora)
        with inputs.steps.step(f"languages:{corpus.name}", f"fertility and parity on {corpus}"):
            res = measure(vocabs, corpus, opts.languages,
                          read=CorpusPass(engine=opts.corpus.corpus_engine(), options=opts.corpus.read_options(),
                                          sample_bytes=opts.corpus.sample_bytes,
                                          max_languages=opts.corpus.bounds().languages),
                          model=ModelRows(embed=embed, tokens=inputs.tokens, exact_isolation=isolation),
                          weights=weights, languages=keep)
        res.summary.selection, res.summary.available = (list(specs) or None), available
        warnings += _selection_notes(corpus, res, specs, keep, available)
        table, res.summary.model, spent = _model_cost(inputs, corpus, res.table, spent)
        tables.append(table.with_columns(pl.lit(str(corpus)).alias("corpus")))
        per_corpus[str(corpus)] = res.summary
        for stem, frame in res.tables.items():
            extra.setdefault(stem, []).append(frame.with_columns(pl.lit(str(corpus)).alias("corpus")))
        if res.summary.weights_missing:
            warnings.append(f"{corpus}: --weights names {len(res.summary.weights_missing)} languages the corpus "
                            f"does not hold ({', '.join(res.summary.weights_missing[:5])}…): left out of the mix")
        if res.summary.languages_folded:
            warnings.append(f"{corpus}: {res.summary.languages_folded} languages past the first "
                            f"{res.summary.max_languages} were measured together as 'other'; raise "
                            "--limit languages=N to measure each")
        if res.table.height > 1 and not res.summary.reference_present:
            warnings.append(f"reference language {opts.languages.reference!r} is not in {corpus}: parity is empty "
                            "there; pass --reference")
    table = pl.concat(tables, how="diagonal_relaxed")
    tables = {"languages": table, **{stem: pl.concat(parts, how="diagonal_relaxed") for stem, parts in extra.items()}}
    record = LanguagesRecord(tokenizers=[v.name for v in vocabs], reference=opts.languages.reference,
                             corpora=per_corpus, costs=language_costs(table, opts.languages.reference, tables.get("tokenizers")),
                             comparisons=pair_verdicts(tables.get("comparisons")))
    return SectionOutput(record=record, tables=tables, warnings=warnings)


def _selection(opts, corpus, domain) -> tuple[list[str], frozenset | None, int | None]:
    """``(--lang values, the ids they select or None for all, languages the corpus names)``: --lang
    selects in the languages corpus; a ``--corpus`` (domain) one is measured whole."""
    from embscope.languages.selection import catalog, select

    specs = list(opts.languages.lang) if corpus not in domain else []
    names = catalog(corpus) if specs else {}
    return specs, (select(specs, names, opts.languages.reference) if specs else None), len(names) or None


def _selection_notes(corpus, res, specs, keep, available) -> list[str]:
    """What a run that measured a subset says: how many of the corpus's languages, or which codes
    taken as given (languages inside the records) never came."""
    from embscope.languages.selection import describe

    if keep is None:
        return []
    if not available:
        missing = sorted(keep - set(res.table["language"].to_list()))
        return [f"{corpus}: --lang {', '.join(missing)}: no such language in its records"] if missing else []
    return [f"{corpus}: measured {res.summary.languages} of its {available} languages ({describe(specs)}, with the "
            "reference); --lang set:all measures every one"]


def language_costs(table, reference: str, tokenizers=None) -> list[LanguageCost]:
    """Per (corpus, tokenizer) with a parity: the costliest language and how many of the others pay
    double (:class:`LanguageCost`), from the languages table (``corpus``, ``tokenizer``,
    ``language``, ``parity``); ``reference`` (parity 1 by definition) is not counted. With the
    ``tokenizers`` table, each gets its tokenizer's Gini too."""
    import polars as pl

    ginis = {}
    if tokenizers is not None and "gini" in tokenizers.columns:
        ginis = {(str(r["corpus"]), str(r["tokenizer"])): r for r in tokenizers.iter_rows(named=True)}

    if "parity" not in table.columns:
        return []
    out = []
    rows = table.filter(pl.col("parity").is_not_null() & pl.col("parity").is_finite() & (pl.col("language") != reference))
    for (corpus, tok), part in rows.group_by(["corpus", "tokenizer"], maintain_order=True):
        top = part.sort("parity", descending=True).row(0, named=True)
        names = language_names(str(corpus)) if Path(str(corpus)).is_dir() else {}
        out.append(LanguageCost(corpus=str(corpus), tokenizer=str(tok), languages=part.height,
                                language=str(top["language"]), name=names.get(str(top["language"])),
                                parity=round(float(top["parity"]), 3),
                                double=int((part["parity"] >= DOUBLE_COST).sum()), reference_name=names.get(reference),
                                parity_lo=_round(top.get("parity_lo")), parity_hi=_round(top.get("parity_hi")),
                                **{k: _round(ginis.get((str(corpus), str(tok)), {}).get(k))
                                   for k in ("gini", "gini_lo", "gini_hi")}))
    return out


def _round(x, digits: int = 3):
    return None if x is None or x != x else round(float(x), digits)


def pair_verdicts(comparisons) -> list[PairVerdicts]:
    """Per (corpus, tokenizer pair): how many languages each tokenizer is surely cheaper on
    (:class:`PairVerdicts`), from ``comparisons.parquet``'s rows."""
    import polars as pl

    if comparisons is None or comparisons.height == 0:
        return []
    out = []
    for (corpus, a, b), part in comparisons.group_by(["corpus", "tokenizer_a", "tokenizer_b"], maintain_order=True):
        v = part["verdict"]
        ratios = part.filter(pl.col("ratio").is_not_null())["ratio"]
        out.append(PairVerdicts(corpus=str(corpus), tokenizer_a=str(a), tokenizer_b=str(b),
                                a_cheaper=int((v == f"{a} cheaper").sum()), b_cheaper=int((v == f"{b} cheaper").sum()),
                                not_distinguishable=int((v == "not distinguishable").sum()),
                                median_ratio=_round(ratios.median()) if len(ratios) else None))
    return out


def _exact_isolation(embed):
    """Exact search's isolation (1 − the nearest other row's cosine) of given rows of ``embed``
    (:func:`embscope.geometry.exact.nearest_cosine`), each row searched once however many corpora
    ask for it; None without a matrix."""
    if embed is None:
        return None
    import numpy as np

    known: dict[int, float] = {}

    def isolation(rows, bound=None):
        """``bound``: the graph's isolation of each row, an upper bound (its neighbour is a real row)."""
        import torch

        from embscope.geometry.exact import nearest_cosine

        rows = np.asarray(rows, dtype=np.int64)
        fresh = np.array([r not in known for r in rows.tolist()], dtype=bool)
        new = rows[fresh]
        if len(new):
            floor = None if bound is None else 1.0 - np.asarray(bound, dtype=np.float64)[fresh]
            known.update(zip(new.tolist(), (1.0 - nearest_cosine(torch.as_tensor(embed), new, floor)).tolist()))
        return np.array([known[r] for r in rows.tolist()], dtype=np.float64)

    return isolation


def _model_cost(inputs: SectionInputs, corpus, table, spent: float):
    """``(table with the model's columns, their record or None, work spent so far)``: the model
    scores the corpus's languages (:mod:`embscope.languages.model_cost`) when the run has a model
    with a tokenizer and a work budget left (``model_work``; null: the default of
    :data:`~embscope.languages.model_cost.WORK`; ``audit`` passes its own); the columns are null
    otherwise."""
    from embscope.languages.counting import OTHER
    from embscope.languages.model_cost import WORK, Scorer, add_columns, model_cost, pick_languages

    opts = inputs.options
    budget = WORK if opts.languages.model_work is None else opts.languages.model_work
    model = inputs.model
    if model is None or model.vocab is None or budget - spent <= 0 or not inputs.vocabs:
        return add_columns(table, None, None), None, spent
    from embscope.models.load import pick_device

    name = model.vocab.name
    measured = [g for g in table.filter(table["tokenizer"] == name)["language"].to_list() if g != OTHER]
    from embscope.languages.selection import AUDIT_SET

    # narrowed by the user's --lang; audit's own bounded default (set:audit) is not a choice of languages
    narrowed = bool(opts.languages.lang) and list(opts.languages.lang) != [AUDIT_SET]
    langs, selection = pick_languages(measured, opts.languages.reference, narrowed)
    if not langs:
        return add_columns(table, None, None), None, spent
    with inputs.steps.step(f"model-cost:{corpus.name}", f"score {len(langs)} languages of {corpus} with the model"):
        cost = model_cost(model, corpus, langs, opts.languages.reference, budget=budget - spent, selection=selection,
                          scorer=Scorer(device=pick_device(opts.load.device)), sample_bytes=opts.corpus.sample_bytes,
                          options=opts.corpus.read_options())
    if cost.record is not None:
        cost.record.work_budget = budget
    return add_columns(table, cost, name), cost.record, spent + (cost.record.work if cost.record else 0.0)
