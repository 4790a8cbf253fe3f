"""Indicators, scan and the scan command on real weights and on a planted synthetic matrix."""

from __future__ import annotations

import json
from pathlib import Path
import os

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from embscope.geometry.indicators import robust_z
from embscope.geometry.options import ScanOptions
from embscope.geometry.scan import scan
from embscope.models.model import LoadedModel


@pytest.fixture(scope="module")
def knn_cache():
    """The session's kNN cache (tests/conftest.py), so each demo model's graph is built once."""
    import os

    return Path(os.environ["EMBSCOPE_CACHE"]) / "knn"


@pytest.fixture(scope="module")
def minilm(minilm_model):
    return minilm_model


def test_robust_z_worked_example():
    z, med, scale = robust_z(np.array([1.0, 2, 3, 4, 100]), np.ones(5, bool))
    assert med == 3 and scale == pytest.approx(1.4826)
    assert z[-1] == pytest.approx(97 / 1.4826)


def test_smollm2_flags_some_rows(knn_cache, smollm2_model, smollm2_graph):
    m = smollm2_model
    res = scan(m, ScanOptions(cache_dir=knn_cache, map=False))
    s = res.summary.to_dict()
    assert s["knn"]["cached"]  # the session's graph (smollm2_graph): the same key as scan's
    assert s["flagged"]["normal"] > 0 and set(s["flagged"]["by_reason"]) <= {"in_norm", "knot", "zero"}
    assert s["reference"]["source"] == "none" and "tied" in s["reference"]["note"]
    assert len(s["top_undertrained"]) == 30
    top = {r["token"] for r in s["top_undertrained"][:20]}
    assert {"MetaInfoClass", "swigfaiss"} <= top  # code-artifact merges whose rows collapsed together
    assert f"indicators flag {s['flagged']['by_indicators']:,} of 48,822 trained rows" in s["threshold_note"]
    json.dumps(s)  # JSON-able
    for name, col in res.columns.items():
        assert len(col) == m.n_rows, name
    assert res.columns["out_norm"][0] is None and res.columns["magikarp_sim"][0] is None
    assert res.columns["z_magikarp"][0] is None and res.columns["verify_max_prob"][0] is None
    reasons = res.columns["flag_reason"]
    # a reason without a flag: the knot of a family (trained near-synonyms), stopped by the collapse gate
    gated = [r is not None and "family" in r for r in reasons]
    assert all((r is not None) == (f or i or g)
               for r, f, i, g in zip(reasons, res.columns["flagged"], res.columns["isolated"], gated))
    assert all(not f for f, r in zip(res.columns["flagged"], reasons) if r in ("family", "family+isolated"))
    assert s["flagged"]["family"] > 0
    print("\n".join(f"{r['id']:>6} {r['token']!r:<20} {r['score']:.2f}" for r in s["top_undertrained"][:20]))


def _planted(seed=0):
    """3000 Gaussian rows (64-d, untied) with 5 zero rows, 10 low-norm rows, a far cluster of 6."""
    g = torch.Generator().manual_seed(seed)
    n, d = 3000, 64
    emb = torch.randn(n, d, generator=g)
    out = torch.randn(n, d, generator=g)
    zero = list(range(10, 15))
    low = list(range(100, 110))
    far = list(range(2000, 2006))
    emb[zero] = 0
    out[zero] = 0
    emb[low] *= 0.05
    out[low] *= 0.05
    centre = torch.randn(d, generator=g) * 4
    emb[far] = centre + 0.1 * torch.randn(len(far), d, generator=g)
    out[far] = -centre + 0.1 * torch.randn(len(far), d, generator=g)
    return emb, out, zero + low + far


def test_planted_rows_are_flagged(tmp_path):
    emb, out, planted = _planted()
    m = LoadedModel(spec="planted", name="planted", source="test", path="", arch=None, config={},
                    embed=emb, output=out, tied=False, dtype="float32", device="cpu", vocab=None)
    res = scan(m, ScanOptions(cache_dir=tmp_path, map=True))
    flagged = np.asarray(res.columns["flagged"])
    assert flagged[planted].all(), [i for i in planted if not flagged[i]]
    others = np.delete(flagged, planted)
    print(f"\nplanted: {flagged[planted].sum()}/{len(planted)} flagged; false-positive rate {others.mean():.4f}")
    assert others.mean() < 0.01, others.mean()   # false-positive rate
    assert np.asarray(res.columns["zero_row"])[10:15].all()
    assert res.summary.flagged.zero_rows == 5
    assert res.summary.reference.source == "zero-rows"
    reasons = res.columns["flag_reason"]
    assert all(reasons[i] == "zero" or reasons[i].startswith("zero+") for i in range(10, 15))
    assert all("in_norm" in reasons[i] for i in range(100, 110))
    assert np.isfinite(res.columns["x"]).all()
    again = scan(m, ScanOptions(cache_dir=tmp_path, map=True))
    assert again.summary.knn.cached
    np.testing.assert_array_equal(res.columns["x"], again.columns["x"])  # seeded layout


@pytest.mark.slow
def test_scan_command_writes_tables(minilm_scan):
    """The session's ``scan --model minilm-l6 --no-map --device cpu`` (tests/conftest.py, with the
    session's kNN cache) wrote the tables; a second scan into its folder is refused."""
    import polars as pl

    from embscope.cli import main

    out = minilm_scan
    t = pl.read_parquet(out / "tokens.parquet")
    assert t.columns[:4] == ["token_id", "token", "token_bytes", "category"]
    assert t.height == 30522 and t["flagged"].sum() > 994 * 0.95
    from embscope.summary import read_summary

    geo = read_summary(json.loads((out / "summary.json").read_text())).sections.tokens.geometry
    assert geo.reference.source == "unused-names" and geo.reference.size == 994
    assert main(["scan", "--model", "minilm-l6", "--out", str(out), "--no-map"]) == 2  # exists
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temp dirs left


def test_subspace_iteration_finds_the_exact_first_principal_component(minilm, smollm2_model):
    """Wide matrices get the first principal component by subspace iteration; on real rows it is
    the direction ``eigh`` finds, and a width past the switch takes that path."""
    import torch

    from embscope.geometry import principal as ind

    for m in (minilm.embed, smollm2_model.embed):
        exact = ind._first_pc_exact(m).double()
        fast = ind.top_eigvec_subspace(m)
        assert fast is not None
        assert 1.0 - abs(float(fast.double() @ exact)) < 1e-8
    wide = torch.cat([minilm.embed[:4000].float()] * 3, dim=1)   # 4000 × 1152 ≥ SUBSPACE_FROM_DIM
    assert wide.shape[1] >= ind.SUBSPACE_FROM_DIM
    assert 1.0 - abs(float(ind.first_principal_component(wide).double() @ ind._first_pc_exact(wide).double())) < 1e-8
