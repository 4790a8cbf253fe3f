"""Every pair of rows at cosine ≥ τ, found exactly: the near-duplicate join behind the collapse gate.

A knot counts as a collapse only when the spread δ over the ⌈k/2⌉ nearest rows,
``mean_j √(1 + r_j² − 2 r_j s_j)``, is at most :data:`~embscope.geometry.indicators.COLLAPSE_SPREAD`
(0.2). Each term is at least ``√(1 − s_j²)`` (its minimum over the norm ratio r_j, at r_j = s_j),
so a collapsed row has some row at cosine ``s ≥ √(1 − 0.2²) ≈ 0.9798``. A row with no other
row that close is *not* knot-flagged, whatever its true neighbours: that is what the certified
graph (:mod:`embscope.geometry.certify`) needs proven for the rows it does not search exactly.

Contractive screen. With ``V`` (d × p) orthonormal, write a unit row as ``x = Vy + w`` with
``w ⊥ V``; then ``x·x' = y·y' + w·w' ≤ y·y' + ‖w‖‖w'‖`` (Cauchy–Schwarz). So the unit vectors
``z = (y, ‖w‖)`` in p + 1 dimensions satisfy ``z·z' ≥ x·x'`` for every pair: no pair at cosine
≥ τ is lost by keeping only pairs with ``z·z' ≥ τ``, whatever V is. V only decides how many
*other* pairs pass: the top right singular vectors of a random sample of rows keep the residuals
small. Measured (1,000 random rows against all, τ = 0.98): the real 7B head's rows (3584 wide, a
flat spectrum: 128 directions hold 24 % of the energy) pass 22 candidates a row at p = 128
(1.3 true pairs), 1,533 at p = 64; Gemma-3-270M (640 wide) 176 at p = 64 for 173 true pairs (its
6,242 unused rows are one collapsed cluster). The screen costs n²·(p + 1)/2 multiply-adds
(each pair once) against exact search's n²·d/2; the candidates are then scored exactly, in
quarters of the width, each pair dropped as soon as its partial sum plus the norms of the rest
(Cauchy–Schwarz) falls below the acceptance threshold.

Rounding. ``y`` and ``‖w‖`` are computed in float64 from the float32 unit rows, the screen in
float32: its error is at most ε_z = 4(p + 1)·2^-24 (the rounding of z and the float32 sum). Exact
search computes each cosine in float32 with an error of at most δ = d·2^-24 (2.1e-4 at d = 3584;
Higham, *Accuracy and Stability of Numerical Algorithms*, 2002, §3.1), and so does the scoring of a
candidate here (in another order). A candidate is accepted at ``τ − 2δ`` (so no pair that exact
search puts at ≥ τ is refused), and the screen keeps pairs at ``τ − 4δ − ε_z`` (so a pair it drops
is below every accepted one, also by exact search's figures: the k partners of a row with at least
k are its k nearest rows).

Rows are sorted by their first coordinate ``y₁``: since ``|y₁ − y₁'| ≤ ‖z − z'‖ = √(2 − 2 z·z')``,
a tile of row blocks whose ``y₁`` ranges lie farther apart than ``√(2 − 2τ)`` holds no candidate
and is skipped (on GloVe's 50-wide rows half the tiles; on diffuse wide rows few).

Output: per row, its best ``k`` partners at or above τ (exact float32 cosines, descending) and how
many partners it has. A row with at least k partners has its exact k nearest rows among them: any
row closer than its k-th partner is itself at ≥ τ, so a partner.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from embscope.geometry.knn_record import JoinRecord
from embscope.progress import track

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: widths tried for the screen (the cheapest estimated total wins; the matrix's own width ends it)
WIDTHS = (16, 32, 64, 128, 256)
#: rows the basis is fitted on, and query rows the candidate counts of each width are estimated on
BASIS_ROWS = 8192
ESTIMATE_ROWS = 512
#: rows per screening tile (a 2048 × 2048 float32 tile is 16 MiB: it stays in the last-level cache
#: between the product that writes it and the kernel that reads it)
BLOCK = 2048
#: rows at least this wide are scored in quarters (narrower ones in one piece: on Gemma-3's 640-wide
#: rows, whose candidates are mostly true partners that read every quarter, pieces cost 30 % more)
PIECES_FROM = 1024
#: a candidate pair costs about this many multiply-adds of the screen per unit of the matrix
#: width (a random row read and a d-long dot product against BLAS's blocked products), measured
CANDIDATE_COST = 8.0


@dataclass
class Join:
    """Pairs of rows at cosine ≥ ``tau``."""

    tau: float
    #: (n, k) cosine of each row's best partners at ≥ tau, descending; -inf where fewer
    best_v: np.ndarray
    #: (n, k) their ids; -1 where fewer
    best_i: np.ndarray
    #: (n,) partners at ≥ tau (all of them, not only the k kept)
    count: np.ndarray
    #: width, screen threshold, candidate pairs scored, tiles skipped, seconds
    info: JoinRecord

    def rows(self) -> np.ndarray:
        """Row ids with at least one partner at ≥ tau."""
        return np.flatnonzero(self.count > 0)


def _basis(xn: "torch.Tensor", p: int, seed: int) -> "torch.Tensor":
    """(d, p) float64 orthonormal: the top right singular vectors of up to BASIS_ROWS random rows
    (any orthonormal basis keeps the screen exact; this one keeps it selective)."""
    import torch

    n, d = xn.shape
    g = torch.Generator().manual_seed(seed)
    take = torch.randperm(n, generator=g)[:min(n, BASIS_ROWS)]
    _, _, v = torch.svd_lowrank(xn[take].float(), q=min(p + 8, d, len(take)), niter=2)
    return torch.linalg.qr(v[:, :p].double())[0]  # re-orthonormalised in float64


def embed(xn: "torch.Tensor", basis: "torch.Tensor") -> "torch.Tensor":
    """(n, p + 1) float32 rows ``z = (y, ‖w‖)`` with ``z·z' ≥ x·x'`` (module docstring); computed
    in float64, rounded once."""
    import torch

    out = []
    for s in range(0, xn.shape[0], 16384):
        blk = xn[s:s + 16384].double()
        y = blk @ basis
        r = (blk.pow(2).sum(1) - y.pow(2).sum(1)).clamp_min(0).sqrt()
        out.append(torch.cat([y, r[:, None]], 1).float())
    return torch.cat(out)


def _pick_width(xn: "torch.Tensor", thr: float, seed: int) -> tuple[int, "torch.Tensor", dict[int, float]]:
    """The screen width with the lowest estimated cost: n²(p + 1)/2 for the screen plus
    CANDIDATE_COST·d per candidate pair, candidates counted (in float32: an estimate) on
    ESTIMATE_ROWS random rows against all. Returns (width, its basis, {width: candidates a row})."""
    import torch

    n, d = xn.shape
    widths = [p for p in WIDTHS if p < d] or [max(1, d - 1)]
    basis = _basis(xn, max(widths), seed)
    y = xn @ basis.float()                                                   # (n, max p)
    sq = y.pow(2).cumsum(1)
    g = torch.Generator().manual_seed(seed + 1)
    q = torch.randperm(n, generator=g)[:min(n, ESTIMATE_ROWS)]
    est = {}
    for p in widths:
        r = (1 - sq[:, p - 1]).clamp_min(0).sqrt()
        s = y[q, :p] @ y[:, :p].T + r[q, None] * r[None, :]
        s[torch.arange(len(q)), q] = -2.0
        per_row = float((s >= thr).sum()) / len(q)
        est[p] = (n * n * (p + 1) / 2 + n * per_row / 2 * CANDIDATE_COST * d, per_row)
    best = min(est, key=lambda p: est[p][0])
    return best, basis[:, :best], {p: round(v[1], 1) for p, v in est.items()}


def _tails(xc: "torch.Tensor") -> tuple[np.ndarray, np.ndarray]:
    """``(cuts, tails)``: where the exact scoring of a pair may stop (quarters of the width, from
    :data:`PIECES_FROM` columns) and each row's norm past each cut but the last, in float64, rounded up, so
    ``partial + tails[i]·tails[j]`` bounds the pair's cosine from above (Cauchy–Schwarz on the
    coordinates not yet read). On the 7B-shaped rows (centre + noise: candidates at cosine
    ≈ 0.80 against τ ≈ 0.98, the bound 0.95 after the first quarter) every candidate stops
    there: 154 ns a pair instead of 504 (one tile of 86,577 candidates, 2 threads)."""
    import torch

    n, d = xc.shape
    cuts = np.array([d // 4, d // 2, 3 * d // 4, d] if d >= PIECES_FROM else [d], dtype=np.int64)
    tails = np.zeros((n, max(1, len(cuts) - 1)), dtype=np.float32)
    for s in range(0, n, 16384):
        sq = xc[s:s + 16384].double().pow(2)
        for h, e in enumerate(cuts[:-1]):
            tails[s:s + 16384, h] = (sq[:, e:].sum(1).sqrt() * (1 + 1e-6)).float().numpy()
    return cuts, tails


def near_duplicates(xn: "torch.Tensor", tau: float, k: int, *, seed: int = 0, progress: bool = True) -> Join:
    """Every pair of unit rows of ``xn`` (CPU, float32) at cosine ≥ ``tau`` (module docstring).

    Returns a :class:`Join` with each row's best ``k`` partners. Example: rows (1, 0),
    (0.99, 0.141), (0, 1) at tau 0.98: rows 0 and 1 are partners (cosine 0.99), row 2 has none.
    """
    import torch

    from embscope.geometry.kernels import count_at_least, insert_pairs, score_pairs

    t0 = time.perf_counter()
    xc = xn.cpu().float().contiguous()
    n, d = xc.shape
    delta = d * 2.0 ** -24
    accept = tau - 2 * delta
    p, basis, per_row = _pick_width(xc, tau - 4 * delta, seed)
    thr = tau - 4 * delta - 4 * (p + 1) * 2.0 ** -24
    z = embed(xc, basis)
    order = torch.argsort(z[:, 0])
    zs = z[order].contiguous()
    u = zs[:, 0].numpy()
    ids = order.numpy().astype(np.int64)
    xs = xc.numpy()
    cuts, tails = _tails(xc)
    reject = np.float32(accept - delta)  # below this after a piece: no partner (a partial sum's rounding ≤ d·2^-24)
    best_v = np.full((n, k), -np.inf, dtype=np.float32)
    best_i = np.full((n, k), -1, dtype=np.int64)
    count = np.zeros(n, dtype=np.int64)
    reach = math.sqrt(max(0.0, 2 - 2 * thr)) + 1e-6
    starts = list(range(0, n, BLOCK))
    scored = skipped = 0
    it = track(starts, total=len(starts), description="kNN join", unit="row blocks") if progress else starts
    for a in it:
        za = zs[a:a + BLOCK]
        ia = ids[a:a + BLOCK]
        hi_a = u[min(n, a + BLOCK) - 1]
        for c in range(a, n, BLOCK):
            if u[c] - hi_a > reach:  # sorted by y₁: this tile and every later one hold no pair
                skipped += len(range(c, n, BLOCK))
                break
            tile = (za @ zs[c:c + BLOCK].T).numpy()                              # (|a|, |c|)
            counts = np.empty(tile.shape[0], dtype=np.int64)
            count_at_least(tile, np.float32(thr), a == c, counts)
            total = int(counts.sum())
            if not total:
                continue
            first = np.concatenate([[0], np.cumsum(counts)[:-1]])
            pi = np.empty(total, np.int64)
            pj = np.empty(total, np.int64)
            ps = np.empty(total, np.float32)
            score_pairs(xs, tails, cuts, ia, ids[c:c + BLOCK], tile, np.float32(thr), a == c, first, reject,
                        pi, pj, ps)
            insert_pairs(pi, pj, ps, np.float32(accept), best_v, best_i, count)
            scored += total
    tiles = len(starts) * (len(starts) + 1) // 2
    return Join(tau=tau, best_v=best_v, best_i=best_i, count=count,
                info=JoinRecord(width=p, screen_threshold=round(thr, 6), accept_threshold=round(accept, 6),
                                candidates_scored=scored, tiles=tiles, tiles_skipped=skipped,
                                rows_with_partner=int((count > 0).sum()),
                                seconds=round(time.perf_counter() - t0, 3), estimated_candidates_per_row=per_row))
