"""The "double cost" of a language (Petrov et al. 2023's cost in tokens, plus where those tokens sit
in the embedding space): columns of ``languages.parquet`` for ``vocabs[0]``, when ``tokens`` (the
geometry table: ``token_id``, ``in_norm``, maybe ``isolation``, ``flagged``) and/or ``embed`` ((V, d)
matrix) are given. The weights are each token's share of the language's tokens:

- ``mean_in_norm`` = Σ_i w_i ‖e_i‖, ``mean_isolation`` = Σ_i w_i isolation_i,
  ``flagged_share`` = Σ_i w_i [flagged_i];
- ``isolation_exact_share`` = Σ_i w_i [isolation_i is exact search's]: under a certified graph the
  :data:`EXACT_ISOLATION_ROWS` heaviest approximate rows are searched exactly, the others keep the
  graph's value, an upper bound, so ``mean_isolation`` is then at most (1 − share)·max isolation
  above the exact mean;
- ``mean_within_sim`` = mean cosine similarity over pairs of the language's :data:`TOP_TOKENS`
  most frequent tokens (high: the language's tokens crowd one corner of the space).
"""

from __future__ import annotations

#: most frequent tokens per language compared pairwise for mean_within_sim (200² pairs)
TOP_TOKENS = 200
#: rows whose isolation a certified graph left approximate that get it exactly (the heaviest in any
#: language first): each costs n·d multiply-adds, so all the rows a corpus uses cost minutes on a
#: 7B head (152,064 × 3584: 420 s for the used rows of UDHR and a medical corpus, 2 cores)
EXACT_ISOLATION_ROWS = 4096


def add_density(rows, name, acc, tokens, embed, exact_isolation=None, boot=None) -> None:
    """Add the double-cost columns to ``rows`` of tokenizer ``name`` (vocabs[0]).

    ``exact_isolation(ids, bound) -> isolations``: exact search's isolation of the given rows (``bound``:
    the graph's isolation of each, an upper bound that the search may use); with it, the
    rows these averages use whose ``knn_exact`` is false (a certified graph's approximate rows) get
    their exact value, so every average is exact search's. With ``boot``
    (:class:`~embscope.languages.intervals.Bootstrap`), the token-weighted means get their
    ``_lo`` / ``_hi`` over the aligned units (Σ_u Σ value / Σ_u tokens with a value)."""
    import numpy as np

    in_norm = isolation = flagged = None
    if tokens is not None:
        ids = tokens["token_id"].to_numpy()
        size = int(ids.max()) + 1 if len(ids) else 0

        def column(col, dtype):
            if col not in tokens.columns:
                return None
            arr = np.full(size, np.nan, dtype=np.float64)
            arr[ids] = tokens[col].cast(dtype).fill_null(np.nan).to_numpy()
            return arr

        import polars as pl

        in_norm = column("in_norm", pl.Float64)
        isolation = column("isolation", pl.Float64)
        flagged = column("flagged", pl.Float64)
        exact = column("knn_exact", pl.Float64)
        if isolation is not None and exact is not None and exact_isolation is not None:
            # each row's largest share of one language's tokens: the rows that weigh most in any
            # language are searched first, at most EXACT_ISOLATION_ROWS of them
            weight = np.zeros(size, dtype=np.float64)
            for row in rows:
                if row["tokenizer"] == name:
                    c = acc[(0, row["language"])].counts[:size].astype(np.float64)
                    if c.sum() > 0:
                        weight[:len(c)] = np.maximum(weight[:len(c)], c / c.sum())
            todo = np.flatnonzero((weight > 0) & (exact != 1.0) & np.isfinite(isolation))
            todo = np.sort(todo[np.argsort(-weight[todo], kind="stable")][:EXACT_ISOLATION_ROWS])
            if len(todo):
                isolation[todo] = exact_isolation(todo, isolation[todo])
                exact[todo] = 1.0
    emb = embed  # (V, d), any dtype; only the rows of each language's top tokens are converted
    for row in rows:
        if row["tokenizer"] != name:
            continue
        counts = acc[(0, row["language"])].counts.astype(np.float64)

        def weighted(values):
            if values is None:
                return None
            n = min(len(values), len(counts))
            w, v = counts[:n], values[:n]
            ok = ~np.isnan(v) & (w > 0)
            return float((w[ok] * v[ok]).sum() / w[ok].sum()) if ok.any() else None

        row["mean_in_norm"] = weighted(in_norm)
        row["mean_isolation"] = weighted(isolation)
        row["isolation_exact_share"] = weighted(exact) if isolation is not None and exact is not None else None
        row["flagged_share"] = weighted(flagged)
        sim = None
        if emb is not None:
            used = np.flatnonzero(counts[:len(emb)])
            top = used[np.argsort(-counts[used], kind="stable")[:TOP_TOKENS]]
            if len(top) >= 2:
                x = emb[top]  # (k, d): only these rows, in float32
                x = x.detach().float().cpu().numpy() if hasattr(x, "detach") else np.asarray(x, dtype=np.float32)
                x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
                s = x @ x.T  # (k, k) cosine similarities
                k = len(top)
                sim = float((s.sum() - np.trace(s)) / (k * (k - 1)))
        row["mean_within_sim"] = sim
        if boot is not None:
            _intervals(row, acc[(0, row["language"])].unit_ids, boot,
                       {"mean_in_norm": in_norm, "mean_isolation": isolation, "flagged_share": flagged,
                        "isolation_exact_share": exact if isolation is not None else None})
    _same_columns(rows)


def _same_columns(rows) -> None:
    """Every density column (and interval end) on every row, so the table has one schema."""
    for row in rows:
        for col in ("mean_in_norm", "mean_isolation", "isolation_exact_share", "flagged_share", "mean_within_sim"):
            row.setdefault(col, None)
            if col != "mean_within_sim":
                row.setdefault(f"{col}_lo", None)
                row.setdefault(f"{col}_hi", None)


def _intervals(row, unit_ids, boot, columns) -> None:
    """``<col>_lo`` / ``<col>_hi`` of the token-weighted means, resampling the language's units."""
    import numpy as np

    from embscope.languages.intervals import unit_value_sums

    for col, values in columns.items():
        lo = hi = None
        if values is not None and unit_ids:
            _, s, n = unit_value_sums(unit_ids, values)
            a, b = boot.interval(s[None], n[None])
            lo, hi = (float(a[0]), float(b[0])) if np.isfinite(a[0]) else (None, None)
        row[f"{col}_lo"], row[f"{col}_hi"] = lo, hi
