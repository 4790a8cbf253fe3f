"""The Qwen2-7B-shaped checkpoint generator: real tokenizer, planted rows, shards, hub-cache layout."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import make_checkpoint as mc  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    planted = mc.make_checkpoint(root / "qwen2-7b", rows=152064, hidden=16, hf_cache=root / "hub")
    return root, planted


def test_shards_index_and_planted_rows(built):
    from safetensors import safe_open

    root, planted = built
    folder = root / "qwen2-7b"
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    wm = index["weight_map"]
    assert wm["model.embed_tokens.weight"] == "model-00001-of-00004.safetensors"
    assert wm["lm_head.weight"] == "model-00004-of-00004.safetensors"
    assert set(wm.values()) == {f"model-0000{i}-of-00004.safetensors" for i in range(1, 5)}
    assert index["metadata"]["total_size"] == sum(
        int(np.prod(safe_open(folder / s, "np").get_slice(n).get_shape())) * 2 for n, s in wm.items())
    with safe_open(folder / wm["model.embed_tokens.weight"], "pt") as fh:
        emb = fh.get_tensor("model.embed_tokens.weight").float()
    with safe_open(folder / wm["lm_head.weight"], "pt") as fh:
        head = fh.get_tensor("lm_head.weight").float()
    assert emb.shape == head.shape == (152064, 16)
    assert (emb[151665:] == 0).all() and (head[151665:] == 0).all()
    assert len(planted.padding_rows) == 399 and planted.padding_rows[0] == 151665
    norms = emb[:151665].norm(dim=1)
    low = np.zeros(151665, bool)
    low[planted.low_norm_rows] = True
    assert abs(low.sum() - 1517) <= 1  # 1 % of the tokenizer's rows
    assert norms[low].max() < norms[~low].min()
    # clusters: rows of one cluster are closer to each other than to another cluster's rows
    c = np.asarray(planted.clusters[:151665])
    a, b = emb[:151665][(c == 0) & ~low], emb[:151665][(c == 1) & ~low]
    assert (a[:50] - a[50:100]).norm(dim=1).mean() < (a[:50] - b[:50]).norm(dim=1).mean()


def test_config_is_qwen2_7b(built):
    cfg = json.loads((built[0] / "qwen2-7b" / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen2ForCausalLM"] and cfg["vocab_size"] == 152064
    assert (cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["tie_word_embeddings"]) == (28, 4, False)
    assert cfg["use_sliding_window"] is False and cfg["rope_theta"] == 1e6



def test_hub_cache_alias_through_cli(built, monkeypatch, capsys):
    """``HF_HOME=... HF_HUB_OFFLINE=1 embscope rope --model qwen2-7b`` finds the generated cache."""
    from embscope.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(built[0] / "hub"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(built[0] / "hub"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    assert main(["rope", "--model", "qwen2-7b", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kv_bytes_per_token"] == 57344 and out["vocab_size"] == 152064


def test_tokenizer_matches_tiktoken_ranks(built):
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(built[0] / "qwen2-7b" / "tokenizer.json"))
    assert tok.get_vocab_size(with_added_tokens=True) == 151665
    assert tok.token_to_id("<|endoftext|>") == 151643 and tok.token_to_id("<|file_sep|>") == 151664
    ref = tiktoken.Encoding("qwen2", pat_str=mc.QWEN2_PATTERN, mergeable_ranks=load_tiktoken_bpe(str(mc.ranks_file())),
                            special_tokens={})
    text = "Patient presents with dyspnoea; SpO2 92 %.\n\n  def f(x):\treturn x**2  # 中文 données 🤖"
    assert tok.encode(text, add_special_tokens=False).ids == ref.encode(text)
    assert tok.encode("<|im_start|>user").ids[0] == 151644


def test_hub_cache_found_offline(built, monkeypatch):
    from huggingface_hub import snapshot_download

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    root, _ = built
    snap = Path(snapshot_download(mc.REPO_ID, cache_dir=root / "hub", local_files_only=True))
    assert snap.name == mc.FAKE_COMMIT
    assert (snap / "model-00004-of-00004.safetensors").resolve().parent.name == "blobs"
    assert json.loads((snap / "config.json").read_text())["model_type"] == "qwen2"
