"""The whole causal LM, for the checks and rewrites that need more than the embedding matrices.

Loaded only when it fits comfortably in memory (:data:`MAX_FULL_BYTES`) and only for causal-LM
architectures: a HF folder through ``AutoModelForCausalLM.from_pretrained``; a ``.gguf`` file
through transformers' GGUF converter. ``from_pretrained(dir, gguf_file=...)`` needs the
``accelerate`` package, so without it the model is built from the GGUF's config and filled with
``load_gguf_checkpoint`` (dequantised to float32) — the same tensors, no extra dependency.
SmolLM2-135M loads this way in about 15 s on 2 CPU cores.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from embscope.model import LoadedModel

#: largest float32 parameter footprint we load on the CPU (≈1.5B parameters; the 24 GiB machine
#: keeps room for a second copy during ``apply`` plus the analyses)
MAX_FULL_BYTES = 6 * 2**30

_CACHE: dict[str, object] = {}


def _param_bytes(model: "LoadedModel") -> int:
    """Rough float32 size: 12·L·h² (attention + MLP of a standard block) + embedding rows."""
    cfg = model.config.get("text_config") or model.config
    h = int(cfg.get("hidden_size") or model.dim)
    layers = int(cfg.get("num_hidden_layers") or cfg.get("n_layer") or 0)
    inter = int(cfg.get("intermediate_size") or 4 * h)
    per_layer = 4 * h * h + 3 * h * inter
    emb = model.n_rows * h * (1 if model.tied else 2)
    return 4 * (layers * per_layer + emb)


def why_not_loadable(model: "LoadedModel") -> str | None:
    """``None`` when :func:`load_causal_lm` can load the model, else the reason (one line)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    cfg = model.config
    mtype = str(cfg.get("model_type") or model.arch or "")
    if mtype not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        archs = " ".join(str(a) for a in cfg.get("architectures") or [])
        return f"{model.name} is not a causal language model transformers can build ({archs or mtype or 'unknown'})"
    size = _param_bytes(model)
    if size > MAX_FULL_BYTES:
        return (f"{model.name} needs ~{size / 2**30:.0f} GiB in float32, over the "
                f"{MAX_FULL_BYTES / 2**30:.0f} GiB limit for loading the whole model on this machine")
    path = Path(model.path)
    if path.suffix == ".gguf" and path.is_file():
        return None
    if path.is_dir() and (path / "config.json").is_file() and any(path.glob("*.safetensors")):
        return None
    return f"{model.path} is not a transformers-loadable checkpoint (config.json + safetensors, or .gguf)"


def load_causal_lm(model: "LoadedModel"):
    """A float32 ``*ForCausalLM`` in eval mode, cached per path (callers that modify it copy it)."""
    key = str(model.path)
    if key in _CACHE:
        return _CACHE[key]
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own step line reports this step

    path = Path(model.path)
    if path.suffix == ".gguf":
        lm = _from_gguf(path)
    else:
        from transformers import AutoModelForCausalLM

        lm = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    lm.eval()
    _CACHE.clear()  # one model at a time
    _CACHE[key] = lm
    return lm


def _from_gguf(path: Path):
    import importlib.util

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if importlib.util.find_spec("accelerate") is not None:
        return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                    dtype=torch.float32)
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    config = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
    lm = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    # Its converter draws a tqdm bar of its own, which transformers' switch does not reach;
    # our step line already reports this step.
    saved, gguf_utils.tqdm = gguf_utils.tqdm, lambda items, **_: items
    try:
        tensors = gguf_utils.load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=lm)["tensors"]
    finally:
        gguf_utils.tqdm = saved
    state = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in tensors.items()}
    lm.load_state_dict(state, strict=False)
    if getattr(config, "tie_word_embeddings", False):
        lm.tie_weights()
    return lm


def set_rows(lm, ids, rows: dict) -> None:
    """Write ``rows["embed"]`` (and ``rows["output"]``, untied models) into ``lm`` at ``ids``, in place."""
    import torch

    idx = torch.as_tensor(list(ids))
    layers = {"embed": lm.get_input_embeddings(), "output": lm.get_output_embeddings()}
    with torch.no_grad():
        for name, layer in layers.items():
            if name in rows:
                layer.weight[idx] = rows[name].to(layer.weight.dtype)


def load_hf_tokenizer(model: "LoadedModel"):
    """The model's ``tokenizers.Tokenizer`` (Rust), needed to add tokens and pre-tokenize."""
    from tokenizers import Tokenizer

    from embscope.errors import VocabError

    tok = getattr(model.vocab, "tok", None)
    if isinstance(tok, Tokenizer):
        return tok
    path = Path(model.path)
    for cand in (path / "tokenizer.json", path.parent / "tokenizer.json"):
        if cand.is_file():
            return Tokenizer.from_file(str(cand))
    raise VocabError(f"{model.name}'s tokenizer is not a HF tokenizers model (tokenizer.json); vocabulary "
                     "extension needs one to add tokens: pass a model folder with tokenizer.json")
