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
    from embscope.extension import apply, suggest
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
    result = suggest(model, tmp_path / "corpus.txt", top=3, min_freq=2, diagnostics=False)
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
