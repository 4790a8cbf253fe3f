"""Cosine k-nearest-neighbour graph of the rows of an embedding matrix.

For every row ``x_i`` of an (n, d) matrix we want the ``k`` rows ``j != i`` with the largest
cosine similarity ``cos(x_i, x_j) = x_i·x_j / (|x_i| |x_j|)``. Example: rows (1, 0), (1, 1),
(0, 1) with k = 1 give neighbours [1, 0, 1] and similarities [0.707, 0.707, 0.707].

Two methods, one tiled code path each, both device-agnostic (CPU or CUDA tensors):

``exact``
    Row block × column tile matmuls with a running top-k per row; an n×n matrix is never built.
    On CUDA the tiles are float16 (fp32 accumulation); on a CPU with native bf16 instructions
    (``avx512_bf16``/``amx_bf16``) bfloat16 (≈3× the fp32 rate here); else float32. When the tiles
    are 16-bit, ``k + RERANK_EXTRA`` candidates are kept and re-scored in float32, so the result
    equals the fp32 one except for near-ties inside one bf16 step (≈0.4 %).

``ivf``
    An inverted file (Jégou et al. 2011, "Product quantization for nearest neighbor search";
    the IVF scheme of FAISS): spherical k-means puts each row in one of ``nlist`` lists; a row
    looks for its neighbours only in the ``nprobe`` lists whose centroids are closest to it. The
    scan is turned inside out so that it runs as dense matmuls: for each list, gather every row
    that probes it and multiply that block by the list's members. Work ≈ (scanned share) × exact.
    ``nprobe`` is tuned before the scan on a random sample of rows: for each sampled row the exact
    neighbours are known, so the recall that a given ``nprobe`` will reach is read off directly
    (a neighbour is found iff its list is probed). The smallest ``nprobe`` reaching
    ``IVF_TUNE_RECALL`` is used.

Recall@k of the returned graph is measured on ``recall_sample`` random rows against float32
exact search, tie-aware: a returned neighbour counts when its exact similarity is at least the
k-th exact similarity (minus 1e-6), so duplicated rows do not count as misses.

Zero rows have no direction: their similarity to everything is 0 and their neighbours are
arbitrary rows (callers flag zero rows separately).

Results are cached as ``<cache_dir>/<key>.npz`` (no pickle) where the key hashes the matrix's
shape, dtype, a strided sample of its values, ``k`` and the method.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from embscope.errors import EmbscopeError
from embscope.progress import track

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: candidates kept beyond k when tiles are 16-bit, re-scored in fp32 (bf16 has an 8-bit mantissa:
#: similarities are off by up to ~0.004; dense vocabularies such as SmolLM2's have dozens of rows
#: within that of the k-th neighbour: 8 extra gave recall 0.992 there, 32 gives ~1.0)
RERANK_EXTRA = 32
#: CPU exact search is used when n·n·d is below this (≈10 s of bf16 matmul on 2 cores, ~3× more
#: in fp32); above it the IVF is tuned and used unless it would have to scan most of the matrix
EXACT_BUDGET = 2.0e12
#: IVF is abandoned for exact search when the tuned nprobe would scan more than this share
IVF_MAX_SCAN = 0.35
#: recall the IVF tuning aims at on the sample (above the 0.95 goal, to leave room for sampling error)
IVF_TUNE_RECALL = 0.97
#: elements per similarity tile (64 Mi floats = 256 MiB in fp32)
TILE_ELEMENTS = 1 << 26
CACHE_VERSION = 1


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
# helpers


def cpu_has_fast_bf16() -> bool:
    """True when the CPU multiplies bfloat16 natively (AVX512-BF16 or AMX), so bf16 tiles pay."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        pass
    return False


def tile_dtype(device: "torch.device | str"):
    """Matmul dtype for similarity tiles on ``device`` (see the module docstring)."""
    import torch

    if torch.device(device).type == "cuda":
        return torch.float16
    return torch.bfloat16 if cpu_has_fast_bf16() else torch.float32


#: rows per block when normalising or checking a matrix in place
NORM_BLOCK = 16384


def normalize_rows(x: "torch.Tensor") -> "torch.Tensor":
    """Rows scaled to unit L2 norm in float32; zero rows stay zero. (n, d) -> (n, d).

    One float32 copy of ``x`` is made and scaled in place, block by block (a 7B vocabulary is
    2.2 GB in float32; a second temporary would double that). ``x`` itself is never modified.
    """
    import torch

    y = x.to(torch.float32, copy=True)
    for s in range(0, y.shape[0], NORM_BLOCK):
        blk = y[s:s + NORM_BLOCK]
        norms = torch.linalg.vector_norm(blk, dim=1, keepdim=True)
        blk.div_(torch.where(norms > 0, norms, torch.ones_like(norms)))
    return y


def all_finite(x: "torch.Tensor") -> bool:
    """Whether every entry is finite, checked block by block (no (n, d) bool temporary)."""
    import torch

    return all(bool(torch.isfinite(x[s:s + NORM_BLOCK]).all()) for s in range(0, x.shape[0], NORM_BLOCK))


def _merge_topk(best_v, best_i, new_v, new_i, m: int):
    """Keep the ``m`` largest of two (rows, ·) candidate sets; returns (values, ids)."""
    import torch

    v = torch.cat([best_v, new_v], dim=1)
    i = torch.cat([best_i, new_i], dim=1)
    top_v, pos = torch.topk(v, min(m, v.shape[1]), dim=1)
    return top_v, torch.gather(i, 1, pos)


def rerank(xn: "torch.Tensor", rows: "torch.Tensor", cand: "torch.Tensor", k: int):
    """Exact fp32 cosine of each row against its candidates; keep the best ``k``.

    ``xn`` (n, d) unit rows; ``rows`` (r,) ids; ``cand`` (r, m) candidate ids (-1 = none).
    Returns (sims (r, k) float32, ids (r, k) int64).
    """
    import torch

    r, m = cand.shape
    d = xn.shape[1]
    block = max(1, TILE_ELEMENTS // max(1, m * d) // 4)
    out_v, out_i = [], []
    for s in range(0, r, block):
        c = cand[s:s + block]
        valid = c >= 0
        cv = xn[c.clamp_min(0)]                                   # (b, m, d)
        q = xn[rows[s:s + block]].unsqueeze(2)                   # (b, d, 1)
        sims = torch.bmm(cv, q).squeeze(2)                        # (b, m)
        sims = torch.where(valid, sims, torch.full_like(sims, -math.inf))
        v, pos = torch.topk(sims, k, dim=1)
        out_v.append(v)
        out_i.append(torch.gather(c, 1, pos))
    return torch.cat(out_v), torch.cat(out_i)


def _mask_self(tile, row_ids, col_ids):
    """Set tile[a, b] = -inf where row_ids[a] == col_ids[b] (a row is not its own neighbour).

    ``col_ids`` must be increasing (a slice of arange, or one list's members in id order), so the
    match of each row is found by binary search: O(rows · log cols), not O(rows · cols).
    """
    import torch

    pos = torch.searchsorted(col_ids, row_ids).clamp_max(len(col_ids) - 1)
    hit = col_ids[pos] == row_ids
    tile[torch.nonzero(hit).squeeze(1), pos[hit]] = -math.inf
    return tile


# ----------------------------------------------------------------------------------------------
# exact


def exact_knn(xn: "torch.Tensor", k: int, *, rows: "torch.Tensor | None" = None, dtype=None,
              progress: bool = True):
    """Exact top-``k`` cosine neighbours of ``rows`` (default: all) among all rows of unit ``xn``.

    Tiled: a block of query rows × a tile of columns at a time, a running top-m per row
    (m = k, or k + RERANK_EXTRA when ``dtype`` is 16-bit, followed by an fp32 re-rank).
    Returns (sims (r, k) float32, ids (r, k) int64), most similar first.
    """
    import torch

    n, d = xn.shape
    dev = xn.device
    dtype = dtype or torch.float32
    rows = torch.arange(n, device=dev) if rows is None else rows.to(dev)
    low = dtype != torch.float32
    m = min(n - 1, k + RERANK_EXTRA if low else k)
    xt = xn.to(dtype)
    n_cols = n if n * 1024 <= TILE_ELEMENTS else max(4096, TILE_ELEMENTS // 1024)
    block = max(64, min(4096, TILE_ELEMENTS // n_cols))
    cols = torch.arange(n, device=dev)
    out_v, out_i = [], []
    starts = range(0, len(rows), block)
    it = track(starts, total=len(starts), description="kNN exact") if progress else starts
    for s in it:
        r_ids = rows[s:s + block]
        q = xt[r_ids]                                              # (b, d)
        best_v = torch.full((len(r_ids), 0), -math.inf, device=dev)
        best_i = torch.zeros((len(r_ids), 0), dtype=torch.long, device=dev)
        for c0 in range(0, n, n_cols):
            c_ids = cols[c0:c0 + n_cols]
            tile = (q @ xt[c0:c0 + n_cols].T).float()             # (b, cols)
            _mask_self(tile, r_ids, c_ids)
            v, pos = torch.topk(tile, min(m, tile.shape[1]), dim=1)
            best_v, best_i = _merge_topk(best_v, best_i, v, c_ids[pos], m)
        if low:
            best_v, best_i = rerank(xn, r_ids, best_i, min(k, m))
        else:
            best_v, best_i = best_v[:, :k], best_i[:, :k]
        out_v.append(best_v)
        out_i.append(best_i)
    return torch.cat(out_v), torch.cat(out_i)


# ----------------------------------------------------------------------------------------------
# ivf


def _kmeans(xn: "torch.Tensor", nlist: int, seed: int):
    """Spherical k-means centroids (nlist, d) of the *centred* unit rows, FAISS ``Kmeans`` on
    ≤ 64·nlist sampled rows. Also returns the row mean ``mu`` (d,).

    Why centred: embedding matrices share a large common direction (the row mean); on raw rows the
    centroids that carry most of it attract far more than their share of rows, and a few giant
    lists make the scan nearly exhaustive. Ranking centroids by ``(x − mu)·c`` removes that pull;
    the recall tuning below keeps the result honest whatever the partition.
    """
    import faiss
    import torch

    g = torch.Generator().manual_seed(seed)
    mu = xn.mean(dim=0)
    take = torch.randperm(xn.shape[0], generator=g)[:64 * nlist].to(xn.device)
    sample = normalize_rows(xn[take] - mu)
    km = faiss.Kmeans(xn.shape[1], nlist, niter=10, spherical=True, seed=seed,
                      max_points_per_centroid=64, verbose=False)
    km.train(np.ascontiguousarray(sample.float().cpu().numpy()))
    return torch.from_numpy(km.centroids).to(xn.device), mu


def _rank_lists(xn, cent, mu, p: int, dtype):
    """(n, p) ids of each row's ``p`` best centroids by ``(x − mu)·c``, best first."""
    import torch

    n = xn.shape[0]
    block = max(1024, TILE_ELEMENTS // 8 // max(1, cent.shape[0]))
    ct = cent.to(dtype)
    shift = (mu @ cent.T).unsqueeze(0)                                      # (1, nlist)
    out = [torch.topk((xn[s:s + block].to(dtype) @ ct.T).float() - shift, p, dim=1).indices
           for s in range(0, n, block)]
    return torch.cat(out)


def ivf_knn(xn: "torch.Tensor", k: int, *, sample: "torch.Tensor", sample_ids, dtype,
            seed: int = 0, nlist: int | None = None, tune_recall: float = IVF_TUNE_RECALL,
            max_scan: float = IVF_MAX_SCAN, progress: bool = True):
    """IVF search (see the module docstring). Returns (sims, ids, params) or None when the tuned
    ``nprobe`` would scan more than ``max_scan`` of the matrix (exact search is then cheaper).

    ``sample`` (s,) row ids with exact neighbour ids ``sample_ids`` (s, k), used to tune nprobe.
    """
    import torch

    n, d = xn.shape
    dev = xn.device
    # √n lists of ≈√n rows balance centroid scoring (n·nlist·d) against list scanning.
    nlist = nlist or max(16, int(round(math.sqrt(n))))
    cent, mu = _kmeans(xn, nlist, seed)
    assign = _rank_lists(xn, cent, mu, 1, dtype)[:, 0]                         # (n,)
    # Tune: rank of each true neighbour's list in its query's centroid order.
    order = torch.argsort(xn[sample] @ cent.T - mu @ cent.T, dim=1, descending=True)    # (s, nlist)
    rank_of = torch.empty_like(order)
    rank_of.scatter_(1, order, torch.arange(nlist, device=dev).expand_as(order))
    nb_rank = torch.gather(rank_of, 1, assign[sample_ids])                  # (s, k)
    sizes = torch.bincount(assign, minlength=nlist).to(torch.float64)
    nprobe = nlist
    for p in range(1, nlist + 1):
        if (nb_rank < p).double().mean().item() >= tune_recall:
            nprobe = p
            break
    scanned = sizes[order[:, :nprobe]].sum(1).mean().item() / n
    params = {"nlist": nlist, "nprobe": nprobe, "scanned_share": round(scanned, 4),
              "tuned_recall": round((nb_rank < nprobe).double().mean().item(), 4)}
    if scanned > max_scan:
        return None, None, params

    probes = _rank_lists(xn, cent, mu, nprobe, dtype)                           # (n, nprobe)
    perm = torch.argsort(assign, stable=True)                                          # rows grouped by list
    bounds = torch.cat([torch.zeros(1, dtype=torch.long, device=dev), torch.cumsum(sizes.long().to(dev), 0)])
    flat_list = probes.reshape(-1)
    flat_row = torch.arange(n, device=dev).repeat_interleave(nprobe)
    qorder = torch.argsort(flat_list)
    qrows = flat_row[qorder]
    qbounds = torch.cat([torch.zeros(1, dtype=torch.long, device=dev),
                         torch.cumsum(torch.bincount(flat_list, minlength=nlist), 0)])
    low = dtype != torch.float32
    m = min(n - 1, k + RERANK_EXTRA if low else k)
    best_v = torch.full((n, m), -math.inf, device=dev)
    best_i = torch.full((n, m), -1, dtype=torch.long, device=dev)
    xt = xn.to(dtype)
    bounds_l, qbounds_l = bounds.tolist(), qbounds.tolist()
    lists = range(nlist)
    it = track(lists, total=nlist, description="kNN ivf") if progress else lists
    for li in it:
        members = perm[bounds_l[li]:bounds_l[li + 1]]
        qs_all = qrows[qbounds_l[li]:qbounds_l[li + 1]]
        if len(members) == 0 or len(qs_all) == 0:
            continue
        mem_t = xt[members]                                                  # (L, d)
        mm = min(m, len(members))
        step = max(64, TILE_ELEMENTS // max(1, len(members)))
        for s in range(0, len(qs_all), step):
            qs = qs_all[s:s + step]
            tile = (xt[qs] @ mem_t.T).float()                                # (q, L)
            _mask_self(tile, qs, members)
            v, pos = torch.topk(tile, mm, dim=1)
            best_v[qs], best_i[qs] = _merge_topk(best_v[qs], best_i[qs], v, members[pos], m)
    if low:
        sims, ids = rerank(xn, torch.arange(n, device=dev), best_i, k)
    else:
        sims, ids = best_v[:, :k], best_i[:, :k]
    return sims, ids, params


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


def matrix_key(x: "torch.Tensor", k: int, method: str) -> str:
    """Hash of shape, dtype, ~1 M strided values, first and last rows, ``k`` and ``method``."""
    import torch

    h = hashlib.sha256()
    h.update(json.dumps([list(x.shape), str(x.dtype), k, method, CACHE_VERSION]).encode())
    flat = x.reshape(-1)
    stride = max(1, flat.numel() // (1 << 20))
    parts = [flat[::stride], x[0].reshape(-1), x[-1].reshape(-1)]
    for p in parts:
        p = p.detach()
        if p.dtype == torch.bfloat16:
            p = p.view(torch.int16)
        h.update(np.ascontiguousarray(p.cpu().numpy()).tobytes())
    return h.hexdigest()[:32]


def default_cache_dir() -> Path:
    base = os.environ.get("EMBSCOPE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "embscope")
    return Path(base) / "knn"


def _load_cached(path: Path) -> KnnGraph | None:
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            return KnnGraph(neighbors=z["neighbors"], sims=z["sims"], method=meta["method"],
                            k=meta["k"], recall_at_k=meta["recall_at_k"],
                            recall_rows=meta["recall_rows"], seconds=meta["seconds"],
                            cached=True, params=meta.get("params", {}))
    except (OSError, KeyError, ValueError):
        return None  # unreadable or foreign cache file: rebuild


def _save_cached(path: Path, g: KnnGraph) -> None:
    meta = {"method": g.method, "k": g.k, "recall_at_k": g.recall_at_k, "recall_rows": g.recall_rows,
            "seconds": g.seconds, "params": g.params}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp.npz")
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, neighbors=g.neighbors, sims=g.sims, meta=np.array(json.dumps(meta)))
        os.replace(tmp, path)
    except OSError:
        pass  # a cache that cannot be written only costs time on the next run


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
    key_path = path / f"{matrix_key(x, k, method)}.npz"
    if use_cache and key_path.exists():
        g = _load_cached(key_path)
        if g is not None and g.neighbors.shape == (n, k):
            return g

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
        # IVF tiles are small and scan a few percent of the matrix: fp32 there costs little and
        # avoids the (n, k + RERANK_EXTRA, d) gather of the re-rank, which would dominate.
        ivf_dtype = dtype if dev.type == "cuda" else torch.float32
        sims, ids, ivf_params = ivf_knn(xn, k, sample=sample, sample_ids=ex_i, dtype=ivf_dtype, seed=seed,
                                        max_scan=IVF_MAX_SCAN if method == "auto" else 1.0,
                                        progress=progress)
        params.update(ivf_params)
        params["tile_dtype"] = str(ivf_dtype).replace("torch.", "")
        if sims is None:
            chosen = "exact"
            params["tile_dtype"] = str(dtype).replace("torch.", "")
            params["fallback"] = "ivf would scan too much; exact search used"
    if chosen == "exact":
        sims, ids = exact_knn(xn, k, dtype=dtype, progress=progress)
    rec = recall_at_k(xn, sample, ids[sample], ex_v)
    graph = KnnGraph(neighbors=ids.cpu().numpy().astype(np.int64), sims=sims.cpu().numpy().astype(np.float32),
                     method=chosen, k=k, recall_at_k=rec, recall_rows=len(sample),
                     seconds=time.perf_counter() - t0, cached=False, params=params)
    if use_cache:
        _save_cached(key_path, graph)
    return graph
