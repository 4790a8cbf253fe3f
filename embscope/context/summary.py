"""Context budget of a model: RoPE reach, KV-cache bytes, and what the vocabulary costs in weights.

Everything here is read from the config alone (HF ``config.json`` as a dict, transformers v4 or v5,
or GGUF metadata through :func:`embscope.loaders.gguf_config.config_from_gguf_metadata`); no
weights are loaded.

RoPE (Su et al. 2021, "RoFormer", arXiv:2104.09864) rotates dimension pair ``i`` of a ``d``-dim
rotary head by angle ``p * theta**(-2i/d)`` at position ``p``; pair ``i`` therefore has wavelength

    lambda_i = 2*pi * theta**(2i/d),   i = 0 .. d/2 - 1

Example: theta = 10000, d = 128 -> lambda_0 = 6.28 tokens, lambda_63 = 2*pi * 10000**(126/128)
~= 54,000 tokens. A pair whose wavelength exceeds the trained context never turned once in
training; its angles beyond that context are out of distribution, which is what scaling schemes
(linear/PI, NTK "dynamic", YaRN arXiv:2309.00071, Llama-3 "llama3", LongRoPE arXiv:2402.13753)
repair by stretching the long wavelengths.

KV cache per token (Ainslie et al. 2023, GQA, arXiv:2305.13245): keys and values for every layer
and KV head,

    bytes/token = 2 * layers * kv_heads * head_dim * bytes_per_element

Example: Qwen2-7B, 28 layers, 4 KV heads, head_dim 128, bf16 -> 2*28*4*128*2 = 57,344 B/token;
at 32,768 tokens that is 1,879,048,192 B = 1.75 GiB. DeepSeek-V2's multi-head latent attention
(arXiv:2405.04434) caches one compressed vector of ``kv_lora_rank + qk_rope_head_dim`` elements per
layer instead (512 + 64 = 576). Sliding-window layers (Mistral-7B v0.1, Gemma-2) cache at most
``window`` tokens, so their share stops growing past the window.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from embscope.records import Record
from embscope.errors import ModelFileError
from embscope.context.rope import risk_band, rope_parameters, rope_wavelengths, scaled_wavelengths
from embscope.context.rope import rope_type as rope_type_of

#: context lengths the KV table always shows (tokens); the claimed maximum is added to them
KV_CONTEXTS = (4096, 8192, 32768, 131072)
#: bytes per cached element for the two cache dtypes shown
KV_DTYPES = {"bf16": 2, "fp8": 1}
_DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float8_e4m3fn": 1}
#: model types whose position information is a learned/absolute table, not RoPE
_ABSOLUTE_POSITIONS = {"bert", "roberta", "xlm-roberta", "distilbert", "mpnet", "electra", "gpt2",
                       "opt", "gpt_neo", "bloom", "mpt", "deberta", "deberta-v2"}
#: encoder-only model types: bidirectional attention, no KV cache at inference
_ENCODERS = {"bert", "roberta", "xlm-roberta", "distilbert", "mpnet", "electra", "deberta", "deberta-v2"}
#: model types whose MLP is two matrices (up, down) instead of gated (gate, up, down)
_PLAIN_MLP = _ABSOLUTE_POSITIONS | {"gpt_neox", "falcon", "phi", "gptj", "starcoder2"}
#: model types whose config omits ``tie_word_embeddings`` yet are untied (transformers' defaults)
_UNTIED_BY_DEFAULT = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
                      "phi3", "deepseek_v2", "deepseek_v3", "gpt_neox", "falcon", "olmo", "olmo2"}
#: model types with q/k/v biases although their config has no ``attention_bias`` key
_QKV_BIAS = {"qwen2", "qwen2_moe"}


@dataclass
class ContextSummary(Record):
    """RoPE reach, KV-cache budget and embedding share of one model config."""

    #: architecture (``model_type``), e.g. ``qwen2``; ``None`` when the config does not say
    model_type: str | None
    #: ``rope`` or ``absolute`` (learned position table: no RoPE fields apply)
    position_encoding: str
    #: RoPE scaling type: default, linear, dynamic, yarn, longrope, llama3 (``none`` for absolute)
    rope_type: str
    #: RoPE base theta (larger = longer wavelengths)
    rope_theta: float | None
    #: scaling factor from the config (1.0 when unscaled)
    rope_factor: float
    #: rotary dimensions per head (``head_dim`` unless partial rotary / MLA)
    rotary_dim: int
    #: context the model was pre-trained at (tokens)
    original_max_positions: int | None
    #: context the config claims (tokens): max_position_embeddings, or for linear/dynamic/yarn
    #: max(max_position_embeddings, original * factor) (Qwen2.5 keeps 32768 and adds yarn x4)
    claimed_max_positions: int | None
    #: claimed / original; 1.0 = no extension
    extension_ratio: float
    #: none, minor, moderate, significant, high (higher = more risk past the trained context)
    risk: str
    #: what to do about ``risk``
    risk_advice: str
    #: wavelength of each rotary pair in tokens, unscaled: 2*pi*theta**(2i/d)
    wavelengths: list[float]
    #: the same after the scaling type's frequency adjustment (equal to ``wavelengths`` for default)
    wavelengths_scaled: list[float]
    #: pairs that turn at least once within the original context (raw wavelengths), higher = more
    #: dims trained on full periods
    pairs_full_turn_original: int
    #: pairs whose *adjusted* wavelength fits in the original context (their angles at the claimed
    #: length stay inside what training saw)
    pairs_full_turn_scaled: int
    #: layers, attention heads, KV heads, head_dim
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    #: ``gqa`` (incl. MHA/MQA) or ``mla`` (compressed latent cache)
    kv_scheme: str
    #: cached elements per token per full-attention layer (2*kv_heads*head_dim, or MLA latent)
    kv_elements_per_layer: int
    #: layers that cache at most ``sliding_window`` tokens
    sliding_layers: int
    #: window of those layers (tokens), ``None`` when there are none
    sliding_window: int | None
    #: KV bytes per token with every layer growing (bf16), lower = cheaper long context
    kv_bytes_per_token: int
    #: KV bytes per token in fp8
    kv_bytes_per_token_fp8: int
    #: {dtype: {context_tokens: total KV bytes for one sequence}}, sliding layers capped
    kv_bytes: dict[str, dict[int, int]]
    #: vocabulary rows and hidden size
    vocab_size: int | None
    hidden_size: int
    #: input and output embeddings share one matrix
    tied: bool
    #: bytes per weight as stored (from ``torch_dtype``/``dtype``; 2 when unknown)
    weight_bytes_per_element: int
    #: bytes of the input embedding table
    embedding_bytes: int
    #: bytes of the untied output head (0 when tied)
    output_head_bytes: int
    #: estimated total parameters (see :func:`estimate_parameters`), ``None`` if not estimable
    params_estimate: int | None
    #: (embedding + output head) parameters / total; the vocabulary's share of the model
    embedding_share: float | None
    #: caveats (estimates, assumptions) in plain words
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict; byte counts are plain ints, context keys strings."""
        out = asdict(self)
        out["kv_bytes"] = {dt: {str(n): int(b) for n, b in row.items()} for dt, row in self.kv_bytes.items()}
        return out


# --------------------------------------------------------------------------------------- config


def _text_config(config: dict) -> dict:
    """The language-model part of multimodal configs (``text_config``), else ``config``."""
    inner = config.get("text_config")
    if isinstance(inner, dict) and "hidden_size" not in config:
        return {**config, **inner}
    return config


def _first(config: dict, *keys: str, default: Any = None) -> Any:
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    return default


def _positive_int(config: dict, name: str, *keys: str, default: Any = None, required: bool = True) -> int | None:
    value = _first(config, *keys, default=default)
    if value is None:
        if required:
            raise ModelFileError(f"config has no {name} ({' / '.join(keys)}); pass a full config.json")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0 or int(value) != value:
        raise ModelFileError(f"config {keys[0]}={value!r} is not a positive integer; fix the config")
    return int(value)


# ------------------------------------------------------------------------------------------ KV


def _layer_windows(config: dict, layers: int) -> list[int | None]:
    """Per layer: the sliding window (tokens) or ``None`` for full attention.

    Sources, first match wins: ``layer_types`` (v5, Gemma-3, Qwen3); Qwen2's
    ``use_sliding_window`` + ``max_window_layers`` (layers i >= max_window_layers slide);
    Gemma-2 (even layers slide); Gemma-3 v4 (``sliding_window_pattern``: every n-th is global);
    otherwise a set ``sliding_window`` applies to all layers (Mistral-7B v0.1).
    """
    window = config.get("sliding_window")
    if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
        return [None] * layers
    types = config.get("layer_types")
    if isinstance(types, list) and len(types) == layers:
        return [window if "sliding" in str(t) else None for t in types]
    if "use_sliding_window" in config:
        if not config.get("use_sliding_window"):
            return [None] * layers
        first = int(config.get("max_window_layers") or 0)
        return [window if i >= first else None for i in range(layers)]
    kind = config.get("model_type")
    if kind == "gemma2":
        return [window if i % 2 == 0 else None for i in range(layers)]
    pattern = config.get("sliding_window_pattern")
    if kind in ("gemma3", "gemma3_text") and isinstance(pattern, int) and pattern > 0:
        return [None if (i + 1) % pattern == 0 else window for i in range(layers)]
    return [window] * layers


def kv_cache_bytes(elements_per_layer: int, windows: list[int | None], tokens: int, bytes_per_element: int) -> int:
    """Bytes of one sequence's KV cache at ``tokens``: sum over layers of min(tokens, window).

    >>> kv_cache_bytes(1024, [None, None], 10, 2)  # 2 layers * 10 tokens * 1024 elements * 2 B
    40960
    """
    cached = sum(tokens if w is None else min(tokens, w) for w in windows)
    return int(cached * elements_per_layer * bytes_per_element)


# ------------------------------------------------------------------------------------ parameters


def estimate_parameters(config: dict) -> int | None:
    """Parameter count of a decoder (or BERT-like encoder) from its config — an estimate.

    embeddings V*d + layers * (q d*H*hd + k,v 2*d*KV*hd + o H*hd*d [+ q/k/v biases]
    + MLP 3*d*I (gated) or 2*d*I [*experts] + 2 norms * d) + final norm d + head V*d when untied
    (+ position table for absolute-position models). Qwen2-7B -> 7,615,616,512 (published 7.62 B).
    Ignores MLA projections, MoE shared experts and other special blocks; ``None`` when the config
    lacks ``intermediate_size``.
    """
    cfg = _text_config(config)
    d = int(cfg["hidden_size"])
    inter = _first(cfg, "intermediate_size", "n_inner", "ffn_dim")
    if inter is None and cfg.get("model_type") == "gpt2":
        inter = 4 * d
    if not inter:
        return None
    layers = int(_first(cfg, "num_hidden_layers", "n_layer", "num_layers"))
    heads = int(_first(cfg, "num_attention_heads", "n_head"))
    kv = int(_first(cfg, "num_key_value_heads", default=heads))
    hd = int(_first(cfg, "head_dim", default=d // heads))
    vocab = int(cfg.get("vocab_size") or 0)
    kind = cfg.get("model_type")
    plain = kind in _PLAIN_MLP
    attn = d * heads * hd + 2 * d * kv * hd + heads * hd * d
    if cfg.get("attention_bias") or kind in _QKV_BIAS or plain:
        attn += heads * hd + 2 * kv * hd + (d if plain else 0)
    mlp = (2 if plain else 3) * d * int(inter) + (int(inter) + d if plain else 0)
    experts = int(_first(cfg, "num_local_experts", "num_experts", default=1) or 1)
    if experts > 1:
        mlp = mlp * experts + d * experts  # experts + router
    per_layer = attn + mlp + 2 * d * (2 if plain else 1)  # norms (LayerNorm has a bias too)
    total = vocab * d + layers * per_layer + d
    if not _tied(cfg):
        total += vocab * d
    if kind in _ABSOLUTE_POSITIONS:
        total += int(_first(cfg, "max_position_embeddings", "n_positions", default=0)) * d
    return int(total)


def _tied(cfg: dict) -> bool:
    if "tie_word_embeddings" in cfg:
        return bool(cfg["tie_word_embeddings"])
    return cfg.get("model_type") not in _UNTIED_BY_DEFAULT


# --------------------------------------------------------------------------------------- summary


def _kv_scheme(mla: bool, heads: int | None, kv_heads: int | None) -> str:
    """``mla`` (latent cache), ``mha`` (a K/V head per query head), ``mqa`` (one), else ``gqa``."""
    if mla:
        return "mla"
    if heads and kv_heads == heads:
        return "mha"
    return "mqa" if kv_heads == 1 else "gqa"


def context_summary(config: dict, *, gguf_metadata: dict | None = None) -> ContextSummary:
    """Read RoPE, KV-cache and embedding-size facts from an HF config (v4 or v5) or GGUF metadata.

    Args:
        config: ``config.json`` as a dict (may be ``{}`` when ``gguf_metadata`` is given).
        gguf_metadata: GGUF key/value metadata; fills what ``config`` lacks.
    Returns:
        :class:`ContextSummary`.
    Raises:
        ModelFileError: missing ``hidden_size``/layers/heads, or non-positive sizes.
    Example:
        >>> s = context_summary({"hidden_size": 3584, "num_hidden_layers": 28,
        ...     "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064})
        >>> s.kv_bytes_per_token
        57344
    """
    if gguf_metadata:
        from embscope.loaders.gguf_config import config_from_gguf_metadata

        config = {**config_from_gguf_metadata(gguf_metadata), **(config or {})}
    if not isinstance(config, dict):
        raise ModelFileError("config is not a JSON object; pass the model's config.json")
    cfg = _text_config(config)
    notes: list[str] = []
    hidden = _positive_int(cfg, "hidden size", "hidden_size", "n_embd", "d_model")
    layers = _positive_int(cfg, "layer count", "num_hidden_layers", "n_layer", "num_layers")
    heads = _positive_int(cfg, "attention head count", "num_attention_heads", "n_head")
    kv_heads = _positive_int(cfg, "KV head count", "num_key_value_heads", default=1 if cfg.get("multi_query") else heads)
    if cfg.get("head_dim") is None and hidden < heads:
        raise ModelFileError(f"config hidden_size={hidden} is smaller than num_attention_heads={heads} "
                             "and there is no head_dim; fix the config")
    head_dim = _positive_int(cfg, "head_dim", "head_dim", default=hidden // heads)
    vocab = _positive_int(cfg, "vocab size", "vocab_size", required=False)
    max_pos = _positive_int(cfg, "max positions", "max_position_embeddings", "n_positions",
                            "max_sequence_length", "seq_length", required=False)
    kind = cfg.get("model_type")

    # -- RoPE
    params = rope_parameters(cfg)
    absolute = kind in _ABSOLUTE_POSITIONS and params.get("rope_theta") is None
    rope_type = "none" if absolute else rope_type_of(params)
    theta = None if absolute else float(params.get("rope_theta") or 10000.0)
    if theta is not None and theta <= 1:
        raise ModelFileError(f"config rope_theta={theta!r} must be > 1; fix the config")
    factor = float(params.get("factor") or 1.0)
    if factor <= 0:
        raise ModelFileError(f"config rope factor={factor!r} must be positive; fix the config")
    mla = cfg.get("kv_lora_rank") is not None and cfg.get("qk_rope_head_dim") is not None
    rotary = int(cfg["qk_rope_head_dim"]) if mla else int(head_dim * float(
        _first(cfg, "partial_rotary_factor", "rotary_pct", default=params.get("partial_rotary_factor") or 1.0)))
    original = _positive_int(params, "original max positions", "original_max_position_embeddings",
                             required=False) or _positive_int(cfg, "original max positions",
                             "original_max_position_embeddings", required=False) or max_pos
    claimed = max_pos
    if rope_type in ("linear", "dynamic", "yarn") and original and factor > 1:
        claimed = max(claimed or 0, int(round(original * factor)))
    ratio = (claimed / original) if (claimed and original) else 1.0
    band, advice = risk_band(ratio)
    lam = scaled = []
    full_orig = full_scaled = 0
    if theta is not None and rotary >= 2:
        lam = rope_wavelengths(theta, rotary)
        scaled = scaled_wavelengths(lam, rope_type, params, theta=theta, rotary_dim=rotary,
                                    original=original or claimed or 1, claimed=claimed or original or 1)
        limit = original or claimed or 0
        full_orig = sum(1 for x in lam if x <= limit)
        full_scaled = sum(1 for x in scaled if x <= limit)
    if absolute:
        notes.append("learned absolute positions: no RoPE; the position table caps context at max positions")
    if kind in _ENCODERS:
        notes.append(f"encoder-only model ({kind}): attention is bidirectional and no KV cache is kept; "
                     "the KV figures are what a decoder of this shape would need")

    # -- KV cache
    if mla:
        per_layer = int(cfg["kv_lora_rank"]) + int(cfg["qk_rope_head_dim"])
        notes.append("MLA: KV figures are the compressed latent cache (kv_lora_rank + qk_rope_head_dim "
                     "per layer), as served by MLA-aware engines")
    else:
        per_layer = 2 * kv_heads * head_dim
    windows = _layer_windows(cfg, layers)
    n_sliding = sum(1 for w in windows if w is not None)
    contexts = sorted(set(KV_CONTEXTS) | ({claimed} if claimed else set()))
    kv = {dt: {n: kv_cache_bytes(per_layer, windows, n, b) for n in contexts} for dt, b in KV_DTYPES.items()}

    # -- embeddings
    tied = _tied(cfg)
    dtype = str(_first(cfg, "torch_dtype", "dtype", default="unknown")).replace("torch.", "")
    if dtype not in _DTYPE_BYTES:
        notes.append(f"weight dtype {dtype}: embedding bytes assume bf16 (2 B per weight)")
    wbytes = _DTYPE_BYTES.get(dtype, 2)
    emb = (vocab or 0) * hidden * wbytes
    head = 0 if tied else emb
    total = estimate_parameters(cfg)
    share = ((vocab or 0) * hidden * (1 if tied else 2) / total) if total else None
    if total:
        notes.append("parameter total is an estimate from the config (dense llama-like formula)")

    return ContextSummary(
        model_type=kind, position_encoding="absolute" if absolute else "rope", rope_type=rope_type,
        rope_theta=theta, rope_factor=factor, rotary_dim=rotary, original_max_positions=original,
        claimed_max_positions=claimed, extension_ratio=round(ratio, 4), risk=band, risk_advice=advice,
        wavelengths=lam, wavelengths_scaled=scaled, pairs_full_turn_original=full_orig,
        pairs_full_turn_scaled=full_scaled, layers=layers, heads=heads, kv_heads=kv_heads,
        head_dim=head_dim, kv_scheme=_kv_scheme(mla, heads, kv_heads), kv_elements_per_layer=per_layer,
        sliding_layers=n_sliding, sliding_window=next((w for w in windows if w), None),
        kv_bytes_per_token=per_layer * layers * KV_DTYPES["bf16"],
        kv_bytes_per_token_fp8=per_layer * layers * KV_DTYPES["fp8"], kv_bytes=kv, vocab_size=vocab,
        hidden_size=hidden, tied=tied, weight_bytes_per_element=wbytes, embedding_bytes=emb,
        output_head_bytes=head, params_estimate=total, embedding_share=share, notes=notes)
