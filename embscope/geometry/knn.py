"""Cosine k-nearest-neighbour graph of the rows of an embedding matrix: dispatch, recall, cache.

For every row ``x_i`` of an (n, d) matrix we want the ``k`` rows ``j != i`` with the largest
cosine similarity ``cos(x_i, x_j) = x_i·x_j / (|x_i| |x_j|)``. Example: rows (1, 0), (1, 1),
(0, 1) with k = 1 give neighbours [1, 0, 1] and similarities [0.707, 0.707, 0.707].

Methods:

``exact`` (:mod:`embscope.geometry.exact`)
    Tiled matmuls with a running top-k, device-agnostic (CPU or CUDA); 16-bit tiles on CUDA and
    on CPUs with native bf16, re-ranked in float32; in float32 each pair is computed once.

``hnsw`` (:mod:`embscope.geometry.hnsw`)
    FAISS's HNSW graph: cost about linear in n, good on narrow or clustered rows (GloVe), poor on
    wide diffuse rows with hubs (a real 7B LM head).

``nndescent`` (:mod:`embscope.geometry.nndescent`)
    NN-descent from a random-projection forest (our compiled kernels): cost linear in n; the
    certified graph's base on rows up to 1,024 wide.

``certified`` (:mod:`embscope.geometry.certify`)
    An approximate graph whose *decisions* are exact search's: the near-duplicate join proves which
    rows can be collapsed, a sample with exact neighbours places the cuts with intervals, and every
    row a decision or a listed figure depends on is searched exactly (m × n × d, not n² × d). Rows
    not searched exactly keep graph values (knot a lower bound, isolation an upper bound).

Every approximate method (``hnsw``, ``nndescent``) returns k real neighbours for every row: a row
the graph left short (a tiny cluster the greedy search never left) is searched exactly.

``auto`` picks exact on CUDA or when n·n·d ≤ ``EXACT_BUDGET``; above, ``certified`` when the rows
are at least ``CERTIFIED_MIN_WIDTH`` wide and its estimated time (:func:`certified_estimate`,
from the GEMM rates measured here) is below exact search's, else exact. It never picks an approximate method whose decisions are approximate.

Recall@k of the returned graph is measured against float32 exact search on ``recall_sample``
random rows, tie-aware: a returned neighbour counts when its exact similarity is at least the k-th
exact similarity (minus 1e-6), so duplicated rows do not count as misses.

Zero rows have no direction: their similarity to everything is 0 and their neighbours are
arbitrary rows (callers flag zero rows separately).

Results are cached as ``<cache_dir>/<key>.npz`` (no pickle), keyed by a hash of every byte of the
matrix with ``k`` and the method, and validated when read (:mod:`embscope.geometry.knn_cache`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from embscope.geometry.exact import (NORM_BLOCK, RERANK_EXTRA, TILE_ELEMENTS, all_finite,  # noqa: F401
                                      cpu_has_fast_bf16, exact_knn, normalize_rows, rerank, tile_dtype)
from embscope.geometry.knn_cache import default_cache_dir, matrix_key  # noqa: F401
from embscope.geometry import knn_cache
from embscope.geometry.graph import KnnError, KnnGraph  # noqa: F401  (their home before graph.py)
from embscope.geometry.knn_record import METHODS, KnnRecord  # noqa: F401 - METHODS re-exported

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: the public surface, including the helpers re-exported from ``exact``
__all__ = ["KnnError", "KnnGraph", "knn_graph", "recall_at_k", "matrix_key", "default_cache_dir",
           "exact_knn", "normalize_rows", "all_finite", "tile_dtype", "cpu_has_fast_bf16",
           "rerank", "EXACT_BUDGET", "RERANK_EXTRA", "TILE_ELEMENTS", "NORM_BLOCK"]

#: ``auto`` runs exact search when n·n·d is below this (the symmetric fp32 search does n·n·d/2
#: multiply-adds: ≈30 s on 2 AVX2 cores at 65 GFLOPS); above it, the certified graph when cheaper
EXACT_BUDGET = 2.0e12
#: the approximate methods (their decisions are not exact search's; ``auto`` never picks one)
APPROXIMATE = ("hnsw", "nndescent")
#: share of the probe's rate the all-rows exact search reaches (each tile's top-k selection and
#: the re-screen around it; measured 76 % on Gemma-3's 640-wide rows and 85 % on the real 7B rows,
#: float32 on AVX2; its estimates within 1.2× on both classes with it, 1.6× under without)
EXACT_EFFICIENCY = 0.8
#: the near-duplicate join's cost per matrix entry outside its screen, in float32 flops (measured:
#: 8 s of the real 7B join's 9.4 on AVX-512, 7.6 of 10.3 on AVX2; :func:`certified_estimate`)
JOIN_ELEMENT_FLOPS = 6500
#: ``auto`` considers the certified graph only for rows at least this wide: below it the join's
#: screen (p + 1 = d/4 + 1 numbers a pair) is bound by the n² pairs it scans, like exact search,
#: not by multiply-adds (measured: a 152,064 × 128 matrix with planted clusters spent longer in the
#: join than the estimate of the whole exact search, then searched most rows exactly one by one)
CERTIFIED_MIN_WIDTH = 512


# ----------------------------------------------------------------------------------------------
# recall, cache, entry point


def recall_at_k(xn, rows, found_ids, exact_sims) -> float:
    """Tie-aware recall@k: share of returned neighbours whose exact similarity reaches the k-th
    exact similarity of their row (minus 1e-6). ``found_ids`` (r, k); ``exact_sims`` (r, k).

    Example: exact sims [0.9, 0.8], returned rows with sims [0.9, 0.7] -> recall 0.5.
    """
    import torch

    found_ids = found_ids.to(xn.device)
    valid = found_ids >= 0
    s = torch.bmm(xn[found_ids.clamp_min(0)], xn[rows].unsqueeze(2)).squeeze(2)
    kth = exact_sims[:, -1:].to(s.device)
    return ((s >= kth - 1e-6) & valid).double().mean().item()


def certified_estimate(n: int, d: int, k: int) -> dict[str, float]:
    """Estimated seconds of exact search and of the certified graph on an (n, d) matrix, from the
    GEMM rates measured here (:mod:`embscope.geometry.probe`). Exact: the tile plan's estimate at
    :data:`EXACT_EFFICIENCY` of the rates. Certified, measured on the real 7B
    head (65,740 × 3584) and Gemma-3-270M (262,144 × 640) on 2 cores, AVX-512 and AVX2:

    - the join: its screen n²·(p + 1)/2 at p = min(128, d/4), at the faster of the float32 and
      bfloat16 rates, plus :data:`JOIN_ELEMENT_FLOPS` a matrix entry at the float32 rate (what
      the join spends outside its screen, on both classes about 8 of the real 7B join's 9.4-10.3 s);
    - the rows searched exactly, the sample's and the pivots' and 3 % of the others (measured:
      3.3 % and 3.1 %), m·n·d in the tile plan of an exact search;
    - on rows at most ``BASE_MAX_WIDTH`` wide (none above), the base graph: NN-descent, about
      90·k·n·d multiply-adds at 5 % of the float32 rate (32.5 s on Gemma-3, AVX-512)."""
    from embscope.geometry.certify import BASE_MAX_WIDTH, PIVOT_ROWS, SAMPLE_DRAWS
    from embscope.geometry.probe import gemm_rates, plan_tiles

    exact_s = plan_tiles(n * (n + 4096) / 2 * d, d, unsafe=1.0, redo_macs=n * n * d).estimate_seconds / EXACT_EFFICIENCY
    r32 = max(gemm_rates(d).rate("float32"), 1e-9) * 1e9
    p = min(128, max(8, d // 4))
    screen = gemm_rates(p + 1)  # the join screens in bfloat16 where the probe measures it faster
    join_s = (2 * n * n * (p + 1) / 2 / (max(screen.rate("float32"), screen.rate("bfloat16"), 1e-9) * 1e9)
              + JOIN_ELEMENT_FLOPS * n * d / r32)
    m = min(n, SAMPLE_DRAWS + PIVOT_ROWS + 0.03 * n)
    refine_s = plan_tiles(m * n * d, d, unsafe=0.0).estimate_seconds
    base_s = 2 * 90 * k * n * d / (0.05 * r32) if d <= BASE_MAX_WIDTH else 0.0  # random row reads
    return {"exact": exact_s, "certified": join_s + refine_s + base_s}


def resolve_method(x: "torch.Tensor", k: int, method: str) -> tuple[str, dict[str, dict[str, float]]]:
    """What ``method`` runs on ``x``: ``auto`` becomes ``exact`` or ``certified`` (module
    docstring); the others stay. Returns (method, the estimates weighed, if any)."""
    if method != "auto":
        return method, {}
    n, d = x.shape
    if x.device.type == "cuda" or n * n * d <= EXACT_BUDGET:
        return "exact", {}
    est = certified_estimate(n, d, k)
    pick = "certified" if est["certified"] < est["exact"] and d >= CERTIFIED_MIN_WIDTH else "exact"
    return pick, {"estimated_seconds": {m: round(v, 1) for m, v in est.items()}}


def fill_short_rows(xn: "torch.Tensor", sims: np.ndarray, ids: np.ndarray, k: int) -> int:
    """Search exactly every row an approximate graph left with fewer than ``k`` neighbours (id −1,
    similarity −inf), in place; returns how many. Example: HNSW's greedy search on a cluster of 3
    rows far from the rest can return 2 neighbours for each, not k."""
    import torch

    short = np.flatnonzero((ids < 0).any(axis=1) | ~np.isfinite(sims).all(axis=1))
    if len(short):
        v, i = exact_knn(xn, k, rows=torch.from_numpy(short), progress=False)
        sims[short], ids[short] = v.cpu().numpy(), i.cpu().numpy()
    return int(len(short))


def knn_graph(x: "torch.Tensor | np.ndarray", k: int = 10, *, method: str = "auto",
              device: str | None = None, cache_dir: str | Path | None = None, use_cache: bool = True,
              recall_sample: int = 1000, seed: int = 0, progress: bool = True) -> KnnGraph:
    """Cosine kNN graph of the rows of ``x`` (self excluded).

    Args:
        x: (n, d) matrix (torch tensor on any device, or numpy array).
        k: neighbours per row.
        method: one of :data:`METHODS`: ``auto`` (:func:`resolve_method`: ``exact`` or
            ``certified``, never an approximate graph), ``exact``, ``certified``
            (:func:`embscope.geometry.certify.certified_knn`, here without the scan's indicator
            context), or an approximate graph: ``hnsw`` or ``nndescent``.
        device: where to compute (default: ``x``'s device).
        cache_dir: cache folder (default ``$EMBSCOPE_CACHE/knn`` or ``~/.cache/embscope/knn``).
        recall_sample: rows with fp32 exact neighbours, on which recall is measured.
    Returns:
        a :class:`KnnGraph`.
    Example:
        >>> import torch
        >>> g = knn_graph(torch.eye(3)[[0, 0, 1, 2]], k=1, use_cache=False, progress=False)
        >>> g.neighbors[:2, 0].tolist()
        [1, 0]
    """
    import torch

    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    if x.ndim != 2:
        raise KnnError(f"kNN needs a 2-D matrix, got shape {tuple(x.shape)}: pass the (rows, dim) embedding")
    n, d = x.shape
    if not 1 <= k < n:
        raise KnnError(f"k={k} does not fit a matrix of {n} rows: choose 1 ≤ k < {n}")
    if method not in METHODS:
        raise KnnError(f"unknown kNN method {method!r}: use {', '.join(METHODS)}")
    if device is not None:
        x = x.to(device)

    chosen, weighed = resolve_method(x, k, method)
    if chosen == "certified":
        from embscope.geometry.certify import certified_knn

        return certified_knn(x, k, seed=seed, progress=progress, cache_dir=cache_dir, use_cache=use_cache,
                             weighed=weighed)
    path = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if use_cache:
        t_key = time.perf_counter()
        key_path = path / f"{matrix_key(x, k, method)}.npz"
        key_seconds = round(time.perf_counter() - t_key, 3)
        hit = knn_cache.load_graph(key_path, n, k)
        if hit is not None:
            hit.info.key_seconds = key_seconds
            return hit
    t0 = time.perf_counter()
    xn = normalize_rows(x)
    if not all_finite(xn):
        raise KnnError("the matrix holds NaN or infinite values: fix or drop those rows before a kNN scan")
    dev = xn.device
    g = torch.Generator().manual_seed(seed)
    sample = torch.randperm(n, generator=g)[:min(recall_sample, n)].to(dev)
    # k + RERANK_EXTRA on the CPU: the share of rows a bf16 screen could not decide is read off them
    wide = min(n - 1, k + RERANK_EXTRA) if dev.type == "cpu" else k
    ex_v, ex_i = exact_knn(xn, wide, rows=sample, dtype=torch.float32, progress=False)
    unsafe = _unsafe_share(ex_v, k, d)
    ex_v, ex_i = ex_v[:, :k], ex_i[:, :k]
    params: dict[str, Any] = {"device": str(dev), **weighed}
    sims, ids = _search(xn, k, chosen, unsafe, seed, progress, params)
    rec = recall_at_k(xn, sample, ids[sample], ex_v)
    info = KnnRecord(method=chosen, k=k, recall_at_k=round(rec, 4), recall_rows=len(sample),
                     seconds=round(time.perf_counter() - t0, 3), **params)
    graph = KnnGraph(neighbors=ids.cpu().numpy().astype(np.int64), sims=sims.cpu().numpy().astype(np.float32),
                     info=info)
    if use_cache:
        knn_cache.save_graph(key_path, graph)
        info.key_seconds = key_seconds
    return graph


def _search(xn: "torch.Tensor", k: int, method: str, unsafe: float, seed: int, progress: bool,
            params: dict[str, Any]):
    """``(sims, ids)``: the (n, k) graph of the unit rows ``xn`` by ``method`` (an approximate
    graph, its short rows searched exactly; or exact search in the measured tile plan), the build's
    details added to ``params``."""
    import torch

    n, d = xn.shape
    dev = xn.device
    if method in APPROXIMATE:
        if method == "hnsw":
            from embscope.geometry.hnsw import hnsw_graph

            sims_np, ids_np, details = hnsw_graph(xn, k)
        else:
            from embscope.geometry.knn_record import NnDescentRecord
            from embscope.geometry.nndescent import nn_descent

            sims_np, ids_np, nd = nn_descent(xn, k, seed=seed, progress=progress)
            details = {"nndescent": NnDescentRecord(**nd)}
        params.update(details, tile_dtype="float32")
        params["short_rows_searched"] = fill_short_rows(xn, sims_np, ids_np, k)
        return torch.from_numpy(sims_np).to(dev), torch.from_numpy(ids_np).to(dev)
    if dev.type == "cuda":
        dtype, threads = tile_dtype(dev), None
        params["tile_dtype"] = str(dtype).replace("torch.", "")
    else:
        from embscope.geometry.probe import plan_tiles

        plan = plan_tiles(n * (n + 4096) / 2 * d, d, unsafe=unsafe, redo_macs=n * n * d)  # a second screen: n·d a row
        dtype, threads = plan.torch_dtype(), plan.threads
        params["tile_dtype"] = plan.dtype
        params["tiles"] = plan.record()
    return exact_knn(xn, k, dtype=dtype, threads=threads, progress=progress)


def _unsafe_share(ex_v, k: int, d: int) -> float:
    """Share of the sample rows a bf16 screen keeping k + RERANK_EXTRA candidates could not decide
    (their last candidate within the bf16 error bound of the k-th: screened again), read
    off their exact similarities (r, k + RERANK_EXTRA). 1.0 when there are no extra columns."""
    import torch

    from embscope.geometry.exact import low_precision_bound

    if ex_v is None or not len(ex_v) or ex_v.shape[1] <= k:
        return 1.0
    v = ex_v.cpu().double()
    b = low_precision_bound(torch.bfloat16, d)
    return float((v[:, -1] + b >= v[:, k - 1]).double().mean())
