"""The tokens section: one row per matrix row (``tokens.parquet``), plus the geometry scan.

Base columns come from :func:`embscope.tables.base_columns`; the scan
(:func:`embscope.geometry.scan.scan`) adds the under-trained indicators, the kNN graph and the 2-D
map. The record holds the category counts and, when the scan ran, its summary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from embscope.records import Record
from embscope.sections.base import Inputs, SectionOutput


@dataclass
class GeometryRecord(Record):
    """The geometry scan's summary (:mod:`embscope.geometry.scan`; formulas in
    :mod:`embscope.geometry.indicators`)."""

    #: matrix rows scanned
    rows: int
    #: rows per category
    categories: dict[str, int]
    #: flagged rows: {normal, normal_share (fraction of normal rows), by_category {category: rows},
    #: by_reason {indicator or zero: rows it fired on}, zero_rows, isolated (normal rows flagged isolated),
    #: family (normal rows whose knot is a trained family of near-synonyms, not a collapse), drift
    #: (normal rows whose Magikarp similarity stops short of the unused rows): neither is flagged}
    flagged: dict[str, Any]
    #: the flag threshold on ``undertrained_score``
    threshold: float
    #: what the threshold means on this run (robust scale, share of trained rows flagged, per indicator)
    threshold_note: str
    #: per evidence name {side, median, scale, scale_of}; run {trained_rows, trained_flagged_share,
    #: per_indicator_share, gaussian_tail}
    indicators: dict[str, Any]
    #: the most under-trained normal tokens, [{id, token (raw text, untrusted), score, reason}]
    top_undertrained: list[dict[str, Any]]
    #: the most isolated normal tokens, [{id, token, z}]
    top_isolated: list[dict[str, Any]]
    #: {script: {rows, flagged, flagged_share, mean_norm}} over normal rows, largest first
    per_script: dict[str, dict[str, Any]]
    #: the kNN graph: {method, k, recall_at_k, recall_rows, seconds, cached, ...method parameters}
    knn: dict[str, Any]
    #: the Magikarp reference set: {size, source, by_source {rule: rows}, note (what works without one)}
    reference: dict[str, Any]
    #: the model's input and output matrices are one
    tied: bool
    #: {knn, indicators, verify, usage, layout} seconds
    timings: dict[str, float]
    #: prompt verification (``--verify N``): {n_checked, n_verified_undertrained, precision,
    #: precision_ci95, sample (top or random), seed, pool, controls_checked, controls_failed, prompts,
    #: max_prob_cut, device, seconds, seconds_per_row, time_cap_s, stopped_at_cap, specials {source,
    #: checked, verified, rows}, note}; null when off
    verification: dict[str, Any] | None = None
    #: rows prompting confirmed as under-trained (max_prob < cut): {count, rows [{id, token, score,
    #: reason, max_prob}]}; null when nothing was verified
    verified_undertrained: dict[str, Any] | None = None
    #: flagged rows not checked by prompting (indicators only): {count, rows [{id, token, score, reason}]}
    candidates: dict[str, Any] | None = None
    #: flagged rows the prompting found trained (max_prob ≥ cut): {count, rows}; null without verification
    cleared: dict[str, Any] | None = None
    #: the flagged rows the user's corpus and chat template produce: {texts, corpus_tokens, template,
    #: flagged_used, flagged_in_template, occurrences, top [{id, token, reason, corpus, template}]};
    #: null without a corpus
    usage: dict[str, Any] | None = None
    #: the 2-D map, laid out from the kNN graph above: {seconds, n_epochs, init, neighbor_preservation (share
    #: of each sampled row's k graph neighbours among its k nearest points in 2-D), preservation_rows};
    #: null without the map
    layout: dict[str, Any] | None = None


@dataclass
class TokensRecord(Record):
    """The tokens table's headline figures."""

    #: matrix rows (= rows of tokens.parquet)
    rows: int
    #: tokens the tokenizer defines (rows past it are padding)
    n_tokens: int
    #: rows per category (normal, special, byte, unreachable, undecodable, padding)
    categories: dict[str, int]
    #: the geometry scan's summary; null when the scan was off (``skipped`` says why)
    geometry: GeometryRecord | None = None


def tokens_section(inputs: Inputs, *, scan: bool = True) -> SectionOutput:
    """Base columns and norms for every row, then (``scan``) indicators, kNN graph and map."""
    from collections import Counter

    from embscope.tables import base_columns, tokens_frame

    model = inputs.model
    if model is None:
        return SectionOutput(skipped="no model: a tokenizer-only run has no matrix")
    opts = inputs.options
    with inputs.steps.step("tokens", "token table and norms"):
        columns = base_columns(model)
    geometry = None
    out = SectionOutput()
    if scan:
        from embscope.geometry.scan import scan as run_scan

        texts = None
        if inputs.data:
            from embscope.corpus.texts import read_texts

            texts = [t for corpus in inputs.data for t in read_texts(corpus, options=opts.read_options())]
        verify, sample, cap = opts.verify, opts.verify_sample, opts.verify_time_cap
        if verify is None:  # automatic (audit): a capped random sample when the whole model loads
            from embscope.geometry.verify import AUTO_TIME_CAP, AUTO_VERIFY
            from embscope.models.fullmodel import why_not_causal

            loadable = model.vocab is not None and why_not_causal(model) is None
            verify, sample, cap = (AUTO_VERIFY, "random", cap or AUTO_TIME_CAP) if loadable else (0, sample, cap)
        with inputs.steps.step("geometry", f"indicators and kNN graph (k={opts.k})"):
            result = run_scan(model, k=opts.k, unused_ids=opts.unused_ids, threshold=opts.threshold,
                              cache_dir=opts.cache_dir, layout=opts.layout, knn_method=opts.knn_method,
                              verify=verify, verify_sample=sample, verify_time_cap=cap, corpus_texts=texts)
        columns.update(result.columns)
        geometry = GeometryRecord.from_dict(result.summary, strict=True)
        out.live = (model, result)
        if geometry.reference.get("size") == 0:
            out.warnings.append(f"{model.name}: {geometry.reference.get('note')}")
        note = (geometry.verification or {}).get("note")
        if note:
            out.warnings.append(f"verification: {note}")
    out.record = TokensRecord(rows=model.n_rows, n_tokens=model.n_tokens,
                              categories=dict(Counter(model.categories)), geometry=geometry)
    out.tables["tokens"] = tokens_frame(columns)
    return out
