"""Compiled (numba) inner loops of the kNN methods, cached on disk.

Imported lazily by the methods that need them (numba costs ~0.5 s to import). Each kernel is
compiled with ``cache=True``, so the first run in a fresh environment compiles once and writes the
machine code next to this file (or, when that folder is read-only, in numba's user-wide cache
folder, ``$NUMBA_CACHE_DIR`` if set); later processes load it in milliseconds. When no cache
location is writable at all, the kernels are compiled in memory instead (``CACHED`` is False).

Kernels:

``select_into(tile, rows, members, best_v, best_i)``
    For each tile row ``a`` (query ``rows[a]``), insert every similarity above the row's current
    m-th best into its sorted top-m (``best_v`` descending, ``best_i`` the member ids). Example:
    best [0.9, 0.5], tile row [0.7, 0.2] -> [0.9, 0.7]. The threshold test skips almost every
    element: in a random order only ≈ m·ln(N/m) of N candidates ever enter a top-m (Knuth, TAOCP
    vol. 3, §5.1.1 on left-to-right maxima).

``refine(xn, nb, nb_new, rev, rev_new, best_v, best_i, best_new)``
    One "neighbours of neighbours" pass (the local join of NN-descent, Dong, Moses & Li 2011,
    "Efficient k-nearest neighbor graph construction for generic similarity measures"): every row
    ``i`` scores, in float32, each neighbour or reverse neighbour of each of its neighbours and
    reverse neighbours (``nb`` (n, K), ``rev`` (n, R), -1 = none), and inserts the better ones
    into its top-m, skipping ids already there. As in NN-descent, a pair is scored only when one
    of its two edges is new (``nb_new``/``rev_new``: inserted in the previous pass); entries
    inserted now are marked in ``best_new``. "A neighbour of my neighbour is likely my
    neighbour" (:mod:`embscope.geometry.nndescent` runs it from a random-projection forest).

``select_cols_into(tile, cols, members, best_v, best_i)``
    The same insertion along the tile's *columns*: column ``j`` is query ``cols[j]`` and tile row
    ``a`` is candidate ``members[a]``. The symmetric exact search reads each tile ``X_a X_cᵀ`` once
    per orientation with it, instead of copying its transpose (a 4096 × 4096 fp32 tile is 64 MiB).
    Threads own disjoint column ranges and read the tile row by row, so every read is contiguous.

``offer_cols(tile, cols, members, shift, best_v, best_i, dirty)``
    :func:`select_cols_into` for lists that already hold other candidates: a member already in a
    column's list is not inserted twice. Exact search of some rows computes, in the same tiles,
    every other row's cosine to them; the certified graph offers those to every row's list (a free
    lower bound, rank by rank). A 16-bit tile offers ``entry − shift`` (``shift``: its error bound,
    so still a lower bound of the cosine) and marks the row in ``dirty``, whose list the caller
    scores again exactly. One thread per column: columns are distinct rows, so no two threads
    write one list.

``rerank_into(xn, rows, cand, out_v, out_i)``
    Exact float32 cosines of each row ``rows[t]`` against its candidate ids ``cand[t]`` (-1 =
    none), the best ``k`` kept (``out_v`` descending). The dot products are read straight from
    ``xn``: no (rows, m, d) gather is ever built (that copy, not the arithmetic, dominated the
    16-bit path's re-rank).

``rescore_into(xn, tile, rows, c0, floor, bound, best_v, best_i, seen, cap)``
    A 16-bit screen whose survivors are scored exactly: for each tile row ``a`` (query
    ``rows[a]``, columns ``c0 …``), a column whose 16-bit cosine reaches ``max(floor[a], k-th
    best so far) − bound`` is scored in float32 on the full rows, as :func:`rerank_into` scores
    it, and inserted into the row's top-k (once). The threshold rises as the list fills, since
    its k-th is a real row's exact cosine. ``seen[a]`` counts the columns scored; past ``cap``
    the row stops (it is searched in float32 instead). Example: floor 0.60, bound 0.01, 16-bit
    row [0.605, 0.2], k = 1 → only column 0 is scored.

``count_at_least``, ``score_pairs(xn, pieces, block, thr, reject, slots, out)``, ``insert_pairs``
    The verification step of the near-duplicate join (:mod:`embscope.geometry.join`): every
    entry of a screening tile at or above ``thr`` is a candidate pair (counted per tile row, then
    listed: a row with no candidate is not read again, the others up to their last), scored exactly in float32 on the full rows ``xn``; pairs at or above ``tau`` go into
    both rows' top-m (serially: a pair writes two rows). A pair's dot product is summed in
    pieces ending at ``cuts``; after each, ``partial + tails[i, h]·tails[j, h]`` (the norms of
    the rows' remaining coordinates: Cauchy–Schwarz) bounds the whole, and a pair below
    ``reject`` stops there (score −inf) without reading the rest of its rows. Example: screen
    bound 0.991, exact cosine 0.97 with ``tau`` 0.98 → rejected. ``score_pairs`` takes its arrays
    in tuples: ``pieces = (cuts, tails)``, ``block = (tile, rows, cols, same)`` (the screening
    tile, the rows of ``xn`` its rows and columns are, whether it is a diagonal tile), ``slots =
    (starts, counts)`` (where each tile row's candidates go in the output, how many) and ``out =
    (pi, pj, ps)`` (each candidate's two rows and its score).

``permute_rows(x, src, buf)``
    Rows reordered in place, ``x[p] ← x[src[p]]`` for every p (``src`` a permutation), one cycle
    at a time through the one-row buffer ``buf``: the join's rows in screen order without a second
    (n, d) copy (2.2 GB in float32 at 152064 × 3584). Serial (a cycle is a chain of reads and
    writes); the inverse permutation puts the rows back bit for bit. Example: rows [a, b, c],
    src [2, 0, 1] → [c, a, b].

``accept_rows(tile, rows, cols, accept, same, best_v, best_i, count)``, ``accept_cols(…)``
    The join's dense tiles: ``tile`` holds the exact float32 cosines of the rows ``rows`` (tile
    rows) and ``cols`` (tile columns); every entry at or above ``accept`` is a partner, counted and
    inserted into the tile row's list (``accept_rows``, one thread per row) or the tile column's
    (``accept_cols``, column chunks, the tile read row by row). On a diagonal tile (``same``) only
    the entries right of the diagonal count, so each pair is entered once from each side.

``square_sums(xn, cuts, out)``
    Each row's sum of squares over the columns ``[cuts[h − 1], cuts[h])``, accumulated in float64
    from float32 rows (the join's norms and the norms past each piece), with no temporary copy.

``project_rows(xn, order, w, node, out)``, ``leaf_pairs(xn, order, bounds, best_v, best_i)``
    The random-projection trees of :mod:`embscope.geometry.nndescent`: ``out[p]`` is the row
    ``order[p]``'s product with its node's direction ``w[node[p]]`` (nodes < 0 are skipped); then
    every pair of rows within a leaf (``order[bounds[j]:bounds[j + 1]]``) is scored in float32 and
    offered to both rows' lists (one thread per leaf: a row lies in one leaf of a tree).

``merge_into(best_v, best_i, new_v, new_i)``
    Each row's top-m of two candidate lists, ids kept once (an approximate graph's neighbours and
    the near-duplicate join's partners: both are real rows' exact cosines, so the merge is still a
    lower bound of the exact list, rank by rank).

All run rows (or columns) in parallel; each row's top-m is written by one thread only and ties keep
the earlier candidate, so results do not depend on the thread count.
"""

from __future__ import annotations

import numba
import numpy as np

from embscope.compiled import dot, holds, jit, push


def _select_into(tile, rows, members, best_v, best_i):  # pragma: no cover - compiled
    b, n_cols = tile.shape
    m = best_v.shape[1]
    for a in numba.prange(b):
        r = rows[a]
        thr = best_v[r, m - 1]
        for j in range(n_cols):
            v = tile[a, j]
            if v > thr:
                push(best_v, best_i, r, v, members[j])
                thr = best_v[r, m - 1]


def _refine(xn, nb, nb_new, rev, rev_new, best_v, best_i, best_new):  # pragma: no cover - compiled
    n, K = nb.shape
    R = rev.shape[1]
    m = best_v.shape[1]
    d = xn.shape[1]
    for i in numba.prange(n):
        thr = best_v[i, m - 1]
        for a in range(K + R):
            j = nb[i, a] if a < K else rev[i, a - K]
            if j < 0:
                continue
            fa = nb_new[i, a] if a < K else rev_new[i, a - K]
            for b in range(K + R):
                c = nb[j, b] if b < K else rev[j, b - K]
                if c < 0 or c == i:
                    continue
                if not (fa or (nb_new[j, b] if b < K else rev_new[j, b - K])):
                    continue  # both edges old: this pair was scored in the previous pass
                s = dot(xn, i, xn, c, 0, d)
                if s > thr:
                    if holds(best_i, i, c):
                        continue
                    p = m - 1
                    while p > 0 and best_v[i, p - 1] < s:
                        best_v[i, p] = best_v[i, p - 1]
                        best_i[i, p] = best_i[i, p - 1]
                        best_new[i, p] = best_new[i, p - 1]
                        p -= 1
                    best_v[i, p] = s
                    best_i[i, p] = c
                    best_new[i, p] = True
                    thr = best_v[i, m - 1]


#: columns per thread chunk of :func:`select_cols_into` (64 floats: one 256-byte run of each tile row)
COL_CHUNK = 64


@numba.njit(cache=True, inline="always")
def chunk(ch, n_cols):  # pragma: no cover - compiled
    """Columns ``[j0, j1)`` of thread chunk ``ch`` of a tile ``n_cols`` wide."""
    j0 = ch * COL_CHUNK
    return j0, min(n_cols, j0 + COL_CHUNK)


def _select_cols_into(tile, cols, members, best_v, best_i):  # pragma: no cover - compiled
    b, n_cols = tile.shape
    m = best_v.shape[1]
    for ch in numba.prange((n_cols + COL_CHUNK - 1) // COL_CHUNK):
        j0, j1 = chunk(ch, n_cols)
        thr = np.empty(j1 - j0, dtype=np.float32)
        for j in range(j0, j1):
            thr[j - j0] = best_v[cols[j], m - 1]
        for a in range(b):
            for j in range(j0, j1):
                v = tile[a, j]
                if v > thr[j - j0]:
                    r = cols[j]
                    push(best_v, best_i, r, v, members[a])
                    thr[j - j0] = best_v[r, m - 1]


def _offer_cols(tile, cols, members, shift, best_v, best_i, dirty):  # pragma: no cover - compiled
    b, n_cols = tile.shape
    m = best_v.shape[1]
    for j in numba.prange(n_cols):
        r = cols[j]
        for a in range(b):
            v = tile[a, j] - shift
            if not v > best_v[r, m - 1]:
                continue
            if not holds(best_i, r, members[a]):
                push(best_v, best_i, r, v, members[a])
                dirty[r] = True


def _rerank_into(xn, rows, cand, out_v, out_i):  # pragma: no cover - compiled
    r, m = cand.shape
    k = out_v.shape[1]
    d = xn.shape[1]
    for t in numba.prange(r):
        i = rows[t]
        for p in range(k):
            out_v[t, p] = -np.inf
            out_i[t, p] = -1
        for a in range(m):
            j = cand[t, a]
            if j < 0:
                continue
            s = dot(xn, i, xn, j, 0, d)
            if s > out_v[t, k - 1]:
                push(out_v, out_i, t, s, j)


def _rescore_into(xn, tile, rows, c0, floor, bound, best_v, best_i, seen, cap):  # pragma: no cover - compiled
    b, c = tile.shape
    k = best_v.shape[1]
    d = xn.shape[1]
    for a in numba.prange(b):
        i = rows[a]
        for t in range(c):
            if seen[a] > cap:
                break
            thr = max(floor[a], best_v[a, k - 1]) - bound
            j = c0 + t
            if not tile[a, t] >= thr or j == i:
                continue
            seen[a] += 1
            s = dot(xn, i, xn, j, 0, d)
            if s > best_v[a, k - 1] and not holds(best_i, a, j):
                push(best_v, best_i, a, s, j)


def _count_at_least(tile, thr, same, out):  # pragma: no cover - compiled
    b, c = tile.shape
    for a in numba.prange(b):
        n = 0
        for t in range(c):
            if tile[a, t] >= thr and not (same and t <= a):
                n += 1
        out[a] = n


def _score_pairs(xn, pieces, block, thr, reject, slots, out):  # pragma: no cover - compiled
    cuts, tails = pieces
    tile, rows, cols, same = block
    starts, counts = slots
    pi, pj, ps = out
    b, c = tile.shape
    nc = len(cuts)
    for a in numba.prange(b):
        q = starts[a]
        end = q + counts[a]
        i = rows[a]
        for t in range(a + 1 if same else 0, c):
            if q == end:
                break  # the row's candidates are all scored: the rest of the tile row is not read
            if tile[a, t] >= thr:
                j = cols[t]
                s = dot(xn, i, xn, j, 0, cuts[0])
                h = 0
                while h + 1 < nc and s + tails[i, h] * tails[j, h] >= reject:
                    s += dot(xn, i, xn, j, cuts[h], cuts[h + 1])
                    h += 1
                pi[q] = i
                pj[q] = j
                ps[q] = s if h + 1 == nc else -np.inf
                q += 1


def _insert_pairs(pi, pj, ps, tau, best_v, best_i, count):  # pragma: no cover - compiled
    m = best_v.shape[1]
    for q in range(len(pi)):
        s = ps[q]
        if s < tau:
            continue
        for side in range(2):
            r = pi[q] if side == 0 else pj[q]
            j = pj[q] if side == 0 else pi[q]
            count[r] += 1
            if s > best_v[r, m - 1]:
                push(best_v, best_i, r, s, j)


def _accept_rows(tile, rows, cols, accept, same, best_v, best_i, count):  # pragma: no cover - compiled
    b, c = tile.shape
    m = best_v.shape[1]
    for a in numba.prange(b):
        r = rows[a]
        n = 0
        for t in range(a + 1 if same else 0, c):
            v = tile[a, t]
            if v >= accept:
                n += 1
                if v > best_v[r, m - 1]:
                    push(best_v, best_i, r, v, cols[t])
        count[r] += n


def _accept_cols(tile, cols, rows, accept, same, best_v, best_i, count):  # pragma: no cover - compiled
    b, n_cols = tile.shape
    m = best_v.shape[1]
    for ch in numba.prange((n_cols + COL_CHUNK - 1) // COL_CHUNK):
        j0, j1 = chunk(ch, n_cols)
        for a in range(b):
            for j in range(max(j0, a + 1) if same else j0, j1):
                v = tile[a, j]
                if v >= accept:
                    r = cols[j]
                    count[r] += 1
                    if v > best_v[r, m - 1]:
                        push(best_v, best_i, r, v, rows[a])


def _square_sums(xn, cuts, out):  # pragma: no cover - compiled
    n = xn.shape[0]
    for i in numba.prange(n):
        e0 = 0
        for h in range(len(cuts)):
            s = 0.0
            for e in range(e0, cuts[h]):
                v = np.float64(xn[i, e])
                s += v * v
            out[i, h] = s
            e0 = cuts[h]


def _project_rows(xn, order, w, node, out):  # pragma: no cover - compiled
    d = xn.shape[1]
    for p in numba.prange(len(order)):
        if node[p] >= 0:
            out[p] = dot(xn, order[p], w, node[p], 0, d)


def _leaf_pairs(xn, order, bounds, best_v, best_i):  # pragma: no cover - compiled
    m = best_v.shape[1]
    d = xn.shape[1]
    for leaf in numba.prange(len(bounds) - 1):
        for a in range(bounds[leaf], bounds[leaf + 1]):
            i = order[a]
            for b in range(a + 1, bounds[leaf + 1]):
                j = order[b]
                s = dot(xn, i, xn, j, 0, d)
                if s > best_v[i, m - 1] and not holds(best_i, i, j):
                    push(best_v, best_i, i, s, j)
                if s > best_v[j, m - 1] and not holds(best_i, j, i):
                    push(best_v, best_i, j, s, i)


def _permute_rows(x, src, buf):  # pragma: no cover - compiled
    done = np.zeros(len(src), dtype=np.bool_)
    for i in range(len(src)):
        if done[i]:
            continue
        buf[:] = x[i]
        j = i
        while True:  # each position is read (as src[j]) before it is written (as j)
            done[j] = True
            s = src[j]
            if s == i:
                x[j] = buf
                break
            x[j] = x[s]
            j = s


def _merge_into(best_v, best_i, new_v, new_i):  # pragma: no cover - compiled
    n, m = best_v.shape
    for r in numba.prange(n):
        for a in range(new_v.shape[1]):
            j = new_i[r, a]
            v = new_v[r, a]
            if j < 0 or not v > best_v[r, m - 1]:
                continue
            if not holds(best_i, r, j):
                push(best_v, best_i, r, v, j)


select_into, _c1 = jit(_select_into)
refine, _c2 = jit(_refine)
select_cols_into, _c3 = jit(_select_cols_into)
rerank_into, _c4 = jit(_rerank_into)
merge_into, _c7 = jit(_merge_into)
offer_cols, _c8 = jit(_offer_cols)
count_at_least, _c5 = jit(_count_at_least)
score_pairs, _c6 = jit(_score_pairs)
rescore_into, _c9 = jit(_rescore_into)
accept_rows, _c10 = jit(_accept_rows)
accept_cols, _c11 = jit(_accept_cols)
square_sums, _c12 = jit(_square_sums)
project_rows, _c13 = jit(_project_rows)
leaf_pairs, _c14 = jit(_leaf_pairs)
insert_pairs = numba.njit(cache=True)(_insert_pairs)  # serial: a pair writes two rows' lists
permute_rows = numba.njit(cache=True)(_permute_rows)  # serial: a cycle is one chain
#: whether the kernels' machine code is cached on disk
CACHED = all((_c1, _c2, _c3, _c4, _c5, _c6, _c7, _c8, _c9, _c10, _c11, _c12, _c13, _c14))


def reverse_lists(nb: np.ndarray, width: int, seed: int = 0, new: np.ndarray | None = None):
    """(n, width) reverse neighbours: up to ``width`` rows ``j`` with ``i`` in ``nb[j]``, chosen
    at random when there are more (hubs), -1 padded, and their (n, width) "new" flags (copied from
    ``new``, the flags of ``nb``; all True when None). Example: nb [[1], [0], [0]] -> [[1, 2],
    [0, -1], [-1, -1]] with width 2 (order within a row may differ)."""
    n, K = nb.shape
    src = np.repeat(np.arange(n, dtype=np.int64), K)
    dst = nb.reshape(-1)
    shuffle = np.random.default_rng(seed).permutation(len(dst))
    order = shuffle[np.argsort(dst[shuffle], kind="stable")]
    dst_s, src_s = dst[order], src[order]
    ok = dst_s >= 0
    dst_s, src_s = dst_s[ok], src_s[ok]
    starts = np.searchsorted(dst_s, np.arange(n))
    rank = np.arange(len(dst_s)) - starts[dst_s]
    keep = rank < width
    rev = np.full((n, width), -1, dtype=np.int64)
    rev[dst_s[keep], rank[keep]] = src_s[keep]
    rev_new = np.zeros((n, width), dtype=np.bool_)
    flags = np.ones(len(order), np.bool_) if new is None else new.reshape(-1)[order][ok]
    rev_new[dst_s[keep], rank[keep]] = flags[keep]
    return rev, rev_new
