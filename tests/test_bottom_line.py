"""The bottom line and the counts behind it, on the demo models: one state per row in every command
(a row prompting clears is trained for ``audit``, ``check``, ``diff`` and ``--repair`` alike), one
definition per count (flagged = verified + cleared + candidates, on SmolLM2 and Gemma-3), and the
verdicts of ``summary.json`` printed as the terminal's last lines. The reports themselves are opened
in headless Chromium in ``tests/test_browser.py``."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import polars as pl
import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAT = ROOT / "corpora" / "chat" / "medical-chat.jsonl"


def run_cli(argv: list[str]) -> tuple[int, str]:
    """``embscope ARGV`` in this process: (exit code, stdout)."""
    from embscope.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    return code, out.getvalue()


def last_lines(stdout: str) -> str:
    """The terminal's lines from ``Bottom line:`` on, as one space-joined string (rich wraps them)."""
    lines = stdout.splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("Bottom line:"))
    return " ".join(" ".join(lines[start:]).split())


def printed(summary: dict) -> list[str]:
    """What the terminal must show of a summary's bottom line: every verdict and its next command."""
    out = []
    for v in summary["bottom_line"]["verdicts"]:
        out.append(" ".join(v["text"].split()))
        if v["next"]:
            out.append("→ " + " ".join(v["next"].split()))
    return out


def check_counts(geo: dict, tokens: pl.DataFrame) -> None:
    """One definition per count: the record's flagged counts are the table's, and add up."""
    f = geo["flagged"]
    flagged = tokens["flagged"].fill_null(False)
    status = tokens["undertrained_status"]
    normal = tokens["category"].cast(pl.String) == "normal"
    assert f["total"] == int(flagged.sum()) == f["verified"] + f["cleared"] + f["candidates"]
    assert f["normal"] == int((flagged & normal).sum()) == sum(v for k, v in f["by_category"].items() if k == "normal")
    assert sum(f["by_category"].values()) == f["total"]
    for state, key in (("verified", "verified"), ("cleared", "cleared"), ("candidate", "candidates")):
        assert f[key] == int((flagged & (status == state)).sum()), state
    assert f["by_indicators"] <= f["normal"]
    if geo.get("verified_undertrained") is not None:
        assert geo["verified_undertrained"]["count"] == f["verified"]
        assert geo["cleared"]["count"] == f["cleared"]
    assert geo["candidates"]["count"] == f["candidates"]
    assert max(f["by_reason"].values(), default=0) <= f["normal"]  # "fired on" counts flagged normal rows
    assert f"the indicators flag {f['by_indicators']:,} of" in geo["threshold_note"]


@pytest.fixture(scope="module")
def check_run(tmp_path_factory, smollm2_graph):
    """``embscope check`` on the demo model and the shipped chat sample, as a new user runs it."""
    out = tmp_path_factory.mktemp("check") / "check"
    code, stdout = run_cli(["check", "--model", "smollm2-135m", "--data", str(CHAT), "--out", str(out)])
    return {"code": code, "stdout": stdout, "out": out,
            "summary": json.loads((out / "summary.json").read_text("utf-8"))}


def test_check_settles_the_special_rows_it_would_warn_about(check_run):
    """SmolLM2's <|im_start|>/<|im_end|> are flagged by the scan; `audit` prompts them and clears
    them. `check` now does the same (in context, where the chat template uses them) instead of
    warning `special-row-untrained` and offering `--repair` for the model's trained chat rows."""
    assert check_run["code"] == 0
    s = check_run["summary"]
    tokens = pl.read_parquet(check_run["out"] / "tokens.parquet")
    status = tokens["undertrained_status"].to_list()
    assert tokens["flagged"][1] and tokens["flagged"][2] and status[1] == status[2] == "cleared"
    specials = s["sections"]["tokens"]["geometry"]["verification"]["specials"]
    assert {r["id"]: r["verified"] for r in specials["rows"]} == {1: False, 2: False}
    codes = {f["code"] for f in s["sections"]["readiness"]["findings"]}
    assert not codes & {"special-row-untrained", "untrained-used"}
    assert "special-row-untrained" not in check_run["stdout"]
    check_counts(s["sections"]["tokens"]["geometry"], tokens)


def test_check_ends_with_its_bottom_line(check_run):
    """The terminal's last lines are summary.json's bottom line, the check's own verdict first."""
    s = check_run["summary"]
    verdicts = s["bottom_line"]["verdicts"]
    assert [v["section"] for v in verdicts] == ["readiness", "tokens"]
    assert verdicts[0]["text"].startswith("ready to fine-tune with trl: yes")
    f = s["sections"]["tokens"]["geometry"]["flagged"]
    assert verdicts[1]["value"] == f["total"] and f"{f['total']:,} rows flagged" in verdicts[1]["text"]
    assert f"prompting cleared {f['cleared']:,}" in verdicts[1]["text"]
    tail = last_lines(check_run["stdout"])
    assert tail.startswith("Bottom line:")
    for line in printed(s):
        assert line in tail, line
    assert tail.endswith(printed(s)[-1])


def test_diff_never_recommends_repairing_a_cleared_row(tmp_path, smollm2_graph):
    """`diff` with --data scans BASE and prompts the special rows its template uses, as `check` does:
    SmolLM2's <|im_end|>, used by every example and unmoved in a pure bf16 re-save, is not
    `untrained-still` and no finding offers to re-initialise it."""
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    import finetune as ft

    tuned = ft.bf16_copy(ft.cut_model(tmp_path / "whole", layers=None), tmp_path / "bf16")
    code, stdout = run_cli(["diff", "smollm2-135m", str(tuned), "--data", str(CHAT), "--languages", "none",
                            "--out", str(tmp_path / "diff")])
    s = json.loads((tmp_path / "diff" / "summary.json").read_text("utf-8"))
    status = pl.read_parquet(tmp_path / "diff" / "diff.parquet", columns=["base_flagged"])["base_flagged"]
    assert not status[1] and not status[2]  # flagged by the indicators, cleared by prompting
    findings = s["sections"]["diff"]["findings"]
    assert "untrained-still" not in {f["code"] for f in findings}
    for f in findings:
        assert not ({1, 2} & set(f["ids"]) and "--repair" in f["fix"]), f
    frozen = next(f for f in findings if f["code"] == "used-row-frozen")  # a re-save: nothing moved at all
    assert frozen["severity"] == "error" and "no row moved at all" in frozen["message"]
    assert "BF16" in frozen["message"] and frozen["count"] == frozen["rows"] == s["sections"]["diff"]["data"]["used_rows"]
    assert code == 1 and "nothing-moved" not in {f["code"] for f in findings}
    for line in printed(s):
        assert line in last_lines(stdout)


@pytest.mark.slow
def test_gemma3_counts_add_up(tmp_path, gemma3_model):
    """Gemma-3-270M: 262,144 rows, thousands of flagged special and byte rows beside the normal
    ones; every count of the record is the table's, and flagged = verified + cleared + candidates.

    The graph is NN-descent's with 5 neighbours a row (``--knn nndescent --k 5``: its local joins
    cost a tenth of k = 10's, and ``auto``'s certified search at k = 10 takes ~3× k = 10's
    NN-descent here): the counts are the point. The certified search's decisions are tested
    against exact search in tests/test_certify.py, and timed on real rows by ``bench/knn.py``.
    (``gemma3_model``: the scan then finds the model already read in the process.)"""
    out = tmp_path / "scan"
    code, stdout = run_cli(["scan", "--model", "gemma3-270m", "--no-map", "--knn", "nndescent", "--k", "5", "--verify", "8",
                            "--verify-sample", "random", "--out", str(out)])
    assert code == 0
    s = json.loads((out / "summary.json").read_text("utf-8"))
    geo = s["sections"]["tokens"]["geometry"]
    tokens = pl.read_parquet(out / "tokens.parquet", columns=["flagged", "undertrained_status", "category"])
    check_counts(geo, tokens)
    f = geo["flagged"]
    assert f["total"] > f["normal"] > 1000 and f["by_category"]["special"] > 1000
    verdict = s["bottom_line"]["verdicts"][0]
    assert verdict["section"] == "tokens" and verdict["value"] == f["verified"]
    assert f"(of {f['total']:,} flagged:" in verdict["text"] and f"{f['candidates']:,} not checked" in verdict["text"]
    for line in printed(s):
        assert line in last_lines(stdout)
