"""The library API: explicit keyword parameters, each documented, with the options' own defaults; a
typo is one line naming the closest option; nothing is written without ``out``; the command line
takes its choices from the library; every option value is refused before the model loads."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import embscope
from embscope.errors import SpecError
from embscope.sections.options import RunOptions

COMMANDS = ("audit", "scan", "check", "diff", "fertility", "compare", "extend")
#: API defaults that differ from the option's own, on purpose
OWN_DEFAULTS = {("audit", "verify"): None,  # automatic: a capped random sample when the model fits
                ("check", "map"): False, ("diff", "map"): False}  # no map unless asked


def _field_defaults() -> dict:
    return {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
            for group in dataclasses.fields(RunOptions) for f in dataclasses.fields(group.default_factory())}


@pytest.mark.parametrize("name", COMMANDS)
def test_explicit_signature_documented_with_the_options_defaults(name):
    fn = getattr(embscope, name)
    params = inspect.signature(fn).parameters
    assert not any(p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) for p in params.values()), name
    fields = _field_defaults()
    options = [n for n in params if n in fields and params[n].default is not inspect.Parameter.empty]
    assert len(options) >= 8, options
    for n in options:
        want = OWN_DEFAULTS.get((name, n), fields[n])
        got = params[n].default
        assert (list(got) if isinstance(got, tuple) else got) == want, (name, n, got, want)
    doc = fn.__doc__
    undocumented = [n for n in params if f"{n}:" not in doc and f"{n}," not in doc]
    assert undocumented == [], (name, undocumented)


@pytest.mark.parametrize("call, message", [
    (lambda: embscope.scan("minilm-l6", thresold=3),
     "scan() has no option 'thresold' (did you mean 'threshold'?); see help(embscope.scan)"),
    (lambda: embscope.check("smollm2-135m", "x.jsonl", trainr="trl"),
     "check() has no option 'trainr' (did you mean 'trainer'?); see help(embscope.check)"),
    (lambda: embscope.run("minilm-l6", sections=["tokens"], knn_metod="exact"),
     "unknown option 'knn_metod' (did you mean 'knn_method'?); see embscope.RunOptions"),
    (lambda: embscope.run("minilm-l6", sections=["tokens"], corpora=["medical"]),
     "run() takes 'corpora' in a Given: pass given=Given(corpora=...)"),
])
def test_a_misspelt_option_is_one_line_naming_the_closest(call, message, monkeypatch):
    import embscope.runner

    monkeypatch.setattr(embscope.runner, "_resolve", lambda *a: pytest.fail("the model was resolved"))
    with pytest.raises(SpecError) as e:
        call()
    assert str(e.value) == message


def test_nothing_is_written_without_out(monkeypatch, tmp_path):
    """No folder is claimed (not even a temporary one) when ``out`` is not given; the tables are in
    the result; with ``out`` they are the same as the files."""
    import polars as pl

    import embscope.output

    def refuse(*a, **k):
        raise AssertionError("a folder was claimed")

    with monkeypatch.context() as mp:
        mp.setattr(embscope.output, "claim", refuse)
        res = embscope.check("smollm2-135m", "corpora/chat/medical-chat.jsonl", scan=False, device="cpu")
    assert res.folder is None and res.tables["findings"].height == len(res.summary.sections.readiness.findings)
    written = embscope.check("smollm2-135m", "corpora/chat/medical-chat.jsonl", scan=False, device="cpu",
                             out=tmp_path / "c")
    assert written.folder == tmp_path / "c"
    assert pl.read_parquet(tmp_path / "c" / "findings.parquet").equals(written.tables["findings"])
    assert written.tables["findings"]["code"].to_list() == res.tables["findings"]["code"].to_list()


def test_the_command_line_lists_the_librarys_choices(capsys):
    """Methods, formats, trainers, engines and severities in ``--help`` are the library's registries."""
    from embscope.api import option_choices
    from embscope.cli import main
    from embscope.readiness.record import SEVERITIES

    choices = option_choices()
    for argv, names in ((["scan", "--help"], choices["knn_method"] + choices["verify_sample"]),
                        (["check", "--help"], choices["data_format"] + choices["trainer"] + SEVERITIES),
                        (["audit", "--help"], choices["engine"] + choices["init"][1:]),
                        (["extend", "--help"], choices["extend_as"])):
        assert main(argv) == 0
        text = " ".join(capsys.readouterr().out.split())
        missing = [n for n in names if n not in text]
        assert missing == [], (argv, missing)


def test_common_options_are_declared_once():
    """Every run command has --out, --force, --json, --quiet and --verbose, from one declaration."""
    import typer.main

    from embscope.cli import app

    commands = {c.name: c for c in typer.main.get_command(app).commands.values()}
    for name in COMMANDS:
        flags = {o for p in commands[name].params for o in p.opts}
        assert {"--out", "--force", "--json", "--quiet", "--verbose"} <= flags, name
    source = "".join(p.read_text(encoding="utf-8") for p in embscope.__path__[0:1]
                     for p in __import__("pathlib").Path(p, "commands").glob("*.py"))
    assert source.count('"--force"') == 1 and source.count('"--quiet"') == 1, "declared more than once"


@pytest.mark.parametrize("argv, message", [
    (["fertility", "-t", "gpt2", "--reference", "engl"], "--reference 'engl' is not a language of"),
    (["audit", "--reference", "en"], "(did you mean 'eng'?)"),
    (["scan", "-m", "minilm-l6", "--verify", "3000"], "--verify 3000 is over the cap"),
    (["scan", "-m", "minilm-l6", "--repair-init", "meen", "--repair", "r", "-c", "medical"], "did you mean 'mean'"),
    (["extend", "-m", "smollm2-135m", "-c", "medical", "--init", "subwrd-mean"], "did you mean 'subword-mean'"),
    (["extend", "-m", "smollm2-135m", "-c", "medical", "--as", "add"], "--as 'add': choose from model, added"),
    (["extend", "-m", "smollm2-135m", "-c", "medical", "--apply-init", "x", "--apply", "a"], "unknown --init strategy 'x'"),
    (["check", "-m", "smollm2-135m", "-d", "medical", "--chat-template", "nope.jinja"], "--chat-template nope.jinja: no such file"),
    (["check", "-m", "smollm2-135m", "-d", "medical", "--pad-token", ""], "--pad-token must name a token"),
    (["check", "-m", "smollm2-135m", "-d", "medical", "--split", "train"], "(splits: none: it has no splits)"),
    (["diff", "smollm2-135m", "smollm2-135m", "--manifest", "nope.json"], "--manifest nope.json: no such file"),
    (["audit", "--limit", "file-byte=1G"], "(did you mean 'file-bytes'?)"),
    (["audit", "--top", "10", "--limit", "top=5"], "--top 10 is above the limit"),
    (["audit", "--threshold", "nan"], "--threshold must be a finite number"),
])
def test_every_option_value_is_checked_before_the_model_loads(argv, message, monkeypatch, capsys):
    """A bad value ends the run in one line before anything is resolved, loaded or written."""
    import embscope.runner
    from embscope.cli import main

    monkeypatch.setattr(embscope.runner, "_resolve", lambda *a: pytest.fail("the model was resolved"))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1, err


def test_a_split_the_data_lacks_is_named_before_the_model_loads(tmp_path, monkeypatch, capsys):
    """``--split`` against hub-style split files: refused from the file names alone, with the splits
    the data has and the closest one."""
    import embscope.runner
    from embscope.cli import main

    line = '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n'
    for name in ("train-00000-of-00001.jsonl", "test-00000-of-00001.jsonl"):
        (tmp_path / name).write_text(line, encoding="utf-8")
    monkeypatch.setattr(embscope.runner, "_resolve", lambda *a: pytest.fail("the model was resolved"))
    assert main(["check", "-m", "smollm2-135m", "-d", str(tmp_path), "--split", "tarin"]) == 2
    err = capsys.readouterr().err
    assert "--split 'tarin' is not in the data (did you mean 'train'?) (splits: test, train)" in err


@pytest.mark.parametrize("argv, message", [
    (["check", "-m", "smollm2-135m", "-d", "medical", "--pad-token", "<nope>"], "--pad-token '<nope>' is not a token"),
    (["scan", "-m", "smollm2-135m", "--unused-ids", "0,60000"], "--unused-ids 60000 is past the last row"),
])
def test_values_the_tokenizer_decides_are_checked_before_any_analysis(argv, message, tmp_path, monkeypatch, capsys):
    """A pad token the tokenizer lacks, a row past the matrix: one line as soon as the model is
    loaded, before the scan or the check runs, and no folder written."""
    import embscope.runner
    from embscope.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(embscope.runner, "_run_sections", lambda *a: pytest.fail("an analysis ran"))
    assert main([*argv, "--out", "o"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []
