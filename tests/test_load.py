"""Loading matrices and tokenizers from real assets and from checkpoints written here."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from embscope.errors import DeviceError, ModelFileError, SpecError, VocabError
from embscope.models.load import load_model
from tests.conftest import write_checkpoint


@pytest.fixture(scope="module")
def smollm2(smollm2_model):
    return smollm2_model


@pytest.fixture(scope="module")
def minilm(minilm_model):
    return minilm_model


def test_smollm2_gguf_is_tied_llama(smollm2):
    m = smollm2
    assert tuple(m.embed.shape) == (49152, 576)
    assert m.tied and m.output is None
    assert m.config["rope_theta"] == pytest.approx(1e5)
    assert m.config["num_hidden_layers"] == 30 and m.config["num_key_value_heads"] == 3
    assert m.tensor_names["embed"] == "token_embd.weight"
    assert m.dtype == "Q8_0" and m.embed.dtype == torch.float32
    cats = Counter(m.categories)
    assert cats["special"] == 17 and cats["padding"] == 0
    assert m.vocab.display(1) == "<|im_start|>"
    # the dequantised matrix is not degenerate: rows differ and norms are finite
    norms = m.embed.norm(dim=1)
    assert torch.isfinite(norms).all() and norms.std() > 0


def test_minilm_bert_names_and_unused_rows(minilm):
    m = minilm
    assert tuple(m.embed.shape) == (30522, 384)
    assert m.tensor_names["embed"] == "embeddings.word_embeddings.weight"
    unused = [i for i in range(m.n_tokens) if m.vocab.display(i).startswith("[unused")]
    assert len(unused) == 994
    assert m.vocab.display(7592) == "hello"
    assert {m.vocab.display(i) for i in m.vocab.special_ids} >= {"[CLS]", "[SEP]", "[PAD]", "[MASK]"}


def test_sharded_untied_reads_only_needed_shards(tmp_path, llama3_tokenizer_json):
    rows, hidden = 128300, 16  # 44 padding rows past Llama 3's 128256 tokens
    t = write_checkpoint(tmp_path / "m", rows=rows, hidden=hidden, tokenizer_json=llama3_tokenizer_json)
    # The middle shard holds no embedding: make it garbage. Opening it would fail loudly.
    (tmp_path / "m" / "model-00002-of-00003.safetensors").write_bytes(b"\xff" * 64)
    m = load_model(str(tmp_path / "m"), device="cpu")
    assert not m.tied and m.output is not None
    assert [Path(f).name for f in m.files_read] == ["model-00001-of-00003.safetensors",
                                                      "model-00003-of-00003.safetensors"]
    assert torch.equal(m.embed, t["model.embed_tokens.weight"].float())
    assert torch.equal(m.output, t["lm_head.weight"].float())
    assert m.dtype == "BF16"
    cats = Counter(m.categories)
    assert cats["padding"] == 44 and m.categories[-1] == "padding" and m.n_tokens == 128256


def test_tied_checkpoint_detected(tmp_path, llama3_tokenizer_json):
    write_checkpoint(tmp_path / "m", rows=128256, hidden=8, tokenizer_json=llama3_tokenizer_json, untied=False)
    m = load_model(str(tmp_path / "m"), device="cpu")
    assert m.tied and m.output is None and m.tensor_names["output"] is None


def test_tokenizer_larger_than_matrix_is_clear_error(tmp_path, llama3_tokenizer_json):
    write_checkpoint(tmp_path / "m", rows=1000, hidden=8, tokenizer_json=llama3_tokenizer_json)
    with pytest.raises(VocabError, match="tokenizer has 128256 tokens but the embedding has only 1000 rows"):
        load_model(str(tmp_path / "m"), device="cpu")


@pytest.mark.parametrize("bad, message", [
    ({"hidden_size": None}, "hidden_size"),
    ({"hidden_size": -3}, "not a positive integer"),
    ({"hidden_size": 32}, "config hidden size is 32"),
])
def test_config_nonsense_is_clear_error(tmp_path, bad, message):
    write_checkpoint(tmp_path / "m", rows=64, hidden=8, tokenizer_json=None, config_extra=bad)
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    if bad.get("hidden_size") is None:
        del cfg["hidden_size"]
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelFileError, match=message):
        load_model(str(tmp_path / "m"), device="cpu")


def test_truncated_and_lying_safetensors(tmp_path):
    write_checkpoint(tmp_path / "m", rows=64, hidden=8, tokenizer_json=None)
    shard = tmp_path / "m" / "model-00001-of-00003.safetensors"
    data = shard.read_bytes()
    shard.write_bytes(data[:-100])
    with pytest.raises(ModelFileError, match="claims bytes"):
        load_model(str(tmp_path / "m"), device="cpu")
    shard.write_bytes((2**40).to_bytes(8, "little") + data[8:])
    with pytest.raises(ModelFileError, match="header claims"):
        load_model(str(tmp_path / "m"), device="cpu")


def test_pickle_bin_refused_unless_trusted_and_then_weights_only(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"hidden_size": 4, "model_type": "gpt2"}))

    class Boom:
        def __reduce__(self):
            return (print, ("pwned",))

    torch.save({"transformer.wte.weight": torch.zeros(3, 4), "evil": Boom()}, folder / "pytorch_model.bin")
    with pytest.raises(SpecError, match="convert them to safetensors, or pass trust_pickle=True"):
        load_model(str(folder), device="cpu")
    with pytest.raises(ModelFileError, match="weights_only"):
        load_model(str(folder), device="cpu", trust_pickle=True)


def test_gguf_without_token_embd(tmp_path):
    import gguf
    import numpy as np

    path = tmp_path / "x.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_embedding_length(4)
    w.add_tensor("blk.0.attn_norm.weight", np.ones(4, dtype=np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    with pytest.raises(ModelFileError, match="no token_embd.weight"):
        load_model(str(path), device="cpu")


def test_unknown_alias_suggests(capsys):
    from embscope.cli import main

    assert main(["audit", "--model", "qwen2-7"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'qwen2-7b'" in err and "Traceback" not in err


def test_cuda_without_gpu_is_clear_error():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(DeviceError, match="no CUDA GPU"):
        load_model("minilm-l6", device="cuda")


def test_hub_id_resolves_through_offline_cache(tmp_path, llama3_tokenizer_json):
    """A hub id found in an HF cache layout, with HF_HUB_OFFLINE=1; a missing one is a one-line error."""
    snap = tmp_path / "hub" / "models--acme--tiny" / "snapshots" / ("a" * 40)
    write_checkpoint(snap, rows=128256, hidden=8, tokenizer_json=llama3_tokenizer_json)
    (tmp_path / "hub" / "models--acme--tiny" / "refs").mkdir()
    (tmp_path / "hub" / "models--acme--tiny" / "refs" / "main").write_text("a" * 40)
    env = {"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin",
           "EMBSCOPE_QUIET": "1"}
    code = ("import embscope; m = embscope.load_model('acme/tiny', device='cpu'); "
            "print(m.source, m.n_rows, m.tied)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=Path(__file__).parents[1])
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["hub-cache", "128256", "False"]
    res = subprocess.run([sys.executable, "cli.py", "rope", "--model", "acme/missing"],
                         capture_output=True, text=True, env=env, cwd=Path(__file__).parents[1])
    assert res.returncode == 2
    assert "not in the HF cache" in res.stderr and "HF_HUB_OFFLINE=1" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
