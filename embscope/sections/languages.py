"""The languages section: what each language costs each tokenizer, and — with a model — how dense
and how trained the embedding rows its text uses are (the "double cost").

Runs :func:`embscope.languages.fertility.measure` on every corpus; the table has one row per
(tokenizer, language, corpus).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from embscope.languages.record import CorpusMeasure
from embscope.records import Record
from embscope.sections.base import Inputs, SectionOutput, section


@dataclass
class LanguagesRecord(Record):
    """Per-corpus summaries of the language measurements."""

    #: tokenizer names, the model's own first
    tokenizers: list[str]
    #: language that parity divides by
    reference: str
    #: {corpus path: how it was measured and what was read}
    corpora: dict[str, CorpusMeasure] = field(default_factory=dict)


@section("languages", record=LanguagesRecord, tables=("languages",),
         reads=("vocabs", "model", "languages", "tokens"))
def languages_section(inputs: Inputs) -> SectionOutput:
    """Fertility, parity and embedding density per language, on every corpus."""
    import polars as pl

    from embscope.languages.fertility import measure

    if not inputs.languages:
        return SectionOutput(skipped="no corpus given")
    if not inputs.vocabs:
        return SectionOutput(skipped="the model ships no tokenizer")
    opts = inputs.options
    embed = inputs.model.embed if inputs.model is not None else None
    tables, per_corpus, warnings = [], {}, []
    isolation = _exact_isolation(embed)  # one per run: a row searched for one corpus is not searched again
    for corpus in inputs.languages:
        with inputs.steps.step(f"languages:{corpus.name}", f"fertility and parity on {corpus}"):
            res = measure(list(inputs.vocabs), corpus, reference=opts.reference,
                          sample_bytes=opts.sample_bytes, embed=embed, tokens=inputs.tokens,
                          exact_isolation=isolation,
                          engine=opts.corpus_engine(), options=opts.read_options(),
                          max_languages=opts.bounds().languages)
        tables.append(res.table.with_columns(pl.lit(str(corpus)).alias("corpus")))
        per_corpus[str(corpus)] = res.summary
        if res.summary.languages_folded:
            warnings.append(f"{corpus}: {res.summary.languages_folded} languages past the first "
                            f"{res.summary.max_languages} were measured together as 'other'; raise "
                            "--limit languages=N to measure each")
        if res.table.height > 1 and not res.summary.reference_present:
            warnings.append(f"reference language {opts.reference!r} is not in {corpus}: parity is empty "
                            "there; pass --reference")
    record = LanguagesRecord(tokenizers=[v.name for v in inputs.vocabs], reference=opts.reference,
                             corpora=per_corpus)
    table = pl.concat(tables, how="diagonal_relaxed")
    return SectionOutput(record=record, tables={"languages": table}, warnings=warnings)


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
