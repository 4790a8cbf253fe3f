"""Exact cosine top-k by tiled matmuls, and the row helpers every kNN method shares.

Row block × column tile matmuls with a running top-k per row; an n×n matrix is never built.
When every row is searched in float32 (the CPU path), each pair's cosine is computed once
(:func:`symmetric_knn`): half the multiply-adds.
On CUDA the tiles are float16 (fp32 accumulation); on a CPU with native bf16 instructions
(``avx512_bf16``/``amx_bf16``) bfloat16 (≈3× the fp32 rate there); else float32. When the tiles
are 16-bit, ``k + RERANK_EXTRA`` candidates are kept and re-scored in float32; a row whose last
candidate scores within the 16-bit error bound (:func:`low_precision_bound`) of its re-ranked k-th
neighbour could hide a better row outside the candidates, and is searched again in float32. So the
result equals the fp32 one (collapsed clusters of near-identical rows, such as Gemma-3's unused
rows at cosine 0.9999, are where this matters: 32 extra fp16 candidates alone gave recall 0.988
on a sample of its rows). Example: rows (1, 0),
(1, 1), (0, 1) with k = 1 give neighbours [1, 0, 1] and similarities [0.707, 0.707, 0.707].
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from embscope.progress import track

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: candidates kept beyond k when tiles are 16-bit, re-scored in fp32 (bf16 has an 8-bit mantissa:
#: similarities are off by up to ~0.004; dense vocabularies such as SmolLM2's have dozens of rows
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
    if rows is None and dtype == torch.float32 and n > SYMMETRIC_FROM and dev.type == "cpu":
        return symmetric_knn(xn, k, progress=progress)
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


def symmetric_knn(xn: "torch.Tensor", k: int, *, block: int | None = None, progress: bool = True):
    """Exact fp32 top-``k`` of every row of unit ``xn`` (on the CPU), each pair's cosine computed once.

    ``cos(x_i, x_j) = cos(x_j, x_i)``, so the all-rows search needs only the tiles on and above
    the block diagonal: the tile ``X_a X_bᵀ`` (a < b) feeds the running top-k of block a's rows
    (along its columns) and of block b's rows (along its rows, i.e. the top-k of ``X_b X_aᵀ``).
    That is n(n + B)/2 dot products instead of n², half the multiply-adds, for the same result
    (ties aside: which of two equal similarities is kept may differ). Example: 3 blocks → tiles
    (0,0), (0,1), (0,2), (1,1), (1,2), (2,2): 6 matmuls instead of 9.

    Each tile is read by the compiled :func:`~embscope.geometry.kernels.select_into`, which
    inserts only the similarities above a row's current k-th best (most elements are skipped after
    a few tiles); sorting every tile (``topk``) cost ten times the matmul on narrow matrices
    (GloVe's 50 columns).

    Returns (sims (n, k) float32, ids (n, k) int64), most similar first.
    """
    import numpy as np
    import torch

    from embscope.geometry.kernels import select_into

    n, d = xn.shape
    b = block or max(1024, min(SYMMETRIC_BLOCK, n))
    m = min(k, n - 1)
    starts = list(range(0, n, b))
    best_v = np.full((n, m), -np.inf, dtype=np.float32)
    best_i = np.full((n, m), -1, dtype=np.int64)
    ids = np.arange(n, dtype=np.int64)
    pairs = [(a, c) for ai, a in enumerate(starts) for c in starts[ai:]]
    it = track(pairs, total=len(pairs), description="kNN exact") if progress else pairs
    xc = xn.cpu().float()
    for a, c in it:
        qa, qc = xc[a:a + b], xc[c:c + b]
        tile = qa @ qc.T                                                        # (|a|, |c|) fp32
        if a == c:
            tile.fill_diagonal_(-math.inf)
        ia, ic = ids[a:a + len(qa)], ids[c:c + len(qc)]
        select_into(tile.numpy(), ia, ic, best_v, best_i)
        if a != c:
            select_into(tile.T.contiguous().numpy(), ic, ia, best_v, best_i)
    dev = xn.device
    return torch.from_numpy(best_v).to(dev), torch.from_numpy(best_i).to(dev)


def low_precision_bound(dtype, d: int) -> float:
    """Largest error of a cosine of two unit rows rounded to ``dtype`` (16-bit) and summed in fp32.

    Rounding each entry costs a relative error ≤ u (unit roundoff: 2^-11 for float16, 2^-8 for
    bfloat16), so |â·b̂ − a·b| ≤ (2u + u²)·Σ|a_i b_i| ≤ 2u + u² for unit rows (Cauchy–Schwarz), plus
    at most d·2^-24 from the fp32 accumulation (Higham, *Accuracy and Stability of Numerical
    Algorithms*, 2002, §3.1). A row whose m-th 16-bit candidate scores within this of its re-ranked
    k-th neighbour may have a true neighbour outside the candidates, and is searched again in fp32.
    """
    import torch

    u = 2.0 ** -11 if dtype == torch.float16 else 2.0 ** -8
    return 2 * u + u * u + d * 2.0 ** -24
