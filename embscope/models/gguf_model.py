"""The whole causal LM from a GGUF file, read by embscope's own GGUF reader.

transformers' GGUF path (``load_gguf_checkpoint``) parses the file with gguf-py's generic reader
(one memory view per token string, every metadata field parsed twice: once for the config, once
for the tensors) and maps names once per submodule. The same model is built here from the one
parse :func:`embscope.formats.gguf.open_gguf` keeps for the run:

1. **config** — the metadata mapped to a transformers config exactly as transformers' legacy
   GGUF reader maps it: its own key tables (``GGUF_CONFIG_MAPPING``, ``GGUF_CONFIG_DEFAULTS_MAPPING``
   in ``transformers/integrations/ggml.py``), ties the head when there is no ``output.weight``,
   ``vocab_size`` from the token list when the file states none, ``gemma3`` → ``gemma3_text``;
2. **names** — each state-dict key through gguf-py's ``TensorNameMap`` for the architecture
   (llama.cpp's own table, the one transformers uses): ``model.layers.0.self_attn.q_proj.weight``
   → ``blk.0.attn_q.weight``, ``lm_head.weight`` → ``output.weight``;
3. **tensors** — dequantised by gguf-py's dequantisers (:meth:`~embscope.formats.gguf.GGUFFile.tensor`),
   then the inverse of llama.cpp's conversion where it changed a tensor:

   - llama: ``convert_hf_to_gguf.py`` permutes the rows of ``q_proj``/``k_proj`` per head from
     HF's rotate-half layout to interleaved pairs, ``w.reshape(h, 2, d/2, …).swapaxes(1, 2)``; the
     inverse is ``w.reshape(h, d/2, 2, …).swapaxes(1, 2)`` (``h`` = heads for q, KV heads for k).
     Example, one head of 4 rows [a0, a1, b0, b1] (HF) ↔ [a0, b0, a1, b1] (GGUF);
   - gemma2 / gemma3: llama.cpp stores RMSNorm weights as 1 + w (HF's Gemma norm multiplies by
     1 + w), so 1 is subtracted from every ``*norm.weight``.

Only the architectures in :data:`BUILDERS` are built here (each checked against transformers'
loader: the same state dict bit for bit, the same logits); any other GGUF goes through
transformers' loader as before. No pickle anywhere; ``trust_remote_code=False``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from embscope.formats.gguf import GGUFFile

#: GGUF architecture → the tensor fix-up after dequantisation (see the module docstring)
BUILDERS = {"llama": "unpermute_qk", "qwen2": None, "qwen3": None, "gemma2": "norm_minus_one",
            "gemma3": "norm_minus_one"}


def can_build(reader: "GGUFFile") -> bool:
    """True when this module builds the file's architecture itself."""
    return reader.fields.get("general.architecture") in BUILDERS


def transformers_config_dict(reader: "GGUFFile") -> dict[str, Any]:
    """The config dict transformers' GGUF reader derives from this file's metadata (the legacy
    reader's ``parsed_parameters["config"]``), from embscope's parse of the file.

    Each metadata key ``<prefix>.<rest>`` (the architecture name in keys and string values
    replaced by transformers' name for it) is looked up in transformers' table under ``prefix``;
    a hit sets the mapped config key (``llama.block_count`` → ``num_hidden_layers``,
    ``tokenizer.ggml.bos_token_id`` → ``bos_token_id``).
    """
    from transformers.integrations.ggml import GGUF_CONFIG_DEFAULTS_MAPPING, GGUF_CONFIG_MAPPING

    fields = reader.fields
    arch = fields["general.architecture"]
    updated = "mistral" if "llama" in arch and fields.get("general.name") == "mistral" else arch
    cfg: dict[str, Any] = {"tie_word_embeddings": "output.weight" not in reader.tensors}
    for key, value in GGUF_CONFIG_DEFAULTS_MAPPING.get(updated, GGUF_CONFIG_DEFAULTS_MAPPING.get(arch) or {}).items():
        cfg.setdefault(key, value)
    for key, value in fields.items():
        key = key.replace(arch, updated)
        prefix, _, rest = key.partition(".")
        if isinstance(value, list) and len(value) == 1:  # transformers reads a one-item array as its item
            value = value[0]
        if isinstance(value, str) and arch in value:
            value = value.replace(arch, updated)
        renamed = GGUF_CONFIG_MAPPING.get(prefix, {}).get(rest)
        if renamed is not None and renamed != -1:
            cfg[renamed] = value
    if cfg.get("model_type") == "gemma3":  # the GGUF holds the text backbone only
        cfg["model_type"] = "gemma3_text"
    if "vocab_size" not in cfg and "tokenizer.ggml.tokens" in fields:
        cfg["vocab_size"] = len(fields["tokenizer.ggml.tokens"])
    return cfg


def _unpermute(w, n_head: int):
    """Inverse of llama.cpp's q/k row permutation: (h·2·(r/2h), …) interleaved pairs → HF halves."""
    rows = w.shape[0] // n_head // 2
    return w.reshape(n_head, rows, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)


def _fix(kind: str | None, gguf_name: str, w, cfg: dict):
    if kind == "unpermute_qk" and (".attn_q." in gguf_name or ".attn_k." in gguf_name):
        heads, kv = cfg.get("num_attention_heads"), cfg.get("num_key_value_heads")
        if heads is not None and kv is not None:
            return _unpermute(w, heads if ".attn_q." in gguf_name else kv)
    if kind == "norm_minus_one" and "norm.weight" in gguf_name:
        return w - 1
    return w


def _name_map(lm, arch: str, n_layers: int) -> dict[str, str]:
    """GGUF tensor name → state-dict key for every key gguf-py's table maps. A key the table does
    not know whole is tried without its leading module names (``model.norm`` → ``norm``), as
    transformers does by recursing into the submodules."""
    from gguf import MODEL_ARCH_NAMES, get_tensor_name_map

    arch_id = next(k for k, v in MODEL_ARCH_NAMES.items() if v == arch)
    table = get_tensor_name_map(arch_id, n_layers)
    out: dict[str, str] = {}
    for key in lm.state_dict(keep_vars=True):
        stem, dot, suffix = key.rpartition(".") if key.endswith((".weight", ".bias")) else (key, "", "")
        parts = stem.split(".")
        for cut in range(len(parts)):
            name = table.get_name(".".join(parts[cut:]))
            if name is not None:
                out.setdefault(name + dot + suffix, key)
                break
    return out


def build_causal_lm(path: Path):
    """A float32 ``*ForCausalLM`` (eval mode not set) from ``path``, built from embscope's parse.

    Raises :class:`~embscope.errors.ModelFileError` when the file lacks weights the model needs.
    """
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from embscope.formats.gguf import open_gguf
    from embscope.models.fill import fill_weights, no_init_weights

    reader = open_gguf(path)
    arch = reader.fields["general.architecture"]
    cfg = transformers_config_dict(reader)
    config = CONFIG_MAPPING[cfg["model_type"]].from_dict(cfg)
    config._name_or_path = str(Path(path).parent)  # what transformers records for a GGUF in a folder
    with no_init_weights():  # every weight is overwritten below (missing ones are refused)
        lm = AutoModelForCausalLM.from_config(config, dtype=torch.float32, trust_remote_code=False)
    kind = BUILDERS[arch]
    names = _name_map(lm, arch, config.num_hidden_layers)
    state = {}
    for gguf_name in reader.tensors:
        key = names.get(gguf_name)
        if key is not None:
            state[key] = torch.from_numpy(_fix(kind, gguf_name, reader.tensor(gguf_name), cfg))
    # assign: the parameters become the dequantised arrays themselves (no second copy, no page
    # faults on a fresh float32 buffer: 1.6 of SmolLM2's 3.2 s)
    fill_weights(lm, state, path, assign=True)
    return lm
