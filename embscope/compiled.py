"""Compiled (numba) building blocks shared by the analyses: a top-k list insert, the cache-aware
compile, and the screen of query vectors against a matrix's rows.

Below the analyses' layer so that :mod:`embscope.geometry` (whose kernels build on these) and
:mod:`embscope.extension` (the nearest trained rows of new rows) both use one copy. Kernels are
compiled with ``cache=True`` (see :mod:`embscope.geometry.kernels` for the cache rules).

``rescore_queries_into(q, blk, scale, tile, c0, ok, floor, bound, best_v, best_i)``
    A 16-bit screen of query vectors that are not rows of the matrix (new rows of a vocabulary
    extension against a matrix's trained rows), its survivors scored exactly: tile row ``a`` is
    query ``q[a]``, column ``t`` is ``blk[t]`` (row ``c0 + t``, skipped unless ``ok[t]``), and a
    column whose 16-bit cosine reaches ``max(floor[a], k-th best so far) − bound`` is scored in
    float32 as ``q[a]·blk[t] · scale[t]`` (``scale``: the inverse row norms) and inserted into the
    query's top-k (once). Example: floor 0.60, bound 0.01, 16-bit row [0.605, 0.2], k = 1 → only
    column 0 is scored.
"""

from __future__ import annotations

import warnings

import numba
import numpy as np


def jit(fn):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", numba.NumbaWarning)
            return numba.njit(parallel=True, fastmath=True, cache=True)(fn), True
    except (RuntimeError, numba.NumbaWarning, OSError):  # no writable cache location
        return numba.njit(parallel=True, fastmath=True, cache=False)(fn), False


@numba.njit(cache=True, fastmath=True, inline="always")
def dot(x, i, y, j, e0, e1):  # pragma: no cover - compiled
    """``x[i, e0:e1] · y[j, e0:e1]`` in float32: one loop of its own, so that it is vectorised
    (inlined into the kernels that score candidates)."""
    s = np.float32(0.0)
    for e in range(e0, e1):
        s += x[i, e] * y[j, e]
    return s


@numba.njit(cache=True, inline="always")
def push(best_v, best_i, r, v, j):  # pragma: no cover - compiled
    """Insert (v, j) into row r's list, sorted descending, dropping its last entry."""
    p = best_v.shape[1] - 1
    while p > 0 and best_v[r, p - 1] < v:
        best_v[r, p] = best_v[r, p - 1]
        best_i[r, p] = best_i[r, p - 1]
        p -= 1
    best_v[r, p] = v
    best_i[r, p] = j


@numba.njit(cache=True, inline="always")
def holds(best_i, r, j):  # pragma: no cover - compiled
    """Whether row r's list already holds id j."""
    for p in range(best_i.shape[1]):
        if best_i[r, p] == j:
            return True
    return False


def _rescore_queries_into(q, blk, scale, tile, c0, ok, floor, bound, best_v, best_i):  # pragma: no cover - compiled
    nq, c = tile.shape
    k = best_v.shape[1]
    d = q.shape[1]
    for a in numba.prange(nq):
        for t in range(c):
            if not ok[t]:
                continue
            thr = max(floor[a], best_v[a, k - 1]) - bound
            if not tile[a, t] >= thr:
                continue
            s = dot(q, a, blk, t, 0, d) * scale[t]
            j = c0 + t
            if s > best_v[a, k - 1] and not holds(best_i, a, j):
                push(best_v, best_i, a, s, j)


rescore_queries_into, CACHED = jit(_rescore_queries_into)
