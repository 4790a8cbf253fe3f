"""Parameter count of a model from its config: total, and active per token for mixture-of-experts.

One estimator for the whole package (the context summary's embedding share and the whole-model
loader's memory check both call :func:`estimate_parameters`). Counted per decoder layer ``l``:

- attention, standard/GQA: ``q d·H·hd + k,v 2·d·KV·hd + o H·hd·d`` (+ q/k/v biases for Qwen2 and
  ``attention_bias``; + q/k RMSNorm ``2·hd`` for Qwen3/Gemma-3/OLMo-2);
- attention, MLA (DeepSeek-V2/V3, arXiv:2405.04434): queries ``d·q_r + q_r + q_r·H·(n+r)`` with a
  query LoRA rank ``q_r`` (else ``d·H·(n+r)``), keys/values ``d·(c+r) + c + c·H·(n+v)``, output
  ``H·v·d`` — ``c`` = ``kv_lora_rank``, ``n``/``r``/``v`` = nope/rope/value head dims;
- feed-forward, dense: gated ``3·d·I`` (SwiGLU/GeGLU), or plain ``2·d·I + I + d`` (GPT-2/BERT);
- feed-forward, MoE layer: ``E`` routed experts of width ``I_e`` (``moe_intermediate_size``, else
  ``intermediate_size``) ``E·3·d·I_e``, shared experts (DeepSeek ``n_shared_experts·3·d·I_e``;
  Qwen2-MoE one expert of ``shared_expert_intermediate_size`` plus a ``d`` gate; Llama-4 one of
  ``intermediate_size``) and the router ``d·E``. Which layers are MoE: DeepSeek
  ``l >= first_k_dense_replace and l % moe_layer_freq == 0``; Qwen-MoE ``(l+1) %
  decoder_sparse_step == 0`` and ``l`` not in ``mlp_only_layers``; Llama-4 ``moe_layers`` or every
  ``interleave_moe_layer_step``-th; Mixtral every layer. Dense layers use ``intermediate_size``
  (Llama-4: ``intermediate_size_mlp``);
- norms ``2·d`` per layer (``4·d`` for Gemma-2/3, LayerNorm with bias ``4·d``), final norm.

Plus input embedding ``V·d``, an untied output head ``V·d`` and, for learned absolute positions,
the position table ``P·d``. *Active* parameters per token count everything but the routed experts,
plus ``num_experts_per_tok`` of them per MoE layer (embedding tables counted whole, as Mistral and
Qwen state theirs; DeepSeek's own "36.6 B activated" leaves the input embedding out).

Checked against published totals (tests/test_context.py): Qwen2-7B 7,615,616,512 and
Llama-3.1-8B 8,030,261,248 exactly; GPT-2 124,439,808 exactly; Mixtral-8x7B 46.7 B / 12.9 B
active; Qwen3-30B-A3B 30.5 B / 3.3 B; DeepSeek-V3 671 B / 37 B (multi-token-prediction module
not counted, as in DeepSeek's 671 B).
"""

from __future__ import annotations

from dataclasses import dataclass

from embscope.config import Dims, dims, first, max_positions, positive_int, text_config
from embscope.records import Record

#: model types whose position information is a learned absolute table (added to the count)
ABSOLUTE_POSITIONS = {"bert", "roberta", "xlm-roberta", "distilbert", "mpnet", "electra", "gpt2",
                      "opt", "gpt_neo", "deberta", "deberta-v2"}
#: model types whose positions are ALiBi attention biases: neither RoPE nor a position table
ALIBI = {"bloom", "mpt"}
#: model types whose MLP is two matrices (up, down) with biases and whose norms are LayerNorms
PLAIN_MLP = ABSOLUTE_POSITIONS | ALIBI | {"gpt_neox", "falcon", "phi", "gptj", "starcoder2"}
#: model types whose config omits ``tie_word_embeddings`` yet are untied (transformers' defaults)
UNTIED_BY_DEFAULT = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
                     "qwen2_vl", "qwen2_5_vl", "phi3", "deepseek_v2", "deepseek_v3", "gpt_neox",
                     "falcon", "olmo", "olmo2", "llama4_text", "llama4"}
#: model types with q/k/v biases although their config has no ``attention_bias`` key
QKV_BIAS = {"qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl"}
#: model types with a per-head RMSNorm on queries and keys (``2·head_dim`` per layer)
QK_NORM = {"qwen3", "qwen3_moe", "gemma3_text", "gemma3", "olmo2"}
#: model types with four norms per layer (pre/post attention, pre/post feed-forward)
FOUR_NORMS = {"gemma2", "gemma3_text", "gemma3"}


@dataclass
class ParamEstimate(Record):
    """Parameter counts read from a config (an estimate: special blocks may be missed)."""

    #: all parameters of the language model (vision towers and MTP modules not counted)
    total: int
    #: parameters one token passes through: total minus the routed experts it does not use
    active: int
    #: input embedding + untied output head (+ learned position table)
    embedding: int
    #: routed experts per MoE layer (0 for dense models) and experts used per token
    experts: int = 0
    experts_per_token: int = 0
    #: layers whose feed-forward is a mixture of experts
    moe_layers: int = 0




def tied(cfg: dict) -> bool:
    """Whether input and output embeddings share one matrix (``tie_word_embeddings``, else the
    family's transformers default)."""
    if "tie_word_embeddings" in cfg:
        return bool(cfg["tie_word_embeddings"])
    return cfg.get("model_type") not in UNTIED_BY_DEFAULT


def _attention(cfg: dict, dm: Dims, kind: str | None) -> int:
    d, h = dm.hidden, dm.heads
    if dm.mla:
        c = positive_int(cfg, "kv_lora_rank", "kv_lora_rank")
        r = positive_int(cfg, "qk_rope_head_dim", "qk_rope_head_dim")
        qr = positive_int(cfg, "q_lora_rank", "q_lora_rank", required=False)
        q = (d * int(qr) + int(qr) + int(qr) * h * dm.head_dim) if qr else d * h * dm.head_dim
        kv = d * (c + r) + c + c * h * (dm.head_dim - r + dm.v_head_dim)
        return q + kv + h * dm.v_head_dim * d
    hd, kv = dm.head_dim, dm.kv_heads
    attn = d * h * hd + 2 * d * kv * hd + h * hd * d
    plain = kind in PLAIN_MLP
    if cfg.get("attention_bias") or kind in QKV_BIAS or plain:
        attn += h * hd + 2 * kv * hd + (d if plain else 0)
    if kind in QK_NORM:
        attn += 2 * hd
    return attn


def _moe_layout(cfg: dict, layers: int) -> tuple[int, list[bool]]:
    """(routed experts per MoE layer, per layer: is it MoE)."""
    experts = positive_int(cfg, "expert count", "n_routed_experts", "num_local_experts", "num_experts",
                           required=False) or 0
    if experts <= 1:
        return 0, [False] * layers
    if cfg.get("n_routed_experts"):  # DeepSeek-V2/V3
        k = positive_int(cfg, "first_k_dense_replace", "first_k_dense_replace", required=False,
                         allow_zero=True) or 0
        freq = positive_int(cfg, "moe_layer_freq", "moe_layer_freq", required=False) or 1
        return experts, [i >= k and i % freq == 0 for i in range(layers)]
    if isinstance(cfg.get("moe_layers"), list):  # Llama-4, explicit
        chosen = {int(i) for i in cfg["moe_layers"] if isinstance(i, int)}
        return experts, [i in chosen for i in range(layers)]
    if cfg.get("interleave_moe_layer_step"):  # Llama-4
        step = positive_int(cfg, "interleave_moe_layer_step", "interleave_moe_layer_step")
        return experts, [(i + 1) % step == 0 for i in range(layers)]
    # Qwen2/3-MoE (Mixtral: no key, every layer); GGUF conversions state leading dense layers
    step = positive_int(cfg, "decoder_sparse_step", "decoder_sparse_step", required=False) or 1
    dense = {int(i) for i in cfg.get("mlp_only_layers") or [] if isinstance(i, int)}
    k = positive_int(cfg, "first_k_dense_replace", "first_k_dense_replace", required=False, allow_zero=True) or 0
    return experts, [(i + 1) % step == 0 and i not in dense and i >= k for i in range(layers)]


def estimate_parameters(config: dict) -> ParamEstimate | None:
    """Total and active parameters of ``config`` (see the module docstring for what is counted).

    ``None`` when the config has no feed-forward width (``intermediate_size``, ``n_inner``,
    ``ffn_dim``; GPT-2 defaults to ``4·d``).

    >>> est = estimate_parameters({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
    ...                            "n_positions": 1024, "vocab_size": 50257})
    >>> est.total
    124439808
    """
    cfg = text_config(config)
    kind = cfg.get("model_type")
    dm = dims(cfg)
    d = dm.hidden
    inter = first(cfg, "intermediate_size_mlp" if kind in ("llama4_text", "llama4") else "intermediate_size",
                  "intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size")
    if inter is None and kind in ("gpt2", "gpt_neo", "gptj"):
        inter = 4 * d
    if not inter:
        return None
    inter = positive_int({"intermediate_size": inter}, "feed-forward width", "intermediate_size")
    plain = kind in PLAIN_MLP

    def mlp(width: int) -> int:
        return 2 * d * width + width + d if plain else 3 * d * width

    attn = _attention(cfg, dm, kind)
    norms = 4 * d if (plain or kind in FOUR_NORMS) else 2 * d
    experts, is_moe = _moe_layout(cfg, dm.layers)
    top_k = (positive_int(cfg, "experts per token", "num_experts_per_tok", "moe_top_k", required=False) or 1
             if experts else 0)
    total = active = 0
    if experts:
        width = positive_int(cfg, "expert width", "moe_intermediate_size", "intermediate_size")
        expert = mlp(width)
        shared = 0
        if cfg.get("n_shared_experts"):
            shared = positive_int(cfg, "n_shared_experts", "n_shared_experts") * expert
        elif cfg.get("shared_expert_intermediate_size"):
            shared = mlp(positive_int(cfg, "shared expert width", "shared_expert_intermediate_size")) + d  # + gate
        elif kind in ("llama4_text", "llama4"):
            shared = expert
        router = d * experts
        moe_total = experts * expert + shared + router
        moe_active = top_k * expert + shared + router
    for layer_is_moe in is_moe:
        if layer_is_moe:
            total += attn + moe_total + norms
            active += attn + moe_active + norms
        else:
            total += attn + mlp(inter) + norms
            active += attn + mlp(inter) + norms
    final_norm = 2 * d if plain else d
    embedding = (dm.vocab or 0) * d * (1 if tied(cfg) else 2)
    if kind in ABSOLUTE_POSITIONS:
        embedding += (max_positions(cfg)[0] or 0) * d
    total += embedding + final_norm
    active += embedding + final_norm
    return ParamEstimate(total=int(total), active=int(active), embedding=int(embedding), experts=experts,
                         experts_per_token=top_k, moe_layers=sum(is_moe))
