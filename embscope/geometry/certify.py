"""The certified kNN graph: every decision exact search would make, at a fraction of its cost.

An approximate graph lists real rows with their exact cosines, so each of its neighbour
similarities is a lower bound of the exact one at the same rank: the knot it gives is a lower
bound of the exact knot, the isolation an upper bound. That alone never proves a row *not*
knot-flagged, and that is where the collapse gate helps (:mod:`embscope.geometry.join`): a
knot-flagged row has another row at cosine ≥ 0.9798, and the join finds every such row exactly.

The run, for k neighbours, threshold T, trained rows F (:func:`certified_graph`):

1. **join** every pair of rows at cosine ≥ τ = √(1 − 0.2²) (a row with at least k partners has its
   exact k nearest rows among them);
2. **base graph**: NN-descent from the join's partners (:func:`base_graph`), merged with them; every row
   gets k real neighbours (rows the base left short are searched exactly);
3. **sample**: independent draws from F searched exactly, two halves (:mod:`embscope.geometry.population`):
   the median and MAD of ``−log(1 − knot)`` and of isolation get intervals at confidence
   :data:`~embscope.geometry.population.CONFIDENCE`, hence the cuts ``median + T·scale``;
4. **refine** (exact search, m × n × d): every row the other indicators flag (so their reasons are
   exact), every join row with fewer than k partners, every row whose graph isolation (an upper
   bound) reaches the isolation cut's lower end, and the rows the summary and report list
   (:func:`~embscope.geometry.certify_lists.certify_lists`);
5. **check**: a row searched exactly whose decision depends on a cut and whose value lies inside
   that cut's interval doubles the sample (round j at level α/2^(j+1)); after
   :data:`MAX_ROUNDS` rounds every row is searched exactly (the graph then *is* exact search's).

Why a decision cannot flip (given the cuts' intervals hold; docs/undertrained.md):
``flagged`` by the norms or Magikarp does not depend on the graph. By the knot: only when the
spread is ≤ 0.2, which needs a partner at ≥ τ; such rows are searched exactly, so their knot and
spread are exact, and their knot lies outside the cut's interval (step 5), on the side exact
search puts it. A row with no partner has a graph spread > 0.2 as well (every graph similarity is
below τ), so neither graph nor exact search flags it by the knot. ``isolated``: a row not searched
exactly has a graph isolation below the cut's lower end, and its exact isolation is smaller still;
a row searched exactly lies outside the interval. The z-values use the sample's point estimates,
which lie inside the intervals, so the decisions they give equal those at the true cut.

What stays approximate: the knot, isolation, neighbours and z of rows not searched exactly (the
``knn_exact`` column says which; their knot is a lower bound, their isolation an upper bound), and
the figures that count such rows' knot against the cut: the ``family`` count (rows whose knot
passes the cut without a collapse) and the knot's share in the threshold note. How far they are
off is measured on the sample (``certificate.measured``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from embscope.geometry.indicators import COLLAPSE_SPREAD, DEFAULT_THRESHOLD, MIN_SCALE
from embscope.geometry.certify_lists import certify_lists, fitted_z
from embscope.geometry.certify_search import Search, knot_and_isolation, settle
from embscope.geometry.graph import KnnError, KnnGraph
from embscope.geometry.knn_record import CertificateRecord, CutRecord, KnnRecord, MeasuredRecord
from embscope.geometry.population import CONFIDENCE, level_of_round, spread_ci

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: sample draws (both halves together) in the first round
SAMPLE_DRAWS = 2000
#: rounds of sample doubling before every row is searched exactly
MAX_ROUNDS = 4
#: rows searched exactly before the sample is drawn (seeded apart from it): every row's cosines to
#: them are offered to its list, the graph the sample's gaps are measured against
PIVOT_ROWS = 1024
#: NN-descent is the base graph up to this width; wider rows go without one: on the real 7B head
#: (3584 wide, diffuse, with hubs) approximate graphs found the nearest row of few rows (HNSW:
#: isolation ρ 0.27, bench/README.md), and the pivots' offers do as well there
BASE_MAX_WIDTH = 1024
#: share of the rows past which searching the join's and the flags' rows one by one costs more
#: than exact search of every pair (m·n·d against n²·d/2, plus the sample and pivots)
EXACT_SHARE = 0.35


def collapse_tau() -> float:
    """Cosine a collapsed row's nearest row must reach: √(1 − COLLAPSE_SPREAD²), less 1e-6 for the
    float64 arithmetic of the spread."""
    return math.sqrt(1.0 - COLLAPSE_SPREAD ** 2) - 1e-6


@dataclass
class Certified:
    """The certified graph and what its decisions rest on."""

    #: (n, k) neighbour ids and cosines, descending
    neighbors: np.ndarray
    sims: np.ndarray
    #: (n,) the row's neighbours are exact search's
    exact: np.ndarray
    #: {knot, isolation}: (median, scale) on the transformed scale, for the robust z
    knn_fit: dict[str, tuple[float, float]]
    #: what was sampled, refined and proven
    certificate: CertificateRecord


def base_graph(xn: "torch.Tensor", k: int, *, seed: int = 0, init=None) -> tuple[np.ndarray, np.ndarray, str, float]:
    """The approximate graph under the certificate: NN-descent
    (:func:`embscope.geometry.nndescent.nn_descent`, from ``init``: the join's partners) when the
    rows are at most :data:`BASE_MAX_WIDTH` wide, else none (the lists start from the join's
    partners and the exact searches' offers). Its quality decides only how many rows are searched
    exactly, never a decision. Returns (sims, ids) (n, k), -inf/-1 where short, the base's name
    and its seconds."""
    t0 = time.perf_counter()
    n, d = xn.shape
    if d > BASE_MAX_WIDTH:
        empty = (np.full((n, k), -np.inf, np.float32), np.full((n, k), -1, np.int64))
        return (*empty, "none (rows wider than the base graph's limit)", 0.0)
    from embscope.geometry.nndescent import nn_descent

    s, i, _ = nn_descent(xn, k, seed=seed, init=init)
    return s, i, "nndescent", round(time.perf_counter() - t0, 3)


def _cuts(values: dict[str, np.ndarray], base: dict[str, np.ndarray], exact: np.ndarray, fit_rows: np.ndarray,
          draws_a: np.ndarray, draws_b: np.ndarray, alpha: float, threshold: float) -> dict[str, dict[str, Any]]:
    """Per indicator: the interval of its median and MAD over the fit rows and the cut (point, lo,
    hi). Two bounds, each at α/2, intersected (:mod:`embscope.geometry.population`): the sample
    alone (halves A and B), and the whole population's graph values with the sample's gaps. The
    knot's graph value is a lower bound (its negation an upper bound), isolation's an upper bound."""
    from embscope.geometry.population import bounded_spread, intersect, negate

    out = {}
    draws = np.concatenate([draws_a, draws_b])
    for name in ("knot", "isolation"):
        v, b = values[name], base[name]
        sample = spread_ci(v[draws_a], v[draws_b], alpha / 2)
        sign = -1.0 if name == "knot" else 1.0  # make the graph's value an upper bound
        pop = bounded_spread(sign * v[fit_rows], exact[fit_rows], sign * (b[draws] - v[draws]), alpha / 2)
        if pop is not None and name == "knot":
            pop = negate(pop)
        sp = intersect(sample, pop)
        cut, lo, hi = sp.cut(threshold, MIN_SCALE[name])
        out[name] = {"spread": sp, "cut": cut, "lo": lo, "hi": hi,
                     "by": "sample+population" if pop is not None else "sample"}
    return out


def _cut_record(c: dict[str, Any]) -> CutRecord:
    """The summary's record of one of :func:`_cuts`' cuts."""
    sp = c["spread"]
    return CutRecord(cut=c["cut"], interval=[c["lo"], c["hi"]], by=c["by"], median=sp.median,
                     median_interval=[sp.median_lo, sp.median_hi], mad=sp.mad, mad_interval=[sp.mad_lo, sp.mad_hi],
                     draws=list(sp.draws), alpha=sp.alpha)


def certified_graph(x: "torch.Tensor | np.ndarray", k: int = 10, *, context: "CertificateScope | None" = None,
                    seed: int = 0, confidence: float = CONFIDENCE, draws: int = SAMPLE_DRAWS,
                    progress: bool = True) -> Certified:
    """The certified kNN graph of the rows of ``x`` (module docstring).

    Args:
        x: (n, d) matrix.
        context: what the certificate is for (:class:`CertificateScope`): the rows the robust z's
            are fitted on (``fit_rows``, default every row), the rows flagged without the graph
            (``graph_free``: searched exactly so that their reasons are exact), the row norms
            (``norms``, the collapse gate's ratios; default computed), the rows each listed
            top-``TOP_N`` is drawn from (``groups``) with each row's score without the knot
            (``other_scores``), and the flag threshold in robust sigmas (``threshold``).
            Default: :class:`CertificateScope`'s.
        confidence: the cuts' intervals hold together with this probability (all rounds).
        draws: sample draws in the first round.
    Returns:
        :class:`Certified`.
    """
    import torch

    from embscope.geometry.exact import all_finite, normalize_rows
    from embscope.geometry.join import near_duplicates

    t_all = time.perf_counter()
    ctx = context or CertificateScope()
    fit_rows, graph_free, norms, groups = ctx.fit_rows, ctx.graph_free, ctx.norms, ctx.groups
    other_scores, threshold = ctx.other_scores, ctx.threshold
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    xn = normalize_rows(x.cpu())
    if not all_finite(xn):
        raise KnnError("the matrix holds NaN or infinite values: fix or drop those rows before a kNN scan")
    n, d = xn.shape
    fit_rows = np.ones(n, bool) if fit_rows is None else np.asarray(fit_rows, bool)
    graph_free = np.zeros(n, bool) if graph_free is None else np.asarray(graph_free, bool)
    if norms is None:
        norms = torch.linalg.vector_norm(x.float(), dim=1).double().numpy()
    alpha = 1.0 - confidence
    timings: dict[str, float] = {}

    # 1. the join
    t = time.perf_counter()
    tau = collapse_tau()
    join = near_duplicates(xn, tau, k, seed=seed, progress=progress)
    timings["join"] = time.perf_counter() - t

    # rows the certificate would search one by one (partners short of k, graph-free flags): past
    # EXACT_SHARE of the matrix, the symmetric exact search (n²·d/2) is the cheaper way to them
    todo = int(((join.count > 0) & (join.count < k) | graph_free).sum())
    if todo > EXACT_SHARE * n:
        return _exact_instead(xn, k, fit_rows, groups, other_scores, threshold, join, timings, progress,
                              f"{todo:,} of {n:,} rows have a near-duplicate short of k or a flag from "
                              "another indicator: exact search everywhere was cheaper")

    run, base_sims, base_name, base_seconds = _base(xn, k, join, seed, progress, timings)
    r = _rounds(run, base_sims, join, fit_rows, graph_free, norms, seed, draws, alpha, threshold)
    cuts, draws_a, draws_b = r.cuts, r.draws_a, r.draws_b
    fallback = None
    if r.undecided:  # the sample could not separate them from the cuts: exact search everywhere
        _search_every_row(run, "every row (cut undecided)")
        fallback = (f"{r.undecided} rows stayed inside a cut's interval after {MAX_ROUNDS} rounds: every row "
                    "was searched exactly")
    # the sample's point estimates; after the fallback the population itself (exact figures, no interval)
    knn_fit = _population_fit(run.sims, fit_rows) if fallback else {
        name: (c["spread"].median, max(1.4826 * c["spread"].mad, MIN_SCALE[name])) for name, c in cuts.items()}

    lists = certify_lists(run, knn_fit, tau, groups or {}, other_scores, fit_rows)
    sample_rows = np.unique(np.concatenate([draws_a, draws_b]))
    measured = _measured(base_sims, run.sims, sample_rows, knn_fit, threshold)
    timings["exact search"] = run.seconds
    timings["all"] = time.perf_counter() - t_all
    cert = CertificateRecord(
        confidence=confidence, rounds=r.rounds, sample_draws=int(len(draws_a) + len(draws_b)),
        sample_rows=int(len(sample_rows)), tau=round(tau, 6), threshold=threshold,
        cuts={name: _cut_record(c) for name, c in cuts.items()}, exact_rows=int(run.exact.sum()),
        refined=dict(run.by_reason), undecided=r.undecided, reasons_undecided=r.reasons_undecided, fallback=fallback,
        join=join.info, lists=lists, measured=measured, seconds={k_: round(v, 3) for k_, v in timings.items()},
        base=base_name, base_seconds=base_seconds)
    return Certified(neighbors=run.ids, sims=run.sims, exact=run.exact.copy(), knn_fit=knn_fit, certificate=cert)


def _base(xn, k: int, join, seed: int, progress: bool, timings: dict[str, float]):
    """Steps 2 of the module docstring: ``(search, base sims, base name, base seconds)``. The base
    graph merged with the join's partners (rows with ≥ k partners are exact already), then the
    pivots' offers and exact search of rows still short of k; the base sims are a copy fixed before
    the sample is drawn (the graph the sample's gaps are measured against)."""
    from embscope.geometry.kernels import merge_into

    n = xn.shape[0]
    t = time.perf_counter()
    sims, ids, base_name, base_seconds = base_graph(xn, k, seed=seed, init=(join.best_v.copy(), join.best_i.copy()))
    merge_into(sims, ids, join.best_v, join.best_i)
    timings["base"] = time.perf_counter() - t
    exact = join.count >= k  # their k nearest rows are among their partners (join module docstring)
    sims[exact], ids[exact] = join.best_v[exact], join.best_i[exact]
    run = Search(xn, sims, ids, exact, k, progress)
    run.by_reason["join (≥ k partners)"] = int(exact.sum())
    run.search(np.random.default_rng(seed + 1).choice(n, min(n, PIVOT_ROWS), replace=False), "pivots")
    short = np.flatnonzero((ids < 0).any(axis=1))
    run.search(short, "graph short of k")
    return run, run.sims.copy(), base_name, base_seconds


@dataclass
class _Rounds:
    """What the sample rounds left: the last round's cuts, the draws of halves A and B, the rounds
    run, the rows still inside a cut's interval and the flagged rows whose knot reason is."""

    cuts: dict[str, dict[str, Any]]
    draws_a: np.ndarray
    draws_b: np.ndarray
    rounds: int
    undecided: int
    reasons_undecided: int


def _rounds(run: Search, base_sims: np.ndarray, join, fit_rows: np.ndarray, graph_free: np.ndarray,
            norms: np.ndarray, seed: int, draws: int, alpha: float, threshold: float) -> _Rounds:
    """Steps 3–5 of the module docstring: the sample searched exactly, the cuts with their
    intervals, the isolation band and the rows the cuts decide searched exactly, and the sample
    doubled while a decided row lies inside a cut's interval (at most :data:`MAX_ROUNDS` rounds)."""
    from embscope.geometry.indicators import collapse_spread

    base_knot, base_iso = knot_and_isolation(base_sims)
    rng = np.random.default_rng(seed)
    pool = np.flatnonzero(fit_rows)
    draws_a = rng.choice(pool, max(1, draws // 2))
    draws_b = rng.choice(pool, max(1, draws // 2))
    tau_rows = join.rows()
    rounds = 0
    while True:
        run.search(np.concatenate([draws_a, draws_b]), "sample")
        # flagged whatever their neighbours: searched for their figures, not to bound other rows
        run.search(np.flatnonzero(graph_free), "flagged by other indicators", offer=False)
        run.search(tau_rows, "near-duplicate (partner at ≥ τ)")
        knot_x, iso = knot_and_isolation(run.sims)
        cuts = _cuts({"knot": knot_x, "isolation": iso}, {"knot": base_knot, "isolation": base_iso}, run.exact,
                     fit_rows, draws_a, draws_b, level_of_round(alpha, rounds), threshold)
        lo_iso = cuts["isolation"]["lo"]

        def band():
            v = 1.0 - run.sims[:, 0].astype(np.float64)
            rows = np.flatnonzero(~run.exact & (v >= lo_iso))
            return rows[np.argsort(-v[rows], kind="stable")]

        settle(run, band, "isolation band")
        knot_x, iso = knot_and_isolation(run.sims)
        ex = run.exact
        spread = collapse_spread(norms, run.ids, run.sims)
        collapsed = ex & (np.nan_to_num(spread, nan=np.inf) <= COLLAPSE_SPREAD)
        kc, ic = cuts["knot"], cuts["isolation"]
        near_knot = (knot_x >= kc["lo"]) & (knot_x < kc["hi"])
        # a flag the knot decides: a collapsed row nothing else flags (a flagged row only changes its reason)
        in_knot = collapsed & ~graph_free & near_knot
        in_iso = ex & (iso >= ic["lo"]) & (iso < ic["hi"])
        undecided = int((in_knot | in_iso).sum())
        reasons_undecided = int((ex & graph_free & near_knot).sum())
        if not undecided or rounds + 1 >= MAX_ROUNDS:
            return _Rounds(cuts, draws_a, draws_b, rounds + 1, undecided, reasons_undecided)
        rounds += 1
        draws_a = np.concatenate([draws_a, rng.choice(pool, len(draws_a))])
        draws_b = np.concatenate([draws_b, rng.choice(pool, len(draws_b))])


def _search_every_row(run: Search, reason: str) -> None:
    """Exact search of every row into ``run`` (its rows not yet exact counted under ``reason``)."""
    from embscope.geometry.exact import exact_knn

    t = time.perf_counter()
    v, i = exact_knn(run.xn, run.k, progress=run.progress)
    run.sims[:], run.ids[:] = v.numpy(), i.numpy()
    run.by_reason[reason] = int((~run.exact).sum())
    run.exact[:] = True
    run.seconds += time.perf_counter() - t


def _population_fit(sims: np.ndarray, fit_rows: np.ndarray) -> dict[str, tuple[float, float]]:
    """{knot, isolation}: the population's own (median, scale) of the robust z, from exact
    neighbours of every row (no sample, no interval)."""
    from embscope.geometry.indicators import robust_z

    out = {}
    for name, v in zip(("knot", "isolation"), knot_and_isolation(sims)):
        _, med, scale = robust_z(v, fit_rows, MIN_SCALE[name])
        out[name] = (med, scale)
    return out


def _exact_instead(xn, k, fit_rows, groups, other_scores, threshold, join, timings, progress, why: str):
    """The certified graph as exact search of every row (its decisions and figures are then exact
    search's by definition); the fit is the population's own median and MAD."""
    from embscope.geometry.exact import exact_knn

    t = time.perf_counter()
    v, i = exact_knn(xn, k, progress=progress)
    sims, ids = v.numpy(), i.numpy()
    timings["exact search"] = time.perf_counter() - t
    knn_fit = _population_fit(sims, fit_rows)
    n = len(sims)
    cert = CertificateRecord(
        confidence=1.0, rounds=0, sample_draws=0, sample_rows=0, tau=round(join.tau, 6), threshold=threshold,
        cuts={}, exact_rows=n, refined={"every row (exact search was cheaper)": n}, undecided=0,
        reasons_undecided=0, fallback=why, join=join.info,
        lists={name: True for name in ("top_isolated", *(f"top_score:{g}" for g in (groups or {})))},
        measured=MeasuredRecord(rows=n, base_recall_at_k=1.0),
        seconds={k_: round(v_, 3) for k_, v_ in timings.items()}, base="none (exact search)", base_seconds=0.0)
    return Certified(neighbors=ids, sims=sims, exact=np.ones(n, bool), knn_fit=knn_fit, certificate=cert)


def _measured(base_sims: np.ndarray, sims: np.ndarray, rows: np.ndarray, knn_fit,
              threshold: float) -> MeasuredRecord | None:
    """How far the base graph was from exact search on the sample rows (all exact): the knot's
    and isolation's gaps (quantiles) and the share of rows whose knot sits on the other side of
    the cut (the ``family`` count's error rate), with a 95 % Clopper–Pearson upper bound."""
    from scipy.stats import beta

    if not len(rows):
        return None
    bk, bi = knot_and_isolation(base_sims[rows])
    ek, ei = knot_and_isolation(sims[rows])
    gap_k = np.exp(-bk) - np.exp(-ek)  # knot (cosine units): exact − graph ≥ 0
    gap_i = bi - ei  # isolation: graph − exact ≥ 0
    flagged_base, flagged_exact = fitted_z("knot", bk, knn_fit) >= threshold, fitted_z("knot", ek, knn_fit) >= threshold
    flips = int((flagged_base != flagged_exact).sum())
    m = len(rows)
    upper = float(beta.ppf(0.95, flips + 1, m - flips)) if flips < m else 1.0
    q = [50, 90, 99, 100]
    return MeasuredRecord(rows=m, knot_gap=dict(zip(map(str, q), np.percentile(gap_k, q).round(5).tolist())),
                          isolation_gap=dict(zip(map(str, q), np.percentile(gap_i, q).round(5).tolist())),
                          knot_cut_flips=flips, knot_cut_flip_share_95=round(upper, 5),
                          base_recall_top1=round(float((gap_i <= 1e-6).mean()), 4),
                          base_recall_at_k=round(float((base_sims[rows] >= sims[rows][:, -1:] - 1e-6).mean()), 4))


@dataclass
class CertificateScope:
    """What the certificate is for: the indicators' rows and flags that do not depend on the graph
    (:func:`embscope.geometry.indicators.prepare`). Default: every row fits the cuts, none is
    flagged otherwise, no list."""

    fit_rows: np.ndarray | None = None
    graph_free: np.ndarray | None = None
    norms: np.ndarray | None = None
    groups: dict[str, np.ndarray] | None = None
    other_scores: np.ndarray | None = None
    threshold: float = DEFAULT_THRESHOLD

    def digest(self) -> str:
        """A hash of everything above (part of the cache key: another threshold or other flags is
        another certificate)."""
        import hashlib

        h = hashlib.blake2b(digest_size=12)
        h.update(repr(float(self.threshold)).encode())
        for name in ("fit_rows", "graph_free", "norms", "other_scores"):
            v = getattr(self, name)
            h.update(name.encode() + (b"-" if v is None else np.ascontiguousarray(v).tobytes()))
        for name, v in sorted((self.groups or {}).items()):
            h.update(name.encode() + np.packbits(np.asarray(v, bool)).tobytes())
        return h.hexdigest()


def context_for(prep, categories, threshold: float) -> CertificateScope:
    """The :class:`CertificateScope` of a scan: its fit rows, graph-free flags, norms, the report's two
    score groups (normal and other rows) and each row's score without the knot."""
    from embscope.geometry.indicators import SCORED, _raw, evidence, graph_free_flags

    cats = np.asarray(categories)
    zs, _ = evidence(_raw(prep), prep.fit_rows)
    other = np.vstack([np.nan_to_num(zs[n_], nan=-np.inf) for n_ in SCORED if n_ in zs]).max(axis=0)
    normal = cats == "normal"
    return CertificateScope(fit_rows=prep.fit_rows, graph_free=graph_free_flags(prep, threshold), norms=prep.in_norm,
                   groups={"normal": normal, "other": ~normal}, other_scores=other, threshold=threshold)


def certified_knn(x, k: int = 10, *, context: CertificateScope | None = None, seed: int = 0, progress: bool = True,
                  cache_dir=None, use_cache: bool = True, weighed: dict[str, dict[str, float]] | None = None):
    """:func:`certified_graph` as a :class:`~embscope.geometry.knn.KnnGraph`, cached (the key holds
    the matrix, k and the context's digest). ``graph.exact`` marks the rows searched exactly;
    ``graph.info.certificate`` says what was sampled, refined and proven, and ``graph.info.knn_fit``
    the (median, scale) the robust z's of knot and isolation must use. ``weighed``: the estimates
    ``auto`` chose it by (:func:`embscope.geometry.knn.resolve_method`)."""
    import torch

    from embscope.geometry import knn_cache

    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    x = x.cpu()
    ctx = context or CertificateScope()
    n = x.shape[0]
    key_path = None
    if use_cache:
        from pathlib import Path

        base = Path(cache_dir) if cache_dir is not None else knn_cache.default_cache_dir()
        key_path = base / f"{knn_cache.matrix_key(x, k, 'certified:' + ctx.digest())}.npz"
        hit = knn_cache.load_graph(key_path, n, k)
        if hit is not None and hit.exact is not None and hit.info.certificate is not None:
            return hit
    t0 = time.perf_counter()
    cert = certified_graph(x, k, context=ctx, seed=seed, progress=progress)
    measured = cert.certificate.measured or MeasuredRecord(rows=0)
    # recall@k: the base graph's, on the sample rows (what the rows not searched exactly look like)
    info = KnnRecord(method="certified", k=k,
                     recall_at_k=float("nan") if measured.base_recall_at_k is None else measured.base_recall_at_k,
                     recall_rows=measured.rows, seconds=round(time.perf_counter() - t0, 3), device="cpu",
                     certificate=cert.certificate, knn_fit={name: [float(v) for v in fit]
                                                           for name, fit in cert.knn_fit.items()}, **(weighed or {}))
    graph = KnnGraph(neighbors=cert.neighbors.astype(np.int64), sims=cert.sims.astype(np.float32), info=info,
                     exact=cert.exact)
    if key_path is not None:
        knn_cache.save_graph(key_path, graph)
    return graph
