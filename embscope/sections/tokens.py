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
    #: flagged rows: {normal, normal_share (fraction of normal rows), by_category {category: rows}, zero_rows}
    flagged: dict[str, Any]
    #: the flag threshold on ``undertrained_score``
    threshold: float
    #: what the threshold means on this run
    threshold_note: str
    #: the most under-trained normal tokens, [{id, token (raw text, untrusted), score}]
    top_undertrained: list[dict[str, Any]]
    #: {script: {rows, flagged, flagged_share, mean_norm}} over normal rows, largest first
    per_script: dict[str, dict[str, Any]]
    #: the kNN graph: {method, k, recall_at_k, recall_rows, seconds, cached, ...method parameters}
    knn: dict[str, Any]
    #: the Magikarp reference set: {size, source, note}
    reference: dict[str, Any]
    #: {component: {median, scale}} of the robust z-scores
    fit: dict[str, Any]
    #: the model's input and output matrices are one
    tied: bool
    #: {knn, indicators, layout} seconds
    timings: dict[str, float]


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

        with inputs.steps.step("geometry", f"indicators and kNN graph (k={opts.k})"):
            result = run_scan(model, k=opts.k, unused_ids=opts.unused_ids, threshold=opts.threshold,
                              cache_dir=opts.cache_dir, layout=opts.layout, knn_method=opts.knn_method)
        columns.update(result.columns)
        geometry = GeometryRecord.from_dict(result.summary, strict=True)
        if geometry.reference.get("size") == 0:
            out.warnings.append(f"{model.name}: {geometry.reference.get('note')}")
    out.record = TokensRecord(rows=model.n_rows, n_tokens=model.n_tokens,
                              categories=dict(Counter(model.categories)), geometry=geometry)
    out.tables["tokens"] = tokens_frame(columns)
    return out
