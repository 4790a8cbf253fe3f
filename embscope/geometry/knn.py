"""Cosine k-nearest-neighbour graph of the rows of an embedding matrix: dispatch, recall, cache.

For every row ``x_i`` of an (n, d) matrix we want the ``k`` rows ``j != i`` with the largest
cosine similarity ``cos(x_i, x_j) = x_i·x_j / (|x_i| |x_j|)``. Example: rows (1, 0), (1, 1),
(0, 1) with k = 1 give neighbours [1, 0, 1] and similarities [0.707, 0.707, 0.707].

Methods:

``exact`` (:mod:`embscope.geometry.exact`)
    Tiled matmuls with a running top-k, device-agnostic (CPU or CUDA); 16-bit tiles on CUDA and
    on CPUs with native bf16, re-ranked in float32; in float32 each pair is computed once.

``ivf`` (:mod:`embscope.geometry.ivf`)
    An inverted file over spherical k-means lists, ``nprobe`` tuned on a sample to
    ``IVF_TUNE_RECALL``, each list scanned with BLAS for all the rows that probe it. CPU only
    (a CUDA matrix is copied there). Fast when the rows form clusters.

``refined`` (:mod:`embscope.geometry.refine`)
    A cheap IVF graph (recall ≈ 0.6) improved by "neighbours of neighbours" passes until the
    tuning sample's recall reaches 0.95. Fast on diffuse rows (Gemma-3, GloVe), where the IVF
    alone must scan half the matrix.

``hnsw`` (:mod:`embscope.geometry.hnsw`)
    FAISS's HNSW graph: cost about linear in n, good on narrow or clustered rows (GloVe), poor on
    wide diffuse rows with hubs (a real 7B LM head).

``auto`` picks exact on CUDA or when n·n·d ≤ ``EXACT_BUDGET``. Otherwise it times exact search on
the recall sample (so exact's cost is measured, not assumed), builds a pilot HNSW graph on a
subset and measures how far the indicators it would feed are from exact ones
(:func:`embscope.geometry.hnsw.pilot`), estimates the work of ``ivf`` and ``refined`` from the
tuning sample, and runs the cheapest plan that qualifies (:mod:`embscope.geometry.approx`), or
exact search when every plan would cost more than a third of it.

Recall@k of the returned graph is measured against float32 exact search on the held-out half of
``recall_sample`` random rows (the other half tunes the approximate methods), tie-aware: a returned neighbour counts when its exact similarity is at least the
k-th exact similarity (minus 1e-6), so duplicated rows do not count as misses.

Zero rows have no direction: their similarity to everything is 0 and their neighbours are
arbitrary rows (callers flag zero rows separately).

Results are cached as ``<cache_dir>/<key>.npz`` (no pickle), keyed by a hash of every byte of the
matrix with ``k`` and the method, and validated when read (:mod:`embscope.geometry.knn_cache`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from embscope.errors import EmbscopeError
from embscope.geometry.exact import (NORM_BLOCK, RERANK_EXTRA, TILE_ELEMENTS, all_finite,  # noqa: F401
                                      cpu_has_fast_bf16, exact_knn, normalize_rows, rerank, tile_dtype)
from embscope.geometry.ivf import IVF_MAX_SCAN, IVF_TUNE_RECALL, ivf_knn  # noqa: F401
from embscope.geometry.knn_cache import default_cache_dir, matrix_key  # noqa: F401
from embscope.geometry import knn_cache

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: the public surface, including the helpers re-exported from ``exact`` and ``ivf``
__all__ = ["KnnError", "KnnGraph", "knn_graph", "recall_at_k", "matrix_key", "default_cache_dir",
           "exact_knn", "ivf_knn", "normalize_rows", "all_finite", "tile_dtype", "cpu_has_fast_bf16",
           "rerank", "EXACT_BUDGET", "IVF_MAX_SCAN", "IVF_TUNE_RECALL", "RERANK_EXTRA", "TILE_ELEMENTS",
           "NORM_BLOCK"]

#: CPU exact search is used when n·n·d is below this (the symmetric fp32 search does n·n·d/2
#: multiply-adds: ≈30 s on 2 AVX2 cores at 65 GFLOPS); above it the IVF is tuned and used unless it
#: would have to scan most of the matrix
EXACT_BUDGET = 2.0e12
#: the values ``method`` accepts
METHODS = ("auto", "exact", "ivf", "refined", "hnsw")


class KnnError(EmbscopeError):
    """A matrix that the kNN graph cannot be built from."""


@dataclass
class KnnGraph:
    """A k-nearest-neighbour graph under cosine similarity (self excluded)."""

    #: (n, k) int64 row ids, most similar first
    neighbors: np.ndarray
    #: (n, k) float32 cosine similarity to each neighbour, descending (higher = closer)
    sims: np.ndarray
    #: ``exact``, ``ivf`` or ``refined``
    method: str
    k: int
    #: recall@k against fp32 exact search on ``recall_rows`` random rows (1.0 = perfect)
    recall_at_k: float
    #: rows the recall was measured on
    recall_rows: int
    #: seconds spent building the graph (the build that was cached, when ``cached``)
    seconds: float
    #: whether the graph was read from the cache
    cached: bool = False
    #: method details: device, tile dtype, nlist, nprobe, scanned share
    params: dict[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """JSON-able summary (no arrays)."""
        return {"method": self.method, "k": self.k, "recall_at_k": round(float(self.recall_at_k), 4),
                "recall_rows": self.recall_rows, "seconds": round(float(self.seconds), 3),
                "cached": self.cached, **self.params}


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


def knn_graph(x: "torch.Tensor | np.ndarray", k: int = 10, *, method: str = "auto",
              device: str | None = None, cache_dir: str | Path | None = None, use_cache: bool = True,
              recall_sample: int = 1000, seed: int = 0, progress: bool = True) -> KnnGraph:
    """Cosine kNN graph of the rows of ``x`` (self excluded).

    Args:
        x: (n, d) matrix (torch tensor on any device, or numpy array).
        k: neighbours per row.
        method: ``auto`` (exact on CUDA or when n·n·d ≤ EXACT_BUDGET, else the cheapest of the
            tuned IVF, the refined IVF and HNSW when its pilot qualifies, or exact when all cost
            more), ``exact``, ``ivf``, ``refined`` or ``hnsw``.
        device: where to compute (default: ``x``'s device).
        cache_dir: cache folder (default ``$EMBSCOPE_CACHE/knn`` or ``~/.cache/embscope/knn``).
        recall_sample: rows with fp32 exact neighbours: half tune, half (held out) measure recall.
    Returns:
        a :class:`KnnGraph`.
    Example:
        >>> g = knn_graph(torch.eye(3)[[0, 0, 1, 2]], k=1, use_cache=False)   # doctest: +SKIP
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

    path = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if use_cache:
        t_key = time.perf_counter()
        key_path = path / f"{matrix_key(x, k, method)}.npz"
        key_seconds = time.perf_counter() - t_key
        hit = knn_cache.load(key_path, n, k)
        if hit is not None:
            nb, sm, meta = hit
            return KnnGraph(neighbors=nb, sims=sm, method=str(meta.get("method")), k=k,
                            recall_at_k=float(meta.get("recall_at_k", float("nan"))),
                            recall_rows=int(meta.get("recall_rows", 0)), seconds=float(meta.get("seconds", 0.0)),
                            cached=True, params={**meta.get("params", {}), "key_seconds": round(key_seconds, 3)})

    t0 = time.perf_counter()
    xn = normalize_rows(x)
    if not all_finite(xn):
        raise KnnError("the matrix holds NaN or infinite values: fix or drop those rows before a kNN scan")
    dev = xn.device
    dtype = tile_dtype(dev)
    g = torch.Generator().manual_seed(seed)
    sample = torch.randperm(n, generator=g)[:min(recall_sample, n)].to(dev)
    t_sample = time.perf_counter()
    ex_v, ex_i = exact_knn(xn, k, rows=sample, dtype=torch.float32, progress=False)
    t_sample = time.perf_counter() - t_sample
    # the first half tunes the approximate methods, the second (held-out) half measures recall
    half = max(1, len(sample) // 2) if len(sample) > 1 else len(sample)
    tune, held = sample[:half], sample[half:] if len(sample) > 1 else sample

    chosen = method
    if method == "auto":
        chosen = "exact" if dev.type == "cuda" or n * n * d <= EXACT_BUDGET else "approx"
    params: dict[str, Any] = {"device": str(dev), "tile_dtype": str(dtype).replace("torch.", "")}
    sims = ids = None
    hnsw_cost = None
    if chosen == "approx":  # is HNSW fit for these rows? a pilot on a subset says (see geometry.hnsw)
        from embscope.geometry.hnsw import estimate_seconds, pilot

        pil = pilot(xn, k, tune.cpu().numpy(), seed=seed)
        params["hnsw_pilot"] = {key: v for key, v in pil.items() if key != "ok"}
        # exact search of all rows ≈ the sample's time × n / sample, halved by symmetry
        exact_s = t_sample * n / max(1, len(sample)) / 2
        params["exact_estimate_seconds"] = round(exact_s, 1)
        if pil["ok"]:
            hnsw_cost = estimate_seconds(pil, n) / max(exact_s, 1e-9)
    if chosen in ("approx", "ivf", "refined", "hnsw"):
        from embscope.geometry.approx import approx_knn

        sims_np, ids_np, ap = approx_knn(xn, k, tune_rows=tune, tune_ids=ex_i[:half], tune_kth=ex_v[:half, -1],
                                         method="auto" if chosen == "approx" else chosen, seed=seed,
                                         progress=progress, hnsw_cost=hnsw_cost)
        chosen = ap.pop("method")
        params.update(ap)
        params["tile_dtype"] = "float32"
        if sims_np is None:
            chosen = "exact"
            params["tile_dtype"] = str(dtype).replace("torch.", "")
            params["fallback"] = "approximate plans cost more than exact search; exact search used"
        else:
            sims, ids = torch.from_numpy(sims_np).to(dev), torch.from_numpy(ids_np).to(dev)
    if chosen == "exact":
        sims, ids = exact_knn(xn, k, dtype=dtype, progress=progress)
    held_pos = slice(half, None) if len(sample) > 1 else slice(None)
    rec = recall_at_k(xn, held, ids[held], ex_v[held_pos])
    graph = KnnGraph(neighbors=ids.cpu().numpy().astype(np.int64), sims=sims.cpu().numpy().astype(np.float32),
                     method=chosen, k=k, recall_at_k=rec, recall_rows=len(held),
                     seconds=time.perf_counter() - t0, cached=False, params=params)
    if use_cache:
        meta = {"method": graph.method, "k": k, "recall_at_k": graph.recall_at_k,
                "recall_rows": graph.recall_rows, "seconds": graph.seconds, "params": params}
        knn_cache.save(key_path, graph.neighbors, graph.sims, meta)
        graph.params["key_seconds"] = round(key_seconds, 3)
    return graph
