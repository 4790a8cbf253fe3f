"""Bootstrap intervals of the per-language costs: ``<name>_lo`` / ``<name>_hi`` columns of
``languages.parquet``.

Every cost is Σ_u num(u) / Σ_u den(u) over the aligned units of the language (see
:mod:`embscope.languages.bootstrap`); per unit the counting pass keeps the sums
(:mod:`embscope.languages.counting`):

==========================  ============================  ==========================
column                      numerator per unit            denominator per unit
==========================  ============================  ==========================
``fertility``               tokens                        words
``tokens_per_char``         tokens                        characters
``bytes_per_token``         UTF-8 bytes                   tokens
``split_word_rate``         words split in ≥ 2 tokens     words (the word sample)
``single_token_word_rate``  words that are one token      words (the word sample)
``parity``                  tokens of the language        tokens of the reference (paired)
``mean_in_norm`` …          Σ of the value over tokens    tokens with a value
==========================  ============================  ==========================

Units are resampled with replacement, the same draws for every column of a language (so the
columns' intervals are consistent with each other), and parity resamples the units the language
shares with the reference, one draw for both. Texts without a unit key leave every interval null
(:data:`NO_UNITS`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from embscope.languages.bootstrap import LEVEL, RESAMPLES, SEED, quantiles, resample_counts

#: why an interval is null on texts without unit keys
NO_UNITS = "the corpus's records carry no unit key (the jsonl/parquet `unit` field): there is nothing to resample"


def unit_order(keys) -> list:
    """Unit keys in a fixed order (numbers, then strings), so a seed always draws the same units.

    >>> unit_order({"b", 2, "a", 1})
    [1, 2, 'a', 'b']
    """
    return sorted(keys, key=lambda u: (isinstance(u, str), u if not isinstance(u, str) else 0, str(u)))


@dataclass
class Bootstrap:
    """The run's bootstrap settings, and its draws cached by number of units."""

    #: resamples per interval
    resamples: int = RESAMPLES
    #: the seed of every draw
    seed: int = SEED
    #: the intervals' coverage
    level: float = LEVEL
    _cache: dict = field(default_factory=dict, repr=False)

    def counts(self, n: int) -> np.ndarray:
        """(resamples, n) multiplicities (:func:`~embscope.languages.bootstrap.resample_counts`)."""
        m = self._cache.get(n)
        if m is None:
            m = self._cache[n] = resample_counts(n, resamples=self.resamples, seed=self.seed)
        return m

    def stats(self, num: np.ndarray, den: np.ndarray) -> np.ndarray:
        """(K, B) resampled ratios of the rows of ``num`` / ``den`` (K, n)."""
        m = self.counts(num.shape[1])
        with np.errstate(divide="ignore", invalid="ignore"):
            a, b = num @ m.T, den @ m.T
            return np.where(b != 0, a / np.where(b != 0, b, 1.0), np.nan)

    def interval(self, num, den) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi), each (K,), of the paired ratios Σ num[k] / Σ den[k]."""
        num = np.atleast_2d(np.asarray(num, dtype=np.float64))
        den = np.atleast_2d(np.asarray(den, dtype=np.float64))
        if num.shape[1] == 0:
            return np.full(len(num), np.nan), np.full(len(num), np.nan)
        return quantiles(self.stats(num, den), self.level)


def _put(row: dict, name: str, lo, hi) -> None:
    row[f"{name}_lo"] = None if lo is None or not np.isfinite(lo) else float(lo)
    row[f"{name}_hi"] = None if hi is None or not np.isfinite(hi) else float(hi)


def add_cost_intervals(row: dict, a, la, ref, boot: Bootstrap, words: dict | None) -> None:
    """The interval columns of one (tokenizer, language) row.

    ``a`` / ``ref``: the tokenizer's :class:`~embscope.languages.counting._Acc` of the language and
    of the reference (or None); ``la``: the language's ``_LangAcc``; ``words``: unit → (words,
    split, single) of the word sample (:func:`embscope.languages.wordrates.unit_rates`) or None.
    """
    units = unit_order(a.units.keys() & la.units.keys())
    if units:
        t = np.array([a.units[u] for u in units], dtype=np.float64)
        wcb = np.array([la.units[u] for u in units], dtype=np.float64)  # (n, 3): words, chars, bytes
        lo, hi = boot.interval(np.stack([t, t, wcb[:, 2]]), np.stack([wcb[:, 0], wcb[:, 1], t]))
        for i, name in enumerate(("fertility", "tokens_per_char", "bytes_per_token")):
            _put(row, name, lo[i], hi[i])
    else:
        for name in ("fertility", "tokens_per_char", "bytes_per_token"):
            _put(row, name, None, None)
    keys = unit_order(k for k in (words or {}) if k is not None)
    if keys:
        w = np.array([words[k] for k in keys], dtype=np.float64)  # (n, 3): words, split, single
        lo, hi = boot.interval(np.stack([w[:, 1], w[:, 2]]), np.stack([w[:, 0], w[:, 0]]))
        _put(row, "split_word_rate", lo[0], hi[0])
        _put(row, "single_token_word_rate", lo[1], hi[1])
    else:
        _put(row, "split_word_rate", None, None)
        _put(row, "single_token_word_rate", None, None)
    shared = unit_order(a.units.keys() & ref.units.keys()) if ref is not None else []
    if shared:
        lo, hi = boot.interval([[a.units[u] for u in shared]], [[ref.units[u] for u in shared]])
        _put(row, "parity", lo[0], hi[0])
    else:
        _put(row, "parity", None, None)


def unit_value_sums(unit_ids: dict, values: np.ndarray) -> tuple[list, np.ndarray, np.ndarray]:
    """Per unit, Σ over the unit's tokens of ``values[id]`` and the number of those tokens with a
    value (not NaN): the numerator and denominator of a token-weighted mean such as
    ``mean_in_norm``.

    >>> u, s, n = unit_value_sums({0: [(np.array([1, 2]), np.array([2, 1]))], 1: [(np.array([0]), np.array([3]))]},
    ...                           np.array([np.nan, 1.0, 4.0]))
    >>> u, s.tolist(), n.tolist()
    ([0, 1], [6.0, 0.0], [3.0, 0.0])
    """
    units = unit_order(unit_ids)
    s = np.zeros(len(units))
    n = np.zeros(len(units))
    size = len(values)
    for i, u in enumerate(units):
        for ids, counts in unit_ids[u]:
            keep = ids < size
            v, c = values[ids[keep]], counts[keep].astype(np.float64)
            ok = ~np.isnan(v)
            s[i] += float((v[ok] * c[ok]).sum())
            n[i] += float(c[ok].sum())
    return units, s, n
