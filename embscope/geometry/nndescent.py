"""An approximate cosine kNN graph by NN-descent from a random-projection forest.

NN-descent (Dong, Moses & Li 2011, "Efficient k-nearest neighbor graph construction for generic
similarity measures") improves a graph by local joins: "a neighbour of my neighbour is likely my
neighbour", so each row scores the neighbours and reverse neighbours of its own neighbours and
reverse neighbours and keeps the best (:func:`embscope.geometry.kernels.refine`; a pair is scored
only when one of its two edges is new since the last pass). It starts, as pynndescent does
(McInnes, github.com/lmcinnes/pynndescent), from the leaves of random-projection trees (Dasgupta
& Freund 2008, "Random projection trees and low dimensional manifolds"): each tree splits its
rows in two halves along the direction between two random rows of the node, recursively, until
a node holds at most :data:`LEAF` rows, and every pair within a leaf is scored. Work: about
``trees·n·LEAF/2·d`` multiply-adds for the forest and ``n·(2k)²·d`` per pass, linear in n (exact
search is n²·d/2).

Every similarity in the graph is a real row's float32 cosine, so each list is a lower bound of
the exact list, rank by rank: what :mod:`embscope.geometry.certify` needs from its base graph
(the graph's quality decides only how many rows it searches exactly). Measured on Gemma-3-270M's
262,144 × 640 rows (bench/README.md): see :data:`TREES`.

Deterministic for a seed: the trees' directions come from the seed, each leaf's pairs are scored
by one thread, and each row's list is written by one thread per pass (ties keep the earlier id).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from embscope.progress import track

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: rows per leaf of a random-projection tree at most (every pair within a leaf is scored)
LEAF = 64
#: trees of the initial forest
TREES = 4
#: local-join passes at most
MAX_PASSES = 6
#: passes stop when one inserts fewer than this share of n·k new neighbours (pynndescent's delta)
MIN_UPDATES = 0.001


def rp_leaves(xs: np.ndarray, leaf: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One random-projection tree: ``(order, bounds)``, the row ids in leaf order and the leaves'
    boundaries (leaf j is ``order[bounds[j]:bounds[j + 1]]``, at most ``leaf`` rows each). Each
    node is split at the median of its rows' projections on the difference of two of its rows.
    Example: 1,000 rows with leaf 64 → 16 leaves of 62 or 63 rows."""
    from embscope.geometry.kernels import project_rows

    n = len(xs)
    order = np.arange(n, dtype=np.int64)
    bounds = np.array([0, n], dtype=np.int64)
    while True:
        sizes = np.diff(bounds)
        split = np.flatnonzero(sizes > leaf)
        if not len(split):
            return order, bounds
        starts, lens = bounds[split], sizes[split]
        a = starts + (rng.random(len(split)) * lens).astype(np.int64)
        b = starts + (rng.random(len(split)) * lens).astype(np.int64)
        w = np.ascontiguousarray(xs[order[a]] - xs[order[b]])
        node_of = np.full(len(sizes), -1, dtype=np.int64)
        node_of[split] = np.arange(len(split))
        node = np.repeat(node_of, sizes)                       # position -> the node it splits, or -1
        proj = np.zeros(n, dtype=np.float32)
        project_rows(xs, order, w, node, proj)
        # rows of each split node sorted by projection (lexsort is stable: other rows keep their place)
        order = order[np.lexsort((proj, np.repeat(np.arange(len(sizes)), sizes)))]
        bounds = np.unique(np.concatenate([bounds, starts + lens // 2]))


def forest_lists(xs: np.ndarray, m: int, *, trees: int = TREES, leaf: int = LEAF, seed: int = 0,
                 init: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's best ``m`` among the rows sharing one of its leaves in ``trees`` random-projection
    trees, merged into ``init`` (sims, ids) when given. Returns (sims, ids) (n, m) descending,
    -inf / -1 where fewer, and the first tree's leaf order (rows whose lists overlap lie close)."""
    from embscope.geometry.kernels import leaf_pairs

    n = len(xs)
    if init is None:
        sims, ids = np.full((n, m), -np.inf, np.float32), np.full((n, m), -1, np.int64)
    else:
        sims, ids = np.ascontiguousarray(init[0], np.float32), np.ascontiguousarray(init[1], np.int64)
    rng = np.random.default_rng(seed)
    first = None
    for _ in range(trees):
        order, bounds = rp_leaves(xs, leaf, rng)
        leaf_pairs(xs, order, bounds, sims, ids)
        first = order if first is None else first
    return sims, ids, first


def nn_descent(xn: "torch.Tensor | np.ndarray", k: int, *, seed: int = 0, init=None, trees: int = TREES,
               max_passes: int = MAX_PASSES, progress: bool = False) -> tuple[np.ndarray, np.ndarray, dict]:
    """NN-descent graph of the unit rows ``xn`` (module docstring): (sims (n, k) float32, ids (n, k)
    int64, details), most similar first, self excluded. ``init``: (sims, ids) (n, k) lists to start
    from (real rows' cosines, such as the near-duplicate join's partners)."""
    from embscope.geometry.kernels import refine, reverse_lists

    t0 = time.perf_counter()
    xs = np.ascontiguousarray(xn.cpu().numpy() if hasattr(xn, "cpu") else xn, dtype=np.float32)
    n = len(xs)
    sims, ids, order = forest_lists(xs, k, trees=trees, seed=seed, init=init)
    t_forest = time.perf_counter() - t0
    # the rows in the first tree's leaf order: a row's neighbours of neighbours mostly lie near it
    inv = np.empty(n, np.int64)
    inv[order] = np.arange(n)
    xp = xs[order]
    ids_p = np.where(ids[order] >= 0, inv[np.maximum(ids[order], 0)], -1)
    sims_p = np.ascontiguousarray(sims[order])
    new = np.ones(ids_p.shape, np.bool_)
    updates = []
    passes = range(max_passes)
    for p in track(passes, total=max_passes, description="kNN NN-descent", unit="passes") if progress else passes:
        rev, rev_new = reverse_lists(ids_p, k, seed=seed + p, new=new)
        out_new = np.zeros(ids_p.shape, np.bool_)
        refine(xp, ids_p.copy(), new, rev, rev_new, sims_p, ids_p, out_new)
        new = out_new
        updates.append(int(new.sum()))
        if updates[-1] < MIN_UPDATES * n * k:
            break
    del xp
    ids = np.where(ids_p >= 0, order[np.maximum(ids_p, 0)], -1)[inv]
    return sims_p[inv], ids, {"trees": trees, "leaf": LEAF, "passes": len(updates), "updates": updates,
                              "forest_seconds": round(t_forest, 3),
                              "seconds": round(time.perf_counter() - t0, 3)}
