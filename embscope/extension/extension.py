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

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embscope.errors import CorpusError, SpecError
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


def reference_mask(model: "LoadedModel", tokens: "pl.DataFrame | None"):
    """(V,) bool trained rows: not special/padding/unreachable, not flagged in ``tokens``."""
    from embscope.extension.init import trained_mask

    flagged: list[int] = []
    if tokens is not None and "flagged" in tokens.columns:
        id_col = next((c for c in ("token_id", "id") if c in tokens.columns), None)
        ids = tokens[id_col].to_list() if id_col else list(range(tokens.height))
        flagged = [i for i, f in zip(ids, tokens["flagged"].to_list()) if f]
    return trained_mask(model.categories, model.n_rows, flagged)


def init_contexts(model: "LoadedModel", pieces: Sequence[Sequence[int]], trained, piece_counts=None):
    """``{"embed": ctx, "output": ctx}`` (output only for untied models)."""
    from embscope.extension.init import InitContext

    # The matrices stay in their stored dtype (memory-mapped bf16 for most checkpoints); every
    # strategy converts the row chunks it reads.
    ctxs = {"embed": InitContext(model.embed, trained, pieces, piece_counts)}
    if not model.tied and model.output is not None:
        ctxs["output"] = InitContext(model.output, trained, pieces, piece_counts)
    return ctxs


def new_rows(model: "LoadedModel", result: ExtensionResult, spec: str, trained=None) -> dict[str, Any]:
    """Rows for ``result.terms`` by ``spec`` (``NAME`` or ``INPUT/OUTPUT``): ``{"embed", "output"?}``."""
    from embscope.extension.init import initialise, parse_init

    names = dict(zip(("embed", "output"), parse_init(spec)))
    trained = reference_mask(model, None) if trained is None else trained
    ctxs = init_contexts(model, result.pieces, trained, result.piece_counts)
    return {which: initialise(names[which], ctx) for which, ctx in ctxs.items()}


def suggest(model: "LoadedModel", corpus_path: str | Path, *, top: int = 200, max_ngram: int = 1,
            min_freq: int = 5, init: Sequence[str] = ("subword-mean",), tokens: "pl.DataFrame | None" = None,
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
        init: strategy specs to diagnose (``NAME`` or ``INPUT/OUTPUT`` for untied models).
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
    from embscope.extension.init import parse_init
    from embscope.corpus.stream import CorpusWarning
    from embscope.corpus.engine import Engine

    if top < 1 or max_ngram < 1 or min_freq < 1:
        raise SpecError(f"--top, --max-ngram and --min-freq must be at least 1 (got {top}, {max_ngram}, {min_freq})")
    specs = list(dict.fromkeys(init))
    for spec in specs:
        parse_init(spec)  # unknown names fail before any work
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
        with steps.step("diagnostics", "checking each initialisation"):
            result.summary["strategies"], result.summary["kl_note"] = _diagnose(
                model, result, specs, reference_mask(model, tokens), tok, ext, steps)
    return result


def _diagnose(model, result: ExtensionResult, specs, trained, tok, ext, steps: Steps):
    from embscope.extension.diagnostics import held_out_ids, hidden_and_logits, kl_and_mass, row_diagnostics
    from embscope.models.fullmodel import load_causal_lm, why_not_loadable

    reason = why_not_loadable(model)
    h = logits = None
    note = reason
    if reason is None:
        with steps.step("whole model", "loading the whole model"):
            lm = load_causal_lm(model)
        with steps.step("held-out pass", "held-out text through the model"):
            ids = held_out_ids(tok, ext)
            h, logits = hidden_and_logits(lm, ids)
        note = f"held-out general English text, {len(ids)} tokens, none of them a new term"
    import torch

    from embscope.extension.diagnostics import TOP_K
    from embscope.extension.init import initialise, nearest_trained, parse_init

    names = model.token_strings()
    # One context per matrix for every strategy (its mean and norms are computed once), and one
    # pass per matrix for the nearest neighbours of every strategy's rows.
    ctxs = init_contexts(model, result.pieces, trained, result.piece_counts)
    rows_of = {spec: {which: initialise(name, ctxs[which])
                      for which, name in zip(("embed", "output"), parse_init(spec)) if which in ctxs}
               for spec in specs}
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
    return out, note
