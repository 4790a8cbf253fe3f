"""Approximate cosine top-k by a hierarchical navigable small-world graph (FAISS ``IndexHNSWFlat``).

HNSW (Malkov & Yashunin 2018, "Efficient and robust approximate nearest neighbor search using
Hierarchical Navigable Small World graphs") inserts each row into a layered proximity graph of
about ``M`` links per row and answers a query by greedy best-first search with a candidate list of
``efSearch`` rows. Building and querying every row costs ≈ n · log n · M · d multiply-adds: the
time grows about linearly in the rows, unlike exact search's n² · d.

Its weak spot is the one that matters here: on wide, diffuse matrices whose rows share a few
"hubs" (rows near the mean direction that appear in most rows' neighbour lists; Radovanović,
Nanopoulos & Ivanović 2010, "Hubs in space", JMLR 11), the greedy search stops at local optima and
returns much worse neighbours. Measured on the first 65,740 rows of DeepSeek-R1-Distill-Qwen-7B's
LM head (3584 wide; efSearch 32): Spearman's ρ of the knot indicator against exact search 0.64
(70 % of those rows have their 10th and 32nd exact neighbours within 0.005 of each other: a
tie among hub rows), where 100,000 GloVe rows (50 wide; efSearch 64) get 0.9985. So :func:`pilot` first builds the graph on a subset and
compares, on the tuning rows, the indicators the graph would feed (mean cosine to the k nearest,
cosine to the nearest) with those from exact search in the same subset; ``auto`` uses HNSW only
when that error is small (:data:`PILOT_MAX_ERROR`).

FAISS draws each row's level from a generator with a fixed seed, but rows are inserted by
several threads, so two runs can build slightly different graphs (``seed`` picks the pilot's
subset only). Similarities returned are the inner products of the unit rows that FAISS computes in float32 for
the neighbours it returns (exact for those rows, up to summation order).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: links per row (FAISS's M); 16 is FAISS's and hnswlib's usual default
HNSW_M = 16
#: candidate list while inserting rows
EF_CONSTRUCTION = 40
#: candidate list while querying (≥ k + 1)
EF_SEARCH = 64
#: rows of the pilot graph (or all rows, when fewer): enough for the hubs and the local
#: structure to show, an eighth or less of a 152k-row vocabulary
PILOT_ROWS = 20_000
#: largest acceptable 99th percentile of the pilot's indicator error, in units of the indicator's
#: robust spread (1.4826 · MAD) over the tuning rows. Measured pilots (knot, isolation): GloVe
#: 0.13–0.15, 0.0003–0.04 (whole-graph ρ ≥ 0.99); Gemma-3-270M 0.55, 1.11; SmolLM2 2.04, 4.66;
#: the real 7B head 1.87, 5.08 (whole-graph ρ 0.64)
PILOT_MAX_ERROR = 0.25


def hnsw_knn(xn: "torch.Tensor | np.ndarray", k: int, *, rows: np.ndarray | None = None,
             ef_search: int = EF_SEARCH, timings: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` cosine neighbours (self excluded) of every row of unit ``xn``, or of ``rows``
    among all rows. Returns (sims (r, k) float32, ids (r, k) int64), most similar first; a row
    with fewer than k found gets -inf / -1. ``timings`` (a dict) receives ``build`` and ``search``
    seconds."""
    import time

    import faiss

    x = np.ascontiguousarray(xn.cpu().numpy() if hasattr(xn, "cpu") else xn, dtype=np.float32)
    n, d = x.shape
    t0 = time.perf_counter()
    index = faiss.IndexHNSWFlat(d, HNSW_M, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = EF_CONSTRUCTION
    index.add(x)
    t1 = time.perf_counter()
    index.hnsw.efSearch = max(ef_search, k + 1)
    q = np.arange(n) if rows is None else np.asarray(rows)
    sims, ids = index.search(x[q], k + 1)
    if timings is not None:
        timings.update(build=t1 - t0, search=time.perf_counter() - t1)
    return drop_self(sims, ids, q, k)


def hnsw_graph(xn: "torch.Tensor | np.ndarray", k: int) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """:func:`hnsw_knn` over every row, with the parameters for the graph's record."""
    sims, ids = hnsw_knn(xn, k)
    return sims, ids, {"hnsw_m": HNSW_M, "ef_search": EF_SEARCH}


def estimate_seconds(pilot_record: dict[str, Any], n: int) -> float:
    """Seconds to build and query HNSW over ``n`` rows, scaled from the pilot's build: insertion
    costs ∝ log n per row (the greedy descent), and a query about what an insertion does."""
    import math

    p = max(2, pilot_record["pilot_rows"])
    per_row = pilot_record["pilot_build_seconds"] / p
    return 2.0 * per_row * n * math.log(max(n, 2)) / math.log(p)


def drop_self(sims: np.ndarray, ids: np.ndarray, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Remove each query's own id (or, where it is absent, the last candidate); (r, k) each."""
    own = ids == np.asarray(query)[:, None]
    drop = own.copy()
    drop[~own.any(1), -1] = True
    # a row listed twice (FAISS pads with -1, never repeats) cannot occur; keep the shape exact
    out_s = sims[~drop].reshape(len(ids), k).astype(np.float32)
    out_i = ids[~drop].reshape(len(ids), k).astype(np.int64)
    out_s[out_i < 0] = -np.inf
    return out_s, out_i


def indicator_error(approx: np.ndarray, exact: np.ndarray) -> dict[str, float]:
    """How far an approximate graph's indicators are from exact ones on the same rows.

    ``approx``, ``exact``: (r, k) similarities, descending. For the knot (mean of the k) and for
    the nearest similarity (isolation), the 99th percentile of ``|approx − exact|`` divided by the
    robust spread of the exact values over the rows (1.4826 · MAD, floored at 1e-3). A missed
    neighbour can only lower a similarity, so the error is one-sided.
    Example: exact knots spread with MAD 0.05 (scale 0.074) and errors of 0.01 → 0.135.
    """
    out = {}
    for name, a, e in (("knot", approx.mean(1), exact.mean(1)), ("isolation", approx[:, 0], exact[:, 0])):
        scale = max(1.4826 * float(np.median(np.abs(e - np.median(e)))), 1e-3)
        out[name] = float(np.percentile(np.abs(e - a), 99)) / scale
    return out


def pilot(xn: "torch.Tensor", k: int, tune_rows: np.ndarray, *, seed: int = 0) -> dict[str, Any]:
    """Build HNSW on a random subset holding the tuning rows and measure :func:`indicator_error`
    of those rows against exact search within the subset. Returns the errors, the subset size and
    ``ok`` (both errors ≤ :data:`PILOT_MAX_ERROR`)."""
    import time

    import torch

    from embscope.geometry.exact import exact_knn

    t0 = time.perf_counter()
    n = xn.shape[0]
    tune_rows = np.asarray(tune_rows)
    rng = np.random.default_rng(seed)
    if n <= PILOT_ROWS:
        sub = np.arange(n)
    else:
        rest = np.setdiff1d(np.arange(n), tune_rows)
        sub = np.sort(np.concatenate([tune_rows, rng.choice(rest, PILOT_ROWS - len(tune_rows), replace=False)]))
    xs = xn[torch.from_numpy(sub)].contiguous()
    pos = np.searchsorted(sub, tune_rows)
    ex_v, _ = exact_knn(xs, k, rows=torch.from_numpy(pos), dtype=torch.float32, progress=False)
    tm: dict[str, float] = {}
    ap_v, _ = hnsw_knn(xs, k, rows=pos, timings=tm)
    err = indicator_error(ap_v, ex_v.numpy())
    return {"pilot_rows": int(len(sub)), "pilot_error": {k_: round(v, 4) for k_, v in err.items()},
            "pilot_seconds": round(time.perf_counter() - t0, 3), "pilot_build_seconds": round(tm["build"], 3),
            "ok": all(v <= PILOT_MAX_ERROR for v in err.values())}
