"""Spec resolution: local folders over aliases, a fast answer when the hub is unreachable, and
offline hints that name only what the command needs. Never touches a real host: the hub endpoint
is pointed at a closed local port."""

from __future__ import annotations

import importlib
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from embscope.errors import SpecError
from embscope.models.resolve import download_hint, hub_reachable, resolve, resolve_config

ROOT = Path(__file__).parents[1]
GPT2 = json.loads((ROOT / "tests" / "configs" / "gpt2.json").read_text())
CLOSED_PORT = "http://127.0.0.1:9"  # discard port: nothing listens there, connect is refused


def test_local_folder_wins_over_alias(tmp_path, monkeypatch, caplog):
    (tmp_path / "gpt2").mkdir()
    (tmp_path / "gpt2" / "config.json").write_text(json.dumps({**GPT2, "n_layer": 2}))
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.WARNING, logger="embscope.models.resolve"):
        r = resolve("gpt2", need="config")
    assert r.source == "folder" and r.path == Path("gpt2")
    assert resolve_config("gpt2")["n_layer"] == 2  # the local one, not openai-community/gpt2
    assert any("using the local folder" in m and "openai-community/gpt2" in m for m in caplog.messages)


def test_a_plain_file_does_not_hide_an_alias(tmp_path, monkeypatch):
    (tmp_path / "minilm-l6").write_text("notes")
    monkeypatch.chdir(tmp_path)
    assert resolve("minilm-l6", need="config").source == "package"


def test_local_folder_log_line_reaches_stderr(tmp_path):
    (tmp_path / "gpt2").mkdir()
    (tmp_path / "gpt2" / "config.json").write_text(json.dumps(GPT2))
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(tmp_path / "hub"))
    res = subprocess.run([sys.executable, "-m", "embscope.cli", "rope", "--model", "gpt2", "--json"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "using the local folder" in res.stderr and json.loads(res.stdout)["rope"] is None


@pytest.fixture
def unreachable_hub(tmp_path, monkeypatch):
    """huggingface_hub as if online, its endpoint a closed local port, its cache empty. Its download
    module is imported first: the 2 s are for noticing the hub is down, not for a one-time import
    (about 0.5 s on an idle machine, several seconds on a loaded one)."""
    importlib.import_module("huggingface_hub.file_download")

    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", CLOSED_PORT)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path


def test_hub_reachable_closed_port_is_fast():
    t = time.perf_counter()
    assert hub_reachable(CLOSED_PORT) is False
    assert time.perf_counter() - t < 2.0


def test_unreachable_hub_one_line_error_within_2s(unreachable_hub, capsys):
    from embscope.cli import main

    t = time.perf_counter()
    with pytest.raises(SpecError) as info:
        resolve("acme/missing", need="config")
    assert time.perf_counter() - t < 2.0
    msg = str(info.value)
    assert "could not be reached within" in msg and "\n" not in msg
    assert "hf download acme/missing config.json," in msg and "shards" not in msg and "tokenizer" not in msg
    t = time.perf_counter()
    assert main(["rope", "--model", "acme/missing"]) == 2
    assert time.perf_counter() - t < 2.0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "hf download acme/missing config.json," in err[0]


def test_hint_names_what_the_command_needs(unreachable_hub):
    with pytest.raises(SpecError, match="tokenizer.json") as info:
        resolve("acme/missing", need_weights=False)
    assert "shards" not in str(info.value)
    with pytest.raises(SpecError, match="shards"):
        resolve("acme/missing")


def test_offline_hint_for_rope_names_config_only(tmp_path, monkeypatch):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(SpecError, match="HF_HUB_OFFLINE=1") as info:
        resolve_config("acme/missing")
    assert str(info.value).count("hf download acme/missing config.json,") == 1


def test_download_hints():
    assert download_hint("a/b", "config") == "hf download a/b config.json"
    assert download_hint("a/b", "tokenizer") == "hf download a/b config.json tokenizer.json tokenizer_config.json"
    assert "model.safetensors.index.json" in download_hint("a/b", "weights")
    with pytest.raises(ValueError):
        resolve("a/b", need="everything")
