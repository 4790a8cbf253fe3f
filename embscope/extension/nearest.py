"""Nearest trained rows of a few query vectors: the top-k cosine neighbours of each query among a
matrix's trained rows, equal to a float32 search, with the products in bf16 where this CPU
multiplies them faster (measured by :func:`embscope.models.forward.bf16_gain`) and every bf16
answer that its rounding bound cannot settle screened again: every row within the bound of the
query's k-th is scored in float32.

Used by the initialisation strategies (:func:`embscope.extension.init.nearest_trained`) and the
diagnostics that list each new row's nearest tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: candidates kept beyond k by the bf16 pass of :func:`nearest_rows`, re-scored in float32
NEAREST_EXTRA = 64
#: matrix rows per block of :func:`nearest_rows`
NEAREST_CHUNK = 16384
#: queries whose candidates are re-scored together (128 × 69 rows × 3584 floats: 127 MB)
RESCORE_QUERIES = 128


def nearest_rows(matrix: "torch.Tensor", trained: "torch.Tensor", queries: "torch.Tensor", k: int, *,
                 norms: "torch.Tensor | None" = None, dtype=None) -> "tuple[torch.Tensor, torch.Tensor]":
    """``(sims, ids)`` (n, k) each: the top-k cosine neighbours of each query among the rows of
    ``matrix`` (V, d) where ``trained`` (V,) is True, equal to a float32 search.

    The products run in ``dtype`` (default: bf16 where this CPU multiplies the block shape at
    least :data:`embscope.models.forward.BF16_GAIN` times faster, measured; else float32), on the
    matrix in its stored dtype (a bf16 checkpoint is never converted block by block). In bf16,
    ``k +`` :data:`NEAREST_EXTRA` candidates per query are kept and re-scored in float32. A bf16
    cosine is off by at most ε = 2u + u² + 2⁻⁹ + d·2⁻²⁴ (u = 2⁻⁸: the rounding of both inputs,
    of the bf16 output, and the float32 accumulation; :func:`embscope.geometry.exact.low_precision_bound`
    without the output term), so a row outside the candidates can beat the re-scored k-th only if
    the last candidate's bf16 cosine is within ε of it: such queries are screened again
    (:func:`_screen_pass`), every row whose bf16 cosine reaches the re-scored k-th − ε scored in
    float32, so the answer is still float32's.
    ``norms`` (V,): the rows' float32 norms, when the caller has them (else computed per block).

    Example: rows (1, 0), (1, 1), (0, 1), all trained, query (1, 0.1), k = 2 → ids [0, 1] with
    cosines [0.995, 0.774].
    """
    import torch

    from embscope.models.forward import BF16_GAIN, bf16_gain

    q = torch.nn.functional.normalize(queries.float(), dim=1)                  # (n, d)
    n, d = q.shape
    if dtype is None:
        dtype = torch.bfloat16 if q.device.type == "cpu" and bf16_gain(d, 2048) >= BF16_GAIN else torch.float32
    n_trained = int(trained.sum())
    m = min(k + NEAREST_EXTRA, n_trained)
    if dtype == torch.float32 or n == 0 or m <= k:
        return _nearest_pass(matrix, trained, q, k, norms, torch.float32)
    low, cand = _nearest_pass(matrix, trained, q, m, norms, dtype)           # (n, m) bf16 candidates
    sims = torch.empty(n, k)
    ids = torch.empty(n, k, dtype=torch.long)
    for a in range(0, n, RESCORE_QUERIES):                                    # float32 re-score
        c = cand[a:a + RESCORE_QUERIES]
        rows = matrix[c.reshape(-1)].float().reshape(*c.shape, d)             # (b, m, d)
        exact = torch.einsum("bd,bmd->bm", q[a:a + RESCORE_QUERIES], rows) \
            / torch.linalg.vector_norm(rows, dim=2).clamp_min(1e-12)
        sims[a:a + RESCORE_QUERIES], order = exact.topk(k, dim=1)
        ids[a:a + RESCORE_QUERIES] = c.gather(1, order)
    # a row outside the candidates scored at most the last candidate's bf16 cosine, so its true
    # cosine is at most that + ε: it can beat the re-scored k-th only when that reaches it
    u = 2.0 ** -8
    eps = 2 * u + u * u + 2.0 ** -9 + d * 2.0 ** -24
    unsure = torch.nonzero(low[:, -1] + eps >= sims[:, -1]).flatten()
    if len(unsure):
        sims[unsure], ids[unsure] = _screen_pass(matrix, trained, q[unsure], k, norms, dtype,
                                                 sims[unsure, -1] - eps)
    return sims, ids


def _screen_pass(matrix, trained, q, k, norms, dtype, floor):
    """The exact top-k of unit queries ``q`` whose true k-th cosine is at least ``floor + ε``
    (a re-scored k-th): any row in the top-k then has a bf16 cosine ≥ ``floor``. Per block, the
    queries and rows with such a pair are multiplied again in float32 (one product of the rows
    that pass, never more than the block) and each query keeps its best k of those."""
    import torch

    from embscope.allocator import converted_blocks

    n = q.shape[0]
    qd = q.to(dtype)
    best_s = torch.full((n, 0), -2.0)
    best_i = torch.zeros((n, 0), dtype=torch.long)
    for s, block in converted_blocks(matrix, NEAREST_CHUNK, dtype):
        nb = norms[s:s + NEAREST_CHUNK] if norms is not None else torch.linalg.vector_norm(block.float(), dim=1)
        sims = (qd @ block.T).float() / nb.clamp_min(1e-12)
        sims[:, ~trained[s:s + NEAREST_CHUNK]] = -2.0
        hit = sims >= floor[:, None]
        cols = torch.nonzero(hit.any(0)).flatten()
        if not len(cols):
            continue
        rows = matrix[cols + s].float()  # the stored rows (a float32 matrix's blocks are rounded copies)
        exact = (q @ rows.T) / torch.linalg.vector_norm(rows, dim=1).clamp_min(1e-12)   # (n, u) float32
        exact = torch.where(hit[:, cols], exact, torch.full_like(exact, -2.0))
        v, i = exact.topk(min(k, len(cols)), dim=1)
        best_s, order = torch.cat([best_s, v], 1).topk(min(k, best_s.shape[1] + v.shape[1]), dim=1)
        best_i = torch.cat([best_i, cols[i] + s], 1).gather(1, order)
    return best_s, best_i


def _nearest_pass(matrix, trained, q, k, norms, dtype):
    """One pass over ``matrix`` in blocks: products in ``dtype``, divided by the rows' norms,
    untrained rows masked, a running top-k per query."""
    import torch

    from embscope.allocator import converted_blocks

    qd = q.to(dtype)
    best_s = torch.full((q.shape[0], 0), -2.0)
    best_i = torch.zeros((q.shape[0], 0), dtype=torch.long)
    for s, block in converted_blocks(matrix, NEAREST_CHUNK, dtype):
        nb = norms[s:s + NEAREST_CHUNK] if norms is not None else \
            torch.linalg.vector_norm(block.float(), dim=1)
        sims = (qd @ block.T).float() / nb.clamp_min(1e-12)                    # (n, c)
        sims[:, ~trained[s:s + NEAREST_CHUNK]] = -2.0
        kk = min(k, sims.shape[1])
        v, i = sims.topk(kk, dim=1)
        best_s, order = torch.cat([best_s, v], 1).topk(min(k, best_s.shape[1] + kk), dim=1)
        best_i = torch.cat([best_i, i + s], 1).gather(1, order)
    return best_s, best_i
