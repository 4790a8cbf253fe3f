"""The whole causal LM built from embscope's GGUF parse equals transformers' GGUF-loaded model."""

from __future__ import annotations

import pytest
import torch

#: prompts whose logits are compared (a few hundred positions in all)
PROMPTS = ("The capital of France is Paris, and the capital of Italy is",
           "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)",
           "Le patient présente une cholécystite aiguë ; la douleur irradie vers l'épaule droite.")


def _transformers_loaded(path):
    """transformers' own GGUF loader (``load_gguf_checkpoint``, the path embscope used before)."""
    from embscope.models.fullmodel import _from_gguf

    return _from_gguf(path).eval()


def _assert_same_model(ours, theirs):
    assert ours.config.to_dict() == theirs.config.to_dict()
    a, b = ours.state_dict(), theirs.state_dict()
    assert a.keys() == b.keys()
    differ = [k for k in a if a[k].dtype != b[k].dtype or not torch.equal(a[k], b[k])]
    assert differ == []
    assert ours.get_output_embeddings().weight.data_ptr() == ours.get_input_embeddings().weight.data_ptr() \
        if ours.config.tie_word_embeddings else True


def _assert_same_logits(ours, theirs, vocab):
    with torch.no_grad():
        for text in PROMPTS:
            ids = torch.tensor([vocab.encode(text)])
            la, lb = ours(input_ids=ids).logits, theirs(input_ids=ids).logits
            assert torch.equal(la, lb), (text, float((la - lb).abs().max()))


@pytest.mark.slow  # transformers' own GGUF load is the reference: ~25 CPU-s with ours and the prompts
def test_smollm2_built_from_our_parse_equals_transformers(smollm2_model):
    from pathlib import Path

    from embscope.models.gguf_model import build_causal_lm

    path = Path(smollm2_model.path)
    ours = build_causal_lm(path).eval()
    theirs = _transformers_loaded(path)
    _assert_same_model(ours, theirs)
    _assert_same_logits(ours, theirs, smollm2_model.vocab)


@pytest.mark.slow  # two whole-model loads of a 262,144-row model (~25 CPU-s)
def test_gemma3_built_from_our_parse_equals_transformers(gemma3_model):
    from pathlib import Path

    from embscope.models.gguf_model import build_causal_lm

    model = gemma3_model
    path = Path(model.path)
    ours = build_causal_lm(path).eval()
    theirs = _transformers_loaded(path)
    _assert_same_model(ours, theirs)
    _assert_same_logits(ours, theirs, model.vocab)


def _write_tiny_gguf(path, arch: str, *, heads: int, kv_heads: int, head_dim: int | None = None,
                     hidden: int = 64, layers: int = 2, ffn: int = 96, vocab: int = 256, tied: bool = True):
    """A random GGUF of ``arch`` laid out as llama.cpp's converter writes one: the tensors of the HF
    model of that shape under gguf-py's names, Q8_0 matrices and F32 vectors."""
    import gguf
    import numpy as np
    from transformers import AutoConfig, AutoModelForCausalLM

    hf_type = {"gemma3": "gemma3_text"}.get(arch, arch)
    extra = {"head_dim": head_dim} if head_dim else {}
    config = AutoConfig.for_model(hf_type, hidden_size=hidden, num_hidden_layers=layers, intermediate_size=ffn,
                                  num_attention_heads=heads, num_key_value_heads=kv_heads, vocab_size=vocab,
                                  tie_word_embeddings=tied, **extra)
    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in AutoModelForCausalLM.from_config(config).state_dict().items()}
    arch_id = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch)
    table = gguf.get_tensor_name_map(arch_id, layers)
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(layers)
    w.add_context_length(128)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(vocab)
    if head_dim:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    if arch.startswith("gemma"):
        w.add_sliding_window(64)
    for key, shape in shapes.items():
        if tied and key == "lm_head.weight":
            continue
        stem, _, suffix = key.rpartition(".")
        name = table.get_name(stem) + "." + suffix
        x = rng.standard_normal(shape).astype(np.float32) * 0.1
        if x.ndim == 2 and x.shape[1] % 32 == 0:
            w.add_tensor(name, gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0),
                         raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("arch,hidden,heads,kv,head_dim,tied", [
    ("llama", 64, 4, 2, None, False),     # grouped-query attention: k is un-permuted with the KV heads
    ("qwen2", 64, 4, 2, None, True),
    # transformers maps no head width for qwen3 GGUFs (its config's default, 128, is used)
    ("qwen3", 512, 4, 2, None, False),
    ("gemma2", 64, 4, 1, 32, True),
    ("gemma3", 64, 4, 1, 32, True),
])
def test_every_built_architecture_equals_transformers(tmp_path, arch, hidden, heads, kv, head_dim, tied):
    from embscope.models.gguf_model import BUILDERS, build_causal_lm

    assert set(BUILDERS) == {"llama", "qwen2", "qwen3", "gemma2", "gemma3"}
    path = tmp_path / f"{arch}.gguf"
    _write_tiny_gguf(path, arch, hidden=hidden, heads=heads, kv_heads=kv, head_dim=head_dim, tied=tied)
    ours = build_causal_lm(path).eval()
    theirs = _transformers_loaded(path)
    _assert_same_model(ours, theirs)
    ids = torch.arange(1, 40)[None]
    with torch.no_grad():
        assert torch.equal(ours(input_ids=ids).logits, theirs(input_ids=ids).logits)


def test_unbuilt_architecture_goes_through_transformers(tmp_path):
    import gguf

    from embscope.formats.gguf import open_gguf
    from embscope.models.gguf_model import can_build

    other = tmp_path / "phi3.gguf"
    w = gguf.GGUFWriter(str(other), "phi3")
    w.add_block_count(1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert not can_build(open_gguf(other))


def test_one_parse_per_file(tmp_path):
    """The run's readers share one parse; a rewritten file is parsed again."""
    from embscope.formats.gguf import open_gguf

    path = tmp_path / "m.gguf"
    _write_tiny_gguf(path, "llama", heads=4, kv_heads=4)
    first = open_gguf(path)
    assert open_gguf(path) is first and open_gguf(path, tensors=False) is first
    _write_tiny_gguf(path, "llama", heads=4, kv_heads=4, ffn=64)
    again = open_gguf(path)
    assert again is not first and again.fields["llama.feed_forward_length"] == 64
