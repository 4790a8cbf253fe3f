"""Output folders: --force replaces only embscope folders, never protected ones; one writer at a
time; no write through a symlink; SIGTERM and dead processes leave nothing behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from embscope.cli import main
from embscope.errors import OutputError
from embscope.output import MARKER, claim, read_marker, replace_file, write_new

ROOT = Path(__file__).resolve().parents[1]


def one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    lines = [e for e in err if e.startswith("error:")]
    assert len(lines) == 1 and not any("Traceback" in e for e in err), err
    return lines[0]


def test_claim_writes_marker_and_renames_into_place(tmp_path):
    out = tmp_path / "r"
    with claim(out, kind="scan") as tmp:
        assert tmp.name == f".r.{os.getpid()}.partial" and oct(tmp.stat().st_mode & 0o777) == "0o700"
        write_new(tmp / "a.txt", "x")
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "a.txt"]
    assert read_marker(out)["kind"] == "scan"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]  # no lock, no partial left


def test_force_replaces_only_embscope_folders(tmp_path):
    out = tmp_path / "r"
    with claim(out) as tmp:
        write_new(tmp / "old.txt", "old")
    with pytest.raises(OutputError, match="already exists"):
        with claim(out):
            pass
    with claim(out, force=True) as tmp:
        write_new(tmp / "new.txt", "new")
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "new.txt"]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    with pytest.raises(OutputError, match="not an embscope output folder"):
        with claim(mine, force=True):
            pass
    (mine / MARKER).write_text("not json")  # a marker that is not ours does not count
    with pytest.raises(OutputError, match="not an embscope output folder"):
        with claim(mine, force=True):
            pass
    assert (mine / "thesis.tex").read_text() == "years of work"


@pytest.mark.parametrize("which", ["home", "cwd", "cwd-parent", "root"])
def test_force_never_replaces_protected_folders(tmp_path, monkeypatch, which):
    home = tmp_path / "home"
    work = home / "work"
    work.mkdir(parents=True)
    (work / "keep.txt").write_text("keep")
    for d in (home, work):
        (d / MARKER).write_text(json.dumps({"tool": "embscope"}))  # even with a forged marker
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    target = {"home": home, "cwd": Path("."), "cwd-parent": Path(".."), "root": Path("/")}[which]
    with pytest.raises(OutputError, match="refusing|cannot be an output folder|pass another"):
        with claim(target, force=True):
            pass
    assert (work / "keep.txt").read_text() == "keep"


def test_force_never_replaces_an_input(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / MARKER).write_text(json.dumps({"tool": "embscope"}))
    for target in (model, tmp_path):
        with pytest.raises(OutputError, match="input of this run"):
            with claim(target, force=True, inputs=[model / "config.json"]):
                pass
    assert (model / "config.json").exists()


def test_cli_force_on_home_and_model_folder(tmp_path, monkeypatch, capsys):
    """The reported reproductions: `scan --out ~ --force` and `--out <model folder> --force`."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "keep.txt").write_text("keep")
    assert main(["scan", "--model", "minilm-l6", "--out", str(tmp_path), "--force", "--no-map"]) == 2
    assert "your home folder" in one_error(capsys)
    from embscope.models.resolve import resolve

    model_dir = resolve("minilm-l6").path
    before = sorted(p.name for p in model_dir.iterdir())
    assert main(["scan", "--model", "minilm-l6", "--out", str(model_dir), "--force", "--no-map"]) == 2
    assert "refusing" in one_error(capsys)
    assert sorted(p.name for p in model_dir.iterdir()) == before
    assert (tmp_path / "keep.txt").read_text() == "keep"


def test_second_writer_is_refused_while_the_first_runs(tmp_path):
    out = tmp_path / "r"
    with claim(out):
        with pytest.raises(OutputError, match="another embscope run is writing"):
            with claim(out):
                pass
    with claim(out, force=True):  # released afterwards
        pass


def test_concurrent_cli_runs_on_one_out(tmp_path):
    """Two processes, one --out: one writes the folder, the other is refused (not both 'wrote').
    (Two UDHR languages: the race is over the folder, not the size of the pass.)"""
    out = tmp_path / "r"
    env = dict(os.environ, EMBSCOPE_QUIET="1")
    cmd = [sys.executable, "cli.py", "fertility", "-t", "gpt2", "--corpus", "udhr", "--lang", "eng,fra", "--out",
           str(out)]
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [(p.wait(timeout=300), p.stdout.read(), p.stderr.read()) for p in procs]
    codes = sorted(r[0] for r in results)
    assert codes == [0, 2], results
    refused = next(r for r in results if r[0] == 2)[2]
    assert "another embscope run is writing" in refused or "already exists" in refused
    assert sum("wrote" in r[1] for r in results) == 1


def test_no_write_follows_a_symlink(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    link = tmp_path / "link"
    link.symlink_to(victim)
    with pytest.raises(OutputError):
        write_new(link, "evil")
    replace_file(link, "page")  # replaces the link itself
    assert victim.read_text() == "keep" and not link.is_symlink() and link.read_text() == "page"
    dir_link = tmp_path / "dir-link"
    dir_link.symlink_to(tmp_path)
    with pytest.raises(OutputError, match="symbolic link"):
        with claim(dir_link):
            pass


def test_stale_partial_of_a_dead_process_is_removed(tmp_path):
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(proc.stdout)
    stale = tmp_path / f".r.{dead}.partial"
    stale.mkdir()
    (stale / MARKER).write_text(json.dumps({"tool": "embscope", "pid": dead}))
    foreign = tmp_path / ".r.1.partial"  # pid 1 is alive: never touched
    foreign.mkdir()
    (foreign / MARKER).write_text(json.dumps({"tool": "embscope", "pid": 1}))
    with claim(tmp_path / "r"):
        pass
    assert not stale.exists() and foreign.exists()


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_mid_run_leaves_nothing(tmp_path, sig, code):
    out = tmp_path / "reports" / "r"
    env = dict(os.environ, HF_HUB_OFFLINE="1", EMBSCOPE_CACHE=str(tmp_path / "cache"))
    env.pop("EMBSCOPE_QUIET", None)
    # A background job inherits SIGINT as ignored; a terminal user's Ctrl-C is not, so restore it.
    proc = subprocess.Popen([sys.executable, "cli.py", "scan", "--model", "smollm2-135m", "--out", str(out)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    for line in proc.stderr:  # stop once the kNN step has started (the folder is claimed by then)
        seen.append(line)
        if "kNN" in line:
            break
    time.sleep(0.5)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    err = "".join(seen) + err
    assert proc.returncode == code, err
    assert "nothing was written" in err and "Traceback" not in err
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == []


def test_fifo_as_output_parent_is_refused(tmp_path, capsys):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert main(["fertility", "-t", "gpt2", "--corpus", "udhr", "--out", str(fifo / "r")]) == 2
    one_error(capsys)


def test_extend_checks_both_folders_before_any_work(tmp_path, capsys):
    """An existing --apply target fails at once, before the corpus is read or --out is written."""
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x").write_text("x")
    out = tmp_path / "out"
    t0 = time.perf_counter()
    assert main(["extend", "--model", "smollm2-135m", "--corpus", "medical", "--apply", str(taken),
                 "--out", str(out)]) == 2
    assert "already exists" in one_error(capsys)
    assert time.perf_counter() - t0 < 20 and not out.exists()


def test_tensor_digest_follows_edits_and_never_reuses_a_freed_address():
    """The digest cache is keyed by the tensor and its version counter: an in-place edit gives a
    new digest, and a new tensor (even one allocated where a freed one lived) is hashed afresh."""
    import gc

    import torch

    from embscope.provenance import tensor_digest

    a = torch.zeros(64, 8)
    before = tensor_digest(a)
    assert tensor_digest(a) == before  # cached: same tensor, same version
    a[3, 1] = 1.0
    edited = tensor_digest(a)
    assert edited != before
    a[3, 1] = 0.0
    assert tensor_digest(a) == before  # same bytes, same digest
    digests = set()
    for i in range(20):  # freed and re-allocated buffers of one size often land at one address
        b = torch.full((64, 8), float(i))
        digests.add(tensor_digest(b))
        del b  # no reference cycle: freed here, so the next tensor may get its address (and id)
        gc.collect(0)  # the youngest generation only: a full collection walks every object of the
        # test process (~1-2 s each late in a run, 20 of them)
    assert len(digests) == 20


def test_a_stop_dropped_inside_native_code_still_stops_the_run(tmp_path):
    """SIGTERM handled inside a ctypes callback (numba's compiler calls back so) is dropped by
    Python; the next step boundary raises it again, and the dropped exception is not printed."""
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent("""
        import ctypes, os, signal, sys
        from embscope import signals
        from embscope.progress import Steps
        signals.install()
        callback = ctypes.CFUNCTYPE(None)(lambda: os.kill(os.getpid(), signal.SIGTERM))
        try:
            with Steps(verbose=False).step("native"):
                callback()           # the handler runs in here; its exception is swallowed
                print("after the callback", flush=True)
        except signals.Terminated:
            print("terminated", flush=True)
            sys.exit(0)
        print("ran on", flush=True)
    """))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.stdout.split() == ["after", "the", "callback", "terminated"], proc.stdout + proc.stderr
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("flag", ["-q", "-v"])
def test_quiet_and_verbose_hold_for_one_cli_call(flag, monkeypatch, tmp_path):
    """`main([..., -q])` in a notebook or test process silences that call only: the next library
    call shows its progress as before (the mode was once left at quiet for the whole process)."""
    from embscope import progress
    from embscope.cli import main

    monkeypatch.delenv("EMBSCOPE_QUIET", raising=False)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "eng.jsonl").write_text('{"text": "All human beings are born free.", "lang": "eng"}\n')
    before = progress.mode()
    assert main(["fertility", "--tokenizer", "gpt2", "--corpus", str(tmp_path / "c"), "--out", str(tmp_path / "o"),
                 flag]) == 0
    assert progress.chosen_mode() is None and progress.mode() == before != "quiet"
