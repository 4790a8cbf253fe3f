"""``suggest``: which terms to add, what that saves (measured), and how each initialisation behaves.

Data flow: one pass over the corpus counts terms (:func:`~embscope.extension.candidates.corpus_candidates`)
→ candidates ranked by estimated savings (:mod:`embscope.extension.candidates`) → the top N written
into a copy of the tokenizer in its own terms (:mod:`embscope.tokenizer.extend`: BPE merges,
Unigram pieces; added tokens with ``extend_as="added"``), and a second pass re-tokenizes the corpus with
both tokenizers (:func:`~embscope.extension.savings.corpus_savings`: tokens saved and cuts,
measured with the tokenizer that is written) → rows initialised per strategy
(:mod:`embscope.extension.init`) → norms and neighbours per strategy
(:mod:`embscope.extension.diagnostics`) and, with the whole model, the staged measurements of
:mod:`embscope.extension.evaluate` and the pick of :mod:`embscope.extension.choose`. Both passes run on an
:class:`~embscope.corpus.engine.Engine` (one process, all local cores, or Ray) and stream the
corpus shard by shard, so its size is not bounded by memory; every engine gives the same numbers.
"""

# long: suggest and its two methods (terms, merges) share the record, measurement and diagnostics helpers kept here
from __future__ import annotations

import contextlib
import dataclasses
from collections import Counter
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embscope.errors import CorpusError, SpecError
from embscope.extension.contexts import HOLD_EVERY as HOLD
from embscope.extension.diagnostics import RowDiagnostics, StrategyRecord
from embscope.extension.options import METHODS, ExtensionOptions
from embscope.progress import Steps

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import polars as pl
    import torch

    from embscope.extension.contexts import Contexts
    from embscope.tokenizer.extend import TokenizerExtension

    from embscope.extension.evaluate import Plan
    from embscope.corpus.engine import Engine
    from embscope.corpus.readers import ReadOptions
    from embscope.models.model import LoadedModel
    from embscope.extension.record import ExtensionRecord

@dataclass
class ExtensionResult:
    """What :func:`suggest` found. ``apply`` needs only this and the model."""

    #: candidates.parquet: every candidate, best first (see :func:`candidates.candidates_table`)
    table: "pl.DataFrame"
    #: summary.json's ``extension``: top_n, tokens_saved, corpus_tokens, strategies {name: diagnostics}, ...
    summary: "ExtensionRecord"
    #: the new tokens' texts, in id order: the terms (surface form, leading space where it occurs),
    #: the intermediate tokens of their merge chains (BPE), and with ``--as added`` the spaced twins
    #: of line-initial terms (see :func:`candidates.space_twins`)
    terms: list[str]
    #: per new token, the old piece ids it replaces
    pieces: list[list[int]]
    #: (V,) corpus count per old token id (weighted-subword uses it)
    piece_counts: "np.ndarray | None" = field(default=None, repr=False)
    #: the rows each diagnosed strategy produced, ``{spec: {"embed", "output"?}}``: ``apply``
    #: writes these (``distil`` rows need the model and corpus again otherwise)
    rows: "dict[str, dict[str, torch.Tensor]]" = field(default_factory=dict, repr=False)
    #: the corpus contexts fidelity, bits per byte and ``distil`` used, None without the whole model
    contexts: "Contexts | None" = field(default=None, repr=False)
    #: the extended tokenizer and its new tokens
    extension: "TokenizerExtension | None" = field(default=None, repr=False)
    #: new_tokens.parquet: every new token, its kind, pieces and corpus count
    new_tokens: "pl.DataFrame | None" = field(default=None, repr=False)
    #: ``focus``: the corpus's static token embeddings, trained on first call (memoised)
    static: "Any" = field(default=None, repr=False)
    #: the held-out corpus slice of the target language (its tokenizer costs: the extension section)
    target_texts: list[str] = field(default_factory=list, repr=False)

    @property
    def token_ids(self) -> list[int]:
        """The new tokens' ids, in :attr:`terms` order."""
        return self.extension.ids


def reference_mask(model: "LoadedModel", tokens: "pl.DataFrame | None"):
    """(V,) bool trained rows: not special/padding/unreachable, not flagged in ``tokens``."""
    from embscope.extension.init import trained_mask

    flagged: list[int] = []
    if tokens is not None and "flagged" in tokens.columns:
        id_col = next((c for c in ("token_id", "id") if c in tokens.columns), None)
        ids = tokens[id_col].to_list() if id_col else list(range(tokens.height))
        flagged = [i for i, f in zip(ids, tokens["flagged"].to_list()) if f]
    return trained_mask(model.categories, model.n_rows, flagged)


def init_contexts(model: "LoadedModel", pieces: Sequence[Sequence[int]], trained, piece_counts=None,
                  terms: Sequence[str] | None = None, distil=None, new_ids: Sequence[int] | None = None,
                  static=None):
    """``{"embed": ctx, "output": ctx}`` (output only for untied models).

    ``terms`` (the new terms' texts) lets ``omp`` look words up; ``distil`` (start rows → fitted
    rows) lets ``distil`` fit input rows; output rows of untied models keep their start.
    ``new_ids`` and ``static`` (a memoised call for the corpus's static embeddings) let ``focus`` run.
    """
    from embscope.extension.init import InitContext

    text = _token_texts(model) if terms is not None else None
    # The matrices stay in their stored dtype (memory-mapped bf16 for most checkpoints); every
    # strategy converts the row chunks it reads.
    ctxs = {"embed": InitContext(model.embed, trained, pieces, piece_counts, token_text=text, terms=terms,
                                 distil=distil, new_ids=new_ids, static=static)}
    if not model.tied and model.output is not None:
        ctxs["output"] = InitContext(model.output, trained, pieces, piece_counts, token_text=text, terms=terms,
                                     distil=(lambda start: start) if distil is not None else None,
                                     new_ids=new_ids, static=static)
    return ctxs


def _token_texts(model: "LoadedModel") -> list[str]:
    """Each row's text as the tokenizer decodes it (" hyper"); rows past the tokenizer: ""."""
    try:
        from embscope.models.fullmodel import load_hf_tokenizer

        tok = load_hf_tokenizer(model)
    except Exception:  # noqa: BLE001 - no HF tokenizer: omp finds no shared words, keeps subword-mean
        return [""] * model.n_rows
    n = min(tok.get_vocab_size(), model.n_rows)
    return tok.decode_batch([[i] for i in range(n)]) + [""] * (model.n_rows - n)


#: ``distil``'s work budget inside ``--init auto``, 10¹² multiply-adds (:func:`~.distil.work`,
#: known before it runs: the same inputs run it or leave it out on every machine and at any load).
#: SmolLM2-135M + corpora/medical needs about 2.4 (60–110 s on this project's 2-core machine),
#: Gemma-3-270M about 5; a 1.5B-parameter model, about 25, is left out. Named (``--init distil``)
#: it always runs
DISTIL_WORK = 20.0
#: the same budget in ``audit`` (its extension step keeps its earlier cost; ``extend`` fits distil)
AUDIT_DISTIL_WORK = 0.0


def new_rows(model: "LoadedModel", result: ExtensionResult, spec: str, trained=None) -> dict[str, Any]:
    """Rows for ``result.terms`` by ``spec`` (``NAME`` or ``INPUT/OUTPUT``): ``{"embed", "output"?}``."""
    from embscope.extension.init import initialise, parse_init

    names = dict(zip(("embed", "output"), parse_init(spec)))
    trained = reference_mask(model, None) if trained is None else trained
    ctxs = init_contexts(model, result.pieces, trained, result.piece_counts, terms=result.terms,
                         new_ids=result.token_ids if result.extension is not None else None, static=result.static)
    return {which: initialise(names[which], ctx) for which, ctx in ctxs.items()}


@dataclass
class _Job:
    """One :func:`suggest` call, its arguments resolved: what each of its steps reads."""

    #: the model, and its HF tokenizer
    model: "LoadedModel"
    tok: Any
    #: the domain corpus (file or folder), and how it is read
    corpus_path: str | Path
    engine: "Engine"
    sample_bytes: int | None
    read_options: "ReadOptions | None"
    #: the knobs (top, init, method, rows, target language, ...)
    options: ExtensionOptions
    #: strategy specs to diagnose, and those of them ``auto`` may leave out (with the reason)
    specs: list[str]
    optional: set[str]
    #: tokens table with ``flagged`` rows (excluded from every mean), or None
    tokens: "pl.DataFrame | None"
    steps: Steps
    #: held-out text the measurements read
    plan: "Plan"
    #: work budgets of optional strategies, 10¹² multiply-adds (``{"distil": 20.0}`` under ``auto``)
    budget: dict[str, float | None]


@dataclass
class _Measured:
    """The extended tokenizer and what it changes: on the corpus (``saved``, read as ``report``
    says) and on general text (``general`` = (texts, source), ``general_changes``)."""

    ext: "TokenizerExtension"
    saved: Any
    report: Any
    general: tuple[list[str], str]
    general_changes: Any


def suggest(model: "LoadedModel", corpus_path: str | Path, options: ExtensionOptions | None = None, *,
            tokens: "pl.DataFrame | None" = None, steps: Steps | None = None, engine: "Engine | None" = None,
            sample_bytes: int | None = None, read_options: "ReadOptions | None" = None,
            plan: "Plan | None" = None) -> ExtensionResult:
    """Rank vocabulary-extension candidates, write the top ``options.top`` into the tokenizer,
    measure what that saves, and check each initialisation strategy in ``options.init``.

    Args:
        model: from :func:`embscope.load_model`; its tokenizer must be a HF ``tokenizers`` model.
        corpus_path: domain corpus (file or folder).
        options: :class:`~embscope.extension.options.ExtensionOptions` (default: its defaults).
            The fields read here:

            - ``top``: how many terms to add (the rest of the table is still written).
            - ``max_ngram``: longest multi-word term, in words (multi-word terms need
              ``extend_as="added"``).
            - ``min_freq``: least occurrences of a term.
            - ``init``: strategy specs to diagnose (``NAME`` or ``INPUT/OUTPUT`` for untied
              models); ``auto`` (the default) diagnoses every strategy and records the recommended
              one (:mod:`embscope.extension.choose`) as ``summary.recommended``.
            - ``diagnostics``: also load the whole model (when it fits) for fidelity, bits per
              byte and the disturbance of old text.
            - ``extend_as``: ``model`` (merges, Unigram pieces: :mod:`embscope.tokenizer.extend`)
              or ``added`` (HF added tokens, with spaced twins).
            - ``bpb_bytes``: held-out corpus bytes the measurements read, when ``plan`` is not
              given (:func:`~embscope.extension.evaluate.plan_for`; None: 24 KB).
            - ``distil_work``: the most work ``distil`` may do inside ``auto``, 10¹² multiply-adds
              (:func:`embscope.extension.distil.work`, estimated before it runs; None:
              :data:`DISTIL_WORK`; ``math.inf``: no limit); a named ``distil`` always runs.
            - ``method``: ``terms`` (the best ``top`` words by estimated savings, each with its
              merge chain) or ``merges`` (continued BPE on the corpus,
              :mod:`embscope.extension.merges`; the corpus may be a ``word<TAB>count`` list;
              ``min_freq`` is then the least count of a pair).
            - ``rows``: the most new tokens (rows) the tokenizer grows by, intermediates included;
              needed by ``merges``; with ``terms`` the best terms whose chains fit are taken.
            - ``target_lang``, ``norm_correction``: the target language (:mod:`.target`), each
              strategy's ``+norm`` twin too.
        tokens: a tokens table with ``flagged`` (under-trained rows), excluded from every mean.
        steps: progress and timings of the steps (default: quiet).
        engine: where the two corpus passes run (term counting; tokens before and after) —
            :class:`embscope.corpus.engine.Engine`: one process, local worker processes or Ray;
            every engine gives the same candidates and counts. Default: local, all cores for
            corpora of 32 MB or more.
        sample_bytes: read at most this many bytes of text per language (default: all).
        read_options: record fields of jsonl/Parquet/Arrow files
            (:class:`embscope.corpus.readers.ReadOptions`).
        plan: how much held-out text the measurements read (:class:`~embscope.extension.evaluate.Plan`;
            default: ``plan_for(options.bpb_bytes or CORPUS_BYTES)``).

    Returns:
        :class:`ExtensionResult`.

    Example:
        >>> r = suggest(load_model("smollm2-135m"), "corpora/medical", ExtensionOptions(top=50))  # doctest: +SKIP
        >>> r.summary.tokens_saved, r.table["term"][:3].to_list()  # doctest: +SKIP
    """
    from embscope.corpus.engine import Engine
    from embscope.extension.evaluate import CORPUS_BYTES, plan_for
    from embscope.extension.init import AUTO, expand_specs
    from embscope.models.fullmodel import load_hf_tokenizer

    o = options or ExtensionOptions()
    _check_args(o.top, o.max_ngram, o.min_freq, o.extend_as, o.method, o.rows)
    specs = expand_specs(o.init, o.norm_correction)  # unknown names fail before any work
    optional = set(expand_specs([AUTO], o.norm_correction)) - set(o.init) if AUTO in o.init else set()
    distil_work = DISTIL_WORK if o.distil_work is None else o.distil_work
    job = _Job(model=model, tok=load_hf_tokenizer(model), corpus_path=corpus_path, engine=engine or Engine(),
               sample_bytes=sample_bytes, read_options=read_options, options=o, specs=specs, optional=optional,
               tokens=tokens, steps=steps or Steps(verbose=False),
               plan=plan if plan is not None else plan_for(o.bpb_bytes or CORPUS_BYTES),
               budget={"distil": distil_work} if "distil" in optional else {})
    return _suggest_merges(job) if o.method == "merges" else _suggest_terms(job)


def _suggest_terms(job: _Job) -> ExtensionResult:
    """:func:`suggest` with ``method="terms"``: the best words by estimated savings, written into
    the tokenizer with their merge chains, measured and diagnosed."""
    from embscope.extension.candidates import candidates_table, corpus_candidates, new_tokens_table
    from embscope.extension.focus import corpus_static
    from embscope.extension.target import target_record

    o, tok = job.options, job.tok
    tally: Counter = Counter()
    with job.steps.step("candidates", "reading the corpus and counting terms"):
        cands, report = corpus_candidates(tok, job.corpus_path, max_ngram=o.max_ngram, min_freq=o.min_freq,
                                          engine=job.engine, sample_bytes=job.sample_bytes,
                                          options=job.read_options, tally=tally)
    if not cands:
        raise CorpusError(f"no term in {job.corpus_path} occurs {o.min_freq}+ times and takes 2+ tokens; "
                          "lower --min-freq or pass a larger corpus")
    chosen, twins, skipped = _choose_terms(tok, cands, o.top, o.extend_as)
    if o.rows is not None:
        from embscope.extension.merges import within_rows

        chosen, twins = within_rows(tok, chosen, twins, o.extend_as, o.rows, skipped)
    with job.steps.step("measure", "re-tokenizing the corpus with the extended tokenizer"):
        m = _extend_and_measure(job, chosen, twins, report)
        skipped.update(m.ext.skipped)
    ext, saved = m.ext, m.saved
    added_terms = {t.text: int(saved.counts_extended[t.id]) for t in ext.tokens if t.kind == "term"}
    summary = _record(job, m, cands, twins, skipped, chosen, added_terms, o.max_ngram)
    summary.rows = o.rows
    summary.corpus_words, summary.words_split = tally["words"], tally["split"]
    summary.words_split_share = round(tally["split"] / tally["words"], 5) if tally["words"] else None
    result = ExtensionResult(table=candidates_table(cands, added_terms), summary=summary,
                             terms=[t.text for t in ext.tokens], pieces=[list(t.pieces) for t in ext.tokens],
                             piece_counts=saved.counts, extension=ext,
                             new_tokens=new_tokens_table(ext, saved.counts_extended),
                             static=corpus_static(job.corpus_path, ext.tokenizer, job.sample_bytes,
                                                  job.read_options))
    summary.target_language, result.target_texts = target_record(job.corpus_path, o.target_lang, job.sample_bytes,
                                                                 job.read_options)
    if o.diagnostics:
        _diagnostics(job, result, m.general)
    return result


def _check_args(top: int, max_ngram: int, min_freq: int, as_: str, method: str = "terms",
                rows: int | None = None) -> None:
    """Refuse impossible sizes and forms before any work."""
    from embscope.tokenizer.extend import FORMS

    if top < 1 or max_ngram < 1 or min_freq < 1:
        raise SpecError(f"--top, --max-ngram and --min-freq must be at least 1 (got {top}, {max_ngram}, {min_freq})")
    if as_ not in FORMS:
        raise SpecError(f"--as {as_!r}: choose from {', '.join(FORMS)}")
    if method not in METHODS:
        raise SpecError(f"--method {method!r}: choose from {', '.join(METHODS)}")
    if rows is not None and rows < 1:
        raise SpecError(f"--rows must be at least 1 (got {rows})")
    if method == "merges" and rows is None:
        raise SpecError("--method merges needs --rows N: the most rows the tokenizer may grow by")
    if method == "merges" and as_ != "model":
        raise SpecError("--method merges writes merges into the tokenizer's model; drop --as added")


def _suggest_merges(job: _Job) -> ExtensionResult:
    """:func:`suggest` with ``method="merges"``: merges learned from the corpus
    (:mod:`embscope.extension.merges`), measured and diagnosed as the terms are."""
    from embscope.extension.candidates import new_tokens_table
    from embscope.extension.evaluate import general_texts
    from embscope.extension.merges import learn_and_measure, merges_table
    from embscope.tokenizer.tokenization_check import changes

    o, tok = job.options, job.tok
    with job.steps.step("merges", f"learning up to {o.rows} merges from the corpus"):
        ext, learned, saved, listed, report, n_words = learn_and_measure(
            tok, job.corpus_path, rows=o.rows, min_freq=o.min_freq, engine=job.engine,
            sample_bytes=job.sample_bytes, options=job.read_options)
    general = general_texts()
    m = _Measured(ext=ext, saved=saved, report=report, general=general, general_changes=changes(tok, ext, general[0]))
    summary = _record(job, m, [], [], dict(ext.skipped), [], {}, 1)
    summary.candidates, summary.top_n = n_words, len(ext.tokens)
    summary.estimated_savings = int(sum(learned.counts))  # Σ the pairs' counts when merged
    summary.method, summary.rows, summary.merges_stopped = "merges", o.rows, learned.stopped
    table = merges_table(ext, learned.counts, saved.counts_extended)
    result = ExtensionResult(table=table, summary=summary, terms=[t.text for t in ext.tokens],
                             pieces=[list(t.pieces) for t in ext.tokens], piece_counts=saved.counts, extension=ext,
                             new_tokens=new_tokens_table(ext, saved.counts_extended))
    if not listed:  # running text: focus's static embeddings, and the target language's figures
        from embscope.extension.focus import corpus_static
        from embscope.extension.target import target_record

        result.static = corpus_static(job.corpus_path, ext.tokenizer, job.sample_bytes, job.read_options)
        summary.target_language, result.target_texts = target_record(job.corpus_path, o.target_lang,
                                                                     job.sample_bytes, job.read_options)
    if o.diagnostics:
        _diagnostics(job, result, general,
                     no_text="a word-frequency list has no running text to measure on" if listed else None)
    return result


def _choose_terms(tok, cands, top: int, as_: str):
    """``(terms to add, their spaced twins, {term passed over: why})`` from the ranked candidates."""
    from embscope.extension.candidates import space_twins

    chosen = cands[:top]
    twins: list = []
    skipped: dict[str, str] = {}
    if as_ == "added":
        twins = space_twins(tok, [c.term for c in chosen])
    else:  # no merge joins two pre-tokens: the best one-pre-token words are taken, the others listed
        skipped = {c.term: SPANS[c.n_words > 1] for c in chosen if c.n_pretokens > 1}
        chosen = [c for c in cands if c.n_pretokens == 1][:top]
    return chosen, twins, skipped


#: why a term of several pre-tokens is not written as merges: (a word the pre-tokenizer cuts, n-gram)
SPANS = ("the model's pre-tokenizer cuts this word into several pre-tokens, and no merge joins two "
         "pre-tokens; add it with --as added",
         "a multi-word term spans pre-tokens, which no merge joins; add it with --as added")


def _extend_and_measure(job: _Job, chosen, twins, report) -> _Measured:
    """The terms written into the tokenizer, the corpus re-tokenized with both tokenizers (its
    first pass read as ``report`` says), and what the extension changes in general text."""
    from embscope.corpus.stream import CorpusWarning
    from embscope.extension.savings import corpus_savings
    from embscope.extension.evaluate import general_texts
    from embscope.tokenizer.tokenization_check import changes
    from embscope.tokenizer.extend import extend_tokenizer

    tok = job.tok
    terms, pieces = [c.term for c in chosen], [c.piece_ids for c in chosen]
    ext = extend_tokenizer(tok, terms + [t for t, _ in twins], pieces + [p for _, p in twins],
                           form=job.options.extend_as)
    with warnings.catch_warnings():  # the first pass already warned about this corpus's bad input
        warnings.simplefilter("ignore", CorpusWarning)
        saved = corpus_savings(tok, ext, job.corpus_path, engine=job.engine, sample_bytes=job.sample_bytes,
                               options=job.read_options)
    general = general_texts()
    return _Measured(ext=ext, saved=saved, report=report, general=general,
                     general_changes=changes(tok, ext, general[0]))


def _record(job: _Job, m: _Measured, cands, twins, skipped, chosen, added_terms, max_ngram: int) -> "ExtensionRecord":
    """The record of what was read, added and saved (measured and estimated); diagnostics fill the rest."""
    from embscope.extension.record import ExtensionRecord
    from embscope.tokenizer.tokenization_check import GeneralChanges, TokenizationCheck

    ext, saved, report = m.ext, m.saved, m.report
    n_terms = sum(t.kind == "term" for t in ext.tokens)
    return ExtensionRecord(
        model=job.model.name, corpus=str(job.corpus_path), corpus_texts=report.texts, corpus_report=report.record(),
        engine=job.engine.record(), candidates=len(cands), top_n=n_terms - len(twins), form=ext.form,
        space_twins_added=len(twins), intermediates=sum(t.kind == "intermediate" for t in ext.tokens),
        tokens_added=len(ext.tokens), merges_added=len(ext.merges), terms_skipped=skipped,
        corpus_tokens=saved.before, corpus_tokens_after=saved.after, tokens_saved=saved.before - saved.after,
        saved_fraction=round((saved.before - saved.after) / max(saved.before, 1), 5),
        estimated_savings=int(sum(c.savings_tokens for c in chosen if c.term in added_terms)),
        tokenization_check=TokenizationCheck(corpus=saved.changes,
                                             general=GeneralChanges(**vars(m.general_changes), source=m.general[1])),
        max_ngram=max_ngram, min_freq=job.options.min_freq, tied=job.model.tied)


def _diagnostics(job: _Job, result: ExtensionResult, general, no_text: str | None = None) -> None:
    """Each strategy's rows measured (:func:`_diagnose`), the recommended one picked, into the
    summary. ``no_text``: why the corpus has no running text to measure on (None: it has)."""
    from embscope.corpus.stream import CorpusWarning, iter_corpus
    from embscope.extension.choose import general_note, ordered, recommend
    from embscope.extension.fidelity import compute_precision
    from embscope.extension.init import AUTO
    from embscope.models.fullmodel import fastest_threads, why_not_loadable

    model, init, specs = job.model, job.options.init, job.specs
    target, pick_on_target = result.summary.target_language, job.options.target_lang is not None

    def texts():
        if no_text:
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CorpusWarning)
            for batch in iter_corpus(job.corpus_path, sample_bytes=job.sample_bytes, options=job.read_options):
                yield from batch.texts

    # the thread count the model's forward passes run fastest at now (under load one intra-op
    # thread can be faster). Without the whole model the step is products with the (V, d)
    # matrices, which pick their own (Qwen2-7B's nearest-row search of 1,520 rows: 16.0 s on 2
    # threads, 30.6 s on 1).
    unloadable = no_text or why_not_loadable(model)
    threads = (fastest_threads(model.dim, compute_precision()) if unloadable is None
               else contextlib.nullcontext())
    with job.steps.step("diagnostics", "checking each initialisation"), threads:
        strategies = _diagnose(job, result, reference_mask(model, job.tokens), texts(), unloadable, general, target)
    rec = result.summary
    if rec.bits_per_byte_original is not None:  # the summary names the text each figure came from
        rec.bits_per_byte_original.source = (
            f"held-out text of {Path(job.corpus_path).name} (1 text in 4, never fitted on)")
    if AUTO in init or len(specs) > 1:
        rec.recommended, rec.recommended_why = recommend(strategies)
        strategies = ordered(strategies, rec.recommended)
    elif strategies:  # one strategy asked for: --apply-init auto writes that one
        rec.recommended = next(iter(strategies))
        rec.recommended_why = f"{rec.recommended}: the only strategy diagnosed"
    if target is not None:
        from embscope.extension.target import english_retention

        english_retention(rec, target, strategies, pick_on_target)
        if pick_on_target and rec.recommended in strategies:
            strategies = ordered(strategies, rec.recommended)
    rec.general_note = general_note(strategies, general[1])
    rec.strategies = strategies


def _diagnose(job: _Job, result: ExtensionResult, trained, texts, reason: str | None, general, target=None):
    """Figures per strategy: rows per strategy, their norms and neighbours, and with the whole
    model the measurements of :mod:`embscope.extension.evaluate` (the original model's figures
    and the notes go into ``result.summary``). ``reason``: why the whole model is not loaded
    (None: it is)."""
    from embscope.extension.contexts import collect, start_ids
    from embscope.extension.evaluate import AUDIT_PLAN, measure

    model, tok, steps, plan, budget = job.model, job.tok, job.steps, job.plan, job.budget
    ext = result.extension
    new_ids = ext.ids
    lm = found = None
    if reason is None:
        from embscope.models.fullmodel import load_causal_lm

        with steps.step("whole model", "loading the whole model"):
            lm = load_causal_lm(model)
        with steps.step("contexts", "corpus contexts of the new terms"):
            found = collect(texts, ext.tokenizer, new_ids, result.pieces, start_ids(tok, lm.config.bos_token_id),
                            bpb_bytes=plan.corpus_bytes)
    result.contexts = found
    distil = None
    if lm is not None:
        from embscope.extension.distil import fit_rows

        def distil(start):
            from embscope.extension.fidelity import compute_precision, forward_precision
            from embscope.models.fullmodel import fastest_threads

            with steps.step("distil", f"fitting {start.shape[0]} rows on {len(found.fit)} corpus contexts"), \
                    fastest_threads(model.dim, compute_precision(), lm), forward_precision():
                return fit_rows(lm, found.fit, start, new_ids, budget=budget.get("distil"), priority=counts,
                                report=fitted)

        counts = result.new_tokens["count"].fill_null(0).to_list() if result.new_tokens is not None else None
        fitted: dict = {}

    names = model.token_strings()
    # One context per matrix for every strategy (its mean and norms are computed once), and one
    # pass per matrix for the nearest neighbours of every strategy's rows.
    ctxs = init_contexts(model, result.pieces, trained, result.piece_counts, terms=result.terms, distil=distil,
                         new_ids=new_ids, static=result.static)
    rows_of, skipped = _strategy_rows(job.specs, ctxs, job.optional)
    specs = [s for s in job.specs if s in rows_of]
    result.rows = rows_of
    rows = _row_figures(specs, rows_of, ctxs, result.terms, names)
    rec = result.summary
    rec.skipped_strategies, rec.omp_known_terms = skipped, ctxs["embed"].memo.get("omp_known")
    rec.distil_work_budget = None if budget.get("distil") is None else float(budget["distil"])
    if lm is not None and found is not None:
        from embscope.extension.distil import work

        rec.distil_work = round(work(lm, found.fit), 4)
        rec.distil_rows_fitted = fitted.get("rows_fitted")
    if lm is None:
        rec.kl_note = rec.fidelity_note = f"not measured: {reason}"
        return {spec: StrategyRecord(**vars(rows[spec])) for spec in specs}
    figures, measured = measure(lm, tok, ext.tokenizer, new_ids, {s: rows_of[s] for s in specs}, found,
                                steps=steps, plan=plan, general=general)
    out = {spec: StrategyRecord(**{**vars(rows[spec]), **figures.get(spec, {})}) for spec in specs}
    if target is not None and target.lang != "eng":  # English is the general text, measured above
        from embscope.extension.target import BPB_BYTES as TARGET_BYTES, target_bits

        target_bits(target, lm, tok, ext.tokenizer, new_ids, rows_of, specs, figures, steps,
                    min(TARGET_BYTES, plan.corpus_bytes))
    rec = result.summary = dataclasses.replace(  # Measured's fields are ExtensionRecord's
        rec, **{f.name: getattr(measured, f.name) for f in dataclasses.fields(measured)})
    base = measured.bits_per_byte_original
    rec.fidelity_note = (
        f"{len(found.held)} held-out corpus contexts ({len({c.term for c in found.held})} new tokens; "
        f"1 text in {HOLD}, {found.n_held_texts} of {found.n_texts}, never fitted on); "
        f"bits per byte on {base.texts if base else 0} held-out texts, {base.bytes if base else 0} bytes"
        + (" (audit's sample; extend reads more)" if plan == AUDIT_PLAN else "")
        if found.held else "no held-out context holds a new token")
    return out


def _strategy_rows(specs, ctxs, optional) -> tuple[dict[str, dict], dict[str, str]]:
    """``({spec: {"embed", "output"?}}, {spec auto could not run: why})``: each strategy's rows."""
    from embscope.extension.init import initialise, parse_init

    rows_of: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    for spec in specs:
        try:
            rows_of[spec] = {which: initialise(name, ctxs[which])
                             for which, name in zip(("embed", "output"), parse_init(spec)) if which in ctxs}
        except SpecError as err:  # auto's extras (distil without a model or over budget, omp without GloVe)
            if spec not in optional:
                raise
            skipped[spec] = str(err)
    return rows_of, skipped


def _row_figures(specs, rows_of, ctxs, terms, names) -> dict[str, RowDiagnostics]:
    """Norms and nearest trained rows of every strategy's rows: one nearest-row pass per matrix for
    all strategies together (:func:`embscope.extension.diagnostics.row_diagnostics`)."""
    import torch

    from embscope.extension.diagnostics import TOP_K, row_diagnostics
    from embscope.extension.init import nearest_trained

    nearest: dict[tuple[str, str], tuple] = {}
    for which, ctx in ctxs.items():
        sims, ids = nearest_trained(ctx, torch.cat([rows_of[spec][which] for spec in specs]), TOP_K)
        at = 0
        for spec in specs:
            n = rows_of[spec][which].shape[0]
            nearest[(spec, which)] = (sims[at:at + n], ids[at:at + n])
            at += n
    out = {}
    for spec in specs:
        d = row_diagnostics(spec, rows_of[spec]["embed"], ctxs["embed"], terms, names,
                            nearest=nearest[(spec, "embed")])
        if "output" in rows_of[spec]:
            d.add_output(row_diagnostics(spec, rows_of[spec]["output"], ctxs["output"], terms, names,
                                         nearest=nearest[(spec, "output")]))
        out[spec] = d
    return out
