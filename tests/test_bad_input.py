"""Bad input through the CLI: one clear line on stderr, exit code 2, nothing half-written.

Model-file cases (truncated or lying safetensors, pickle payloads, GGUF without token_embd, config
nonsense, tokenizer larger than the matrix, uncached hub ids, --device cuda) are in test_load.py;
corpus files (binary, invalid UTF-8, empty, 100 MB single line) in test_corpus.py. This file checks
the same promise end to end, where the output folder is at stake.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from embscope.cli import main
from tests.conftest import write_checkpoint

ROOT = Path(__file__).resolve().parents[1]


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def leftovers(parent: Path, name: str) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(name) or p.name.startswith(f".{name}."))


@pytest.mark.parametrize("argv, expected", [
    (["audit", "--model", "no-such-model"], "unknown model 'no-such-model'"),
    (["audit", "--model", "minilm-l6", "--corpus", "/nonexistent/corpus"], "corpus '/nonexistent/corpus' does not exist"),
    (["audit", "--model", "minilm-l6", "--unused-ids", "1,x"], "--unused-ids must be comma-separated integers"),
    (["scan", "--model", "minilm-l6", "--unused-ids", "5,99999"], "--unused-ids 99999 is past the last row"),
    (["scan", "--model", "minilm-l6", "--threshold", "nan"], "--threshold must be a finite number"),
    (["audit", "--model", "minilm-l6", "--no-scan", "--corpus", "no-such-corpus"], "corpus 'no-such-corpus' does not exist"),
    (["rope", "--model", "/nonexistent/folder"], "no model folder or file at '/nonexistent/folder' (a local path)"),
])
def test_user_mistakes_are_one_line(capsys, argv, expected):
    assert main(argv) == 2
    assert expected in one_line_error(capsys)


def test_unwritable_output_folder(capsys, tmp_path):
    # /sys is a read-only filesystem even for root; elsewhere a path under a regular file.
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for out in ("/sys/embscope-report", str(blocker / "report")):
        assert main(["audit", "--model", "minilm-l6", "--no-scan", "--out", out]) == 2
        assert "pass a writable --out" in one_line_error(capsys)
    assert not Path("/sys/embscope-report").exists()


def test_existing_report_folder_is_not_overwritten(capsys, tmp_path):
    out = tmp_path / "report"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["audit", "--model", "minilm-l6", "--no-scan", "--out", str(out)]) == 2
    assert "already exists" in one_line_error(capsys)
    assert (out / "keep.txt").read_text() == "mine" and len(list(out.iterdir())) == 1


def test_failure_mid_run_leaves_nothing(capsys, tmp_path, llama3_tokenizer_json):
    """The tokenizer check fails after the folder is claimed: no report, no partial folder."""
    write_checkpoint(tmp_path / "m", rows=1000, hidden=8, tokenizer_json=llama3_tokenizer_json)
    out = tmp_path / "reports" / "r"
    assert main(["audit", "--model", str(tmp_path / "m"), "--out", str(out)]) == 2
    assert "tokenizer has 128256 tokens" in one_line_error(capsys)
    assert leftovers(tmp_path / "reports", "r") == []


def test_report_of_missing_folder(capsys, tmp_path):
    assert main(["report", str(tmp_path / "nothing")]) == 2
    one_line_error(capsys)


def test_summary_json_is_valid_after_no_scan_audit(tmp_path):
    from embscope.summary import read_summary

    out = tmp_path / "r"
    assert main(["audit", "--model", "minilm-l6", "--no-scan", "--languages", "none", "--out", str(out)]) == 0
    s = read_summary(json.loads((out / "summary.json").read_text()))
    assert s.model.rows == 30522 and s.skipped["languages"] == "no corpus given"
    assert s.sections.tokens.geometry is None and s.sections.context is not None
    assert sorted(p.name for p in out.iterdir()) == [".embscope", "index.html", "summary.json", "tokens.parquet"]


def test_usage_errors_are_typer_messages_not_tracebacks(capsys):
    assert main(["audit", "--bogus"]) == 2
    assert main(["audit", "--k", "notanint"]) == 2
    err = capsys.readouterr().err
    assert "No such option: --bogus" in err and "Traceback" not in err


def test_every_command_has_help_text():
    from embscope.cli import app
    from typer.main import get_command

    group = get_command(app)
    assert len(group.commands) >= 8
    for name, cmd in group.commands.items():
        assert cmd.help and len(cmd.help.strip()) > 20, f"{name} lacks help text"


def test_unreadable_inputs_are_named_before_the_model_loads(capsys, tmp_path, monkeypatch):
    """A .csv training file, an empty corpus file and a folder of .csv files: one line naming the
    file type (or the emptiness) and the fix, before any model is resolved or loaded."""
    import embscope.runner as runner

    def no_model(*a, **k):
        raise AssertionError("the model was resolved before the inputs were checked")

    monkeypatch.setattr(runner, "_resolve", no_model)
    (tmp_path / "x.csv").write_text("text,label\nhello,1\n")
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "csvs").mkdir()
    for name in ("a.csv", "b.csv", "c.tsv"):
        (tmp_path / "csvs" / name).write_text("text\nhello\n")
    cases = [
        (["check", "--model", "smollm2-135m", "--data", str(tmp_path / "x.csv")],
         "x.csv is a .csv file, which embscope does not read as training data: convert it to .jsonl"),
        (["extend", "--model", "smollm2-135m", "--corpus", str(tmp_path / "empty.txt")],
         "empty.txt is empty (0 bytes)"),
        (["fertility", "-t", "gpt2", "--corpus", str(tmp_path / "csvs")],
         "csvs holds no file embscope reads as a corpus (2 .csv, 1 .tsv)"),
    ]
    for argv, expected in cases:
        assert main(argv) == 2
        assert expected in one_line_error(capsys)


def test_step_with_nothing_to_report_shows_no_check_mark(capsys, tmp_path, monkeypatch):
    """``extend`` on a corpus of blank lines: the step says it found nothing (never ✓), then one error."""
    monkeypatch.delenv("EMBSCOPE_QUIET", raising=False)
    (tmp_path / "blank.txt").write_text("  \n\n   \n")
    assert main(["extend", "--model", "smollm2-135m", "--corpus", str(tmp_path / "blank.txt"),
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "nothing to report" in err and "✓ vocabulary-extension" not in err
    assert "– vocabulary-extension candidates" in err
    assert [line for line in err.splitlines() if line.startswith("error:")] == [
        line for line in err.splitlines() if "holds no usable text" in line and line.startswith("error:")]
    assert not (tmp_path / "out").exists()
