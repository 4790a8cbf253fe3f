"""GGUF metadata → an HF-style ``config.json`` dict, so one context summary serves both formats.

llama.cpp stores model facts under ``<arch>.<key>`` (``llama.block_count``,
``llama.rope.freq_base``, ``llama.attention.head_count_kv``, …) with the architecture in
``general.architecture``; this maps them to the transformers names that
:func:`embscope.context.context_summary` reads.
"""

from __future__ import annotations

from typing import Any

from embscope.errors import ModelFileError


def _plain(value: Any) -> Any:
    """A GGUF field value as a plain Python value (accepts ``gguf.ReaderField`` too)."""
    contents = getattr(value, "contents", None)
    return contents() if callable(contents) else value


def _scalar(value: Any) -> Any:
    """The first entry of a per-layer array, or the value itself."""
    return value[0] if isinstance(value, list) and value else value


def config_from_gguf_metadata(meta: dict, *, tensor_names: list[str] | None = None) -> dict:
    """An HF-style config dict from GGUF metadata (llama.cpp key names, arch prefix from
    ``general.architecture``). ``tensor_names`` decides tying (no ``output.weight`` -> tied).

    >>> config_from_gguf_metadata({"general.architecture": "llama", "llama.embedding_length": 576,
    ...     "llama.block_count": 30, "llama.attention.head_count": 9})["hidden_size"]
    576
    """
    meta = {k: _plain(v) for k, v in meta.items()}
    arch = meta.get("general.architecture")
    if not arch:
        raise ModelFileError("GGUF metadata has no general.architecture; the file is not a model GGUF")

    def get(key: str, default: Any = None) -> Any:
        return meta.get(f"{arch}.{key}", default)

    cfg: dict[str, Any] = {"model_type": arch, "architectures": [f"gguf:{arch}"]}
    mapping = {"hidden_size": "embedding_length", "num_hidden_layers": "block_count",
               "num_attention_heads": "attention.head_count", "num_key_value_heads": "attention.head_count_kv",
               "intermediate_size": "feed_forward_length", "max_position_embeddings": "context_length",
               "rope_theta": "rope.freq_base", "rms_norm_eps": "attention.layer_norm_rms_epsilon",
               "sliding_window": "attention.sliding_window", "kv_lora_rank": "attention.kv_lora_rank",
               "q_lora_rank": "attention.q_lora_rank", "vocab_size": "vocab_size",
               # mixture of experts (Mixtral, Qwen-MoE, DeepSeek-V2/V3 conversions)
               "num_experts": "expert_count", "num_experts_per_tok": "expert_used_count",
               "moe_intermediate_size": "expert_feed_forward_length", "n_shared_experts": "expert_shared_count",
               "first_k_dense_replace": "leading_dense_block_count"}
    for hf_key, gguf_key in mapping.items():
        if get(gguf_key) is not None:
            value = get(gguf_key)
            cfg[hf_key] = value[0] if isinstance(value, list) and value else value  # per-layer arrays
    if "vocab_size" not in cfg and isinstance(meta.get("tokenizer.ggml.tokens"), list):
        cfg["vocab_size"] = len(meta["tokenizer.ggml.tokens"])
    cfg.setdefault("num_key_value_heads", cfg.get("num_attention_heads"))
    # Values pass through unchanged; embscope.config checks them and names a bad key.
    heads, hidden = cfg.get("num_attention_heads"), cfg.get("hidden_size")
    sizes_ok = all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (heads, hidden))
    if cfg.get("q_lora_rank") == 0:  # llama.cpp writes 0 for "no query compression"
        cfg["q_lora_rank"] = None
    if get("expert_shared_feed_forward_length") and not get("expert_shared_count"):
        cfg["shared_expert_intermediate_size"] = get("expert_shared_feed_forward_length")
    head_dim = _scalar(get("attention.key_length")) or (hidden // heads if sizes_ok else None)
    rot = _scalar(get("rope.dimension_count"))
    if cfg.get("kv_lora_rank") is not None and rot:
        # MLA: newer conversions write key_length = kv_lora_rank + rope dims (the cached width) and
        # the per-head q/k and v widths as key_length_mla / value_length_mla; older ones write the
        # per-head widths as key_length / value_length.
        qk = get("attention.key_length_mla") or head_dim
        cfg["qk_rope_head_dim"] = rot
        if isinstance(qk, int) and isinstance(rot, int) and qk > rot:
            cfg["qk_nope_head_dim"] = qk - rot
        value = get("attention.value_length_mla") or get("attention.value_length")
        if value is not None:
            cfg["v_head_dim"] = value
    elif head_dim is not None:
        cfg["head_dim"] = head_dim
    partial = isinstance(rot, int) and isinstance(head_dim, int) and 0 < rot < head_dim
    if cfg.get("kv_lora_rank") is None and partial:
        cfg["partial_rotary_factor"] = rot / head_dim
    kind = get("rope.scaling.type")
    if kind and kind != "none":
        scaling = {"rope_type": kind, "factor": get("rope.scaling.factor", 1.0)}
        if get("rope.scaling.original_context_length"):
            scaling["original_max_position_embeddings"] = get("rope.scaling.original_context_length")
        cfg["rope_scaling"] = scaling
    for hf_key, key in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id")):
        if meta.get(f"tokenizer.ggml.{key}") is not None:
            cfg[hf_key] = meta[f"tokenizer.ggml.{key}"]
    if tensor_names is not None:
        cfg["tie_word_embeddings"] = "output.weight" not in set(tensor_names)
    return cfg


