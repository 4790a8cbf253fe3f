"""Context budget of a model: RoPE reach, KV-cache bytes, and what the vocabulary costs in weights.

Everything here is read from the config alone (HF ``config.json`` as a dict, transformers v4 or v5,
or GGUF metadata through :func:`embscope.formats.gguf_config.config_from_gguf_metadata`); no
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

from dataclasses import dataclass, field

from embscope.arguments import checked
from embscope.records import Record
from embscope.config import CONFIG_MAXIMA, dims, first, max_positions, positive_int, text_config
from embscope.models.params import ABSOLUTE_POSITIONS, ALIBI, ParamEstimate, estimate_parameters, tied
from embscope.context.rope import RopeSummary, extension_band, rope_parameters, rope_summary
from embscope.context.rope import rope_type as rope_type_of
from embscope.errors import ModelFileError

#: context lengths the KV table shows (tokens) up to the model's own maximum context, which is
#: added to them; past it, one row only: twice the maximum (see :func:`kv_contexts`)
KV_CONTEXTS = (4096, 8192, 32768, 131072)
#: bytes per cached element for the two cache dtypes shown
KV_DTYPES = {"bf16": 2, "fp8": 1}
_DTYPE_BYTES = {"float32": 4, "float": 4, "f32": 4, "float16": 2, "half": 2, "f16": 2, "bfloat16": 2, "bf16": 2,
                "float8_e4m3fn": 1, "float8_e5m2": 1, "f8_e4m3": 1, "f8_e5m2": 1}
#: encoder-only model types: bidirectional attention, no KV cache at inference
_ENCODERS = {"bert", "roberta", "xlm-roberta", "distilbert", "mpnet", "electra", "deberta", "deberta-v2"}
#: RoPE types whose maths is relative to an original length; transformers takes
#: ``max_position_embeddings`` for it when the config states none
_SCALED_TYPES = {"llama3", "yarn", "longrope", "dynamic"}


@dataclass
class ContextSummary(Record):
    """Position encoding, context lengths, KV-cache budget and parameter share of one config.

    Every field is explained, with a worked example, in docs/context.md.
    """

    #: architecture (``model_type``), e.g. ``qwen2``; ``None`` when the config does not say
    model_type: str | None
    #: ``rope``, ``absolute`` (learned position table) or ``alibi`` (attention biases)
    position_encoding: str
    #: the rotary encoding; ``None`` when there is none (``rope_absent_reason`` says why)
    rope: RopeSummary | None
    #: why ``rope`` is ``None``, e.g. ``learned absolute positions``
    rope_absent_reason: str | None
    #: context the model was pre-trained at (tokens), only when the config or GGUF states it
    trained_context: int | None
    #: where ``trained_context`` comes from (a config key), or why it is unknown
    trained_context_source: str
    #: longest context the config allows (tokens): max_position_embeddings, or for yarn/dynamic
    #: max(max_position_embeddings, original * factor)
    max_context: int | None
    #: ``max_position_embeddings`` as written (the configured maximum, not the trained context)
    max_position_embeddings: int | None
    #: max_context / trained_context; ``None`` when the trained context is unknown
    extension_ratio: float | None
    #: none, up to 2x, up to 4x, up to 8x, over 8x, unknown (see :func:`extension_band`)
    extension_band: str
    #: what the band means for this config
    extension_note: str
    #: True when max_position_embeddings covers max_context (the config declares the length)
    extension_declared: bool | None
    #: layers, attention heads, KV heads
    layers: int
    heads: int
    kv_heads: int
    #: query/key width per head (MLA: qk_nope_head_dim + qk_rope_head_dim) and value width
    head_dim: int
    v_head_dim: int
    #: ``mha``, ``gqa``, ``mqa`` or ``mla`` (compressed latent cache)
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
    #: {dtype: {context_tokens: total KV bytes for one sequence}}, sliding layers capped; the
    #: contexts of :func:`kv_contexts`: up to ``max_context``, then one past it (twice it)
    kv_bytes: dict[str, dict[int, int]]
    #: vocabulary rows and hidden size
    vocab_size: int | None
    hidden_size: int
    #: input and output embeddings share one matrix
    tied: bool
    #: bytes per weight as stored: the loaded embedding's dtype when known (GGUF blocks: block
    #: bytes / weights per block, Q8_0 34/32), else the config's ``torch_dtype``/``dtype``; 2
    #: (bf16, an assumption a note states) when neither says
    weight_bytes_per_element: float
    #: bytes of the input embedding table
    embedding_bytes: int
    #: bytes of the untied output head (0 when tied)
    output_head_bytes: int
    #: estimated parameters: total, active per token, embedding (``None`` if not estimable)
    params: ParamEstimate | None
    #: (embedding + output head rows) / total parameters; the vocabulary's share of the model
    embedding_share: float | None
    #: caveats (estimates, assumptions) in plain words
    notes: list[str] = field(default_factory=list)
    #: the dtype ``weight_bytes_per_element`` is for (``bfloat16``, ``Q8_0``, ...); ``None`` when
    #: neither the loaded matrix nor the config says (bf16 assumed, a note says so)
    weight_dtype: str | None = None


# ------------------------------------------------------------------------------------------ KV


def _layer_windows(config: dict, layers: int) -> list[int | None]:
    """Per layer: the sliding window (tokens) or ``None`` for full attention.

    Sources, first match wins: ``layer_types`` (v5, Gemma-3, Qwen3); Qwen2's
    ``use_sliding_window`` + ``max_window_layers`` (layers i >= max_window_layers slide);
    Gemma-2 (even layers slide); Gemma-3 v4 (``sliding_window_pattern``, default 6 as in
    transformers and llama.cpp: every n-th layer is global);
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
        first_slide = positive_int(config, "max_window_layers", "max_window_layers", required=False,
                                   allow_zero=True) or 0
        return [window if i >= first_slide else None for i in range(layers)]
    kind = config.get("model_type")
    if kind == "gemma2":
        return [window if i % 2 == 0 else None for i in range(layers)]
    pattern = config.get("sliding_window_pattern") or (6 if kind in ("gemma3", "gemma3_text") else None)
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


def _kv_scheme(mla: bool, heads: int | None, kv_heads: int | None) -> str:
    """``mla`` (latent cache), ``mha`` (a K/V head per query head), ``mqa`` (one), else ``gqa``."""
    if mla:
        return "mla"
    if heads and kv_heads == heads:
        return "mha"
    return "mqa" if kv_heads == 1 else "gqa"


# ------------------------------------------------------------------------------------ positions


def _position_encoding(cfg: dict) -> tuple[str, str | None]:
    """(encoding, reason there is no RoPE or ``None``)."""
    kind = cfg.get("model_type")
    has_rope = any(cfg.get(k) is not None for k in ("rope_theta", "rope_scaling", "rope_parameters",
                                                    "rotary_dim", "rotary_pct", "qk_rope_head_dim"))
    if has_rope:
        return "rope", None
    attn_config = cfg.get("attn_config")
    if kind in ALIBI or cfg.get("alibi") or (isinstance(attn_config, dict) and attn_config.get("alibi")):
        return "alibi", "ALiBi attention biases (no RoPE, no position table)"
    if kind in ABSOLUTE_POSITIONS or cfg.get("position_embedding_type") == "absolute" or (
            kind is None and "n_positions" in cfg and "n_embd" in cfg):
        return "absolute", "learned absolute positions"
    return "rope", None


def _lengths(cfg: dict, params: dict | None, kind: str, max_pos: int | None
             ) -> tuple[int | None, str, int | None, int | None]:
    """(trained context, its source, reference length for the scaling maths, max context)."""
    stated = None
    source = "unknown: the config states no original_max_position_embeddings"
    if params is not None and params.get("original_max_position_embeddings") is not None:
        stated = int(params["original_max_position_embeddings"])
        source = "rope_scaling.original_max_position_embeddings"
    elif cfg.get("original_max_position_embeddings") is not None:
        stated = positive_int(cfg, "original context", "original_max_position_embeddings")
        source = "original_max_position_embeddings"
    if stated is None and kind in _SCALED_TYPES and max_pos:
        # transformers computes these scalings relative to max_position_embeddings when no original is given
        stated, source = max_pos, f"max_position_embeddings (the length {kind} scaling is relative to)"
    reference = stated or max_pos
    factor = float(params.get("factor") or 1.0) if params else 1.0
    claimed = max_pos
    if kind in ("dynamic", "yarn") and reference and factor > 1:
        claimed = max(max_pos or 0, int(round(reference * factor)))
    elif kind == "linear" and not max_pos and stated and factor > 1:
        claimed = int(round(stated * factor))
    top = CONFIG_MAXIMA["max positions"]
    if claimed is not None and claimed > top:  # each in range, their product is not
        raise ModelFileError(f"config RoPE scaling claims a context of {claimed:.3g} tokens ({reference:,} × factor "
                             f"{factor:g}), above {top:,}, far past any real model; fix the factor in config.json")
    return stated, source, reference, claimed


# --------------------------------------------------------------------------------------- summary


@checked
def context_summary(config: dict, *, gguf_metadata: dict | None = None,
                    stored_dtype: str | None = None) -> ContextSummary:
    """Read position, KV-cache and embedding-size facts from an HF config (v4 or v5) or GGUF metadata.

    Args:
        config: ``config.json`` as a dict (may be ``{}`` when ``gguf_metadata`` is given).
        gguf_metadata: GGUF key/value metadata; fills what ``config`` lacks.
        stored_dtype: the dtype the embedding is stored in (``LoadedModel.dtype``: ``BF16``,
            ``Q8_0``, ...), which sizes the embedding bytes; ``None``: the config's dtype.
    Returns:
        :class:`ContextSummary`.
    Raises:
        ModelFileError: a missing or malformed key (one line naming it), e.g. no hidden size,
            ``rope_theta: "x"``, ``max_position_embeddings: Infinity``, ``rope_scaling: [1, 2]``.
    Example:
        >>> s = context_summary({"hidden_size": 3584, "num_hidden_layers": 28,
        ...     "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064})
        >>> s.kv_bytes_per_token
        57344
    """
    if gguf_metadata:
        from embscope.formats.gguf_config import config_from_gguf_metadata

        config = {**config_from_gguf_metadata(gguf_metadata), **(config or {})}
    cfg = text_config(config)
    notes: list[str] = []
    dm = dims(cfg)
    max_pos, _ = max_positions(cfg)
    kind = cfg.get("model_type")

    # -- positions
    encoding, reason = _position_encoding(cfg)
    rope = None
    params = None
    rtype = "none"
    if encoding == "rope":
        params = rope_parameters(cfg)
        rtype = rope_type_of(params)
    trained, source, reference, claimed = _lengths(cfg, params, rtype, max_pos)
    if encoding == "rope":
        partial = first(cfg, "partial_rotary_factor", "rotary_pct", default=params.get("partial_rotary_factor") or 1.0)
        if isinstance(partial, bool) or not isinstance(partial, (int, float)) or not 0 < partial <= 1:
            raise ModelFileError(f"config partial_rotary_factor={partial!r} must be in (0, 1]; fix it in config.json")
        rotary = int(cfg["qk_rope_head_dim"]) if dm.mla else int(dm.head_dim * float(partial))
        rope = rope_summary(params, rotary, trained=trained, reference=reference, claimed=claimed)
        if rtype == "linear" and rope.factor > 1 and max_pos:
            notes.append(f"linear RoPE factor {rope.factor:g}: max_position_embeddings ({max_pos:,}) already "
                         "includes it (transformers divides the frequencies by the factor and keeps "
                         "max_position_embeddings as the limit), so the maximum is not multiplied again")
    elif encoding == "absolute":
        if max_pos:
            trained, source = max_pos, "the position table size"
        notes.append("learned absolute positions: no RoPE; the position table caps the context at its size")
    ratio = (claimed / trained) if (claimed and trained) else None
    declared = (claimed <= max_pos) if (ratio and claimed and max_pos) else None
    band, meaning = extension_band(ratio, declared)
    if kind in _ENCODERS:
        notes.append(f"encoder-only model ({kind}): attention is bidirectional and no KV cache is kept; "
                     "the KV figures are what a decoder of this shape would need")

    per_layer, windows, kv = _kv_cache(cfg, dm, encoding, claimed, notes)
    n_sliding = sum(1 for w in windows if w is not None)
    is_tied, (wdtype, wbytes), emb, est, share = _embedding_figures(cfg, dm, notes, stored_dtype)

    return ContextSummary(
        model_type=kind, position_encoding=encoding, rope=rope, rope_absent_reason=reason,
        trained_context=trained, trained_context_source=source, max_context=claimed,
        max_position_embeddings=max_pos, extension_ratio=round(ratio, 4) if ratio else None,
        extension_band=band, extension_note=meaning, extension_declared=declared,
        layers=dm.layers, heads=dm.heads, kv_heads=dm.kv_heads, head_dim=dm.head_dim,
        v_head_dim=dm.v_head_dim, kv_scheme=_kv_scheme(dm.mla, dm.heads, dm.kv_heads),
        kv_elements_per_layer=per_layer, sliding_layers=n_sliding,
        sliding_window=next((w for w in windows if w), None),
        kv_bytes_per_token=per_layer * dm.layers * KV_DTYPES["bf16"],
        kv_bytes_per_token_fp8=per_layer * dm.layers * KV_DTYPES["fp8"], kv_bytes=kv, vocab_size=dm.vocab,
        hidden_size=dm.hidden, tied=is_tied, weight_bytes_per_element=wbytes, weight_dtype=wdtype, embedding_bytes=emb,
        output_head_bytes=0 if is_tied else emb, params=est, embedding_share=share, notes=notes)


def _kv_cache(cfg: dict, dm, encoding: str, claimed: int | None, notes: list[str]):
    """``(elements per layer and token, window per layer, {dtype: {context: bytes}})``; MLA caches
    its compressed latent, a position table stops the contexts at its size."""
    if dm.mla:
        per_layer = int(cfg["kv_lora_rank"]) + int(cfg["qk_rope_head_dim"])
        notes.append("MLA: KV figures are the compressed latent cache (kv_lora_rank + qk_rope_head_dim "
                     "per layer), as served by MLA-aware engines")
    else:
        per_layer = 2 * dm.kv_heads * dm.head_dim
    windows = _layer_windows(cfg, dm.layers)
    contexts = kv_contexts(claimed, beyond=encoding != "absolute")
    kv = {dt: {n: kv_cache_bytes(per_layer, windows, n, b) for n in contexts} for dt, b in KV_DTYPES.items()}
    return per_layer, windows, kv


def kv_contexts(max_context: int | None, beyond: bool = True) -> list[int]:
    """The context lengths of the KV table: the lengths of :data:`KV_CONTEXTS` below the model's
    maximum context, that maximum, and (``beyond``) one row past it, twice the maximum: what
    doubling the context would cost. A position table (``beyond`` False) has no positions past its
    size; an unknown maximum gives :data:`KV_CONTEXTS`.

    >>> kv_contexts(8192), kv_contexts(32768), kv_contexts(1024, beyond=False), kv_contexts(None)
    ([4096, 8192, 16384], [4096, 8192, 32768, 65536], [1024], [4096, 8192, 32768, 131072])
    """
    if not max_context:
        return list(KV_CONTEXTS)
    out = [n for n in KV_CONTEXTS if n < max_context] + [max_context]
    return out + [2 * max_context] if beyond else out


def bytes_per_weight(dtype: str | None) -> float | None:
    """Bytes one weight takes in ``dtype``: torch and safetensors names, and GGUF's block types
    (block bytes / weights per block, from ``gguf``'s ``GGML_QUANT_SIZES``); ``None`` when unknown.

    >>> bytes_per_weight("bfloat16"), bytes_per_weight("F32"), bytes_per_weight("Q8_0"), bytes_per_weight("x")
    (2, 4, 1.0625, None)
    """
    if not dtype:
        return None
    name = str(dtype).replace("torch.", "")
    if name.lower() in _DTYPE_BYTES:
        return _DTYPE_BYTES[name.lower()]
    try:
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

        block, size = GGML_QUANT_SIZES[GGMLQuantizationType[name.upper()]]
    except (ImportError, KeyError):
        return None
    return size / block if block > 1 else size


def _weight_bytes(cfg: dict, stored: str | None, notes: list[str]) -> tuple[str | None, float]:
    """``(dtype, bytes per weight)``: the stored dtype, else the config's, else bf16 with a note."""
    said = str(first(cfg, "torch_dtype", "dtype", default="")).replace("torch.", "") or None
    for dtype in (stored, said):
        b = bytes_per_weight(dtype)
        if b is not None:
            return dtype, b
    notes.append(f"weight dtype {'not stated' if not said else said + ' not known here'}: the embedding "
                 "bytes are an estimate at bf16 (2 B per weight)")
    return None, 2


def _embedding_figures(cfg: dict, dm, notes: list[str], stored: str | None = None):
    """``(tied, (dtype, bytes per weight), embedding bytes, parameter estimate, embedding share)``."""
    is_tied = tied(cfg)
    wdtype, wbytes = _weight_bytes(cfg, stored, notes)
    vocab = dm.vocab or 0
    emb = int(round(vocab * dm.hidden * wbytes))
    est = estimate_parameters(cfg)
    share = (vocab * dm.hidden * (1 if is_tied else 2) / est.total) if est and est.total else None
    if est:
        notes.append("the parameter counts and the embedding share are estimates from the config's shapes "
                     "(see docs/context.md)")
        if est.experts:
            notes.append(f"mixture of experts: {est.experts_per_token} of {est.experts} routed experts per token "
                         f"in {est.moe_layers} layers; active parameters per token {est.active:,}")
        if cfg.get("num_nextn_predict_layers"):
            notes.append("multi-token-prediction layers (num_nextn_predict_layers) are not counted")
    return is_tied, (wdtype, wbytes), emb, est, share
