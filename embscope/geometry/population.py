"""Distribution-free confidence intervals for a robust z's median and MAD, from a random sample.

The certified graph (:mod:`embscope.geometry.certify`) knows the exact knot and isolation only
on some rows, so the median and MAD of the trained rows, which place the cut
``median + threshold · max(1.4826·MAD, floor)``, are estimated from a random sample of them, and
the cut gets an interval instead of a value.

Sampling. Rows are drawn uniformly *with replacement* (independent draws; a row drawn twice
counts twice), so every statement below is about i.i.d. draws from the population of trained rows
and needs no assumption on the values' distribution. Two independent halves: ``A`` bounds the
median, ``B`` the MAD given A's interval (the MAD's interval must not reuse the sample that placed
the median's, or its level would not hold).

Median (half A, m draws, sorted x_(1) ≤ … ≤ x_(m)). For the population median M,
``P(x_(l) > M) = P(Bin(m, F(M)) < l) ≤ P(Bin(m, ½) ≤ l − 1)`` because ``F(M) ≥ ½``, and
symmetrically for x_(u) < M; l and u are the widest order statistics whose tail is ≤ α/4 each
(David & Nagaraja, *Order Statistics*, 3rd ed., 2003, §7.1). Ties only make this conservative.
Example: m = 1000, α = 0.001: l = 447, u = 554 (the 44.7 % and 55.4 % sample quantiles).

MAD (half B). ``h(c) = median_v |v − c|`` is 1-Lipschitz in c (each |v − c| is), and the MAD is
h(M). On :data:`MAD_GRID` centres c_g spread evenly over A's interval [m_lo, m_hi] (fixed by A, so
independent of B), B's order statistics of |v − c_g| bound h(c_g), α/(4·G) each side; any M in the
interval lies within half a grid step s of a centre, so MAD ∈ [min_g lo_g − s/2, max_g hi_g + s/2].
(Bounding |v − M| between its extremes over the whole interval instead would add the interval's
whole width: for a symmetric distribution h is flat at M, and that envelope was 3× wider.) In all
the median and the MAD hold together with probability ≥ 1 − α (union bound). Example: 1000 + 1000
standard normal draws, α = 0.001: the cut median + 4·1.4826·MAD is known to about ±0.6.

Sequential enlargement: when a row's exact value falls inside a cut's interval, the sample is
doubled and the intervals recomputed at level α/2^j in round j, so that every round together still
errs with probability ≤ α (``level_of_round``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: default confidence of the cut intervals (all rounds together)
CONFIDENCE = 0.999
#: 1.4826·MAD estimates a normal distribution's standard deviation (as in the robust z)
MAD_TO_SD = 1.4826
#: centres at which the MAD's interval is bounded (see the module docstring)
MAD_GRID = 16


def order_ci(m: int, alpha_each: float) -> tuple[int, int]:
    """1-based ranks (l, u) with ``P(Bin(m, ½) ≤ l − 1) ≤ alpha_each`` and
    ``P(Bin(m, ½) ≥ u) ≤ alpha_each``: the population median lies in ``[x_(l), x_(u)]`` with
    probability ≥ 1 − 2·alpha_each. (1, m) when the sample is too small for anything narrower
    (then the interval is the sample's range, and may well miss: callers enlarge the sample).

    Example: m = 1000, alpha_each = 0.00025 → (447, 554).
    """
    from scipy.stats import binom

    if m <= 0:
        return 0, 0
    j = int(binom.ppf(alpha_each, m, 0.5))  # smallest j with P(Bin ≤ j) ≥ alpha_each
    if binom.cdf(j, m, 0.5) > alpha_each:
        j -= 1  # the largest j with P(Bin ≤ j) ≤ alpha_each
    l = j + 1
    return max(1, l), min(m, m + 1 - l)  # Bin(m, ½) is symmetric


def level_of_round(alpha: float, j: int) -> float:
    """Error budget of round ``j`` (0-based) of the sequential enlargement: α/2^(j+1), summing to ≤ α."""
    return alpha / 2 ** (j + 1)


@dataclass(frozen=True)
class Spread:
    """The median and MAD of one indicator over the trained rows: point estimates and intervals."""

    median: float
    median_lo: float
    median_hi: float
    mad: float
    mad_lo: float
    mad_hi: float
    #: draws in halves A and B
    draws: tuple[int, int]
    #: the error probability these intervals were computed at
    alpha: float

    def cut(self, threshold: float, floor: float) -> tuple[float, float, float]:
        """``median + threshold · max(1.4826·MAD, floor)``: (point, low, high) over the intervals."""
        def at(med, mad):
            return med + threshold * max(MAD_TO_SD * mad, floor)

        corners = [at(a, b) for a in (self.median_lo, self.median_hi) for b in (self.mad_lo, self.mad_hi)]
        return at(self.median, self.mad), min(corners), max(corners)


def spread_ci(a: np.ndarray, b: np.ndarray, alpha: float) -> Spread:
    """Median and MAD with their intervals (module docstring) from the values of the draws of half
    ``a`` and half ``b`` (NaN dropped). Point estimates use both halves, clipped into the intervals.

    Example: a, b = 1000 draws each of a standard normal, alpha 0.001: median ≈ 0 ± 0.11,
    MAD ≈ 0.674, interval about [0.53, 0.83].
    """
    a = np.sort(np.asarray(a, dtype=np.float64)[np.isfinite(a)])
    b = np.asarray(b, dtype=np.float64)[np.isfinite(b)]
    both = np.concatenate([a, b])
    if len(a) == 0 or len(b) == 0:
        return Spread(math.nan, math.nan, math.nan, math.nan, math.nan, math.nan, (len(a), len(b)), alpha)
    la, ua = order_ci(len(a), alpha / 4)
    m_lo, m_hi = float(a[la - 1]), float(a[ua - 1])
    centres = np.linspace(m_lo, m_hi, MAD_GRID) if m_hi > m_lo else np.array([m_lo])
    step = (m_hi - m_lo) / (len(centres) - 1) if len(centres) > 1 else 0.0
    lb, ub = order_ci(len(b), alpha / (4 * len(centres)))
    dev = np.sort(np.abs(b[None, :] - centres[:, None]), axis=1)               # (G, m_B)
    d_lo = max(0.0, float(dev[:, lb - 1].min()) - step / 2)
    d_hi = float(dev[:, ub - 1].max()) + step / 2
    med = float(np.median(both))
    mad = float(np.median(np.abs(both - med)))
    return Spread(min(max(med, m_lo), m_hi), m_lo, m_hi, min(max(mad, d_lo), d_hi), d_lo, d_hi,
                  (len(a), len(b)), alpha)


#: gap widths δ at which the population bound is tried (all hold together: α is split over them)
GAPS = (1e-6, 1e-3, 1e-2, 1e-1)


def _rank(a: np.ndarray, r: int) -> float:
    """The r-th smallest entry of ``a`` (1-based, clipped to [1, len]); np.partition, O(len)."""
    r = min(max(int(r), 1), len(a))
    return float(np.partition(a, r - 1)[r - 1])


def bounded_spread(values: np.ndarray, exact: np.ndarray, gaps: np.ndarray, alpha: float) -> Spread | None:
    """Median and MAD intervals of a population whose rows are known exactly (``exact``) or only
    from above (``values`` ≥ the exact value), using the whole population and a sample of gaps.

    ``values`` (N,): exact values where ``exact``, upper bounds elsewhere. ``gaps`` (m,): for m
    i.i.d. uniform draws from the population, ``upper bound − exact value`` as the graph gave it
    before any exact search (≥ 0). For a gap width δ let q_δ be the population share of rows whose
    gap exceeds δ; its Clopper–Pearson upper bound from the draws holds at level α/|GAPS| for
    each δ in :data:`GAPS`. Then for every t (module docstring of :mod:`embscope.geometry.population`
    for the notation), with ``F_lo(t)`` the share of rows whose known value or bound is ≤ t:

        F_lo(t) ≤ F(t) ≤ F_lo(t) + q_δ + (share of unknown rows with t < bound ≤ t + δ)

    (a row can cross t only if its gap exceeds δ or its bound lies within δ above t), which
    brackets the median. For the MAD, each row's |v − M| is bracketed over M ∈ the median's interval
    and v ∈ [bound − δ, bound] (unknown rows) or v exactly, rows with a larger gap counted against
    both sides (at most q_δ). The narrowest cut over the δ's is returned (all hold together, so
    choosing after the fact is allowed). With a graph that is exact on most rows the intervals are
    far narrower than a sample alone gives (the sample only estimates how rare big gaps are).
    Returns None when nothing is known.
    """
    from scipy.stats import beta

    v = np.asarray(values, dtype=np.float64)
    ex = np.asarray(exact, dtype=bool)
    ok = np.isfinite(v)
    v, ex = v[ok], ex[ok]
    g = np.asarray(gaps, dtype=np.float64)
    g = g[np.isfinite(g)]
    n, m = len(v), len(g)
    if n == 0 or m == 0:
        return None
    a_each = alpha / len(GAPS)
    med = float(np.median(v))  # of known values and bounds: a point estimate, clipped below
    mad = float(np.median(np.abs(v - med)))
    half = n / 2
    best = None
    for delta in GAPS:
        k_big = int((g > delta).sum())
        q = float(beta.ppf(1 - a_each / 2, k_big + 1, m - k_big)) if k_big < m else 1.0
        if q >= 0.25:
            continue
        lo_v = np.where(ex, v, v - delta)  # the smallest each row's value can be (gap ≤ δ)
        # F(t) ≤ share(lo_v ≤ t) + q and F(t) ≥ share(v ≤ t): order statistics bound the median
        m_lo = _rank(lo_v, math.ceil((0.5 - q) * n))
        m_hi = _rank(v, math.floor(half) + 1)
        # h(c) = median |v − c| is 1-Lipschitz: bound it at centres over [m_lo, m_hi] (the q_δ
        # statements hold for every c at once, so the grid costs no confidence)
        centres = np.linspace(m_lo, m_hi, MAD_GRID) if m_hi > m_lo else np.array([m_lo])
        step = (m_hi - m_lo) / (len(centres) - 1) if len(centres) > 1 else 0.0
        c = centres[:, None]                                                    # (G, 1)
        d_min = np.where(ex, np.abs(v - c), np.maximum(0.0, np.maximum(c - v, lo_v - c)))  # (G, n)
        r_lo = min(max(math.ceil((0.5 - q) * n), 1), n) - 1
        mad_lo = float(np.partition(d_min, r_lo, axis=1)[:, r_lo].min())
        d_max = np.maximum(np.abs(v - c), np.abs(lo_v - c))
        r_hi = min(max(math.floor((0.5 + q) * n) + 1, 1), n) - 1
        mad_hi = float(np.partition(d_max, r_hi, axis=1)[:, r_hi].max())
        del d_min, d_max
        mad_lo, mad_hi = max(0.0, mad_lo - step / 2), mad_hi + step / 2
        width = (m_hi - m_lo) + (mad_hi - mad_lo)
        if best is None or width < best[0]:
            best = (width, Spread(min(max(med, m_lo), m_hi), m_lo, m_hi, min(max(mad, mad_lo), mad_hi),
                                  mad_lo, mad_hi, (m, n), alpha))
    return best[1] if best else None


def intersect(a: Spread | None, b: Spread | None) -> Spread | None:
    """Both intervals at once (each held at its own level; together at the sum of the two α's)."""
    if a is None or b is None:
        return a or b
    lo, hi = max(a.median_lo, b.median_lo), min(a.median_hi, b.median_hi)
    dlo, dhi = max(a.mad_lo, b.mad_lo), min(a.mad_hi, b.mad_hi)
    if lo > hi or dlo > dhi:  # disjoint: one of them failed (probability ≤ α); keep the wider union
        lo, hi = min(a.median_lo, b.median_lo), max(a.median_hi, b.median_hi)
        dlo, dhi = min(a.mad_lo, b.mad_lo), max(a.mad_hi, b.mad_hi)
    med = min(max(a.median, lo), hi)
    mad = min(max(a.mad, dlo), dhi)
    return Spread(med, lo, hi, mad, dlo, dhi, a.draws, a.alpha + b.alpha)


def negate(s: Spread) -> Spread:
    """The Spread of −v from that of v (the knot's graph value is a lower bound: negated, an upper one)."""
    return Spread(-s.median, -s.median_hi, -s.median_lo, s.mad, s.mad_lo, s.mad_hi, s.draws, s.alpha)
