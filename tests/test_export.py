"""``embscope export atlas|projector``: the token map in Embedding Atlas's and the projector's formats."""

from __future__ import annotations

import json
import math

import pytest


def _tokens(n: int = 6):
    import polars as pl

    from embscope.tables import tokens_frame

    return tokens_frame({
        "token_id": list(range(n)), "token": ["a", "b\u202e", "<s>", "\tx", "d", "e"][:n],
        "category": ["normal"] * n, "x": [float(i) for i in range(n)], "y": [0.5] * n,
        "neighbors": [[(i + 1) % n, (i + 2) % n] for i in range(n)],
        "neighbor_sims": [[0.9, 0.25]] * n, "flagged": [i == 1 for i in range(n)],
        "script": ["Latin"] * n,
    }).with_columns(pl.Series("verify_max_prob", [None, 0.001, 0.5, None, None, None][:n], dtype=pl.Float32))


def test_atlas_table_has_the_neighbour_struct():
    from embscope.report.atlas import atlas_table

    t = atlas_table(_tokens())
    assert t.columns[:5] == ["token_id", "token", "x", "y", "neighbors"]
    nb = t["neighbors"][0]
    assert nb["ids"] == [1, 2]  # zero-based row indices = token ids
    assert [round(d, 6) for d in nb["distances"]] == [0.1, 0.75]  # 1 - cosine similarity
    assert t["token"][1] == "b\\u202e" and t["token"][3] == "\\tx"  # as the report shows them
    assert t["verified"].to_list() == [None, True, False, None, None, None]
    assert t["category"].dtype.is_(__import__("polars").String)


def test_atlas_refuses_a_table_without_map():
    import polars as pl

    from embscope.errors import SpecError
    from embscope.report.atlas import atlas_table

    t = _tokens().with_columns(pl.lit(float("nan"), dtype=pl.Float32).alias("x"))
    with pytest.raises(SpecError, match="has no 2-D map"):
        atlas_table(t)
    with pytest.raises(SpecError, match="not in token-id order"):
        atlas_table(_tokens().reverse())


def test_export_atlas_cli_no_map_is_one_line(minilm_scan, capsys):
    from embscope.cli import main

    assert main(["export", "atlas", str(minilm_scan)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--no-map" in err
    assert not (minilm_scan / "atlas").exists()


def test_export_projector(minilm_scan, minilm_model, tmp_path):
    import numpy as np
    import polars as pl

    from embscope.cli import main

    out = tmp_path / "proj"
    assert main(["export", "projector", str(minilm_scan), "--out", str(out), "--sample", "300"]) == 0
    cfg = json.loads((out / "projector_config.json").read_text())
    emb = cfg["embeddings"][0]
    assert emb["tensorShape"] == [300, 384] and emb["tensorPath"] == "tensors.tsv"
    assert emb["metadataPath"] == "metadata.tsv"
    assert 'tensor_path: "tensors.tsv"' in (out / "projector_config.pbtxt").read_text()
    meta = (out / "metadata.tsv").read_text(encoding="utf-8").split("\n")
    assert meta[-1] == "" and len(meta) == 302  # header + 300 rows + final newline
    header = meta[0].split("\t")
    assert header[:3] == ["token_id", "token", "category"]
    assert all(len(line.split("\t")) == len(header) for line in meta[1:-1])
    ids = [int(line.split("\t")[0]) for line in meta[1:-1]]
    assert ids == sorted(ids)
    tokens = pl.read_parquet(minilm_scan / "tokens.parquet")
    flagged = tokens.filter(pl.col("flagged"))["token_id"].to_list()
    assert set(flagged[:300]) <= set(ids)  # every flagged row is in the sample
    values = np.loadtxt(out / "tensors.tsv", delimiter="\t", dtype=np.float32)
    assert values.shape == (300, 384)
    want = minilm_model.embed[ids].float().numpy()
    assert np.allclose(values, want, rtol=1e-5, atol=1e-7)
    assert not math.isnan(float(values.sum()))


@pytest.mark.parametrize("column, value, expected", [
    ("x", ["0.5"] * 6, "column 'x' is String, but float32 (a number) is expected"),
    ("token", list(range(6)), "column 'token' is Int64, but string (text) is expected"),
    ("neighbors", ["[1, 2]"] * 6, "column 'neighbors' is String, but list[int32] (a list of integers)"),
    ("neighbor_sims", [["a", "b"]] * 6, "column 'neighbor_sims' is List(String), but list[float32]"),
    ("flagged", ["yes"] * 6, "column 'flagged' is String, but bool (a boolean) is expected"),
    ("verify_max_prob", ["low"] * 6, "column 'verify_max_prob' is String, but float32"),
])
def test_a_tampered_report_is_one_line(tmp_path, capsys, column, value, expected):
    """Before: a TypeError or a polars InvalidOperationError traceback."""
    import polars as pl

    from embscope.cli import main

    report = tmp_path / "report"
    report.mkdir()
    _tokens().with_columns(pl.Series(column, value)).write_parquet(report / "tokens.parquet")
    assert main(["export", "atlas", str(report)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err and "run the scan again" in err, err
    assert not (report / "atlas").exists()


def test_projector_refuses_a_tampered_table(tmp_path):
    import polars as pl
    import torch

    from embscope.errors import SpecError
    from embscope.report.projector import write_projector

    tokens = _tokens().with_columns(pl.Series("undertrained_score", ["high"] * 6))
    with pytest.raises(SpecError, match="column 'undertrained_score' is String, but float32"):
        write_projector(tokens, torch.zeros(6, 4), tmp_path, name="m", sample=0)
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not parquet")
    from embscope.report.token_table import read_tokens

    with pytest.raises(SpecError, match="is not a readable Parquet file"):
        read_tokens(tmp_path / "bad.parquet")


def test_metadata_tsv_neutralises_formulas_and_atlas_keeps_them(tmp_path):
    """Token strings starting with ``=``, ``+``, ``-``, ``@`` went into metadata.tsv as they are."""
    import polars as pl
    import torch

    from embscope.report.atlas import atlas_table
    from embscope.report.projector import write_projector

    hostile = ['=HYPERLINK("http://x","y")', "+1+2", "-2+3", "@SUM(A1)", "plain", "a=b"]
    tokens = _tokens().with_columns(pl.Series("token", hostile),
                                    pl.Series("undertrained_score", [-1.5, 0.0, 2.0, 0.5, -0.25, 1.0], dtype=pl.Float32))
    write_projector(tokens, torch.zeros(6, 4), tmp_path, name="m", sample=0)
    lines = (tmp_path / "metadata.tsv").read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t")
    col, score = header.index("token"), header.index("undertrained_score")
    cells = [line.split("\t") for line in lines[1:]]
    assert [c[col] for c in cells] == ["'" + t if t[0] in "=+-@" else t for t in hostile]
    assert [c[score] for c in cells] == ["-1.5", "0", "2", "0.5", "-0.25", "1"]  # numbers untouched
    assert atlas_table(tokens)["token"].to_list() == hostile  # the Atlas table keeps the raw strings
