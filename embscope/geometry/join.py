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

16-bit screen. Where the probe (:func:`embscope.machine.gemm_rates`) measures bfloat16 products
faster, the screen may run on ``z`` rounded to bfloat16 (float32 accumulation, bfloat16 result):
its error is then at most β = :func:`~embscope.geometry.exact.low_precision_bound` at width p + 1
(``Σ|z_i z'_i| ≤ ‖z‖‖z'‖ = 1``), and the screen keeps pairs at ``τ − 4δ − ε_z − β``: more
candidates (each scored exactly as above) for a product about four times faster on a CPU with
native bf16. Its entries are compared as integers: a positive bfloat16 orders like its bit
pattern, and the threshold is positive. Which of the two runs, and at which width, is the lower
estimate of screen plus candidates (:func:`_pick_width`); on a CPU without native bf16 it is
always float32.

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
#: a candidate pair scored alone costs about as much as this many multiply-adds of a float32
#: product (two rows read from memory and their dot product, stopped early for wide rows: measured
#: 150 ns a pair on 2 threads on Gemma-3's 640-wide rows and on the real 7B rows' 3584-wide ones)
PAIR_MACS = 16384
#: a tile whose screen passes more than this share of its pairs is scored as one float32 product
#: of its rows (the product of two 2048-row blocks of Gemma-3 takes 28 ms, about 180,000 pairs)
DENSE_SHARE = 1 / 64
#: random rows the candidates per row of each width are counted against (scaled to all rows)
ESTIMATE_COLUMNS = 32768


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


def _square_sums(xc: "torch.Tensor", cuts: np.ndarray) -> np.ndarray:
    """(n, len(cuts)) float64: each row's sum of squares over the columns ``[cuts[h-1], cuts[h])``
    (compiled, one pass, no temporary)."""
    from embscope.geometry.kernels import square_sums

    out = np.empty((xc.shape[0], len(cuts)), dtype=np.float64)
    square_sums(xc.numpy(), np.ascontiguousarray(cuts, dtype=np.int64), out)
    return out


def embed(xn: "torch.Tensor", basis: "torch.Tensor", norm2: np.ndarray | None = None) -> "torch.Tensor":
    """(n, p + 1) float32 rows ``z = (y, ‖w‖)`` with ``z·z' ≥ x·x'`` (module docstring); computed
    in float64 (``y`` by blocks through one reused buffer; ``norm2``: the rows' squared norms in
    float64, default computed), rounded once."""
    import torch

    n, d = xn.shape
    p = basis.shape[1]
    if norm2 is None:
        norm2 = _square_sums(xn.float().contiguous(), np.array([d]))[:, 0]
    out = torch.empty(n, p + 1, dtype=torch.float32)
    block = 16384
    buf = torch.empty(min(n, block), d, dtype=torch.float64)
    ybuf = torch.empty(min(n, block), p, dtype=torch.float64)
    for s in range(0, n, block):
        b = min(block, n - s)
        buf[:b].copy_(xn[s:s + b])
        y = torch.mm(buf[:b], basis, out=ybuf[:b])
        r = (torch.from_numpy(norm2[s:s + b]) - y.pow(2).sum(1)).clamp_min(0).sqrt()
        out[s:s + b, :p] = y
        out[s:s + b, p] = r
    return out


def _pick_width(xn: "torch.Tensor", thr: float, seed: int) -> tuple[int, str, "torch.Tensor", dict[str, float]]:
    """The screen's width and dtype with the lowest estimated time: n²(p + 1)/2 multiply-adds of the
    screen at the probe's rate for the dtype, plus :data:`PAIR_MACS` per candidate pair at the
    float32 rate, candidates counted (in float32: an estimate) on ESTIMATE_ROWS random rows
    against up to ESTIMATE_COLUMNS random rows, scaled to all n, at the dtype's threshold (``thr``
    less the bfloat16 bound for bfloat16). Returns (width, dtype, its basis,
    {"<width>" or "<width> bfloat16": candidates a row})."""
    import torch

    from embscope.machine import gemm_rates

    n, d = xn.shape
    widths = [p for p in WIDTHS if p < d] or [max(1, d - 1)]
    basis = _basis(xn, max(widths), seed)
    g = torch.Generator().manual_seed(seed + 1)
    cols = torch.randperm(n, generator=g)[:min(n, ESTIMATE_COLUMNS)]
    q = cols[:min(len(cols), ESTIMATE_ROWS)]
    y = xn[cols] @ basis.float()                                             # (c, max p)
    sq = y.pow(2).cumsum(1)
    scale = n / len(cols)
    est, per_row = {}, {}
    for p in widths:
        rates = gemm_rates(p + 1)
        r32 = max(rates.rate("float32"), 1e-9)
        r = (1 - sq[:, p - 1]).clamp_min(0).sqrt()
        s = y[:len(q), :p] @ y[:, :p].T + r[:len(q), None] * r[None, :]
        s[torch.arange(len(q)), torch.arange(len(q))] = -2.0
        for dtype in ("float32", "bfloat16"):
            rate = rates.rate(dtype)
            if rate <= 0:
                continue
            cand = float((s >= thr - _screen_bound(dtype, p)).sum()) / len(q) * scale
            label = f"{p}" if dtype == "float32" else f"{p} bfloat16"
            est[(p, dtype)] = 2 * n * n * (p + 1) / 2 / rate + 2 * n * cand / 2 * PAIR_MACS / r32
            per_row[label] = round(cand, 1)
    p, dtype = min(est, key=est.get)
    return p, dtype, basis[:, :p].contiguous(), per_row


def _screen_bound(dtype: str, p: int) -> float:
    """How far a screen entry in ``dtype`` may lie below the float32 one: 0, or the bfloat16 bound
    of a product of unit vectors of width p + 1."""
    import torch

    from embscope.geometry.exact import low_precision_bound

    return 0.0 if dtype == "float32" else low_precision_bound(torch.bfloat16, p + 1)


def _tails(sums: np.ndarray) -> np.ndarray:
    """(n, pieces − 1) float32: each row's norm past each cut but the last (``sums``: its squares
    per piece, :func:`_square_sums`), in float64, rounded up, so ``partial + tails[i]·tails[j]``
    bounds the pair's cosine from above (Cauchy–Schwarz on the coordinates not yet read). On the
    7B-shaped rows (centre + noise: candidates at cosine ≈ 0.80 against τ ≈ 0.98, the bound 0.95
    after the first quarter) every candidate stops there: 154 ns a pair instead of 504 (one tile
    of 86,577 candidates, 2 threads)."""
    if sums.shape[1] == 1:
        return np.zeros((len(sums), 1), dtype=np.float32)
    rest = np.cumsum(sums[:, ::-1], axis=1)[:, ::-1][:, 1:]               # squares past cut h
    return (np.sqrt(rest) * (1 + 1e-6)).astype(np.float32)


class _Tile:
    """One reused buffer for the (|a|, |c|) products of the join (a fresh 16 MiB tile per product
    is a fresh mapping the kernel must fault in). A bfloat16 product comes back as its bit
    patterns (int16: positive values order as their bits)."""

    def __init__(self, dtype=None):
        import torch

        self.dtype = dtype or torch.float32
        self.buf = torch.empty(BLOCK * BLOCK, dtype=self.dtype)

    def product(self, a: "torch.Tensor", c: "torch.Tensor") -> np.ndarray:
        import torch

        out = torch.mm(a, c.T, out=self.buf[:len(a) * len(c)].view(len(a), len(c)))
        return out.numpy() if self.dtype == torch.float32 else out.view(torch.int16).numpy()


def near_duplicates(xn: "torch.Tensor", tau: float, k: int, *, seed: int = 0, progress: bool = True) -> Join:
    """Every pair of unit rows of ``xn`` (CPU, float32) at cosine ≥ ``tau`` (module docstring).

    Returns a :class:`Join` with each row's best ``k`` partners. Example: rows (1, 0),
    (0.99, 0.141), (0, 1) at tau 0.98: rows 0 and 1 are partners (cosine 0.99), row 2 has none.
    A float32 contiguous ``xn`` is the join's own working copy: its rows are reordered while the
    join runs and are back in their order, bit for bit, when it returns or raises.
    """
    import torch

    from embscope.geometry.kernels import permute_rows

    t0 = time.perf_counter()
    xc = xn.cpu().float().contiguous()
    n, d = xc.shape
    delta = d * 2.0 ** -24
    accept = tau - 2 * delta
    p, screen_dtype, basis, per_row = _pick_width(xc, tau - 4 * delta, seed)
    thr = tau - 4 * delta - 4 * (p + 1) * 2.0 ** -24 - _screen_bound(screen_dtype, p)
    cuts = np.array([d // 4, d // 2, 3 * d // 4, d] if d >= PIECES_FROM else [d], dtype=np.int64)
    sums = _square_sums(xc, cuts)
    z = embed(xc, basis, sums.sum(1))
    order = torch.argsort(z[:, 0])
    zs = z[order].contiguous()
    del z
    u = zs[:, 0].numpy()
    low = screen_dtype == "bfloat16"
    screen = _Tile(torch.bfloat16 if low else None)
    if low:
        zs = zs.to(torch.bfloat16)
    # the threshold as the tile's entries hold it: float32, or the bits of the least bfloat16 ≥ thr
    thr_t = _bf16_bits_at_least(thr) if low else np.float32(thr)
    ids = order.numpy().astype(np.int64)
    # the rows in screen order, so that a tile's rows and columns are two contiguous blocks, read
    # from the cache by the pair scoring (random rows from memory cost Gemma-3's join 3.4 s):
    # reordered in place and put back at the end (a sorted copy was another n × d float32, 2.2 GB
    # at 152064 × 3584, the audit's peak)
    permute_rows(xc.numpy(), ids, np.empty(d, np.float32))
    try:
        pairs = _Pairs(xc, cuts, _tails(sums)[ids], ids, k, np.float32(accept), delta)
        skipped = _screen(zs, u, thr, thr_t, screen, pairs, progress)
    finally:
        back = np.empty_like(ids)
        back[ids] = np.arange(n)
        permute_rows(xc.numpy(), back, np.empty(d, np.float32))
    starts = range(0, n, BLOCK)
    tiles = len(starts) * (len(starts) + 1) // 2
    return Join(tau=tau, best_v=pairs.best_v, best_i=pairs.best_i, count=pairs.count,
                info=JoinRecord(width=p, screen_threshold=round(thr, 6), accept_threshold=round(accept, 6),
                                candidates_scored=pairs.scored, tiles=tiles, tiles_skipped=skipped,
                                dense_tiles=pairs.dense, screen_dtype=screen_dtype, rows_with_partner=int((pairs.count > 0).sum()),
                                seconds=round(time.perf_counter() - t0, 3), estimated_candidates_per_row=per_row))


def _screen(zs, u: np.ndarray, thr: float, thr_t, screen: "_Tile", pairs: "_Pairs", progress: bool) -> int:
    """Every tile of row blocks (``zs`` in screen order) whose ``y₁`` ranges lie within reach,
    screened at ``thr_t`` and its candidates handed to ``pairs``; returns the tiles skipped."""
    from embscope.geometry.kernels import count_at_least

    n = len(u)
    reach = math.sqrt(max(0.0, 2 - 2 * thr)) + 1e-6
    starts = list(range(0, n, BLOCK))
    skipped = 0
    it = track(starts, total=len(starts), description="kNN join", unit="row blocks") if progress else starts
    for a in it:
        za = zs[a:a + BLOCK]
        hi_a = u[min(n, a + BLOCK) - 1]
        for c in range(a, n, BLOCK):
            if u[c] - hi_a > reach:  # sorted by y₁: this tile and every later one hold no pair
                skipped += len(range(c, n, BLOCK))
                break
            tile = screen.product(za, zs[c:c + BLOCK])
            counts = np.empty(tile.shape[0], dtype=np.int64)
            count_at_least(tile, thr_t, a == c, counts)
            pairs.tile(a, c, tile, counts, thr_t)
    return skipped


class _Pairs:
    """The join's partners, tile by tile: a tile whose screen passed few candidates has them scored
    one by one (in pieces, :func:`~embscope.geometry.kernels.score_pairs`); a dense one (more than
    :data:`DENSE_SHARE` of its entries: a collapsed cluster, such as Gemma-3's 6,242 unused rows,
    whose pairs all pass) is one float32 product of the two blocks' rows, every entry at or above
    the acceptance threshold a partner (:func:`~embscope.geometry.kernels.accept_rows`). Both
    compute each cosine in float32 over the full rows, so both accept the same pairs: a pair the
    product accepts (≥ τ − 2δ) is ≥ τ − 3δ exactly, so its screen value passed ``thr``."""

    def __init__(self, xsort, cuts, tails, ids, k, accept, delta):
        """``xsort``, ``tails``: the rows and their tails in screen order; ``ids``: their row ids."""
        n = len(ids)
        self.xsort, self.xs, self.cuts, self.tails, self.ids = xsort, xsort.numpy(), cuts, tails, ids
        self.accept = accept
        self.reject = np.float32(accept - delta)  # below this after a piece: no partner (a partial sum's rounding ≤ d·2^-24)
        self.best_v = np.full((n, k), -np.inf, dtype=np.float32)
        self.best_i = np.full((n, k), -1, dtype=np.int64)
        self.count = np.zeros(n, dtype=np.int64)
        self.scored = self.dense = 0
        self.exact = _Tile()

    def tile(self, a: int, c: int, tile: np.ndarray, counts: np.ndarray, thr) -> None:
        """The partners among the pairs of row blocks ``a`` and ``c`` (sorted positions) whose
        screen ``tile`` passed ``counts`` candidates per row at ``thr``."""
        from embscope.geometry.kernels import accept_cols, accept_rows, insert_pairs, score_pairs

        total = int(counts.sum())
        if not total:
            return
        b, w = tile.shape
        self.scored += total
        if total > DENSE_SHARE * tile.size:
            self.dense += 1
            ia, ic = self.ids[a:a + b], self.ids[c:c + w]
            ex = self.exact.product(self.xsort[a:a + b], self.xsort[c:c + w])
            accept_rows(ex, ia, ic, self.accept, a == c, self.best_v, self.best_i, self.count)
            accept_cols(ex, ic, ia, self.accept, a == c, self.best_v, self.best_i, self.count)
            return
        first = np.concatenate([[0], np.cumsum(counts)[:-1]])
        pi = np.empty(total, np.int64)
        pj = np.empty(total, np.int64)
        ps = np.empty(total, np.float32)
        score_pairs(self.xs, (self.cuts, self.tails), (tile, np.arange(a, a + b), np.arange(c, c + w), a == c), thr,
                    self.reject, (first, counts), (pi, pj, ps))
        insert_pairs(self.ids[pi], self.ids[pj], ps, self.accept, self.best_v, self.best_i, self.count)


def _bf16_bits_at_least(v: float) -> np.int16:
    """The int16 bit pattern of the least bfloat16 value ≥ ``v`` (> 0): a bfloat16 entry e of a
    tile is ≥ v exactly when its bits, read as int16, are ≥ this (positive bfloat16 values order
    as their bits; negative ones read as negative integers). Example: 0.968 → 0.96875, bits 16248."""
    import torch

    bits = int(torch.tensor([v], dtype=torch.float32).to(torch.bfloat16).view(torch.int16)[0])
    as_float = float(torch.tensor([bits], dtype=torch.int16).view(torch.bfloat16)[0])
    return np.int16(bits + 1 if as_float < v else bits)  # rounded down: the next bfloat16 up
