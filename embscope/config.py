"""Reading a model's ``config.json``: the language-model part, its sizes, checked once.

Every reader here raises :class:`~embscope.errors.ModelFileError` with one line that names the key
and what to do, never a ``KeyError``/``ValueError`` traceback: configs are untrusted input
(``rope_theta: "x"``, ``max_position_embeddings: Infinity``, ``rope_scaling: [1, 2]``).

- :func:`text_config`: multimodal configs (Gemma-3, Llama-4, Qwen2-VL saved by transformers v5)
  keep the language model under ``text_config``; its keys win over the outer ones.
- :func:`hidden_size`: the model width, the one reader every module uses (the loader checks the
  embedding's width against it; the context summary and the parameter estimate use it).
- :func:`max_positions`: the longest context the config states, the one reader of it (``rope`` and
  ``check`` agree on it).
- :func:`dims`: hidden size, layers, heads, KV heads and head dims, under every family's key names
  (Llama ``hidden_size``/``num_hidden_layers``/``num_attention_heads``, GPT-2 ``n_embd``/
  ``n_layer``/``n_head``, T5-like ``d_model``/``num_layers``, DeepSeek MLA head dims).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from embscope.errors import ModelFileError

#: config keys that give the hidden size, by family (Llama/BERT, GPT-2, T5-like, Meta originals)
HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model", "dim")
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
HEAD_KEYS = ("num_attention_heads", "n_head", "n_heads")
#: config keys that state the longest context, by family: Llama/Qwen/Gemma ``max_position_embeddings``,
#: GPT-2 ``n_positions``, MPT ``max_seq_len``, ``max_sequence_length``, ChatGLM/Qwen-1 ``seq_length``
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "max_sequence_length", "seq_length")

#: Defaults transformers applies to keys a published config leaves out, for families whose
#: published configs are sparse. Gemma-3's ``text_config`` (e.g. google/gemma-3-4b-it) states only
#: the keys that differ from ``Gemma3TextConfig``'s defaults; these are those defaults
#: (transformers ``models/gemma3/configuration_gemma3.py``; checked in tests/test_context.py).
FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216,
                    "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
                    "head_dim": 256, "max_position_embeddings": 131072, "rope_theta": 1_000_000.0,
                    "sliding_window": 4096, "sliding_window_pattern": 6, "tie_word_embeddings": True},
}


def text_config(config: dict) -> dict:
    """The language-model part of ``config``: ``text_config`` merged over the outer keys, with
    the family defaults of :data:`FAMILY_DEFAULTS` under both.

    >>> text_config({"model_type": "x", "text_config": {"hidden_size": 8}})["hidden_size"]
    8
    """
    if not isinstance(config, dict):
        raise ModelFileError("config is not a JSON object; pass the model's config.json")
    inner = config.get("text_config")
    cfg = {**config, **inner} if isinstance(inner, dict) else dict(config)
    if isinstance(inner, dict) and inner.get("model_type") is None and config.get("model_type") == "gemma3":
        cfg["model_type"] = "gemma3_text"
    defaults = FAMILY_DEFAULTS.get(str(cfg.get("model_type")))
    if defaults:
        cfg = {**defaults, **{k: v for k, v in cfg.items() if v is not None or k not in defaults}}
    return cfg


def first(config: dict, *keys: str, default: Any = None) -> Any:
    """The value of the first key present and not ``None``."""
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    return default


def _key_of(config: dict, keys: tuple[str, ...]) -> str:
    return next((k for k in keys if config.get(k) is not None), keys[0])


#: largest value a config may state, by the key's meaning: every real model is orders of magnitude
#: below (widest hidden size about 25,600, deepest stack about 200 layers, longest context 10 M
#: tokens, largest vocabulary about 260 k), and a hostile config.json past them would otherwise
#: allocate per-layer lists or print gigabytes of JSON. Keys not listed here: :data:`MAX_CONFIG_INT`.
CONFIG_MAXIMA = {
    "hidden size": 1 << 17, "layer count": 1 << 14, "attention head count": 1 << 14,
    "KV head count": 1 << 14, "head_dim": 1 << 16, "v_head_dim": 1 << 16, "qk_rope_head_dim": 1 << 16,
    "qk_nope_head_dim": 1 << 16, "kv_lora_rank": 1 << 16, "q_lora_rank": 1 << 16,
    "max positions": 1 << 40, "original context": 1 << 40, "vocab size": 1 << 24,
    "expert count": 1 << 16, "experts per token": 1 << 16, "n_shared_experts": 1 << 16,
    "feed-forward width": 1 << 22, "expert width": 1 << 22, "shared expert width": 1 << 22,
}
#: largest integer any other config key may state (2^40: about 10^12)
MAX_CONFIG_INT = 1 << 40


def positive_int(config: dict, name: str, *keys: str, default: Any = None, required: bool = True,
                 where: str = "config", allow_zero: bool = False) -> int | None:
    """A positive integer under the first of ``keys`` (``1.0`` is accepted as 1).

    Raises ModelFileError naming the key for a missing (when ``required``), non-numeric,
    non-finite, fractional, zero or negative value.
    """
    value = first(config, *keys, default=default)
    if value is None:
        if required:
            raise ModelFileError(f"{where} has no {name} ({' / '.join(keys)}); pass the model's full config.json")
        return None
    key = _key_of(config, keys)
    ok = (not isinstance(value, bool) and isinstance(value, (int, float))
          and (isinstance(value, int) or math.isfinite(value))  # isfinite(10**400) would overflow
          and (value >= 0 if allow_zero else value > 0) and int(value) == value)
    if not ok:
        what = "a non-negative" if allow_zero else "a positive"
        raise ModelFileError(f"{where} {key}={_short(value)} is not {what} integer; fix it in config.json")
    top = CONFIG_MAXIMA.get(name, MAX_CONFIG_INT)
    if value > top:
        raise ModelFileError(f"{where} {key}={_short(value)} is above {top:,}, far past any real model; fix it "
                             "in config.json")
    return int(value)


def max_positions(config: dict, *, where: str = "config") -> tuple[int | None, str | None]:
    """The longest context ``config`` states, in tokens, and the key it is under
    (:data:`CONTEXT_KEYS`, first present wins, of the language model's part); ``(None, None)`` when it
    states none. A malformed value is a one-line :class:`~embscope.errors.ModelFileError`.

    >>> max_positions({"text_config": {"max_position_embeddings": 8192}, "n_positions": 1024})
    (8192, 'max_position_embeddings')
    >>> max_positions({"seq_length": 2048}), max_positions({})
    ((2048, 'seq_length'), (None, None))
    """
    cfg = text_config(config)
    value = positive_int(cfg, "max positions", *CONTEXT_KEYS, required=False, where=where)
    return (value, _key_of(cfg, CONTEXT_KEYS)) if value is not None else (None, None)


def _short(value: Any) -> str:
    """``repr`` of a config value, cut to 40 characters (a 10^400 integer is 401 digits)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:20] + f"...({len(text)} characters)"


#: largest value a float config key may state, where one is known (a factor of 1e308 overflows the
#: scaling maths; 1e20 claims a 10^22-token context): far past every published model, whose
#: largest RoPE scaling factor is 64-128 (LongRoPE, Phi-3) and largest rope_theta 10^8
NUMBER_MAXIMA = {"factor": float(1 << 16), "rope_theta": 1e12, "low_freq_factor": 1e4, "high_freq_factor": 1e4,
                 "beta_fast": 1e4, "beta_slow": 1e4}


def positive_number(config: dict, key: str, *, default: float | None = None, where: str = "config",
                    minimum: float = 0.0, prefix: str = "") -> float | None:
    """A finite number > ``minimum`` and at most :data:`NUMBER_MAXIMA` ``[key]`` under ``key``
    (``default`` when absent or ``None``); the error names the key as ``prefix + key``
    (``rope_scaling.factor``)."""
    value = config.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ModelFileError(f"{where} {prefix}{key}={_short(value)} is not a number; fix it in config.json")
    if value <= minimum:
        raise ModelFileError(f"{where} {prefix}{key}={value!r} must be > {minimum:g}; fix it in config.json")
    top = NUMBER_MAXIMA.get(key)
    if top is not None and value > top:
        raise ModelFileError(f"{where} {prefix}{key}={value:g} is above {top:g}, far past any real model; fix it "
                             "in config.json")
    return float(value)


def hidden_size(config: dict, *, where: str = "config.json") -> int:
    """The model width (``hidden_size``, ``n_embd``, ``d_model`` or ``dim``) of the language model.

    >>> hidden_size({"n_embd": 768})
    768
    """
    cfg = text_config(config)
    for key in HIDDEN_KEYS:
        if key in cfg and cfg[key] is not None:
            val = cfg[key]
            if isinstance(val, bool) or not isinstance(val, int) or val <= 0:
                raise ModelFileError(f"{where}: {key} = {_short(val)} is not a positive integer; fix config.json")
            if val > CONFIG_MAXIMA["hidden size"]:
                raise ModelFileError(f"{where} {key}={_short(val)} is above {CONFIG_MAXIMA['hidden size']:,}, far "
                                     "past any real model; fix it in config.json")
            return val
    raise ModelFileError(f"{where} has no hidden size ({' / '.join(HIDDEN_KEYS)}); "
                         "fix config.json or re-download it")


@dataclass(frozen=True)
class Dims:
    """The attention shapes of a decoder (or encoder) as its config states them."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    #: query/key width per head (MLA: ``qk_nope_head_dim + qk_rope_head_dim``)
    head_dim: int
    #: value width per head (MLA: ``v_head_dim``; otherwise ``head_dim``)
    v_head_dim: int
    vocab: int | None
    #: multi-head latent attention (DeepSeek-V2/V3): ``kv_lora_rank`` and ``qk_rope_head_dim`` set
    mla: bool


def dims(cfg: dict, *, where: str = "config") -> Dims:
    """:class:`Dims` of a config already passed through :func:`text_config`.

    ``head_dim`` defaults to ``hidden / heads``; under MLA it is ``qk_nope_head_dim +
    qk_rope_head_dim`` (DeepSeek-V3: 128 + 64 = 192, not 7168 / 128 = 56).
    """
    hidden = hidden_size(cfg, where=where)
    layers = positive_int(cfg, "layer count", *LAYER_KEYS, where=where)
    heads = positive_int(cfg, "attention head count", *HEAD_KEYS, where=where)
    kv_heads = positive_int(cfg, "KV head count", "num_key_value_heads", "n_head_kv", "num_kv_heads",
                            default=1 if cfg.get("multi_query") else heads, where=where)
    vocab = positive_int(cfg, "vocab size", "vocab_size", "padded_vocab_size", required=False, where=where)
    mla = cfg.get("kv_lora_rank") is not None and cfg.get("qk_rope_head_dim") is not None
    if mla:
        positive_int(cfg, "kv_lora_rank", "kv_lora_rank", where=where)
        rope = positive_int(cfg, "qk_rope_head_dim", "qk_rope_head_dim", where=where)
        nope = positive_int(cfg, "qk_nope_head_dim", "qk_nope_head_dim", default=0, required=False,
                            where=where) if cfg.get("qk_nope_head_dim") else 0
        head_dim = rope + nope
        v_head_dim = positive_int(cfg, "v_head_dim", "v_head_dim", default=head_dim, where=where)
        return Dims(hidden, layers, heads, kv_heads, head_dim, v_head_dim, vocab, True)
    if cfg.get("head_dim") is None and hidden < heads:
        raise ModelFileError(f"{where} hidden_size={hidden} is smaller than num_attention_heads={heads} "
                             "and there is no head_dim; fix the config")
    head_dim = positive_int(cfg, "head_dim", "head_dim", default=hidden // heads, where=where)
    return Dims(hidden, layers, heads, kv_heads, head_dim, head_dim, vocab, False)
