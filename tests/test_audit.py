"""The whole audit, end to end, on the demo model and on a Qwen2-shaped checkpoint in an HF cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from embscope.summary import read_summary

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_audit_writes_every_table(smollm2_audit):
    out = smollm2_audit
    assert sorted(p.name for p in out.iterdir()) == [
        ".embscope", "candidates.parquet", "index.html", "language_groups.parquet", "languages.parquet",
        "new_tokens.parquet", "summary.json", "tokenizers.parquet", "tokens.parquet"]
    raw = json.loads((out / "summary.json").read_text())
    s = read_summary(raw)
    assert s.model.rows == 49152 and s.model.tied is True
    assert s.sections.context.rope.theta == pytest.approx(1e5)
    assert {"load", "tokens", "geometry", "extension", "report"} <= set(s.timings)
    assert s.embscope.version and s.parameters.scan.k == 10
    assert {"torch", "polars", "numpy", "transformers"} <= set(s.versions)
    name, digest = s.inputs.model.tensors.embed.split(":")
    assert name in ("xxh3_128", "blake2b") and len(digest) == 32 and s.inputs.model.tensors.output is None
    assert s.skipped == {}

    tokens = pl.read_parquet(out / "tokens.parquet")
    assert tokens.height == 49152
    for col in ["token_id", "token", "token_bytes", "category", "in_norm", "out_norm", "zero_row", "magikarp_sim",
                "knot", "isolation", "knn_sim_k", "z_in_norm", "z_knot", "script", "undertrained_score", "flagged",
                "isolated", "flag_reason", "verify_max_prob", "corpus_count", "neighbors", "neighbor_sims"]:
        assert col in tokens.columns, col
    assert tokens["out_norm"].null_count() == 49152  # tied
    # neighbours are real rows, never the row itself, most similar first
    row = tokens.row(1000, named=True)
    assert len(row["neighbors"]) == 10 and 1000 not in row["neighbors"]
    assert row["neighbor_sims"] == sorted(row["neighbor_sims"], reverse=True)
    flagged = tokens.filter(pl.col("flagged") & (pl.col("category") == "normal"))
    assert flagged.height > 0 and flagged["flag_reason"].null_count() == 0
    # --verify 4: the two lists, apart in the table and the summary, and on the report's headline
    geo = s.sections.tokens.geometry
    ver = geo.verification
    assert ver.n_checked == 4 and ver.controls_checked == 4 and ver.sample == "top" and ver.seconds_per_row > 0
    status = tokens["undertrained_status"]
    assert (status == "verified").sum() == geo.verified_undertrained.count > 0
    assert (status == "candidate").sum() == geo.candidates.count
    assert {r.id for r in geo.verified_undertrained.rows}.isdisjoint(r.id for r in geo.candidates.rows)
    html = (out / "index.html").read_text()
    assert 'id="overview-verified"' in html and "flags hold (precision" in html and 'id="candidates"' in html
    # the medical corpus is the user's data: the flagged rows it produces are counted
    usage = s.sections.tokens.geometry.usage
    assert usage is not None and usage.texts > 0
    used = tokens.filter((pl.col("corpus_count") > 0) | (pl.col("template_count") > 0))
    assert used.height == usage.flagged_used

    # UDHR by default: the report shows many languages besides the medical corpus's English
    langs = pl.read_parquet(out / "languages.parquet")
    udhr = langs.filter(pl.col("corpus").str.ends_with("udhr"))
    assert udhr.height > 50 and {"eng", "cmn_hans", "arb"} <= set(udhr["language"].to_list())
    assert udhr.filter(pl.col("language") == "eng")["parity"][0] == pytest.approx(1.0)
    medical = langs.filter(pl.col("corpus").str.ends_with("medical"))
    assert medical["language"].to_list() == ["eng"] and medical["fertility"][0] > 1.0
    # the whole model scored the default languages' first units within audit's budget (0.5×10¹²)
    scored = udhr.filter(pl.col("bits_per_byte").is_not_null())
    assert sorted(scored["language"].to_list()) == ["arb", "cmn_hans", "eng", "hin", "rus"]
    model = next(c.model for p, c in s.sections.languages.corpora.items() if p.endswith("udhr"))
    from embscope.languages.model_cost import AUDIT_WORK

    assert model.work <= model.work_budget == AUDIT_WORK and 0 < model.units < 31 and model.stopped_at_budget
    assert scored.filter(pl.col("language") == "eng")["information_parity"][0] == 1.0

    cands = pl.read_parquet(out / "candidates.parquet")
    assert cands.height >= 50 and (cands["n_pieces"] >= 2).all()
    ext = s.sections.extension
    assert ext.corpus.endswith("medical")
    assert ext.tokens_saved > 0 and ext.corpus_tokens_after == ext.corpus_tokens - ext.tokens_saved


@pytest.mark.slow
def test_parquet_tables_carry_the_schema_version(smollm2_audit):
    import pyarrow.parquet as pq

    from embscope.summary import SCHEMA_VERSION

    for name in ("tokens", "languages", "candidates"):
        meta = pq.read_schema(smollm2_audit / f"{name}.parquet").metadata
        assert meta[b"embscope.schema_version"] == str(SCHEMA_VERSION).encode(), name


@pytest.mark.slow
def test_report_html_has_every_section(smollm2_audit):
    html = (smollm2_audit / "index.html").read_text()
    for section in ("Overview", "Under-trained tokens", "Languages", "Extension", "Context"):
        assert section in html
    assert "http://" not in html.replace("http://www.w3.org", "") and "https://" not in html


@pytest.mark.slow
def test_mission_command_offline_on_qwen2_shaped_cache(tmp_path):
    """`audit --model qwen2-7b` through the HF cache, offline: real Qwen2 vocabulary and config,
    152064 untied rows (narrow, to stay fast), padding rows labelled.

    128 wide, with ``--knn nndescent`` (``auto`` would run exact search here: the width is below
    CERTIFIED_MIN_WIDTH; ~190 s on 2 cores): planted clusters, and no row may come back short of
    k neighbours.

    The three kinds of under-trained row are planted too, ~1 517 rows each: weak input only, head
    collapsed onto the unused rows' mean, both. The scan finds its reference (the unused rows it
    planted, and the padding) and each kind, and flags almost no ordinary row (this was a second
    scan of a 32-wide copy in tests/test_undertrained.py)."""
    from collections import Counter

    sys.path.insert(0, str(ROOT / "bench"))
    from make_checkpoint import make_checkpoint

    from embscope.geometry.knn import EXACT_BUDGET

    hidden = 128
    assert 152064 ** 2 * hidden > EXACT_BUDGET
    p = make_checkpoint(tmp_path / "ckpt", hidden=hidden, hf_cache=tmp_path / "hf" / "hub", kinds=True)
    env = dict(os.environ, HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1", EMBSCOPE_QUIET="1",
               EMBSCOPE_CACHE=str(tmp_path / "cache"))
    out = tmp_path / "report"
    # the rows are the point: the corpus sections read 200 kB of the medical corpus (the whole
    # corpus is read by the demo audit, tests/conftest.py's smollm2_audit)
    res = subprocess.run([sys.executable, "cli.py", "audit", "--model", "qwen2-7b", "--corpus", "medical",
                          "--sample-bytes", "200000", "--languages", "none", "--no-map", "--top", "20",
                          "--knn", "nndescent", "--out", str(out)], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"report: {out / 'index.html'}" in res.stdout
    s = read_summary(json.loads((out / "summary.json").read_text()))
    assert s.model.source == "hub-cache" and s.model.tied is False
    assert s.model.n_tokens == 151665
    assert s.sections.tokens.categories["padding"] == 152064 - 151665
    assert s.inputs.model.tensors.output is not None
    knn = s.sections.tokens.geometry.knn
    assert knn.method == "nndescent" and knn.recall_at_k > 0.85  # measured 0.877 on these planted clusters
    tokens = pl.read_parquet(out / "tokens.parquet", columns=["category", "out_norm", "zero_row", "flagged",
                                                              "flag_reason", "neighbors", "neighbor_sims"])
    padding = tokens.filter(pl.col("category") == "padding")
    assert padding["zero_row"].all() and padding["flagged"].all()
    assert tokens["out_norm"].null_count() == 0
    ids = np.asarray(tokens["neighbors"].to_list())
    assert ids.shape == (152064, 10) and (ids >= 0).all()       # k real neighbours on every row
    assert np.isfinite(np.asarray(tokens["neighbor_sims"].to_list())).all()
    # Only the shards holding embed_tokens and lm_head were opened.
    assert [Path(f).name for f in s.model.files_read] == [
        "model-00001-of-00004.safetensors", "model-00004-of-00004.safetensors"]
    # each planted kind is found, by the indicator that kind should trip
    ref = s.sections.tokens.geometry.reference.by_source
    assert ref["unreachable"] + ref["unused-utf8-bytes"] == len(p.unused_rows)
    flagged = tokens["flagged"].to_numpy()
    reason = tokens["flag_reason"].to_list()
    expect = {"input": {"in_norm"}, "head": {"out_norm", "magikarp"}, "both": {"in_norm"}}
    planted = np.zeros(p.rows, bool)
    for kind, ids in p.kinds.items():
        recall = flagged[ids].mean()
        print(f"\n{kind}: {len(ids)} planted, recall {recall:.3f}", Counter(reason[i] for i in ids).most_common(3))
        assert len(ids) > 1000 and recall >= 0.9, (kind, recall)
        assert all(expect[kind] & set(reason[i].split("+")) for i in ids if flagged[i]), kind
        planted[ids] = True
    for ids in (p.low_norm_rows, p.unused_rows, p.padding_rows):
        planted[ids] = True
    fp = flagged[~planted].mean()
    print(f"ordinary rows flagged: {flagged[~planted].sum()} of {(~planted).sum()} ({fp:.5f})")
    assert fp <= 0.01, fp
