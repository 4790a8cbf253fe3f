"""Nearest trained rows of a few query vectors: the top-k cosine neighbours of each query among a
matrix's trained rows, equal to a float32 search, with the products in bf16 where this CPU
multiplies them faster (measured: :func:`embscope.machine.fast_dtype`) and every row
that the bf16 rounding bound cannot rule out scored in float32.

Used by the initialisation strategies (:func:`embscope.extension.init.nearest_trained`) and the
diagnostics that list each new row's nearest tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: matrix rows per block of :func:`nearest_rows`
NEAREST_CHUNK = 16384


def nearest_rows(matrix: "torch.Tensor", trained: "torch.Tensor", queries: "torch.Tensor", k: int, *,
                 norms: "torch.Tensor | None" = None, dtype=None) -> "tuple[torch.Tensor, torch.Tensor]":
    """``(sims, ids)`` (n, k) each: the top-k cosine neighbours of each query among the rows of
    ``matrix`` (V, d) where ``trained`` (V,) is True, equal to a float32 search.

    The products run in ``dtype`` (default: bf16 where this CPU multiplies products of width d at
    least :data:`embscope.machine.BF16_GAIN` times faster, measured; else float32), at the thread
    count they run fastest at now (:func:`embscope.machine.best_threads`), on the
    matrix in its stored dtype (a bf16 checkpoint is never converted for them). A bf16 cosine is
    off by at most ε = 2u + u² + 2⁻⁹ + d·2⁻²⁴ (u = 2⁻⁸: the rounding of both inputs, of the bf16
    output, and the float32 accumulation; :func:`embscope.geometry.exact.low_precision_bound`
    without the output term), so a row of the true top-k, at least the true k-th ``t_k``, has a
    bf16 cosine of at least ``t_k − ε`` ≥ (any k rows' k-th exact cosine) − ε. One pass keeps each
    query's top-k of exact float32 cosines and scores in float32 every row whose bf16 cosine
    reaches its current k-th − ε (:func:`~embscope.compiled.rescore_queries_into`): the
    threshold rises as the list fills, and no true neighbour is ever below it.
    ``norms`` (V,): the rows' float32 norms, when the caller has them (else computed per block).

    Example: rows (1, 0), (1, 1), (0, 1), all trained, query (1, 0.1), k = 2 → ids [0, 1] with
    cosines [0.995, 0.774].
    """
    import torch

    from embscope.machine import best_threads, fast_dtype, threads

    q = torch.nn.functional.normalize(queries.float(), dim=1)                  # (n, d)
    n, d = q.shape
    if q.device.type != "cpu":
        return _nearest_pass(matrix, trained, q, k, norms, torch.float32)
    if dtype is None:
        dtype = torch.bfloat16 if fast_dtype(d) == "bfloat16" else torch.float32
    name = "bfloat16" if dtype == torch.bfloat16 else "float32"
    with threads(best_threads(d, name)):
        if dtype == torch.float32 or n == 0 or int(trained.sum()) <= k:
            return _nearest_pass(matrix, trained, q, k, norms, torch.float32)
        return _screened_pass(matrix, trained, q, k, norms, dtype)


def _screened_pass(matrix, trained, q, k, norms, dtype):
    """:func:`nearest_rows`' one bf16 pass, its survivors scored in float32 (CPU)."""
    import numpy as np
    import torch

    from embscope.models.rows import converted_blocks
    from embscope.compiled import rescore_queries_into

    n, d = q.shape
    u = 2.0 ** -8
    eps = np.float32(2 * u + u * u + 2.0 ** -9 + d * 2.0 ** -24)
    qd, qs = q.to(dtype), np.ascontiguousarray(q.numpy())
    best_v = np.full((n, k), -np.inf, dtype=np.float32)
    best_i = np.full((n, k), -1, dtype=np.int64)
    floor = np.full(n, -np.inf, dtype=np.float32)
    ok_all = trained.numpy().astype(np.uint8)
    for s, blk in converted_blocks(matrix, NEAREST_CHUNK, torch.float32):  # the stored values, exactly
        raw = matrix[s:s + NEAREST_CHUNK]
        nb = norms[s:s + NEAREST_CHUNK] if norms is not None else torch.linalg.vector_norm(blk, dim=1)
        scale = (1.0 / nb.float().clamp_min(1e-12)).contiguous()
        tile = ((qd @ raw.to(dtype).T).float() * scale).numpy()                    # (n, c)
        rescore_queries_into(qs, blk.numpy(), scale.numpy(), tile, s, ok_all[s:s + NEAREST_CHUNK], floor, eps,
                             best_v, best_i)
    return torch.from_numpy(best_v), torch.from_numpy(best_i)


def _nearest_pass(matrix, trained, q, k, norms, dtype):
    """One pass over ``matrix`` in blocks: products in ``dtype``, divided by the rows' norms,
    untrained rows masked, a running top-k per query."""
    import torch

    from embscope.models.rows import converted_blocks

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
