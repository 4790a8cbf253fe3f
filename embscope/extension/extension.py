"""``suggest``: which terms to add, what that saves (measured), and how each initialisation behaves.

Data flow: one pass over the corpus counts terms (:func:`~embscope.extension.candidates.corpus_candidates`)
→ candidates ranked by estimated savings (:mod:`embscope.extension.candidates`) → the top N added to a
copy of the tokenizer, and a second pass re-tokenizes the corpus with both tokenizers
(:func:`~embscope.extension.candidates.corpus_savings`: tokens saved, measured) → rows initialised per
strategy (:mod:`embscope.extension.init`) → diagnostics per strategy
(:mod:`embscope.extension.diagnostics`). Both passes run on an
:class:`~embscope.corpus.engine.Engine` (one process, all local cores, or Ray) and stream the
corpus shard by shard, so its size is not bounded by memory; every engine gives the same numbers.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embscope.errors import CorpusError, SpecError
from embscope.extension.contexts import HOLD_EVERY as HOLD
from embscope.progress import Steps

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import polars as pl

    from embscope.corpus.engine import Engine
    from embscope.corpus.readers import ReadOptions
    from embscope.models.model import LoadedModel

@dataclass
class ExtensionResult:
    """What :func:`suggest` found. ``apply`` needs only this and the model."""

    #: candidates.parquet: every candidate, best first (see :func:`candidates.candidates_table`)
    table: "pl.DataFrame"
    #: summary.json: top_n, tokens_saved, corpus_tokens, strategies {name: diagnostics}, ...
    summary: dict[str, Any]
    #: the terms to add: the top N, best first (surface form, leading space where it occurs), then
    #: the spaced twins of line-initial terms (see :func:`candidates.space_twins`)
    terms: list[str]
    #: per term, its piece ids in the old tokenizer
    pieces: list[list[int]]
    #: (V,) corpus count per old token id (weighted-subword uses it)
    piece_counts: "np.ndarray | None" = field(default=None, repr=False)
    #: the rows each diagnosed strategy produced, ``{spec: {"embed", "output"?}}``: ``apply``
    #: writes these (``distil`` rows need the model and corpus again otherwise)
    rows: dict[str, dict] = field(default_factory=dict, repr=False)
    #: the corpus contexts fidelity, bits per byte and ``distil`` used
    #: (:class:`~embscope.extension.contexts.Contexts`), None without the whole model
    contexts: Any = field(default=None, repr=False)


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
                  terms: Sequence[str] | None = None, distil=None):
    """``{"embed": ctx, "output": ctx}`` (output only for untied models).

    ``terms`` (the new terms' texts) lets ``omp`` look words up; ``distil`` (start rows → fitted
    rows) lets ``distil`` fit input rows; output rows of untied models keep their start.
    """
    from embscope.extension.init import InitContext

    text = _token_texts(model) if terms is not None else None
    # The matrices stay in their stored dtype (memory-mapped bf16 for most checkpoints); every
    # strategy converts the row chunks it reads.
    ctxs = {"embed": InitContext(model.embed, trained, pieces, piece_counts, token_text=text, terms=terms,
                                 distil=distil)}
    if not model.tied and model.output is not None:
        ctxs["output"] = InitContext(model.output, trained, pieces, piece_counts, token_text=text, terms=terms,
                                     distil=(lambda start: start) if distil is not None else None)
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


def new_rows(model: "LoadedModel", result: ExtensionResult, spec: str, trained=None) -> dict[str, Any]:
    """Rows for ``result.terms`` by ``spec`` (``NAME`` or ``INPUT/OUTPUT``): ``{"embed", "output"?}``."""
    from embscope.extension.init import initialise, parse_init

    names = dict(zip(("embed", "output"), parse_init(spec)))
    trained = reference_mask(model, None) if trained is None else trained
    ctxs = init_contexts(model, result.pieces, trained, result.piece_counts, terms=result.terms)
    return {which: initialise(names[which], ctx) for which, ctx in ctxs.items()}


def suggest(model: "LoadedModel", corpus_path: str | Path, *, top: int = 200, max_ngram: int = 1,
            min_freq: int = 5, init: Sequence[str] = ("auto",), tokens: "pl.DataFrame | None" = None,
            diagnostics: bool = True, steps: Steps | None = None, engine: "Engine | None" = None,
            sample_bytes: int | None = None, options: "ReadOptions | None" = None) -> ExtensionResult:
    """Rank vocabulary-extension candidates, measure the savings of the top ``top``, and check each
    initialisation strategy in ``init``.

    Args:
        model: from :func:`embscope.load_model`; its tokenizer must be a HF ``tokenizers`` model.
        corpus_path: domain corpus (file or folder).
        top: how many terms to add (the rest of the table is still written).
        max_ngram: longest multi-word term, in words.
        min_freq: least occurrences of a term.
        init: strategy specs to diagnose (``NAME`` or ``INPUT/OUTPUT`` for untied models);
            ``auto`` (the default) diagnoses every strategy and records the recommended one
            (:mod:`embscope.extension.choose`) as ``summary["recommended"]``.
        tokens: a tokens table with ``flagged`` (under-trained rows), excluded from every mean.
        diagnostics: also load the whole model (when it fits) for KL and new-token mass.
        engine: where the two corpus passes run (term counting; tokens before and after) —
            :class:`embscope.corpus.engine.Engine`: one process, local worker processes or Ray;
            every engine gives the same candidates and counts. Default: local, all cores for
            corpora of 32 MB or more.
        sample_bytes: read at most this many bytes of text per language (default: all).
        options: record fields of jsonl/Parquet/Arrow files
            (:class:`embscope.corpus.readers.ReadOptions`).

    Returns:
        :class:`ExtensionResult`.

    Example:
        >>> r = suggest(load_model("smollm2-135m"), "corpora/medical", top=50)  # doctest: +SKIP
        >>> r.summary["tokens_saved"], r.table["term"][:3].to_list()  # doctest: +SKIP
    """
    from embscope.extension.candidates import (candidates_table, corpus_candidates, corpus_savings,
                                               extended_tokenizer, space_twins)
    from embscope.models.fullmodel import load_hf_tokenizer
    from embscope.extension.init import AUTO, expand_specs
    from embscope.corpus.stream import CorpusWarning
    from embscope.corpus.engine import Engine

    if top < 1 or max_ngram < 1 or min_freq < 1:
        raise SpecError(f"--top, --max-ngram and --min-freq must be at least 1 (got {top}, {max_ngram}, {min_freq})")
    specs = expand_specs(init)  # unknown names fail before any work
    optional = set(expand_specs([AUTO])) - set(init) if AUTO in init else set()
    steps = steps or Steps(verbose=False)
    engine = engine or Engine()
    tok = load_hf_tokenizer(model)
    with steps.step("candidates", "reading the corpus and counting terms"):
        cands, report = corpus_candidates(tok, corpus_path, max_ngram=max_ngram, min_freq=min_freq,
                                          engine=engine, sample_bytes=sample_bytes, options=options)
    if not cands:
        raise CorpusError(f"no term in {corpus_path} occurs {min_freq}+ times and takes 2+ tokens; "
                          "lower --min-freq or pass a larger corpus")
    chosen = cands[:top]
    terms = [c.term for c in chosen]
    twins = space_twins(tok, terms)
    with steps.step("measure", "re-tokenizing the corpus with the extended tokenizer"):
        ext = extended_tokenizer(tok, terms + [t for t, _ in twins])
        with warnings.catch_warnings():  # the first pass already warned about this corpus's bad input
            warnings.simplefilter("ignore", CorpusWarning)
            before, counts, after, _ = corpus_savings(tok, ext, corpus_path, engine=engine,
                                                      sample_bytes=sample_bytes, options=options)
    result = ExtensionResult(table=candidates_table(cands), summary={},
                             terms=terms + [t for t, _ in twins],
                             pieces=[c.piece_ids for c in chosen] + [p for _, p in twins],
                             piece_counts=counts)
    result.summary = {
        "model": model.name,
        "corpus": str(corpus_path),
        "corpus_texts": report.texts,
        "corpus_report": report.as_dict(),
        "engine": engine.as_dict(),
        "candidates": len(cands),
        "top_n": len(terms),
        "space_twins_added": len(twins),
        "tokens_added": len(terms) + len(twins),
        "corpus_tokens": before,
        "corpus_tokens_after": after,
        "tokens_saved": before - after,
        "saved_fraction": round((before - after) / max(before, 1), 5),
        "estimated_savings": int(sum(c.savings_tokens for c in chosen)),
        "max_ngram": max_ngram,
        "min_freq": min_freq,
        "tied": model.tied,
        "strategies": {},
    }
    if diagnostics:
        from embscope.corpus.stream import iter_corpus
        from embscope.extension.choose import ordered, recommend

        def texts():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", CorpusWarning)
                for batch in iter_corpus(corpus_path, sample_bytes=sample_bytes, options=options):
                    yield from batch.texts

        from embscope.models.fullmodel import fastest_threads, why_not_loadable

        # the model's forward passes are small: under load one intra-op thread is often faster.
        # Without the whole model the step is products with the (V, d) matrices, where every
        # thread pays (Qwen2-7B's nearest-row search of 1,520 rows: 16.0 s on 2 threads, 30.6 s on 1).
        unloadable = why_not_loadable(model)
        threads = fastest_threads() if unloadable is None else contextlib.nullcontext()
        with steps.step("diagnostics", "checking each initialisation"), threads:
            found = _diagnose(model, result, specs, optional, reference_mask(model, tokens), tok, ext, texts(), steps,
                              unloadable)
        strategies, result.summary["kl_note"], extra = found
        result.summary.update(extra)
        if AUTO in init or len(specs) > 1:
            best, why = recommend(strategies)
            if "distil" not in specs and result.contexts is not None:
                why += "; distil (fits each row through the model: minutes on a CPU) was not run: add --init distil"
            result.summary["recommended"], result.summary["recommended_why"] = best, why
            strategies = ordered(strategies, best)
        elif strategies:  # one strategy asked for: --apply-init auto writes that one
            result.summary["recommended"] = next(iter(strategies))
            result.summary["recommended_why"] = f"{result.summary['recommended']}: the only strategy diagnosed"
        result.summary["strategies"] = strategies
    return result


def _model_checks(model, result: ExtensionResult, tok, ext, texts, steps: Steps, reason: str | None):
    """The whole model and what it is measured on: ``(lm, h, logits, contexts, note, reason)``;
    all but ``note``/``reason`` None when the model does not load here (``reason``: why not, from
    :func:`~embscope.models.fullmodel.why_not_loadable`)."""
    from embscope.extension.contexts import collect, start_ids
    from embscope.extension.diagnostics import held_out_ids, hidden_and_logits
    from embscope.models.fullmodel import load_causal_lm

    if reason is not None:
        return None, None, None, None, reason, reason
    with steps.step("whole model", "loading the whole model"):
        lm = load_causal_lm(model)
    with steps.step("held-out pass", "held-out text through the model"):
        ids = held_out_ids(tok, ext)
        h, logits = hidden_and_logits(lm, ids)
    with steps.step("contexts", "corpus contexts of the new terms"):
        new_ids = [ext.token_to_id(t) for t in result.terms]
        ctx = collect(texts, ext, new_ids, result.pieces, start_ids(tok, lm.config.bos_token_id))
    note = f"held-out general English text, {len(ids)} tokens, none of them a new term"
    return lm, h, logits, ctx, note, None


def _diagnose(model, result: ExtensionResult, specs, optional, trained, tok, ext, texts, steps: Steps,
              unloadable: str | None):
    from embscope.extension.diagnostics import kl_and_mass, row_diagnostics

    lm, h, logits, found, note, reason = _model_checks(model, result, tok, ext, texts, steps, unloadable)
    import torch

    from embscope.extension.diagnostics import TOP_K
    from embscope.extension.init import initialise, nearest_trained, parse_init

    new_ids = [ext.token_to_id(t) for t in result.terms]
    result.contexts = found
    distil = None
    if lm is not None:
        from embscope.extension.distil import fit_rows

        def distil(start):
            with steps.step("distil", f"fitting {start.shape[0]} rows on {len(found.fit)} corpus contexts"):
                return fit_rows(lm, found.fit, start, new_ids)

    names = model.token_strings()
    # One context per matrix for every strategy (its mean and norms are computed once), and one
    # pass per matrix for the nearest neighbours of every strategy's rows.
    ctxs = init_contexts(model, result.pieces, trained, result.piece_counts, terms=result.terms, distil=distil)
    rows_of: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    for spec in specs:
        try:
            rows_of[spec] = {which: initialise(name, ctxs[which])
                             for which, name in zip(("embed", "output"), parse_init(spec)) if which in ctxs}
        except SpecError as err:  # auto's extras (distil without a model, omp without GloVe) may fail
            if spec not in optional:
                raise
            skipped[spec] = str(err)
    specs = [s for s in specs if s in rows_of]
    result.rows = rows_of
    nearest: dict[tuple[str, str], tuple] = {}
    for which, ctx in ctxs.items():
        sims, ids = nearest_trained(ctx, torch.cat([rows_of[spec][which] for spec in specs]), TOP_K)
        at = 0
        for spec in specs:
            n = rows_of[spec][which].shape[0]
            nearest[(spec, which)] = (sims[at:at + n], ids[at:at + n])
            at += n
    out: dict[str, dict] = {}
    for spec in specs:
        rows = rows_of[spec]
        diag = row_diagnostics(spec, rows["embed"], ctxs["embed"], result.terms, names,
                               nearest=nearest[(spec, "embed")])
        if h is not None:
            head = rows.get("output", rows["embed"])
            bias = getattr(lm.get_output_embeddings(), "bias", None)
            new_bias = None if bias is None else bias.detach().float().mean().expand(head.shape[0])
            for k, v in kl_and_mass(h, logits, head, new_bias).items():
                setattr(diag, k, v)
        d = diag.to_dict()
        if "output" in rows:
            od = row_diagnostics(spec, rows["output"], ctxs["output"], result.terms, names,
                                 nearest=nearest[(spec, "output")])
            d["output_norm_percentile_median"] = od.norm_percentile_median
            d["output_nearest_cosine_median"] = od.nearest_cosine_median
        out[spec] = d
    extra: dict[str, Any] = {"skipped_strategies": skipped, "omp_known_terms": ctxs["embed"].memo.get("omp_known")}
    if found is not None:
        from embscope.extension.fidelity import bits_per_byte, fidelity

        with steps.step("fidelity", f"{len(found.held)} held-out contexts, {len(specs)} strategies"):
            fid = fidelity(lm, found.held, {s: rows_of[s]["embed"] for s in specs}, new_ids)
        with steps.step("bits per byte", f"{len(found.texts)} held-out texts, {len(specs)} strategies"):
            from embscope.extension.contexts import start_ids

            base, bpb = bits_per_byte(lm, found.texts, tok, ext, start_ids(tok, lm.config.bos_token_id),
                                      new_ids, rows_of)
        for spec in specs:
            out[spec].update(fid.get(spec, {}))
            out[spec].update(bpb.get(spec, {}))
        extra["bits_per_byte_original"] = base
        extra["fidelity_note"] = (
            f"{len(found.held)} held-out corpus contexts ({len({c.term for c in found.held})} terms; "
            f"1 text in {HOLD}, {found.n_held_texts} of {found.n_texts}, never fitted on); "
            f"bits per byte on {base.get('texts', 0)} held-out texts, {base.get('bytes', 0)} bytes"
            if found.held else "no held-out context holds a new term")
    else:
        extra["fidelity_note"] = f"not measured: {reason}"
    return out, note, extra
