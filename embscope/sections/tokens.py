"""The tokens section: one row per matrix row (``tokens.parquet``), plus the geometry scan.

Base columns come from :func:`embscope.tables.base_columns`; the scan
(:func:`embscope.geometry.scan.scan`) adds the under-trained indicators, the kNN graph and the 2-D
map. The record holds the category counts and, when the scan ran, its summary.
"""

from __future__ import annotations

from dataclasses import dataclass

from embscope.geometry.records import GeometryRecord
from embscope.records import Record
from embscope.sections.base import Inputs, SectionOutput


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


def tokens_section(inputs: Inputs) -> SectionOutput:
    """Base columns and norms for every row, then (option ``scan``) indicators, kNN graph and map."""
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
    if opts.scan:
        from embscope.geometry.scan import scan as run_scan

        texts = None
        if inputs.data:
            from embscope.corpus.texts import read_texts

            texts = [t for corpus in inputs.data for t in read_texts(corpus, options=opts.read_options())]
        with inputs.steps.step("geometry", f"indicators and kNN graph (k={opts.k})"):
            result = run_scan(model, k=opts.k, unused_ids=opts.unused_ids, threshold=opts.threshold,
                              cache_dir=opts.cache_dir, layout=opts.layout, knn_method=opts.knn_method,
                              verify=opts.verify, corpus_texts=texts)
        columns.update(result.columns)
        geometry = GeometryRecord.from_dict(result.summary, strict=True)
        out.live = (model, result)
        out.gives["scan"] = out.live
        if geometry.reference.size == 0:
            out.warnings.append(f"{model.name}: {geometry.reference.note}")
        note = geometry.verification.note if geometry.verification is not None else None
        if note:
            out.warnings.append(f"verification: {note}")
    out.record = TokensRecord(rows=model.n_rows, n_tokens=model.n_tokens,
                              categories=dict(Counter(model.categories)), geometry=geometry)
    out.tables["tokens"] = tokens_frame(columns)
    out.gives["tokens"] = out.tables["tokens"]
    return out
