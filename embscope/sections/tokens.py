"""The tokens section: one row per matrix row (``tokens.parquet``), plus the geometry scan.

Base columns come from :func:`embscope.tables.base_columns`; the scan
(:func:`embscope.geometry.scan.scan`) adds the under-trained indicators, the kNN graph and the 2-D
map. The record holds the category counts and, when the scan ran, its summary.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from embscope.geometry.records import GeometryRecord
from embscope.records import Record
from embscope.sections.base import SectionInputs, Scanned, SectionOutput, section


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


@section("tokens", record=TokensRecord, tables=("tokens",), reads=("model", "corpora", "data"), gives=("tokens", "scan"))
def tokens_section(inputs: SectionInputs) -> SectionOutput:
    """Base columns and norms for every row, then (option ``scan``) indicators, kNN graph and map.
    With training data (``check``, ``diff``), the special tokens its chat template uses are checked
    in context even without ``verify``: the rules that warn about special rows read their state."""
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
    if opts.scan.scan:
        from embscope.geometry.scan import scan as run_scan

        texts = None
        if inputs.corpora:
            import warnings

            from embscope.corpus.stream import CorpusWarning
            from embscope.corpus.stream import read_texts

            # all corpora together hold at most scan_bytes of text, whatever their languages
            budget, texts, cut = opts.corpus.bounds().scan_bytes, [], []
            for corpus in inputs.corpora:
                if budget <= 0:
                    cut.append(str(corpus))
                    continue
                with warnings.catch_warnings(record=True) as caught:  # skipped input goes in the summary
                    warnings.simplefilter("always", CorpusWarning)
                    part = read_texts(corpus, options=opts.corpus.read_options(), total_bytes=budget, cut=cut)
                out.warnings += [str(w.message) for w in caught if issubclass(w.category, CorpusWarning)]
                for w in caught:
                    if not issubclass(w.category, CorpusWarning):
                        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
                texts += part
                budget -= sum(len(t.encode("utf-8")) for t in part)
            for c in cut:
                out.warnings.append(f"--corpus {c}: only the first {opts.corpus.bounds().scan_bytes:,} bytes of text "
                                    "(all corpora together) were read for the flagged-row count; raise "
                                    "--limit scan-bytes=N to read more")
        verify, sample, cap = opts.scan.verify, opts.scan.verify_sample, opts.scan.verify_work
        if verify is None:  # automatic (audit): a capped random sample when the whole model loads
            from embscope.geometry.verify import AUTO_VERIFY, AUTO_WORK
            from embscope.models.fullmodel import why_not_causal

            loadable = model.vocab is not None and why_not_causal(model) is None
            verify, sample, cap = (AUTO_VERIFY, "random", cap or AUTO_WORK) if loadable else (0, sample, cap)
        with inputs.steps.step("geometry", f"indicators and kNN graph (k={opts.scan.k})"):
            result = run_scan(model, replace(opts.scan, verify=verify, verify_sample=sample, verify_work=cap),
                              corpus_texts=texts, verify_specials=bool(inputs.data), defer_layout=True)
        columns.update(result.columns)
        geometry = result.summary
        if result.layout_job is not None:
            out.background = _MapInBackground(result, columns, out, inputs.steps)
        out.result = Scanned(model, result)
        out.gives["scan"] = out.result
        if geometry.reference.size == 0:
            out.warnings.append(f"{model.name}: {geometry.reference.note}")
        vf = geometry.verification
        if vf is not None and vf.note and (vf.n_checked or vf.n_checked is None):  # a special-row check is no news
            out.warnings.append(f"verification: {vf.note}")
    out.record = TokensRecord(rows=model.n_rows, n_tokens=model.n_tokens,
                              categories=dict(Counter(model.categories)), geometry=geometry)
    out.tables["tokens"] = tokens_frame(columns)
    out.gives["tokens"] = out.tables["tokens"]
    return out


class _MapInBackground:
    """The map the scan left laying out in its own process while the later sections run: collected
    (``finish``) when the tables are about to be written, into the tokens table and the record."""

    def __init__(self, result, columns, out, steps):
        self.result, self.columns, self.out, self.steps = result, columns, out, steps

    def finish(self) -> None:
        """Collect the map: ``x``, ``y`` into the tokens table; the layout record and the timings
        into the scan's record (the tokens record's ``geometry``, the same object)."""
        import polars as pl

        with self.steps.step("map", "2-D map (laid out alongside the later sections)"):
            self.result.finish_layout()
        xy = {c: self.result.columns[c] for c in ("x", "y")}
        self.columns.update(xy)
        self.out.tables["tokens"] = self.out.tables["tokens"].with_columns(
            *(pl.Series(c, v, dtype=pl.Float32) for c, v in xy.items()))

    def cancel(self) -> None:
        if self.result.layout_job is not None:
            self.result.layout_job.cancel()
