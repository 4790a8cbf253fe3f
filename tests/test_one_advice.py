"""One piece of advice and one count per thing, on the demo model: the audit's suggested ``extend``
command is what ``extend`` would do; ``extend`` names the initialisation it wrote; a lead inside
one standard error says so; the flagged, isolated and sampled counts agree across the cards, the
bottom line, the tables and ``scan``, ``check`` and ``diff``; ``diff`` is never green on new rows it
cannot show trained, nor on BASE against itself; a suggested command is never cut in two."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
from pathlib import Path

import numpy as np
import polars as pl
import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAT = ROOT / "corpora" / "chat" / "medical-chat.jsonl"
CORPUS = ROOT / "corpora" / "medical"


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """``embscope ARGV`` in this process: (exit code, stdout, stderr); stdout is a pipe here."""
    from embscope.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text("utf-8"))


def verdict(s: dict, section: str) -> dict:
    return next(v for v in s["bottom_line"]["verdicts"] if v["section"] == section)


def indicator_count(text: str) -> int:
    """The rows the indicators flag, as a bottom line says it (``30 rows flagged … by the
    indicators`` without prompting; ``30 by the indicators`` inside an audit's verdict)."""
    m = re.search(r"([\d,]+) (?:rows flagged as under-trained )?by the indicators", text)
    assert m, text
    return int(m.group(1).replace(",", ""))


@pytest.fixture(scope="module")
def scan_run(tmp_path_factory, smollm2_graph):
    """``embscope scan`` on the demo model, as a new user runs it (no map: the counts are the same)."""
    out = tmp_path_factory.mktemp("scan") / "scan"
    code, stdout, _ = run_cli(["scan", "--model", "smollm2-135m", "--no-map", "--out", str(out)])
    assert code == 0
    return {"out": out, "stdout": stdout, "summary": summary(out)}


@pytest.fixture(scope="module")
def check_run(tmp_path_factory, smollm2_graph):
    out = tmp_path_factory.mktemp("check") / "check"
    code, stdout, _ = run_cli(["check", "--model", "smollm2-135m", "--data", str(CHAT), "--out", str(out)])
    return {"code": code, "out": out, "stdout": stdout, "summary": summary(out)}


@pytest.fixture(scope="module")
def self_diff(tmp_path_factory, smollm2_graph):
    """``diff BASE BASE`` on the demo model with the chat data: nothing was trained."""
    out = tmp_path_factory.mktemp("diff") / "diff"
    code, stdout, _ = run_cli(["diff", "smollm2-135m", "smollm2-135m", "--data", str(CHAT), "--languages", "none",
                               "--out", str(out)])
    return {"code": code, "out": out, "stdout": stdout, "summary": summary(out)}


# --- one piece of advice -------------------------------------------------------------------------

def test_audit_suggests_what_extend_would_do(smollm2_audit):
    """The audit's next command writes what `extend` would write: the strategy the audit was asked
    to diagnose, or `--apply-init auto` (extend tries every strategy under its own budgets), and the
    strategies auto could not try in the audit (distil: budget 0) are named with why."""
    from embscope.sections.options import RunOptions
    from embscope.summary import read_summary
    from embscope.verdict import RunFacts, extension_verdict

    s = summary(smollm2_audit)
    v = verdict(s, "extension")
    # the shared audit named one strategy (--init subword-mean): the command writes that one
    assert v["next"].endswith("--apply OUT --apply-init subword-mean")
    ext = read_summary(s).sections.extension
    ext.skipped_strategies = {"distil": "over its budget of 0 (audit keeps its extension step short)"}
    auto = extension_verdict(ext, RunFacts(command="audit", model="smollm2-135m", options=RunOptions()))
    assert shlex.split(auto.next)[-2:] == ["--apply-init", "auto"]
    assert "not tried here: distil (over its budget of 0" in auto.text


def test_extend_names_the_init_it_wrote_and_warns(tmp_path):
    """`extend --apply OUT --apply-init NAME` where NAME is not the recommendation: the bottom line
    says the strategy written (not the recommended one as if written) and a warning names both."""
    out = tmp_path / "ext"
    # the words are the point here, not the figures: the least held-out text (--bpb-bytes 256) and
    # only the new rows written (the full folder is written and loaded in tests/test_extend.py and
    # tests/test_apply_section.py)
    code, stdout, stderr = run_cli(["extend", "--model", "smollm2-135m", "--corpus", str(CORPUS), "--top", "10",
                                    "--init", "subword-mean", "--bpb-bytes", "256", "--out", str(out),
                                    "--apply", str(tmp_path / "model"), "--apply-init", "mean", "--rows-only"])
    assert code == 0, stderr
    s = summary(out)
    rec = s["sections"]["extension"]["recommended"]
    assert rec and rec != "mean" and s["sections"]["apply"]["init"] == "mean"
    text = verdict(s, "extension")["text"]
    assert f"initialised with mean (asked for; the recommended one is {rec})" in text
    assert f"initialised with {rec}" not in text
    warned = [w for w in s["warnings"] if w.startswith("apply: wrote the rows of mean")]
    assert warned and f"not the recommended {rec}" in warned[0] and warned[0] in " ".join(stderr.split())


def test_a_lead_inside_one_standard_error_says_so():
    """choose.recommend: a best score ahead of the next by less than the corpus figure's SE is
    said to be within noise; a lead of several SEs is not."""
    from embscope.extension.choose import recommend
    from embscope.extension.diagnostics import StrategyRecord

    def rec(name, score, se):
        return StrategyRecord(name, 50.0, 1.0, 99.0, 0.5, score=score, kl=1e-4, score_corpus=score - 0.1,
                              score_general=1e-5, score_reading=0.1, bits_per_byte_change_se=se, score_bytes=1000)

    name, why = recommend({"distil": rec("distil", 0.1300, 0.016), "subword-mean": rec("subword-mean", 0.1357, 0.015)})
    assert name == "distil" and "within noise" in why and "0.0160" in why
    name, why = recommend({"distil": rec("distil", 0.10, 0.001), "subword-mean": rec("subword-mean", 0.20, 0.001)})
    assert name == "distil" and "within noise" not in why


# --- one count per thing -------------------------------------------------------------------------

def test_audit_counts_agree_with_its_table_and_cards(smollm2_audit):
    """Flagged: the bottom line's total, the card's number and tokens.parquet agree, and the rows
    prompting alone flagged are said apart (the rest is what `scan` counts). Isolated: every
    isolated row of tokens.parquet is counted by category, the undecodable ones named in the
    report. Sampled: a sample that is the whole pool is called so."""
    s = summary(smollm2_audit)
    geo = s["sections"]["tokens"]["geometry"]
    f = geo["flagged"]
    t = pl.read_parquet(smollm2_audit / "tokens.parquet", columns=["flagged", "isolated", "category"])
    assert f["total"] == int(t["flagged"].sum())
    v = verdict(s, "tokens")
    assert f"of {f['total']:,} flagged" in v["text"]
    alone = f["normal"] - f["by_indicators"]
    if alone:
        assert indicator_count(v["text"]) == f["total"] - alone and f"{alone:,} by prompting alone" in v["text"]
    html = (smollm2_audit / "index.html").read_text("utf-8")
    card = re.search(r'id="overview-flagged"><div class="k">[^<]*</div><div class="v">([\d,]+)</div>', html)
    assert card and int(card.group(1).replace(",", "")) == f["total"]
    iso = t.filter(pl.col("isolated")).group_by("category").len()
    by_cat = {str(c): n for c, n in iso.iter_rows()}
    assert f["isolated_by_category"] == by_cat and f["isolated"] == by_cat.get("normal", 0)
    others = {c: n for c, n in by_cat.items() if c != "normal"}
    if others:
        assert f"{sum(by_cat.values()):,} rows in tokens.parquet → isolated" in html.replace("&gt;", ">")
        for c, n in others.items():
            assert f"{n:,} {c}" in html
    vf = geo["verification"]
    if vf["n_checked"] >= vf["pool"]:
        assert "random sample" not in vf["note"] and f"all {vf['pool']:,} normal rows" in vf["note"]
        assert "randomly sampled flags" not in html


def test_flagged_is_one_count_in_every_command(smollm2_audit, scan_run, check_run, self_diff):
    """The rows the indicators flag on the demo model: one number in scan's, check's and diff's
    bottom lines, and the audit's count less the rows prompting alone flagged."""
    counts = {name: indicator_count(verdict(run["summary"], "tokens")["text"])
              for name, run in (("scan", scan_run), ("check", check_run), ("diff", self_diff))}
    scan = scan_run["summary"]["sections"]["tokens"]["geometry"]["flagged"]
    assert counts["scan"] == scan["total"] == int(pl.read_parquet(scan_run["out"] / "tokens.parquet")["flagged"].sum())
    assert len(set(counts.values())) == 1, counts
    f = summary(smollm2_audit)["sections"]["tokens"]["geometry"]["flagged"]
    assert f["total"] - (f["normal"] - f["by_indicators"]) == counts["scan"]


# --- diff is not green on what it cannot show trained ---------------------------------------------

def test_diff_base_base_is_an_error(self_diff):
    """TUNED is BASE: one `nothing-moved` error, exit 1, and the bottom line says nothing was trained."""
    assert self_diff["code"] == 1
    findings = self_diff["summary"]["sections"]["diff"]["findings"]
    assert [(x["code"], x["severity"]) for x in findings] == [("nothing-moved", "error")]
    assert "nothing was trained" in findings[0]["message"]
    assert verdict(self_diff["summary"], "diff")["level"] == "act"


@pytest.mark.parametrize("init", ["random", "copies"])
def test_diff_untrained_new_rows_without_manifest_fail(finetune_run, tmp_path, init):
    """The extended folder, its manifest removed, the new rows replaced by a fresh N(0, σ²) draw or
    by copies of existing rows (untrained): an error finding with the fix, exit 1, no row counted
    as learnt; copied rows are called copies, with the row they copy."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    from embscope.changes.manifest import MANIFEST

    run = finetune_run
    ids = run["manifest"]["token_ids"]
    base, tuned = tmp_path / "base", tmp_path / "tuned"  # apart from the extension folder and its manifest
    shutil.copytree(run["base"], base)
    shutil.copytree(run["ext"], tuned)
    (tuned / MANIFEST).unlink()
    for path in tuned.glob("*.safetensors"):
        tensors = load_file(str(path))
        for name, w in tensors.items():
            if w.ndim == 2 and w.shape[0] > max(ids):
                sigma = float(w[:min(ids)].float().std())
                if init == "random":
                    g = torch.Generator().manual_seed(0)
                    new = torch.randn(len(ids), w.shape[1], generator=g) * sigma
                else:
                    new = w[torch.arange(len(ids)) * 97 + 1000].float()
                w[ids] = new.to(w.dtype)
        save_file(tensors, str(path), metadata={"format": "pt"})
    out = tmp_path / "diff"
    code, stdout, _ = run_cli(["diff", str(base), str(tuned), "--data", str(run["data"]),
                               "--languages", "none", "--no-scan", "--out", str(out)])
    s = summary(out)
    d = s["sections"]["diff"]
    assert code == 1 and d["new_reference"] == "mean" and d["manifest"] is None
    assert d["matrices"]["input"]["new_moved"] == 0
    err = [x for x in d["findings"] if x["code"] == "new-row-unmoved" and x["severity"] == "error"]
    assert len(err) == 1 and err[0]["count"] == len(ids) and "look untrained" in err[0]["message"]
    assert "--manifest" in err[0]["fix"]
    if init == "copies":
        assert f"{len(ids)} are copies of existing rows" in err[0]["message"] and "random" not in err[0]["message"]
        assert f"= row 1000 " in err[0]["message"]
    else:
        assert "fresh random initialisation" in err[0]["message"]
    assert f"0 of {len(ids)} new rows learnt" in verdict(s, "diff")["text"]


# --- commands that copy whole ---------------------------------------------------------------------

def test_suggested_commands_are_one_line_in_a_pipe(check_run):
    """In a pipe (a log), each suggested command is one line, whole; the check's next command is
    the diff with the full data path."""
    s = check_run["summary"]
    lines = check_run["stdout"].splitlines()
    for v in s["bottom_line"]["verdicts"]:
        if v["next"]:
            assert f"    → {v['next']}" in lines, v["next"]
    assert any(line.endswith(f"--data {CHAT}") for line in lines)


def test_suggested_commands_are_not_wrapped_in_a_narrow_terminal():
    """A terminal 40 columns wide folds the line for display; rich inserts no newline into it."""
    from rich.console import Console

    from embscope.commands.console import console, print_whole

    buf = io.StringIO()
    con = Console(file=buf, width=40, force_terminal=True)
    cmd = "→ embscope diff smollm2-135m TUNED --data corpora/chat/medical-chat.jsonl"
    print_whole(con, cmd)
    assert buf.getvalue().count("\n") == 1 and cmd in buf.getvalue()
    with contextlib.redirect_stdout(io.StringIO()):
        assert console().width >= 10_000  # not a terminal: no width to wrap at


def test_extension_table_keeps_full_values_in_a_pipe(smollm2_audit, capsys):
    """extend's strategy table printed into a pipe: every number and name whole, no ellipsis."""
    from embscope.commands.tables import extension_table
    from embscope.summary import read_summary

    class Res:
        summary = read_summary(summary(smollm2_audit))
        folder = smollm2_audit

    extension_table(Res)
    out = capsys.readouterr().out
    assert "…" not in out
    for name, d in Res.summary.sections.extension.strategies.items():
        assert name in out
        if d.score is not None:
            assert format(d.score, "+.4f") in out


# --- the small ones -------------------------------------------------------------------------------

def test_mistyped_local_path_gets_local_advice(tmp_path, monkeypatch):
    """`diff smollm2-135m out/tuned` where out/ exists and out/tuned does not: the advice is about
    the local path (what out/ holds), never an `hf download`; nothing is written."""
    (tmp_path / "out" / "smollm2-med").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(["diff", "smollm2-135m", "out/tuned", "--out", str(tmp_path / "d")])
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "no model folder or file at 'out/tuned'" in err and "smollm2-med" in err and "hf download" not in err
    assert not (tmp_path / "d").exists()


def test_a_tokenizer_name_as_model_says_it_is_a_tokenizer(tmp_path):
    code, _, err = run_cli(["scan", "--model", "o200k_base", "--out", str(tmp_path / "s")])
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "'o200k_base' is a tokenizer, not a model" in err and "embscope fertility -t o200k_base" in err


def test_compare_with_one_tokenizer_says_use_fertility(tmp_path):
    """(The check itself is the API's argument check, embscope.api.compare.)"""
    code, _, err = run_cli(["compare", "-t", "gpt2", "--out", str(tmp_path / "c")])
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "compare needs" in err and "two tokenizers" in err and "fertility" in err
    assert not (tmp_path / "c").exists()
