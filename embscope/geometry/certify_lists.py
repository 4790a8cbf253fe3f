"""The certified graph's lists (:mod:`embscope.geometry.certify`): the rows the summary and the
report list are searched exactly until each list is exact search's, or marked not certified."""

from __future__ import annotations

import numpy as np

from embscope.geometry.certify_search import Search, knot_and_isolation, settle
from embscope.geometry.indicators import transform
from embscope.geometry.records import TOP_N

#: a list is refined row by row only while at most this many rows stand between it and its
#: certificate; beyond, it is recorded as not certified
LIST_REFINE_CAP = 4096


def fitted_z(name: str, v: np.ndarray, knn_fit) -> np.ndarray:
    """The robust z of indicator ``name``'s transformed values ``v``: (v − median) / scale, by the
    fit ``knn_fit`` ({name: (median, scale)}). Example: v 1.2 at (1.0, 0.05) → 4.0."""
    med, scale = knn_fit[name]
    return (v - med) / scale


def certify_lists(run: Search, knn_fit, tau: float, groups: dict[str, np.ndarray],
                  other_scores: np.ndarray | None, fit_rows: np.ndarray) -> dict[str, bool]:
    """Search exactly until the listed rows are exact search's: per group, the :data:`TOP_N`
    highest scores, and the :data:`TOP_N` most isolated normal rows. A row not searched exactly
    has a graph isolation at or above its exact one, and a knot below τ (it has no partner at
    ≥ τ), so its score is at most ``max(other, z_knot(τ))``; a list is certified when its
    ``TOP_N``-th exact value reaches every such bound (rows are searched until it does, up to
    :data:`LIST_REFINE_CAP` rows)."""
    out: dict[str, bool] = {}
    z_tau = float(fitted_z("knot", transform("knot", np.array([tau])), knn_fit)[0])

    def prove(name, pool, exact_value, bound):
        def need():
            ex = pool & run.exact
            vals = exact_value()
            nth = np.sort(vals[ex])[-TOP_N] if ex.sum() >= TOP_N else -np.inf
            b = bound()
            rows = np.flatnonzero(pool & ~run.exact & (b >= nth))
            return rows[np.argsort(-b[rows], kind="stable")]

        out[name] = settle(run, need, f"list: {name}", cap=LIST_REFINE_CAP)

    normal = groups.get("normal", fit_rows)

    def iso_exact():
        return 1.0 - run.sims[:, 0].astype(np.float64)

    prove("top_isolated", normal, iso_exact, iso_exact)  # graph isolation is the upper bound
    if other_scores is not None:
        other = np.nan_to_num(np.asarray(other_scores, dtype=np.float64), nan=-np.inf)

        def score():
            kx, _ = knot_and_isolation(run.sims)
            return np.maximum(other, fitted_z("knot", kx, knn_fit))

        def score_bound():
            return np.maximum(other, z_tau)

        for name, pool in groups.items():
            prove(f"top_score:{name}", np.asarray(pool, bool), score, score_bound)
    return out
