"""Approximate cosine top-k with an inverted file, scanned list by list with BLAS.

An inverted file (Jégou et al. 2011, "Product quantization for nearest neighbor search"; the IVF
scheme of FAISS): spherical k-means puts each row in one of ``nlist`` lists; a row looks for its
neighbours only in the ``nprobe`` lists whose centroids are closest to it. Work ≈ (scanned share)
× exact search.

The scan is turned inside out so that it runs as dense matmuls: for each list, every row that
probes it is multiplied by the list's members in cache-sized blocks (one BLAS sgemm each), and a
compiled pass (:func:`embscope.geometry.kernels.select_into`) inserts the few similarities above
each row's current (k + 1)-th best into its running top-(k + 1); the tile is never sorted. The
row itself is one of its own list's members (similarity 1) and is dropped at the end. Example: 400 000 rows, 632 lists,
nprobe 55 → each list is scanned by ≈ 35 000 rows at once, 632 lists × ≈ 40 blocks of matmuls instead of
400 000 × 55 small scans.

``nprobe`` is tuned before the scan on a random sample of rows whose exact neighbours are known:
a neighbour is found iff its list is probed, so the recall a given ``nprobe`` reaches is read off
directly from the rank of each true neighbour's list in its query's centroid order. The smallest
``nprobe`` reaching ``IVF_TUNE_RECALL`` is used.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from embscope.geometry.exact import TILE_ELEMENTS, normalize_rows
from embscope.progress import track

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: IVF is abandoned for exact search when the tuned nprobe would scan more than this share
IVF_MAX_SCAN = 0.35
#: recall the IVF tuning aims at on the sample (above the 0.95 goal, to leave room for sampling error)
IVF_TUNE_RECALL = 0.97
#: similarity elements per scan tile (512 Ki floats = 2 MiB: the tile stays in L2/L3 between the
#: matmul that writes it and the selection that reads it; 8× larger tiles ran 2-3× slower here)
TILE_CACHE = 1 << 19
#: k-means training rows per centroid (FAISS warns below 39; 64 keeps training a few seconds)
KMEANS_POINTS = 64


def _kmeans(xn: "torch.Tensor", nlist: int, seed: int):
    """Spherical k-means centroids (nlist, d) of the *centred* unit rows, FAISS ``Kmeans`` on
    ≤ KMEANS_POINTS·nlist sampled rows. Also returns the row mean ``mu`` (d,).

    Why centred: embedding matrices share a large common direction (the row mean); on raw rows the
    centroids that carry most of it attract far more than their share of rows, and a few giant
    lists make the scan nearly exhaustive. Ranking centroids by ``(x − mu)·c`` removes that pull;
    the recall tuning below keeps the result honest whatever the partition.
    """
    import faiss
    import torch

    g = torch.Generator().manual_seed(seed)
    mu = xn.mean(dim=0)
    take = torch.randperm(xn.shape[0], generator=g)[:KMEANS_POINTS * nlist].to(xn.device)
    sample = normalize_rows(xn[take] - mu)
    km = faiss.Kmeans(xn.shape[1], nlist, niter=10, spherical=True, seed=seed,
                      max_points_per_centroid=KMEANS_POINTS, verbose=False)
    km.train(np.ascontiguousarray(sample.float().cpu().numpy()))
    return torch.from_numpy(km.centroids).to(xn.device), mu


def _rank_lists(xn, cent, mu, p: int):
    """(n, p) ids of each row's ``p`` best centroids by ``(x − mu)·c``, best first."""
    import torch

    n = xn.shape[0]
    block = max(1024, TILE_ELEMENTS // 8 // max(1, cent.shape[0]))
    shift = (mu @ cent.T).unsqueeze(0)                                      # (1, nlist)
    out = [torch.topk(xn[s:s + block] @ cent.T - shift, p, dim=1).indices for s in range(0, n, block)]
    return torch.cat(out)


def _tune_nprobe(xn, cent, mu, assign, sample, sample_ids, tune_recall: float):
    """Smallest nprobe whose recall on ``sample`` (exact neighbour ids ``sample_ids`` (s, k))
    reaches ``tune_recall``; returns (nprobe, recall reached, mean scanned share)."""
    import torch

    n, nlist = xn.shape[0], cent.shape[0]
    order = torch.argsort(xn[sample] @ cent.T - mu @ cent.T, dim=1, descending=True)    # (s, nlist)
    rank_of = torch.empty_like(order)
    rank_of.scatter_(1, order, torch.arange(nlist, device=order.device).expand_as(order))
    nb_rank = torch.gather(rank_of, 1, assign[sample_ids])                  # (s, k)
    # recall(p) = share of true neighbours whose list ranks < p; first p reaching the target
    found = torch.bincount(nb_rank.reshape(-1), minlength=nlist).cumsum(0).double() / nb_rank.numel()
    nprobe = int(torch.searchsorted(found, torch.tensor([tune_recall - 1e-12], dtype=torch.float64))) + 1
    nprobe = min(nprobe, nlist)
    sizes = torch.bincount(assign, minlength=nlist).double()
    scanned = sizes[order[:, :nprobe]].sum(1).mean().item() / n
    return nprobe, found[nprobe - 1].item(), scanned


class IvfIndex:
    """Spherical k-means lists over unit rows ``xn`` (CPU float32), ready to tune and scan.

    ``nlist`` defaults to √n: √n lists of ≈√n rows balance centroid scoring (n·nlist·d) and
    k-means training against list scanning; finer lists scan less for the same recall but train
    quadratically longer.
    """

    def __init__(self, xn: "torch.Tensor", *, nlist: int | None = None, seed: int = 0):
        self.xn = xn.cpu().float().contiguous()
        n = self.xn.shape[0]
        self.nlist = nlist or max(16, int(round(math.sqrt(n))))
        self.cent, self.mu = _kmeans(self.xn, self.nlist, seed)
        self.assign = _rank_lists(self.xn, self.cent, self.mu, 1)[:, 0]                # (n,)

    def tune(self, sample, sample_ids, recall: float) -> tuple[int, float, float]:
        """(nprobe, recall reached, mean scanned share) for the smallest nprobe reaching ``recall``
        on ``sample`` rows with exact neighbour ids ``sample_ids``."""
        return _tune_nprobe(self.xn, self.cent, self.mu, self.assign, sample.cpu(), sample_ids.cpu(), recall)

    def scan(self, nprobe: int, keep: int, *, progress: bool = True):
        """Each row's best ``keep`` others among the lists it probes: (sims, ids) (n, keep) numpy,
        descending (-inf / -1 where fewer were scanned)."""
        import torch

        from embscope.geometry.kernels import select_into

        xn, n, nlist = self.xn, self.xn.shape[0], self.nlist
        probes = _rank_lists(xn, self.cent, self.mu, nprobe).numpy()                    # (n, nprobe)
        assign_np = self.assign.numpy()
        perm = np.argsort(assign_np, kind="stable")                                     # rows grouped by list
        bounds = np.concatenate([[0], np.cumsum(np.bincount(assign_np, minlength=nlist))])
        flat = probes.reshape(-1)
        qrows = np.argsort(flat, kind="stable") // nprobe                               # rows grouped by probed list
        qbounds = np.concatenate([[0], np.cumsum(np.bincount(flat, minlength=nlist))])
        del probes, flat
        m = keep + 1                                                                    # self is kept, dropped below
        best_v = np.full((n, m), -np.inf, dtype=np.float32)
        best_i = np.full((n, m), -1, dtype=np.int64)
        lists = range(nlist)
        for li in track(lists, total=nlist, description="kNN ivf", unit="lists") if progress else lists:
            members = perm[bounds[li]:bounds[li + 1]]
            if len(members) == 0:
                continue
            mem_t = xn[torch.from_numpy(members)].T.contiguous()                        # (d, L)
            step = max(64, min(1024, TILE_CACHE // len(members)))
            for s in range(qbounds[li], qbounds[li + 1], step):
                qs = qrows[s:min(s + step, qbounds[li + 1])]
                tile = xn[torch.from_numpy(qs)] @ mem_t                                # (q, L) fp32
                select_into(tile.numpy(), qs, members, best_v, best_i)
        # Drop each row's own id (or, when a tie pushed it out, its (keep+1)-th candidate).
        drop = best_i == np.arange(n)[:, None]
        drop[~drop.any(1), -1] = True
        return best_v[~drop].reshape(n, keep), best_i[~drop].reshape(n, keep)


def ivf_knn(xn: "torch.Tensor", k: int, *, sample: "torch.Tensor", sample_ids, seed: int = 0,
            nlist: int | None = None, tune_recall: float = IVF_TUNE_RECALL,
            max_scan: float = IVF_MAX_SCAN, keep: int | None = None, progress: bool = True):
    """IVF search of unit rows ``xn`` (n, d) on the CPU (see the module docstring).

    ``sample`` (s,) row ids with exact neighbour ids ``sample_ids`` (s, k), used to tune nprobe.
    Returns (sims (n, keep) float32, ids (n, keep) int64, params) as torch tensors, or
    (None, None, params) when the tuned ``nprobe`` would scan more than ``max_scan`` of the matrix
    (exact search is then cheaper). ``keep`` defaults to ``k``.
    """
    import torch

    index = IvfIndex(xn, nlist=nlist, seed=seed)
    nprobe, tuned, scanned = index.tune(sample, sample_ids, tune_recall)
    params: dict[str, Any] = {"nlist": index.nlist, "nprobe": nprobe, "scanned_share": round(scanned, 4),
                              "tuned_recall": round(tuned, 4), "scan": "blas+numba per list"}
    if scanned > max_scan:
        return None, None, params
    v, i = index.scan(nprobe, keep or k, progress=progress)
    return torch.from_numpy(v), torch.from_numpy(i), params
