"""``extend --apply`` as a section: its options are refused before any work, and the manifest it
writes is in ``summary.json`` (``sections.apply``)."""

from __future__ import annotations

import json
import time

from tests.test_fuzz_repro import _tiny_extend_model


def test_bad_apply_init_fails_before_any_work(tmp_path, capsys):
    """Before: an unknown ``--apply-init`` failed only after the whole extension pass."""
    from embscope.cli import main

    out, applied = tmp_path / "out", tmp_path / "applied"
    t0 = time.perf_counter()
    assert main(["extend", "--model", "smollm2-135m", "--corpus", "medical", "--apply", str(applied),
                 "--apply-init", "subword-maen", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: unknown --init strategy 'subword-maen'"), err
    assert "did you mean" in err[0] and "subword-mean" in err[0]
    assert time.perf_counter() - t0 < 5 and not out.exists() and not applied.exists()


def test_summary_of_extend_apply_holds_the_manifest(tmp_path, capsys):
    from embscope.cli import main

    model = _tiny_extend_model(tmp_path)
    out, applied = tmp_path / "out", tmp_path / "applied"
    assert main(["extend", "--model", str(model), "--corpus", str(tmp_path / "corpus.txt"), "--top", "3",
                 "--min-freq", "2", "--no-diagnostics", "--apply-init", "subword-mean", "--out", str(out),
                 "--apply", str(applied), "-q"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    written = json.loads((applied / "embscope_extension.json").read_text())
    record = summary["sections"]["apply"]
    assert record["folder"] == str(applied) and record["n_added"] >= 1
    assert {k: v for k, v in record.items() if k != "folder"} == {k: v for k, v in written.items()
                                                                  if k != "embscope"}
    assert record["init"] == "subword-mean" and record["init_reason"] == "asked for"
    assert summary["parameters"]["apply_to"] == str(applied)


def test_runner_chooses_the_extension_corpus_without_the_languages_section(tmp_path):
    """Before: the languages section chose it, so without that section the extension had "no
    single-language corpus given"."""
    from embscope.runner import Given, Job, corpus_path, run

    model = _tiny_extend_model(tmp_path)
    corpus = tmp_path / "corpus.txt"
    res = run(str(model), sections=["extension"], given=Given(languages=[corpus_path("udhr"), corpus]), top=3,
              min_freq=2, diagnostics=False, out=tmp_path / "out", job=Job(render=False, verbose=False))
    assert res.summary.sections.languages is None
    assert res.summary.sections.extension is not None and res.summary.sections.extension.corpus == str(corpus)
