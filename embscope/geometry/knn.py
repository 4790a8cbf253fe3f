"""Cosine k-nearest-neighbour graph of the rows of an embedding matrix: dispatch, recall, cache.

For every row ``x_i`` of an (n, d) matrix we want the ``k`` rows ``j != i`` with the largest
cosine similarity ``cos(x_i, x_j) = x_i·x_j / (|x_i| |x_j|)``. Example: rows (1, 0), (1, 1),
(0, 1) with k = 1 give neighbours [1, 0, 1] and similarities [0.707, 0.707, 0.707].

Two methods:

``exact`` (:mod:`embscope.geometry.exact`)
    Tiled matmuls with a running top-k, device-agnostic (CPU or CUDA); 16-bit tiles on CUDA and
    on CPUs with native bf16, re-ranked in float32.

``ivf`` (:mod:`embscope.geometry.ivf`)
    An inverted file over spherical k-means lists, ``nprobe`` tuned on a sample to
    ``IVF_TUNE_RECALL``, each list scanned by one BLAS ``faiss.knn`` call for all the rows that
    probe it. Runs on the CPU (a CUDA matrix is copied there).

``auto`` picks exact on CUDA or when n·n·d ≤ ``EXACT_BUDGET``, else the IVF, falling back to exact
when the tuned IVF would scan more than ``IVF_MAX_SCAN`` of the matrix.

Recall@k of the returned graph is measured on ``recall_sample`` random rows against float32
exact search, tie-aware: a returned neighbour counts when its exact similarity is at least the
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
from embscope.geometry.knn_cache import CACHE_VERSION, default_cache_dir, matrix_key  # noqa: F401
from embscope.geometry import knn_cache

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: the public surface, including the helpers re-exported from ``exact`` and ``ivf``
__all__ = ["KnnError", "KnnGraph", "knn_graph", "recall_at_k", "matrix_key", "default_cache_dir",
           "exact_knn", "ivf_knn", "normalize_rows", "all_finite", "tile_dtype", "cpu_has_fast_bf16",
           "rerank", "EXACT_BUDGET", "IVF_MAX_SCAN", "IVF_TUNE_RECALL", "RERANK_EXTRA", "TILE_ELEMENTS",
           "NORM_BLOCK"]

#: CPU exact search is used when n·n·d is below this (≈10 s of bf16 matmul on 2 cores, ~3× more
#: in fp32); above it the IVF is tuned and used unless it would have to scan most of the matrix
EXACT_BUDGET = 2.0e12


class KnnError(EmbscopeError):
    """A matrix that the kNN graph cannot be built from."""


@dataclass
class KnnGraph:
    """A k-nearest-neighbour graph under cosine similarity (self excluded)."""

    #: (n, k) int64 row ids, most similar first
    neighbors: np.ndarray
    #: (n, k) float32 cosine similarity to each neighbour, descending (higher = closer)
    sims: np.ndarray
    #: ``exact`` or ``ivf``
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
        method: ``auto`` (exact on CUDA or when n·n·d ≤ EXACT_BUDGET, else tuned IVF with exact as
            fallback), ``exact`` or ``ivf``.
        device: where to compute (default: ``x``'s device).
        cache_dir: cache folder (default ``$EMBSCOPE_CACHE/knn`` or ``~/.cache/embscope/knn``).
        recall_sample: rows on which recall@k is measured against fp32 exact search.
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
    if method not in ("auto", "exact", "ivf"):
        raise KnnError(f"unknown kNN method {method!r}: use auto, exact or ivf")
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
    ex_v, ex_i = exact_knn(xn, k, rows=sample, dtype=torch.float32, progress=False)

    chosen = method
    if method == "auto":
        chosen = "exact" if dev.type == "cuda" or n * n * d <= EXACT_BUDGET else "ivf"
    params: dict[str, Any] = {"device": str(dev), "tile_dtype": str(dtype).replace("torch.", "")}
    sims = ids = None
    if chosen == "ivf":
        sims, ids, ivf_params = ivf_knn(xn, k, sample=sample, sample_ids=ex_i, seed=seed,
                                        max_scan=IVF_MAX_SCAN if method == "auto" else 1.0,
                                        progress=progress)
        params.update(ivf_params)
        params["tile_dtype"] = "float32"
        if sims is None:
            chosen = "exact"
            params["tile_dtype"] = str(dtype).replace("torch.", "")
            params["fallback"] = "ivf would scan too much; exact search used"
        else:
            sims, ids = sims.to(dev), ids.to(dev)
    if chosen == "exact":
        sims, ids = exact_knn(xn, k, dtype=dtype, progress=progress)
    rec = recall_at_k(xn, sample, ids[sample], ex_v)
    graph = KnnGraph(neighbors=ids.cpu().numpy().astype(np.int64), sims=sims.cpu().numpy().astype(np.float32),
                     method=chosen, k=k, recall_at_k=rec, recall_rows=len(sample),
                     seconds=time.perf_counter() - t0, cached=False, params=params)
    if use_cache:
        meta = {"method": graph.method, "k": k, "recall_at_k": graph.recall_at_k,
                "recall_rows": graph.recall_rows, "seconds": graph.seconds, "params": params}
        knn_cache.save(key_path, graph.neighbors, graph.sims, meta)
        graph.params["key_seconds"] = round(key_seconds, 3)
    return graph
