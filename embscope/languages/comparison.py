"""Which of two tokenizers is cheaper on each language, and how sure that is (``comparisons.parquet``).

For tokenizers A and B on the same aligned units of a language,

    ratio = Σ_u tokens_B(u) / Σ_u tokens_A(u)

with its paired percentile bootstrap interval (the same units resampled for A and B:
:mod:`embscope.languages.bootstrap`). The verdict: ``"B cheaper"`` when the whole interval lies
below 1, ``"A cheaper"`` when it lies above 1, else ``"not distinguishable"``. Two byte-identical
vocabularies tokenise every unit the same, so every resample gives exactly 1: ratio 1, interval
[1, 1], not distinguishable. Example: 100 units where B uses 10 % fewer tokens on each → ratio 0.9,
interval [0.9, 0.9], "B cheaper". A language without unit keys gets the ratio of its totals, a null
interval and verdict.
"""

from __future__ import annotations

import numpy as np

from embscope.languages.counting import OTHER
from embscope.languages.intervals import unit_order

#: the verdict when the interval holds 1
NOT_DISTINGUISHABLE = "not distinguishable"


def verdict(a: str, b: str, lo: float | None, hi: float | None) -> str | None:
    """The verdict of an interval of tokens_B / tokens_A.

    >>> verdict("gpt2", "o200k", 0.7, 0.8), verdict("gpt2", "o200k", 0.9, 1.1), verdict("gpt2", "o200k", 1.0, 1.0)
    ('o200k cheaper', 'not distinguishable', 'not distinguishable')
    """
    if lo is None or hi is None:
        return None
    if hi < 1.0:
        return f"{b} cheaper"
    if lo > 1.0:
        return f"{a} cheaper"
    return NOT_DISTINGUISHABLE


def comparisons(vocabs, acc, boot):
    """One row per (language, pair of tokenizers i < j in the order given): ``language``,
    ``tokenizer_a``, ``tokenizer_b``, ``units``, ``ratio``, ``ratio_lo``, ``ratio_hi``, ``verdict``."""
    import polars as pl

    rows = []
    langs = sorted({lang for (_, lang) in acc if lang != OTHER})
    for i in range(len(vocabs)):
        for j in range(i + 1, len(vocabs)):
            a_name, b_name = vocabs[i].name, vocabs[j].name
            for lang in langs:
                a, b = acc.get((i, lang)), acc.get((j, lang))
                if a is None or b is None:
                    continue
                units = unit_order(a.units.keys() & b.units.keys())
                if units:
                    ta = np.array([a.units[u] for u in units], dtype=np.float64)
                    tb = np.array([b.units[u] for u in units], dtype=np.float64)
                    ratio = float(tb.sum() / ta.sum()) if ta.sum() else None
                    lo, hi = boot.interval(tb[None], ta[None])
                    lo, hi = (float(lo[0]), float(hi[0])) if np.isfinite(lo[0]) else (None, None)
                else:
                    ratio = b.tokens / a.tokens if a.tokens else None
                    lo = hi = None
                rows.append({"language": lang, "tokenizer_a": a_name, "tokenizer_b": b_name, "units": len(units),
                             "ratio": ratio, "ratio_lo": lo, "ratio_hi": hi,
                             "verdict": verdict(a_name, b_name, lo, hi)})
    schema = {"language": pl.String, "tokenizer_a": pl.String, "tokenizer_b": pl.String, "units": pl.Int64,
              "ratio": pl.Float64, "ratio_lo": pl.Float64, "ratio_hi": pl.Float64, "verdict": pl.String}
    return pl.DataFrame(rows, schema=schema)
