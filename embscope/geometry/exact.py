"""Exact cosine top-k by tiled matmuls, and the row helpers every kNN method shares.

Row block × column tile matmuls with a running top-k per row; an n×n matrix is never built.
On the CPU every tile is read by a compiled selection kernel
(:mod:`embscope.geometry.kernels`) that inserts only the similarities above a row's current k-th
best; when every row is searched (:func:`symmetric_knn`) each pair's cosine is computed once, the
tile ``X_a X_cᵀ`` feeding both blocks' rows: half the multiply-adds.

Tile dtype. float32, or a 16-bit screen: bfloat16 on a CPU where it is faster (measured by
:mod:`embscope.geometry.probe`, never assumed), float16 on CUDA. A 16-bit screen keeps
``k + RERANK_EXTRA`` candidates per row, re-scores them in float32 (:func:`rerank_rows`), and
a row whose last candidate scores within the 16-bit error bound (:func:`low_precision_bound`) of
its re-ranked k-th neighbour could hide a better row outside the candidates: it is screened again
in 16 bits, every column within the bound of that k-th scored in float32 (:func:`screened_knn`). So
the result equals the float32 one (collapsed clusters of near-identical rows, such
as Gemma-3's unused rows at cosine 0.9999, are where this matters). Example: rows (1, 0),
(1, 1), (0, 1) with k = 1 give neighbours [1, 0, 1] and similarities [0.707, 0.707, 0.707].
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from embscope.progress import track

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: candidates kept beyond k when tiles are 16-bit, re-scored in fp32 (bf16 has an 8-bit mantissa:
#: similarities are off by up to ~0.012; dense vocabularies such as SmolLM2's have dozens of rows
#: within that of the k-th neighbour: 8 extra gave recall 0.992 there, 32 gives ~1.0)
RERANK_EXTRA = 32
#: elements per similarity tile (64 Mi floats = 256 MiB in fp32)
TILE_ELEMENTS = 1 << 26
#: rows per block when normalising or checking a matrix in place
NORM_BLOCK = 16384
#: rows per block of the symmetric all-rows search (a 4096 × 4096 fp32 tile is 64 MiB)
SYMMETRIC_BLOCK = 4096
#: the all-rows fp32 search is symmetric from this many rows (below, one tile does it all)
SYMMETRIC_FROM = 4096
#: query rows per block and columns per tile of the CPU search of some rows (a 2048 × 8192 fp32
#: tile is 64 MiB; the products stay large enough for BLAS to run at its full rate)
QUERY_BLOCK = 2048
COLUMN_TILE = 8192


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
    """Matmul dtype for similarity tiles on ``device``: float16 on CUDA; on the CPU bfloat16 when
    :func:`embscope.geometry.probe.gemm_rates` measures it faster than float32 here, else
    float32 (whether it also pays after the re-search of unsafe rows is
    :func:`embscope.geometry.probe.plan_tiles`'s question)."""
    import torch

    if torch.device(device).type == "cuda":
        return torch.float16
    from embscope.geometry.probe import gemm_rates

    r = gemm_rates(1024)
    return torch.bfloat16 if r.rate("bfloat16") > r.rate("float32") else torch.float32


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


def exact_knn(xn: "torch.Tensor", k: int, *, rows: "torch.Tensor | None" = None, dtype=None,
              progress: bool = True, threads: int | None = None, offer: tuple | None = None):
    """Exact top-``k`` cosine neighbours of ``rows`` (default: all) among all rows of unit ``xn``.

    ``dtype``: tile dtype (default float32; a 16-bit dtype screens, then re-ranks in float32, see
    the module docstring). ``threads``: intra-op threads on the CPU (default: torch's count).
    ``offer``: see :func:`subset_knn` (CPU, some rows).
    Returns (sims (r, k) float32, ids (r, k) int64), most similar first.
    """
    import torch

    dtype = dtype or torch.float32
    if xn.device.type != "cpu":
        return _torch_knn(xn, k, rows=rows, dtype=dtype, progress=progress)
    from embscope.geometry.probe import threads as using

    with using(threads or torch.get_num_threads()):
        if rows is None and xn.shape[0] > SYMMETRIC_FROM:
            return symmetric_knn(xn, k, dtype=dtype, progress=progress)
        rows = torch.arange(xn.shape[0]) if rows is None else rows.cpu()
        return subset_knn(xn, rows, k, dtype=dtype, progress=progress, offer=offer)


def _candidates(k: int, n: int, dtype) -> int:
    """Candidates kept per row: k, or k + RERANK_EXTRA for a 16-bit screen (never more than n − 1)."""
    import torch

    return min(n - 1, k + RERANK_EXTRA if dtype != torch.float32 else k)


def _finish(xn, rows, best_v, best_i, k: int, dtype, progress: bool):
    """The result of a search whose running top-m is ``best_v``/``best_i`` (numpy, rows × m):
    float32 tiles are done; 16-bit ones are re-ranked and their unsafe rows screened again."""
    import numpy as np
    import torch

    n, d = xn.shape
    m = best_v.shape[1]
    if dtype == torch.float32:
        return torch.from_numpy(best_v[:, :k]), torch.from_numpy(best_i[:, :k])
    rows_np = np.asarray(rows, dtype=np.int64)
    v, i = rerank_rows(xn, rows_np, best_i, min(k, m))
    if m < n - 1:  # a row outside the m candidates may beat the k-th: screen those rows again
        unsafe = np.flatnonzero(best_v[:, -1] + low_precision_bound(dtype, d) >= v[:, -1])
        if len(unsafe):
            vu, iu = screened_knn(xn, rows_np[unsafe], k, dtype, floor=v[unsafe, -1])
            v[unsafe], i[unsafe] = vu, iu
    return torch.from_numpy(v), torch.from_numpy(i)


def screened_knn(xn: "torch.Tensor", rows, k: int, dtype, *, floor=None, cap: int | None = None,
                 progress: bool = False, offer: tuple | None = None):
    """Exact top-``k`` of ``rows`` (numpy ids) among the unit rows of ``xn`` from one 16-bit pass
    (CPU). Returns numpy (sims (r, k) float32, ids (r, k) int64).

    A column whose exact cosine is among a row's top k is at least the row's true k-th ``t_k``,
    so its 16-bit cosine is at least ``t_k − β`` (β: :func:`low_precision_bound`). Any k columns'
    exact cosines bound ``t_k`` from below, so the pass keeps each row's top-k of exact cosines
    and scores in float32 every column whose 16-bit cosine reaches ``max(floor, that k-th) − β``
    (:func:`~embscope.geometry.kernels.rescore_into`): the threshold rises as the list fills and
    no true neighbour is ever below it. ``floor`` (r,): a known lower bound of each row's k-th
    similarity (a graph's k-th, or a first screen's re-ranked k-th), default none. A row with
    more than ``cap`` columns to score (default n / 16, where scoring one by one costs about a
    float32 search: a zero row, a collapsed cluster) stops early and is searched in float32.

    ``offer``: (best_v, best_i) (n, m) lists of *every* row: each row's 16-bit cosines to the
    searched rows, less β (lower bounds of the cosines), are offered to its list
    (:func:`~embscope.geometry.kernels.offer_cols`), and every list that took one is scored again
    exactly at the end (m float32 products a row), so the lists hold real rows' exact cosines as
    with float32 tiles. (A row whose better cosine was hidden by another's bound keeps the other:
    still a lower bound, rank by rank.)
    """
    import numpy as np
    import torch

    from embscope.geometry.kernels import offer_cols, rescore_into

    n, d = xn.shape
    xc = xn.float().contiguous()
    xs = xc.numpy()
    rows = np.asarray(rows, dtype=np.int64)
    r = len(rows)
    cap = max(1024, n // 16) if cap is None else cap
    bound = np.float32(low_precision_bound(dtype, d))
    floor = np.full(r, -np.inf, np.float32) if floor is None else np.ascontiguousarray(floor, dtype=np.float32)
    best_v = np.full((r, k), -np.inf, dtype=np.float32)
    best_i = np.full((r, k), -1, dtype=np.int64)
    seen = np.zeros(r, dtype=np.int64)
    rows_t = torch.from_numpy(rows)
    col_ids = torch.arange(n)
    dirty = np.zeros(n, dtype=np.bool_)
    q = xc[rows_t].to(dtype)                                      # (r, d): the queries in dtype
    # Column tiles outer: each is converted once into one reused buffer, never the whole matrix
    # (a 16-bit copy of every row was 1.1 GB at 152064 × 3584). Each query row still meets the
    # columns in ascending order and each column the query blocks in theirs, as with blocks outer.
    cols = torch.empty((min(n, COLUMN_TILE), d), dtype=dtype)
    starts = range(0, n, COLUMN_TILE)
    for c0 in track(starts, total=len(starts), description="kNN exact", unit="column tiles") if progress else starts:
        ct = cols[:min(COLUMN_TILE, n - c0)].copy_(xc[c0:c0 + COLUMN_TILE])
        for s in range(0, r, QUERY_BLOCK):
            e = min(r, s + QUERY_BLOCK)
            tile = (q[s:e] @ ct.T).float()
            _mask_self(tile, rows_t[s:e], col_ids[c0:c0 + COLUMN_TILE])
            t = tile.numpy()
            rescore_into(xs, t, rows[s:e], c0, floor[s:e], bound, best_v[s:e], best_i[s:e], seen[s:e], cap)
            if offer is not None:
                offer_cols(t, np.arange(c0, c0 + t.shape[1], dtype=np.int64), rows[s:e], bound, offer[0], offer[1],
                           dirty)
    if offer is not None and dirty.any():  # the bounds offered become the rows' exact cosines
        again = np.flatnonzero(dirty)
        offer[0][again], offer[1][again] = rerank_rows(xc, again, offer[1][again], offer[1].shape[1])
    over = np.flatnonzero(seen > cap)
    if len(over):
        v32, i32 = subset_knn(xc, torch.from_numpy(rows[over]), k, dtype=torch.float32, progress=False)
        best_v[over], best_i[over] = v32.numpy(), i32.numpy()
    return best_v, best_i


def subset_knn(xn: "torch.Tensor", rows: "torch.Tensor", k: int, *, dtype=None, progress: bool = True,
               offer: tuple | None = None):
    """Exact top-``k`` of the given ``rows`` among all rows of unit ``xn`` on the CPU: query blocks
    × column tiles, each tile read by the compiled selection kernel (no sort of any tile).
    ``offer``: (best_v, best_i) (n, m) lists of *every* row; each row's cosines to the searched
    rows are offered to its list too (:func:`~embscope.geometry.kernels.offer_cols`; 16-bit tiles:
    :func:`screened_knn`).
    Returns (sims (r, k) float32, ids (r, k) int64)."""
    import numpy as np
    import torch

    from embscope.geometry.kernels import offer_cols, select_into

    dtype = dtype or torch.float32
    n, d = xn.shape
    if dtype != torch.float32:
        # one 16-bit pass, its survivors scored exactly (and its offers scored again)
        v, i = screened_knn(xn, rows.cpu().long().numpy(), k, dtype, progress=progress, offer=offer)
        return torch.from_numpy(v), torch.from_numpy(i)
    xc = xn.float().contiguous()
    xt = xc
    rows = rows.cpu().long()
    r = len(rows)
    m = min(n - 1, k)
    best_v = np.full((r, m), -np.inf, dtype=np.float32)
    best_i = np.full((r, m), -1, dtype=np.int64)
    local = np.arange(r, dtype=np.int64)
    col_ids = torch.arange(n)
    dirty = np.zeros(n, dtype=np.bool_)  # float32 offers are the cosines: nothing to score again
    starts = range(0, r, QUERY_BLOCK)
    it = track(starts, total=len(starts), description="kNN exact", unit="row blocks") if progress else starts
    for s in it:
        r_ids = rows[s:s + QUERY_BLOCK]
        q = xt[r_ids]                                                          # (b, d)
        for c0 in range(0, n, COLUMN_TILE):
            tile = (q @ xt[c0:c0 + COLUMN_TILE].T).float()                     # (b, cols)
            _mask_self(tile, r_ids, col_ids[c0:c0 + COLUMN_TILE])
            cols = np.arange(c0, c0 + tile.shape[1], dtype=np.int64)
            t = tile.numpy()
            select_into(t, local[s:s + len(r_ids)], cols, best_v, best_i)
            if offer is not None:
                offer_cols(t, cols, r_ids.numpy(), np.float32(0.0), offer[0], offer[1], dirty)
    return torch.from_numpy(best_v), torch.from_numpy(best_i)


def symmetric_knn(xn: "torch.Tensor", k: int, *, block: int | None = None, dtype=None, progress: bool = True):
    """Exact top-``k`` of every row of unit ``xn`` (on the CPU), each pair's cosine computed once.

    ``cos(x_i, x_j) = cos(x_j, x_i)``, so the all-rows search needs only the tiles on and above
    the block diagonal: the tile ``X_a X_bᵀ`` (a < b) feeds the running top-k of block a's rows
    (along its columns) and of block b's rows (along its rows, i.e. the top-k of ``X_b X_aᵀ``).
    That is n(n + B)/2 dot products instead of n², half the multiply-adds, for the same result
    (ties aside: which of two equal similarities is kept may differ). Example: 3 blocks → tiles
    (0,0), (0,1), (0,2), (1,1), (1,2), (2,2): 6 matmuls instead of 9.

    Each tile is read twice by compiled kernels, once per orientation
    (:func:`~embscope.geometry.kernels.select_into` along rows,
    :func:`~embscope.geometry.kernels.select_cols_into` along columns, no transposed copy); they
    insert only the similarities above a row's current k-th best (most elements are skipped after
    a few tiles); sorting every tile (``topk``) cost ten times the matmul on narrow matrices
    (GloVe's 50 columns). With ``dtype`` bfloat16 the tiles screen and the result is re-ranked as
    in :func:`exact_knn`.

    Returns (sims (n, k) float32, ids (n, k) int64), most similar first.
    """
    import numpy as np
    import torch

    from embscope.geometry.kernels import select_cols_into, select_into

    dtype = dtype or torch.float32
    n, d = xn.shape
    b = block or max(1024, min(SYMMETRIC_BLOCK, n))
    m = _candidates(k, n, dtype)
    starts = list(range(0, n, b))
    best_v = np.full((n, m), -np.inf, dtype=np.float32)
    best_i = np.full((n, m), -1, dtype=np.int64)
    ids = np.arange(n, dtype=np.int64)
    pairs = [(a, c) for ai, a in enumerate(starts) for c in starts[ai:]]
    it = track(pairs, total=len(pairs), description="kNN exact", unit="tile pairs") if progress else pairs
    xc = xn.cpu().float().contiguous()
    xt = xc if dtype == torch.float32 else xc.to(dtype)
    for a, c in it:
        tile = (xt[a:a + b] @ xt[c:c + b].T).float()                            # (|a|, |c|)
        if a == c:
            tile.fill_diagonal_(-math.inf)
        ia, ic = ids[a:a + tile.shape[0]], ids[c:c + tile.shape[1]]
        t = tile.numpy()
        select_into(t, ia, ic, best_v, best_i)
        if a != c:
            select_cols_into(t, ic, ia, best_v, best_i)
    v, i = _finish(xc, ids, best_v, best_i, k, dtype, progress)
    dev = xn.device
    return v.to(dev), i.to(dev)


def rerank_rows(xn: "torch.Tensor", rows, cand, k: int):
    """Exact fp32 cosines of each row against its candidates, the best ``k`` kept (CPU, compiled:
    :func:`~embscope.geometry.kernels.rerank_into`). ``rows`` (r,), ``cand`` (r, m) ids (-1 = none),
    numpy. Returns numpy (sims (r, k) float32, ids (r, k) int64)."""
    import numpy as np

    from embscope.geometry.kernels import rerank_into

    xs = np.ascontiguousarray(xn.float().numpy() if hasattr(xn, "numpy") else xn, dtype=np.float32)
    r = len(rows)
    out_v = np.empty((r, k), dtype=np.float32)
    out_i = np.empty((r, k), dtype=np.int64)
    rerank_into(xs, np.ascontiguousarray(rows, dtype=np.int64), np.ascontiguousarray(cand, dtype=np.int64),
                out_v, out_i)
    return out_v, out_i


def _torch_knn(xn: "torch.Tensor", k: int, *, rows: "torch.Tensor | None" = None, dtype=None,
               progress: bool = True):
    """:func:`exact_knn` on a CUDA device: torch tiles, ``topk`` per tile, the 16-bit re-rank
    and the float32 re-search of unsafe rows in torch."""
    import torch

    n, d = xn.shape
    dev = xn.device
    rows = torch.arange(n, device=dev) if rows is None else rows.to(dev)
    low = dtype != torch.float32
    m = min(n - 1, k + RERANK_EXTRA if low else k)
    xt = xn.to(dtype)
    n_cols = n if n * 1024 <= TILE_ELEMENTS else max(4096, TILE_ELEMENTS // 1024)
    block = max(64, min(4096, TILE_ELEMENTS // n_cols))
    cols = torch.arange(n, device=dev)
    out_v, out_i = [], []
    starts = range(0, len(rows), block)
    it = track(starts, total=len(starts), description="kNN exact", unit="row blocks") if progress else starts
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
            low_m = best_v[:, -1]                                   # m-th 16-bit similarity
            best_v, best_i = rerank(xn, r_ids, best_i, min(k, m))
            if m < n - 1:  # a row outside the m candidates may beat the k-th: redo those in fp32
                unsafe = torch.nonzero(low_m + low_precision_bound(dtype, d) >= best_v[:, -1]).squeeze(1)
                if len(unsafe):
                    v32, i32 = exact_knn(xn, k, rows=r_ids[unsafe], dtype=torch.float32, progress=False)
                    best_v[unsafe], best_i[unsafe] = v32, i32
        else:
            best_v, best_i = best_v[:, :k], best_i[:, :k]
        out_v.append(best_v)
        out_i.append(best_i)
    return torch.cat(out_v), torch.cat(out_i)


def low_precision_bound(dtype, d: int) -> float:
    """Largest error of a cosine of two unit rows rounded to ``dtype`` (16-bit), multiplied with
    float32 accumulation, and returned in ``dtype`` (torch gives 16-bit products on the CPU and on
    CUDA alike).

    Rounding each entry costs a relative error ≤ u (unit roundoff: 2^-11 for float16, 2^-8 for
    bfloat16), so |â·b̂ − a·b| ≤ (2u + u²)·Σ|a_i b_i| ≤ 2u + u² for unit rows (Cauchy–Schwarz);
    the float32 accumulation adds at most d·2^-24 times Σ|â_i b̂_i| (Higham, *Accuracy and
    Stability of Numerical Algorithms*, 2002, §3.1); rounding the sum back to ``dtype`` adds u
    times its magnitude (≤ 1 plus the errors before). Example: bfloat16 at d = 3584:
    2·2^-8 + 2^-16 ≈ 0.00783, accumulation 0.00021, output 0.00392: 0.01196. A row whose m-th
    16-bit candidate scores within this of its re-ranked k-th neighbour may have a true
    neighbour outside the candidates, and is screened again (:func:`screened_knn`).
    """
    import torch

    u = 2.0 ** -11 if dtype == torch.float16 else 2.0 ** -8
    inputs = 2 * u + u * u
    accumulate = d * 2.0 ** -24 * (1 + inputs)
    return inputs + accumulate + u * (1 + inputs + accumulate)


def nearest_cosine(x: "torch.Tensor", rows, floor=None) -> "np.ndarray":
    """Exact cosine of each of ``rows`` to its nearest other row of ``x`` (any dtype, not
    normalised), as exact search computes it: 1 − this is the row's exact isolation. Costs
    len(rows)·n·d multiply-adds (the tile dtype by :func:`embscope.geometry.probe.plan_tiles`;
    a bf16 screen is one pass, :func:`screened_knn`). ``floor`` (len(rows),): a cosine each row is
    known to reach (a graph's nearest neighbour, a real row's cosine), so the bf16 screen scores
    only the rows near it. Example: rows (1, 0), (1, 1), (0, 1), rows [0] → [0.7071]."""
    import numpy as np
    import torch

    from embscope.geometry.probe import plan_tiles, threads

    rows = np.asarray(rows, dtype=np.int64)
    if not len(rows):
        return np.zeros(0, dtype=np.float32)
    xn = normalize_rows(x.cpu())
    n, d = xn.shape
    plan = plan_tiles(len(rows) * n * d, d, unsafe=0.0)
    if plan.dtype == "float32":
        v, _ = exact_knn(xn, 1, rows=torch.from_numpy(rows), threads=plan.threads, progress=False)
        return v[:, 0].numpy()
    if floor is not None:  # another order of the same float32 sums may round it up by up to d·2^-24
        floor = np.nan_to_num(np.asarray(floor, dtype=np.float64), nan=-np.inf) - d * 2.0 ** -24
    with threads(plan.threads):
        v, _ = screened_knn(xn, rows, 1, plan.torch_dtype(), floor=floor)
    return v[:, 0]
