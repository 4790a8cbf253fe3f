"""Per tokenizer, the figures to quote: TokEval's fairness Gini, median and maximum parity, the
languages that pay double, a data mix's expected cost (``tokenizers.parquet``), and per-script and
per-family aggregates (``language_groups.parquet``).

- ``gini`` — the tokenization fairness Gini of TokEval (and Petrov et al. 2023's unfairness view):
  with c_i the mean tokens per aligned unit of language i over n languages and μ their mean,

      G = Σ_i Σ_j |c_i − c_j| / (2 n² μ)

  0 when every language costs the same, towards 1 when one language carries all the cost. Computed
  sorted, G = Σ_k (2k − n − 1) c_(k) / (n² μ) (k = 1 … n): the same number in O(n log n).
  Example: c = [1, 1, 2] → Σ|c_i − c_j| = 4, n² μ = 9 · 4/3 = 12 → G = 4 / 24 = 0.1667.
  The units are those every language of the run has (the languages' own units when they share fewer
  than half of them, ``summary.json`` → ``gini_units``); the interval resamples those units, the same
  draw for every language (:mod:`embscope.languages.bootstrap`).
- ``mix_tokens_per_unit`` = Σ_L w_L c_L / Σ_L w_L over the languages of ``--weights`` that the
  corpus holds: the expected tokens per aligned unit of a data mix with those shares.
"""

from __future__ import annotations

import numpy as np

from embscope.languages.counting import OTHER
from embscope.languages.intervals import unit_order

#: parity at which a language "pays double" (Petrov et al. 2023's premium of 2)
DOUBLE_COST = 2.0


def gini(c) -> np.ndarray:
    """TokEval's Gini of the last axis of ``c`` (see the module doc); NaN where a value is NaN.

    >>> float(round(gini(np.array([1.0, 1.0, 2.0])), 4)), float(gini(np.array([3.0, 3.0])))
    (0.1667, 0.0)
    """
    c = np.sort(np.asarray(c, dtype=np.float64), axis=-1)
    n = c.shape[-1]
    k = np.arange(1, n + 1, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return ((2 * k - n - 1) * c).sum(axis=-1) / (n * n * c.mean(axis=-1))


def unit_costs(accs: dict, boot):
    """(languages, c (L,), C (B, L), units used) — mean tokens per aligned unit of each language and
    its resamples, from ``accs`` = language → ``_Acc``; None without units."""
    langs = [lang for lang, a in accs.items() if a.units and lang != OTHER]
    if not langs:
        return None
    sets = [set(accs[lang].units) for lang in langs]
    shared = set.intersection(*sets)
    if len(shared) >= max(2, 0.5 * float(np.median([len(s) for s in sets]))):
        units = unit_order(shared)
    else:
        units = unit_order(set.union(*sets))
    t = np.array([[accs[lang].units.get(u, 0) for u in units] for lang in langs], dtype=np.float64)  # (L, U)
    p = np.array([[u in accs[lang].units for u in units] for lang in langs], dtype=np.float64)  # (L, U)
    m = boot.counts(len(units))  # (B, U)
    with np.errstate(divide="ignore", invalid="ignore"):
        c = t.sum(axis=1) / p.sum(axis=1)
        cb = (m @ t.T) / (m @ p.T)  # (B, L)
    return langs, c, cb, len(units)


def _interval(point, stats, boot):
    from embscope.languages.bootstrap import quantiles

    lo, hi = quantiles(np.asarray(stats)[None], boot.level)
    f = lambda x: float(x) if x is not None and np.isfinite(x) else None  # noqa: E731
    return f(point), f(lo[0]), f(hi[0])


def tokenizer_tables(vocabs, acc, table, reference: str, boot, *, weights=None, families=None, summary=None) -> dict:
    """``tokenizers`` (one row per tokenizer), ``language_groups`` and, with several tokenizers,
    ``comparisons`` (:mod:`embscope.languages.comparison`) as polars frames. Records the units and
    the weights left out on ``summary`` (a :class:`~embscope.languages.record.CorpusMeasure`)."""
    import polars as pl

    rows, groups, used, missing = [], [], {}, set()
    scripts = {(r["tokenizer"], r["language"]): r["script"] for r in table.iter_rows(named=True)}
    for k, vocab in enumerate(vocabs):
        accs = {lang: a for (kk, lang), a in acc.items() if kk == k}
        part = table.filter(pl.col("tokenizer") == vocab.name)
        par = part.filter(pl.col("parity").is_not_null() & (pl.col("language") != reference))
        row = {"tokenizer": vocab.name, "languages": part.filter(pl.col("language") != OTHER).height}
        costs = unit_costs(accs, boot)
        row["gini"], row["gini_lo"], row["gini_hi"] = (None, None, None) if costs is None else \
            _interval(gini(costs[1]), gini(costs[2]), boot)
        if costs is not None:
            used[vocab.name] = costs[3]
        pv = par["parity"].to_numpy() if par.height else np.zeros(0)
        row["parity_median"] = float(np.median(pv)) if len(pv) else None
        top = par.sort("parity", descending=True).row(0, named=True) if par.height else None
        row["parity_max"] = None if top is None else float(top["parity"])
        row["parity_max_language"] = None if top is None else top["language"]
        row["double_cost_languages"] = int((pv >= DOUBLE_COST).sum()) if len(pv) else None
        lo = par["parity_lo"].to_numpy() if par.height and "parity_lo" in par.columns else None
        row["double_cost_sure"] = None if lo is None else int((np.nan_to_num(lo.astype(np.float64), nan=0.0) >= DOUBLE_COST).sum())
        row["mix_tokens_per_unit"] = row["mix_tokens_per_unit_lo"] = row["mix_tokens_per_unit_hi"] = None
        if weights and costs is not None:
            langs, c, cb, _ = costs
            w = np.array([float(weights.get(lang, 0.0)) for lang in langs])
            missing |= set(weights) - set(langs)
            if w.sum() > 0:
                row["mix_tokens_per_unit"], row["mix_tokens_per_unit_lo"], row["mix_tokens_per_unit_hi"] = \
                    _interval((w * c).sum() / w.sum(), (cb @ w) / w.sum(), boot)
        rows.append(row)
        if costs is not None:
            langs, c, cb, _ = costs
            pmap = dict(zip(par["language"].to_list(), pv.tolist()))
            for kind, key in (("script", lambda lang: scripts.get((vocab.name, lang))),
                              ("family", lambda lang: (families or {}).get(lang))):
                members: dict = {}
                for i, lang in enumerate(langs):
                    g = key(lang)
                    if g is not None:
                        members.setdefault(g, []).append(i)
                for g, idx in sorted(members.items()):
                    ps = [pmap[langs[i]] for i in idx if langs[i] in pmap]
                    point, glo, ghi = _interval(c[idx].mean(), cb[:, idx].mean(axis=1), boot)
                    groups.append({"tokenizer": vocab.name, "grouping": kind, "group": str(g), "languages": len(idx),
                                   "tokens_per_unit": point, "tokens_per_unit_lo": glo, "tokens_per_unit_hi": ghi,
                                   "parity_median": float(np.median(ps)) if ps else None,
                                   "parity_max": float(max(ps)) if ps else None})
    if summary is not None:
        summary.gini_units = used or None
        summary.weights_missing = sorted(missing) if weights else None
    out = {"tokenizers": pl.DataFrame(rows, infer_schema_length=None)}
    if groups:
        out["language_groups"] = pl.DataFrame(groups, infer_schema_length=None)
    if len(vocabs) > 1:
        from embscope.languages.comparison import comparisons

        out["comparisons"] = comparisons(vocabs, acc, boot)
    return {name: frame.with_columns(pl.col(c).cast(pl.Float64) for c, t in frame.schema.items() if t == pl.Null)
            for name, frame in out.items()}
