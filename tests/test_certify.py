"""The certified graph decides as exact search does; the join, the intervals and the graphs it rests on."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from embscope.geometry.certify import certified_graph
from embscope.geometry.exact import exact_knn, normalize_rows
from embscope.geometry.indicators import Neighbors, compute_indicators, prepare, transform

ROWS = 12000
#: rows of it the planted test runs on: its point is the decision at the cuts, which the planted
#: rows straddle whatever the size (exact search, the reference, costs n²)
PLANTED_BASE = 8000


@pytest.fixture(scope="module")
def smol_rows(smollm2_model) -> np.ndarray:
    """The first 12,000 rows of SmolLM2's embedding: real, anisotropic rows with hubs."""
    return smollm2_model.embed[:ROWS].float().numpy().copy()


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def _exact_indicators(x: np.ndarray, *thresholds: float):
    """The indicators from exact search at each threshold (one search: the graph has no threshold)."""
    xt = torch.from_numpy(x)
    v, i = exact_knn(normalize_rows(xt), 10, progress=False)
    cats, strings = ["normal"] * len(x), [""] * len(x)
    out = [compute_indicators(xt, None, cats, strings, Neighbors(v.numpy().copy(), ids=i.numpy().copy()), threshold=t)
           for t in thresholds]
    return out[0] if len(out) == 1 else out


def _certified_indicators(x: np.ndarray, threshold: float, draws: int = 2000):
    from embscope.geometry.certify import CertificateScope, context_for

    xt = torch.from_numpy(x)
    cats, strings = ["normal"] * len(x), [""] * len(x)
    prep = prepare(xt, None, cats, strings)
    ctx: CertificateScope = context_for(prep, cats, threshold)
    cert = certified_graph(xt, 10, context=ctx, draws=draws, progress=False)  # ctx.threshold is threshold
    ind = compute_indicators(xt, None, cats, strings, Neighbors(cert.sims, ids=cert.neighbors, fit=cert.knn_fit),
                             threshold=threshold, prepared=prep)
    return ind, cert


def test_planted_rows_at_the_cuts_are_decided_as_exact_search_does(smol_rows):
    """SmolLM2's first 8,000 rows plus rows planted just above and just below each cut: collapsed
    groups whose knot straddles the knot cut (threshold raised so the cut sits at knot ≈ 0.99, where
    collapses live), and rows whose nearest cosine puts their isolation just above and below its cut. The
    certified run flags, and marks isolated, exactly the rows exact search does — the planted
    ones included, which land on both sides."""
    rng = np.random.default_rng(0)
    base = smol_rows[:PLANTED_BASE]
    ref = _exact_indicators(base, 4.0)
    kn, iso = ref.fit["knot"], ref.fit["isolation"]
    med_knot = transform("knot", np.array([kn["median"]]))[0]
    # threshold whose knot cut is at knot 0.99: x = −log(0.01)
    t_knot = float((transform("knot", np.array([0.99]))[0] - med_knot) / kn["scale"])
    iso_cut = iso["median"] + 4.0 * iso["scale"]
    d = base.shape[1]
    scale = np.median(np.linalg.norm(base, axis=1))
    planted = []
    for c in (0.9935, 0.9925, 0.9875, 0.9865):  # within-group cosine ≈ c: knot ≈ c, spread √(2 − 2c) < 0.2
        b = base[rng.integers(len(base))].astype(np.float64)  # copies at its own norm: norm ratios ≈ 1
        eps = np.sqrt((1 / c - 1) / d) * np.linalg.norm(b)  # per-coordinate noise for a pairwise cosine ≈ c
        planted += [b + eps * rng.standard_normal(d) for _ in range(12)]
    for t in (iso_cut - 0.04, iso_cut - 0.015, iso_cut + 0.015, iso_cut + 0.04):  # nearest cosine 1 − t
        b = _unit(base[rng.integers(len(base))].astype(np.float64))
        w = _unit(rng.standard_normal(d) - (rng.standard_normal(d) @ b) * b)
        w = _unit(w - (w @ b) * b)
        planted.append(((1 - t) * b + np.sqrt(1 - (1 - t) ** 2) * w) * scale)
    x = np.concatenate([base, np.asarray(planted, dtype=np.float32)])
    x = x.astype(np.float32)
    new = np.arange(len(base), len(x))
    for threshold, exact in zip((t_knot, 4.0), _exact_indicators(x, t_knot, 4.0)):
        cert, c = _certified_indicators(x, threshold)
        assert (cert.flagged == exact.flagged).all(), (threshold, c.certificate.cuts)
        assert (cert.isolated == exact.isolated).all(), (threshold, c.certificate.cuts)
        if threshold == t_knot:  # the groups straddle the knot cut, collapsed on both sides
            groups = new[:48]
            collapsed = exact.spread[groups] <= 0.2
            assert collapsed.all(), exact.spread[groups]
            assert exact.flagged[groups][collapsed].any() and not exact.flagged[groups][collapsed].all()
        else:
            assert 0 < exact.isolated[new[48:]].sum() < 4
        assert c.exact[np.flatnonzero(exact.flagged | exact.isolated)].all()  # every decided row searched exactly
        # the rows not searched exactly: their knot a lower bound, their isolation an upper bound
        assert (cert.knot <= exact.knot + 1e-5).all() and (cert.isolation >= exact.isolation - 1e-5).all()


def test_the_band_grows_when_the_sample_is_small(smol_rows):
    """The cut's interval comes from the sample (and the population's graph values): 200 draws
    give a wider interval of the isolation cut than 4,000."""
    x = smol_rows[:8000]
    _, small = _certified_indicators(x, 4.0, draws=200)
    _, large = _certified_indicators(x, 4.0, draws=4000)

    def width(c, name):
        lo, hi = c.certificate.cuts[name].interval
        return hi - lo

    for name in ("isolation", "knot"):
        assert width(small, name) > 1.2 * width(large, name), (name, width(small, name), width(large, name))


def test_join_finds_every_pair_above_tau(minilm_model):
    """The near-duplicate join against brute force on MiniLM rows with 40 near-copies planted:
    every pair at cosine ≥ τ found, each with its exact cosine, and no pair below τ − 2·d·2⁻²⁴."""
    from embscope.geometry.join import near_duplicates

    rng = np.random.default_rng(1)
    base = minilm_model.embed[2000:8000].float().numpy()
    copies = base[rng.integers(len(base), size=40)] * (1 + 0.02 * rng.standard_normal((40, 1)))
    copies += 0.006 * np.linalg.norm(base[0]) * rng.standard_normal(copies.shape) / np.sqrt(base.shape[1])
    xn = normalize_rows(torch.from_numpy(np.concatenate([base, copies]).astype(np.float32)))
    tau = 0.98
    j = near_duplicates(xn, tau, 10, progress=False)
    s = (xn @ xn.T).numpy()
    np.fill_diagonal(s, -2)
    truth = (s >= tau).sum(1)
    np.testing.assert_array_equal(j.count, truth)
    assert truth.sum() > 40  # the copies did make pairs
    has = truth > 0
    top = -np.sort(-s[has], axis=1)[:, :10]
    kept = j.best_v[has]
    np.testing.assert_allclose(np.where(np.isfinite(kept), kept, 0), np.where(kept > -np.inf, top, 0), atol=2e-6)


def test_no_graph_is_short_of_k_neighbours_on_planted_clusters():
    """Planted clusters (30 of 100 rows, 30 of 3 rows, far apart): an approximate graph can leave a
    tiny far cluster's rows short of k (the case that once gave rows id −1 and similarity −inf, and
    a NaN map); every method returns k real neighbours for every row."""
    from embscope.geometry.hnsw import hnsw_knn
    from embscope.geometry.knn import fill_short_rows, knn_graph

    rng = np.random.default_rng(2)
    d = 32
    big, tiny = rng.standard_normal((30, d)) * 10, rng.standard_normal((30, d)) * 10
    x = np.concatenate([c + 0.3 * rng.standard_normal((100, d)) for c in big]
                       + [c + 0.05 * rng.standard_normal((3, d)) for c in tiny]).astype(np.float32)
    for method in ("hnsw", "nndescent", "certified"):
        g = knn_graph(x, 10, method=method, use_cache=False, progress=False)
        assert (g.neighbors >= 0).all() and np.isfinite(g.sims).all(), method
        assert not (g.neighbors == np.arange(len(x))[:, None]).any(), method
    # rows left short are completed with exact search's neighbours
    xn = normalize_rows(torch.from_numpy(x))
    sims, ids = hnsw_knn(xn, 10)
    tiny_rows = np.arange(3000, len(x), 3)
    sims[tiny_rows, 5:], ids[tiny_rows, 5:] = -np.inf, -1
    short = (ids < 0).any(axis=1)
    assert fill_short_rows(xn, sims, ids, 10) == short.sum() == len(tiny_rows)
    ref, _ = exact_knn(xn, 10, rows=torch.from_numpy(np.flatnonzero(short)), progress=False)
    np.testing.assert_allclose(sims[short], ref.numpy(), atol=1e-6)


def test_intervals_hold_on_known_populations():
    """The distribution-free intervals: the worked example of the order statistics, and a
    population (a normal, 3 % of rows with a one-sided gap) whose median and MAD they contain."""
    from embscope.geometry.population import bounded_spread, order_ci, spread_ci

    assert order_ci(1000, 0.00025) == (445, 556)
    rng = np.random.default_rng(3)
    e = rng.standard_normal(100_000)
    med, mad = np.median(e), np.median(np.abs(e - np.median(e)))
    gap = np.where(rng.random(len(e)) < 0.03, rng.exponential(0.5, len(e)), 0.0)
    exact = np.zeros(len(e), bool)
    exact[rng.choice(len(e), 2000)] = True
    draws = rng.integers(0, len(e), 2000)
    for s in (bounded_spread(np.where(exact, e, e + gap), exact, gap[draws], 0.001),
              spread_ci(e[draws[:1000]], e[draws[1000:]], 0.001)):
        assert s.median_lo <= med <= s.median_hi and s.mad_lo <= mad <= s.mad_hi, s


def test_language_density_reads_exact_isolation_for_rows_the_graph_left_approximate(smol_rows):
    """The languages table's ``mean_isolation`` (weighted by each language's token counts) from a
    tokens table whose rows are partly approximate (``knn_exact`` false, isolation too high, as a
    graph's upper bound is): the rows it averages get their exact isolation, so the figure equals
    exact search's."""
    from types import SimpleNamespace

    import polars as pl

    from embscope.languages.density import add_density
    from embscope.sections.languages import _exact_isolation

    x = smol_rows[:5000]
    xn = normalize_rows(torch.from_numpy(x))
    v, _ = exact_knn(xn, 1, progress=False)
    iso = 1.0 - v[:, 0].numpy().astype(np.float64)
    rng = np.random.default_rng(4)
    exact = rng.random(len(x)) < 0.5
    shown = np.where(exact, iso, iso + 0.3)  # what a graph would show: an upper bound
    tokens = pl.DataFrame({"token_id": np.arange(len(x), dtype=np.int32), "in_norm": np.linalg.norm(x, axis=1),
                           "isolation": shown, "flagged": np.zeros(len(x), bool), "knn_exact": exact})
    counts = {lang: rng.poisson(0.3, len(x)).astype(np.int64) for lang in ("eng", "fra")}
    acc = {(0, lang): SimpleNamespace(counts=c) for lang, c in counts.items()}
    rows = [{"tokenizer": "t", "language": lang} for lang in counts]
    emb = torch.from_numpy(x)
    add_density(rows, "t", acc, tokens, emb, _exact_isolation(emb))
    for row in rows:
        w = counts[row["language"]].astype(np.float64)
        assert row["mean_isolation"] == pytest.approx((w * iso).sum() / w.sum(), rel=1e-6)


def test_near_duplicates_everywhere_make_it_exact_search(smol_rows):
    """When most rows have a near-duplicate short of k (searching them one by one would cost more
    than exact search of every pair), the certified graph is exact search's, and says why."""
    x = smol_rows[:3000]
    noise = np.random.default_rng(0).standard_normal(x.shape).astype(np.float32)
    twins = x + 1e-3 * np.linalg.norm(x, axis=1, keepdims=True) * noise / np.sqrt(x.shape[1])
    both = np.concatenate([x, twins])                       # every row has one partner at cos ≈ 1
    cert = certified_graph(both, 10, progress=False)
    assert cert.exact.all() and "exact search everywhere" in cert.certificate.fallback
    v, i = exact_knn(normalize_rows(torch.from_numpy(both)), 10, progress=False)
    assert np.allclose(cert.sims, v.numpy(), atol=1e-6)


def test_a_list_past_the_search_cap_is_marked_unproven(smol_rows, monkeypatch):
    """A most-isolated list the certificate cannot prove within its cap is marked so (the scan then
    lists only rows searched exactly) and costs no further search."""
    from embscope.geometry import certify_lists, certify_search

    monkeypatch.setattr(certify_lists, "LIST_REFINE_CAP", 1)
    monkeypatch.setattr(certify_search, "BATCH", 8)
    x = smol_rows[:6000]
    cert = certified_graph(x, 10, progress=False)
    assert cert.certificate.lists["top_isolated"] is False
    assert "list: top_isolated" not in cert.certificate.refined      # nothing searched past the cap


def test_an_unproven_list_shows_only_rows_searched_exactly():
    """The scan's lists draw from rows with exact neighbours when the certificate could not prove
    them, and from every row otherwise."""
    from types import SimpleNamespace

    from embscope.geometry.scan import _listable

    normal = np.array([True, True, True, False])
    exact = np.array([True, False, True, True])
    def graph(exact, lists):
        return SimpleNamespace(exact=exact, info=SimpleNamespace(certificate=lists and SimpleNamespace(lists=lists)))

    unproven, proven = graph(exact, {"top_isolated": False}), graph(exact, {"top_isolated": True})
    assert _listable(unproven, "top_isolated", normal).tolist() == [True, False, True, False]
    assert _listable(proven, "top_isolated", normal).tolist() == normal.tolist()
    assert _listable(graph(None, None), "top_isolated", normal).tolist() == normal.tolist()


def test_language_density_searches_only_the_heaviest_rows_past_its_cap(smol_rows, monkeypatch):
    """Past EXACT_ISOLATION_ROWS the heaviest approximate rows get exact isolation and the share of
    tokens whose isolation is exact is stated per language."""
    from types import SimpleNamespace

    import polars as pl

    from embscope.languages import density
    from embscope.sections.languages import _exact_isolation

    monkeypatch.setattr(density, "EXACT_ISOLATION_ROWS", 50)
    x = smol_rows[:3000]
    tokens = pl.DataFrame({"token_id": np.arange(len(x), dtype=np.int32), "in_norm": np.linalg.norm(x, axis=1),
                           "isolation": np.full(len(x), 0.9), "flagged": np.zeros(len(x), bool),
                           "knn_exact": np.zeros(len(x), bool)})
    counts = np.zeros(len(x), np.int64)
    counts[:200] = np.arange(200, 0, -1)                       # rows 0..49 are the heaviest
    acc = {(0, "eng"): SimpleNamespace(counts=counts)}
    rows = [{"tokenizer": "t", "language": "eng"}]
    density.add_density(rows, "t", acc, tokens, torch.from_numpy(x), _exact_isolation(torch.from_numpy(x)))
    w = counts / counts.sum()
    assert rows[0]["isolation_exact_share"] == pytest.approx(w[:50].sum())
    assert rows[0]["mean_isolation"] < 0.9


def test_the_languages_exact_isolation_searches_each_row_once(smol_rows, monkeypatch):
    """Rows asked for by a second corpus that the first already had are not searched again, and
    every answer is exact search's."""
    from embscope.geometry import exact as exact_mod
    from embscope.sections.languages import _exact_isolation

    x = torch.from_numpy(smol_rows[:4000])
    asked = []
    real = exact_mod.nearest_cosine
    monkeypatch.setattr(exact_mod, "nearest_cosine",
                        lambda m, rows, floor=None: asked.append(list(rows)) or real(m, rows, floor))
    iso = _exact_isolation(x)
    a = iso(np.array([5, 1, 3]))
    b = iso(np.array([3, 7]), np.array([0.9, 0.9]))  # graph bounds: loose, and only row 7's is read
    assert asked == [[5, 1, 3], [7]]
    v, _ = exact_knn(normalize_rows(x), 1, progress=False)
    truth = 1.0 - v[:, 0].numpy().astype(np.float64)
    assert np.allclose(a, truth[[5, 1, 3]], atol=1e-6) and np.allclose(b, truth[[3, 7]], atol=1e-6)
