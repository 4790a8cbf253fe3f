"""Seeded percentile bootstrap over aligned units: an interval for a ratio of sums.

Every per-language cost is a ratio of two sums over the units of a corpus (UDHR articles, FLORES
sentences): fertility = Σ_u tokens(u) / Σ_u words(u), parity = Σ_u t_L(u) / Σ_u t_ref(u), a
comparison Σ_u t_B(u) / Σ_u t_A(u). The units are the sampling unit: texts of one unit move
together, and words inside a unit are not independent.

The percentile bootstrap (Efron & Tibshirani 1993, *An Introduction to the Bootstrap*, ch. 13):
draw ``resamples`` sets of n units with replacement from the n units, compute the statistic on each,
and take the (1 − level)/2 and (1 + level)/2 quantiles of those statistics. A resample is a vector
of multiplicities m (m_u = how often unit u was drawn, Σ_u m_u = n), so the resampled ratio is
(m · num) / (m · den): one matrix product for all resamples, ``M (B, n) @ x (n,)``.

*Paired* (:func:`ratio_interval`): the numerator and denominator are two measurements of the same
units (tokens of language L and of the reference on the same articles; tokens of tokenizer B and of
A on the same text) and are resampled together: the same multiplicities multiply both, so what the
units share cancels. Two identical tokenizers give num = den unit by unit, every resample gives 1,
and the interval is [1, 1]. *Independent* (:func:`independent_ratio_interval`): numerator and
denominator come from different units (texts that are not aligned) and each is resampled on its own.

Worked example: num = [2, 4], den = [1, 2] → every resample has ratio 2 → (2.0, 2.0, 2.0).

The resamples depend only on (seed, number of units, resamples): two calls with the same seed on
the same units use the same draws, so intervals of different languages on the same units are
paired with each other too.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: resamples of the default interval: the 2.5 % / 97.5 % quantiles of 1000 draws move by well under a
#: tenth of the interval's width between seeds (Efron & Tibshirani 1993 §13.3 ask for 1000 for percentiles)
RESAMPLES = 1000
#: the default coverage of every interval
LEVEL = 0.95
#: the default seed (recorded in summary.json with the resample count)
SEED = 0


def resample_counts(n: int, *, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """(resamples, n) multiplicities: row b counts how often each of n units was drawn in resample b.

    Draw b is ``numpy.random.default_rng(seed).integers(0, n, size=(resamples, n))[b]``.

    >>> resample_counts(3, resamples=2, seed=0).sum(axis=1).tolist()
    [3.0, 3.0]
    """
    if n <= 0:
        return np.zeros((resamples, 0), dtype=np.float64)
    draws = np.random.default_rng(seed).integers(0, n, size=(resamples, n))  # (B, n) unit indices
    flat = draws + (np.arange(resamples)[:, None] * n)  # one bincount for every row
    return np.bincount(flat.ravel(), minlength=resamples * n).reshape(resamples, n).astype(np.float64)


def quantiles(stats: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """The percentile interval's ends over the last axis of ``stats``, ignoring NaN (a resample whose
    denominator sums to 0); NaN where every resample is NaN."""
    stats = np.asarray(stats, dtype=np.float64)
    lo_q, hi_q = (1.0 - level) / 2.0, (1.0 + level) / 2.0
    out = np.full((2,) + stats.shape[:-1], np.nan)
    finite = np.isfinite(stats)
    if finite.all():  # the common case, without nanquantile's per-row cost
        lo, hi = np.quantile(stats, [lo_q, hi_q], axis=-1)
        return lo, hi
    ok = finite.any(axis=-1)
    if ok.any():
        with np.errstate(all="ignore"):
            out[:, ok] = np.nanquantile(np.where(np.isfinite(stats[ok]), stats[ok], np.nan), [lo_q, hi_q], axis=-1)
    return out[0], out[1]


def _ratio(num, den):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den != 0, num / np.where(den != 0, den, 1.0), np.nan)


def ratio_intervals(num: np.ndarray, den: np.ndarray, *, resamples: int = RESAMPLES, seed: int = SEED,
                    level: float = LEVEL, counts: np.ndarray | None = None):
    """Paired intervals of K ratios over the same n units at once: rows of ``num`` and ``den`` (K, n).

    Returns (point, lo, hi), each (K,): point = Σ_u num[k, u] / Σ_u den[k, u] (NaN where the
    denominator is 0). Every row uses the same resamples (``counts`` if given, else
    :func:`resample_counts`).
    """
    num = np.atleast_2d(np.asarray(num, dtype=np.float64))  # (K, n)
    den = np.atleast_2d(np.asarray(den, dtype=np.float64))
    point = _ratio(num.sum(axis=1), den.sum(axis=1))
    if counts is None:
        counts = resample_counts(num.shape[1], resamples=resamples, seed=seed)  # (B, n)
    stats = _ratio(num @ counts.T, den @ counts.T)  # (K, B)
    lo, hi = quantiles(stats, level)
    return point, lo, hi


def ratio_interval(num: Sequence[float], den: Sequence[float], *, resamples: int = RESAMPLES, seed: int = SEED,
                   level: float = LEVEL) -> tuple[float, float, float]:
    """Σnum / Σden with its paired percentile bootstrap interval over the n aligned units.

    ``num[u]`` and ``den[u]`` belong to unit u and are resampled together (see the module doc).

    >>> ratio_interval([2, 4, 6], [1, 2, 3])
    (2.0, 2.0, 2.0)
    >>> p, lo, hi = ratio_interval([3, 1, 2, 5], [2, 2, 2, 2]); p, lo <= p <= hi
    (1.375, True)
    """
    point, lo, hi = ratio_intervals(np.asarray(num)[None], np.asarray(den)[None], resamples=resamples,
                                    seed=seed, level=level)
    return float(point[0]), float(lo[0]), float(hi[0])


def independent_ratio_interval(num: Sequence[float], den: Sequence[float], *, resamples: int = RESAMPLES,
                               seed: int = SEED, level: float = LEVEL) -> tuple[float, float, float]:
    """Σnum / Σden where numerator and denominator units are *not* aligned: each side is resampled on
    its own (numerator with the draws of ``seed``, denominator with those of ``seed + 1``).

    >>> independent_ratio_interval([1, 1], [2, 2, 2])
    (0.3333333333333333, 0.3333333333333333, 0.3333333333333333)
    """
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    point = float(_ratio(num.sum(), den.sum()))
    a = resample_counts(len(num), resamples=resamples, seed=seed) @ num  # (B,)
    b = resample_counts(len(den), resamples=resamples, seed=seed + 1) @ den
    lo, hi = quantiles(_ratio(a, b)[None], level)
    return point, float(lo[0]), float(hi[0])
