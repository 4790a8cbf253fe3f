"""Every finding code through the CLI, with the exit code its documented severity means; the
findings honour the scan's verification; bad ``--repair`` targets fail before any work.

The folders are the cut SmolLM2 of ``tests/test_check.py`` (real rows and tokenizer, 8192 rows),
each with one planted hazard; the runs skip the scan (``--no-scan``): zero rows, which every
planted row is, are found without it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_check import ROWS, build_folder

#: the README table: code → the severities it may have
DOCUMENTED = {
    "untrained-used": {"error", "warning"}, "special-row-untrained": {"error", "warning"},
    "pad-is-eos": {"error", "info"}, "pad-in-labels": {"warning"}, "double-bos": {"error", "warning"},
    "id-beyond-matrix": {"error"}, "added-in-padding": {"error", "warning"}, "exceeds-context": {"warning"},
    "no-labels": {"warning"}, "unknown-tokens": {"warning", "info"}, "no-chat-template": {"error"},
    "render-refused": {"error"}, "render-failed": {"error"}, "prompt-not-prefix": {"warning"},
    "unmapped-roles": {"warning"}, "trainer-drops": {"warning", "error"}, "unreadable-records": {"warning"},
    "ignored-fields": {"info"},
}
EXIT = {"error": 1, "warning": 0, "info": 0}


def _jsonl(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), "utf-8")
    return path


CHAT = [{"messages": [{"role": "user", "content": "What does US stand for?"},
                      {"role": "assistant", "content": "US stands for ultrasound."}]}]


def _case(code: str, tmp: Path, smol):
    """(folder, data, extra args, expected severity) planting ``code`` alone (beside the info
    pad-is-eos every SmolLM2 folder has under TRL)."""
    stands = smol.vocab.encode(" stands")
    plain = lambda **kw: build_folder(tmp / "m", smol, **kw)  # noqa: E731
    data = _jsonl(tmp / "d.jsonl", CHAT)
    if code == "untrained-used":
        return plain(zero_ids=stands), data, [], "error"
    if code == "special-row-untrained":
        return plain(zero_ids=[1]), data, [], "error"
    if code == "pad-is-eos":
        return plain(tokenizer_config={"pad_token": "<|im_end|>"}), data, ["--trainer", "transformers"], "error"
    if code == "pad-in-labels":
        text = _jsonl(tmp / "t.jsonl", [{"text": "one<|endoftext|>two"}])
        return plain(), text, ["--trainer", "transformers", "--pad-token", "<|endoftext|>"], "warning"
    if code == "double-bos":
        text = _jsonl(tmp / "t.jsonl", [{"text": "<|im_start|>already has one"}])
        return plain(post_bos=True), text, [], "error"
    if code == "id-beyond-matrix":
        text = _jsonl(tmp / "t.jsonl", [{"text": "a <|new|> token"}])
        return plain(added=[(ROWS, "<|new|>")]), text, [], "error"
    if code == "added-in-padding":
        rows = [{"messages": [{"role": "user", "content": "call <|tool|> now"}, {"role": "assistant", "content": "ok"}]}]
        return (plain(extra_rows=64, extra_rows_init="zeros", added=[(ROWS, "<|tool|>")]),
                _jsonl(tmp / "t.jsonl", rows), [], "error")
    if code == "exceeds-context":
        return plain(), data, ["--max-length", "8"], "warning"
    if code == "no-labels":  # LLaMA-Factory keeps a pair whose responses infer_seqlen cuts to nothing
        long = "Please summarise the whole history of the patient, every visit, every test and every drug. " * 4
        rows = [{"conversations": [{"from": "human", "value": long}], "chosen": {"from": "gpt", "value": "Yes, that is right."},
                 "rejected": {"from": "gpt", "value": "No, that is wrong here."}}]
        return plain(), _jsonl(tmp / "t.jsonl", rows), ["--trainer", "llamafactory", "--max-length", "8"], "warning"
    if code == "unknown-tokens":
        text = _jsonl(tmp / "t.jsonl", [{"text": "lost <|endoftext|> text"}])
        return plain(tokenizer_config={"pad_token": "<|im_end|>"}, config={"pad_token_id": 2}), text, [], "warning"
    if code == "no-chat-template":
        folder = plain()
        cfg = json.loads((folder / "tokenizer_config.json").read_text())
        del cfg["chat_template"]
        (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
        return folder, data, [], "error"
    if code == "render-refused":
        return plain(template_prefix="{{ 'ab ' * 10**7 }}"), data, [], "error"
    if code == "render-failed":
        return plain(template_prefix="{{ raise_exception('roles must alternate') }}"), data, [], "error"
    if code == "prompt-not-prefix":
        rows = [{"prompt": "The patient has a hist", "completion": "ory of asthma."}]
        return plain(), _jsonl(tmp / "t.jsonl", rows), [], "warning"
    if code == "unmapped-roles":
        rows = [{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}]
        return plain(), _jsonl(tmp / "t.jsonl", rows), [], "warning"
    if code == "trainer-drops":
        rows = [{"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"},
                              {"role": "assistant", "content": "c"}]}]
        return plain(), _jsonl(tmp / "t.jsonl", [*rows, *CHAT]), ["--trainer", "llamafactory"], "warning"
    if code == "unreadable-records":
        return plain(), _jsonl(tmp / "t.jsonl", [*map(json.dumps, CHAT), "{not json"]), [], "warning"
    if code == "ignored-fields":
        return plain(), _jsonl(tmp / "t.jsonl", [{**CHAT[0], "source": "web"}]), [], "info"
    raise AssertionError(code)


@pytest.mark.parametrize("code", list(DOCUMENTED))
def test_every_code_exits_as_documented(code, tmp_path, smollm2_model, capsys):
    from embscope.cli import main
    from embscope.readiness.findings import CODES

    assert set(DOCUMENTED) == set(CODES)
    folder, data, extra, severity = _case(code, tmp_path, smollm2_model)
    argv = ["check", "--model", str(folder), "--data", str(data), "--no-scan", "--json", "-q", *extra]
    rc = main(argv)
    body = json.loads(capsys.readouterr().out)
    found = [f for f in body["findings"] if f["code"] == code]
    assert found and {f["severity"] for f in found} == {severity} <= DOCUMENTED[code], body["findings"]
    assert severity == max((f["severity"] for f in body["findings"]), key=["info", "warning", "error"].index)
    assert rc == EXIT[severity] == body["exit"]
    if severity != "error":  # --fail-on lowers the bar to it
        assert main([*argv, "--fail-on", severity]) == 1
        capsys.readouterr()


def test_findings_honour_verification(smollm2_model, smollm2_audit):
    """The demo audit prompts the model on the rows the template writes: ``<|im_start|>`` and
    ``<|im_end|>`` are cleared (the model predicts them), so the check raises no untrained finding
    for them, the audit does not list them among the flagged rows the data uses, and nothing
    offers to repair them; a row prompting verifies is an error even when it is a special row."""
    import polars as pl

    from embscope.readiness import check_data

    tokens = pl.read_parquet(smollm2_audit / "tokens.parquet", columns=["flagged", "undertrained_status"])
    flagged = tokens["flagged"].fill_null(False).to_numpy()
    status = tokens["undertrained_status"].to_list()
    assert status[1] == "cleared" and status[2] == "cleared" and flagged[1] and flagged[2]
    data = Path(__file__).resolve().parents[1] / "corpora" / "chat" / "medical-chat.jsonl"
    record = check_data(smollm2_model, [str(data)], flagged=flagged, status=status)
    assert not [f for f in record.findings if f.code in ("untrained-used", "special-row-untrained")
                and {1, 2} & set(f.ids)]
    summary = json.loads((smollm2_audit / "summary.json").read_text("utf-8"))
    usage = summary["sections"]["tokens"]["geometry"]["usage"]
    assert not {1, 2} & {r["id"] for r in usage["top"]}
    # without the verification the same rows are warnings; verified, an error
    assert {f.code for f in check_data(smollm2_model, [str(data)], flagged=flagged).findings
            if f.severity == "warning"} >= {"special-row-untrained"}
    stands = smollm2_model.vocab.encode(" stands")[0]
    verified = list(status)
    verified[1] = verified[stands] = "verified"
    record = check_data(smollm2_model, [str(data)], flagged=flagged, status=verified)
    special = next(f for f in record.findings if f.code == "special-row-untrained" and f.severity == "error")
    used = next(f for f in record.findings if f.code == "untrained-used" and f.severity == "error")
    assert 1 in special.ids and stands in used.ids
    i = used.ids.index(stands)
    assert used.input_counts[i] > 0 and used.label_counts[i] > 0  # an answer word: input and label alike


def test_zero_rows_are_found_without_the_scan(tmp_path, smollm2_model, capsys):
    """``--no-scan`` still finds the all-zero rows the data uses: exit 1, never "no findings"."""
    from embscope.cli import main

    stands = smollm2_model.vocab.encode(" stands")
    folder = build_folder(tmp_path / "m", smollm2_model, zero_ids=stands)
    data = _jsonl(tmp_path / "d.jsonl", CHAT)
    assert main(["check", "--model", str(folder), "--data", str(data), "--no-scan", "-q"]) == 1
    out = capsys.readouterr().out
    assert "untrained-used" in out and "no findings" not in out


def test_bad_repair_targets_fail_before_any_work(tmp_path, capsys):
    """A report folder, or --repair with --no-scan: exit 2 at once, nothing written."""
    import time

    from embscope.cli import main

    data = _jsonl(tmp_path / "d.jsonl", CHAT)
    report = tmp_path / "report"
    assert main(["check", "--model", "smollm2-135m", "--data", str(data), "--no-scan", "--out", str(report),
                 "-q"]) == 0
    capsys.readouterr()
    before = sorted(p.name for p in report.iterdir())
    for extra in (["--repair", str(report), "--force"], ["--repair", str(tmp_path / "new"), "--no-scan"]):
        t = time.perf_counter()
        assert main(["check", "--model", "smollm2-135m", "--data", str(data), "-q", *extra]) == 2
        assert time.perf_counter() - t < 5  # refused before loading the model
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: --repair")
    assert sorted(p.name for p in report.iterdir()) == before and not (tmp_path / "new").exists()


# ------------------------------------------------------------------ engines: the same record


def _record_without_time(record) -> dict:
    body = record.to_dict()
    body.pop("seconds")
    return body


@pytest.fixture(scope="module")
def engine_data(tmp_path_factory) -> Path:
    """2,600 conversations (two shards of up to 2,048 examples), with a bad line."""
    from scripts.build_corpora import chat_conversations

    root = Path(__file__).resolve().parents[1]
    convs = chat_conversations(root / "corpora", 2600, seed=5)
    rows = [json.dumps(c, ensure_ascii=False) for c in convs]
    rows[100] = "{not json"
    return _jsonl(tmp_path_factory.mktemp("engine") / "train.jsonl", rows)


@pytest.fixture(scope="module")
def one_process_record(smollm2_model, engine_data):
    """``check_data`` on ``engine_data`` in one process: the reference of the engine tests."""
    from embscope.corpus.backend import Engine
    from embscope.readiness import check_data

    return check_data(smollm2_model, [str(engine_data)], engine=Engine("local", workers=1))


def test_local_workers_give_the_same_record(smollm2_model, engine_data, one_process_record):
    from embscope.corpus.backend import Engine
    from embscope.readiness import check_data

    one = one_process_record
    two = check_data(smollm2_model, [str(engine_data)], engine=Engine("local", workers=2))
    assert one.examples > 2500 and _record_without_time(one) == _record_without_time(two)
    assert {f.code for f in one.findings} >= {"unreadable-records", "pad-is-eos"}


@pytest.mark.slow  # a local Ray starts in ~20 s (once per test process: ray_local, tests/conftest.py)
def test_ray_gives_the_same_record(smollm2_model, engine_data, one_process_record, ray_local):
    """Ray Data (a local Ray, 2 CPUs): the same record as one process."""
    from embscope.readiness import check_data

    on_ray = check_data(smollm2_model, [str(engine_data)], engine=ray_local)
    assert _record_without_time(one_process_record) == _record_without_time(on_ray)


def test_a_refused_record_refuses_that_record_only(smollm2_model):
    """A template that passes its bounds on one conversation refuses that one: the other 299 are
    rendered and tokenized (a template refused on every record stops after a few: see
    tests/test_check.py)."""
    from embscope.readiness import check_data
    from embscope.models.chat_template import read_chat_template

    data = Path(__file__).resolve().parents[1] / "corpora" / "chat" / "medical-chat.jsonl"
    first = json.loads(data.read_text("utf-8").splitlines()[0])["messages"][0]["content"]
    assert "LABD" in first
    template = "{% if 'LABD' in messages[0]['content'] %}{{ 'ab ' * 10**7 }}{% endif %}" + read_chat_template(smollm2_model)
    record = check_data(smollm2_model, [str(data)], template=template)
    refused = next(f for f in record.findings if f.code == "render-refused")
    assert refused.count == 1 and refused.examples == [0] and "render refused: " in refused.message
    assert record.examples == 300 and record.sequences == 299 and record.template == "rendered 299 of 300 (1 failed or refused)"
