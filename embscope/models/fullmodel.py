"""The whole causal LM, for the checks and rewrites that need more than the embedding matrices.

Loaded only when it fits comfortably in memory (:data:`MAX_FULL_BYTES`) and only for causal-LM
architectures: a HF folder through ``AutoModelForCausalLM.from_pretrained``; a ``.gguf`` file
through transformers' GGUF converter. ``from_pretrained(dir, gguf_file=...)`` needs the
``accelerate`` package, so without it the model is built from the GGUF's config and filled with
``load_gguf_checkpoint`` (dequantised to float32) — the same tensors, no extra dependency.
Parsing and name mapping are shared within one load (:func:`_memoised_gguf`).
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from embscope.models.fill import fill_weights, no_init_weights, refuse_missing

if TYPE_CHECKING:  # pragma: no cover
    from embscope.models.model import LoadedModel

#: largest float32 parameter footprint we load on the CPU (≈1.5B parameters; the 24 GiB machine
#: keeps room for a second copy during ``apply`` plus the analyses)
MAX_FULL_BYTES = 6 * 2**30

_CACHE: dict[str, object] = {}


def _param_bytes(model: "LoadedModel") -> int:
    """float32 bytes of the whole model: 4 × :func:`embscope.models.params.estimate_parameters`
    (attention, MLP or experts, norms, embeddings), with the loaded matrix's rows for the vocabulary."""
    from embscope.config import text_config
    from embscope.models.params import estimate_parameters

    from embscope.errors import EmbscopeError

    try:
        est = estimate_parameters({**text_config(model.config), "vocab_size": model.n_rows})
    except EmbscopeError:  # nonsense config values: count the embedding rows only
        est = None
    if est is None:  # no feed-forward width in the config: count the embedding rows only
        return 4 * model.n_rows * model.dim * (1 if model.tied else 2)
    return 4 * est.total


def _text_config(model: "LoadedModel") -> dict:
    sub = model.config.get("text_config")
    return sub if isinstance(sub, dict) else model.config


def _positive(cfg: dict, *keys: str) -> int | None:
    """The first of ``keys`` that holds a positive integer (configs are untrusted: "x", -1, true)."""
    for key in keys:
        v = cfg.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


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
    loadable = ((path.suffix == ".gguf" and path.is_file())
                or (path.is_dir() and (path / "config.json").is_file() and any(path.glob("*.safetensors"))))
    if not loadable:
        return f"{model.path} is not a transformers-loadable checkpoint (config.json + safetensors, or .gguf)"
    missing = missing_weights(model)
    if missing:
        return (f"{model.name} lacks {len(missing)} of the weights a full model needs (e.g. {missing[0]}); "
                "transformers would fill them with random values")
    return None


def why_not_causal(model: "LoadedModel") -> str | None:
    """:func:`why_not_loadable`, plus: the checkpoint's own architecture
    must be a causal LM (a BERT encoder has a ``bert`` causal class in transformers, but its
    weights are an encoder's)."""
    # a GGUF's synthesised config names its llama.cpp architecture (``gguf:llama``); its class is
    # chosen by why_not_loadable from model_type. The architecture is checked first: an encoder's
    # missing LM-head weights are a consequence, not the reason.
    archs = [str(a) for a in model.config.get("architectures") or [] if not str(a).startswith("gguf:")]
    if archs and not any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        return f"{model.name} is not a causal language model ({' '.join(archs)})"
    try:
        return why_not_loadable(model)
    except Exception as exc:  # noqa: BLE001 - an unknown config is a note, not a failure
        return f"{model.name}: {exc}"


def missing_weights(model: "LoadedModel") -> list[str]:
    """Weights a full ``*ForCausalLM`` of this config needs that the checkpoint does not store.

    HF folders: the model is built on the ``meta`` device (no memory) and its state-dict keys are
    compared with the tensor names in the safetensors headers or index; a key counts as stored
    when any weight tied to it is, or when it is stored without the ``model.`` prefix. GGUF files:
    every block ``blk.0`` … ``blk.{L-1}`` must hold tensors (the converter maps the rest).
    Shapes-only test checkpoints (embeddings and a norm) are thus refused, not padded with random
    layers.
    """
    path = Path(model.path)
    stored = _stored_names(path)
    if path.suffix == ".gguf":
        layers = _positive(_text_config(model), "num_hidden_layers") or 0
        return [f"blk.{i}.*" for i in range(layers) if not any(n.startswith(f"blk.{i}.") for n in stored)]
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(str(path), trust_remote_code=False)
        with torch.device("meta"):
            lm = AutoModelForCausalLM.from_config(config, trust_remote_code=False)
    except Exception as exc:  # a config transformers cannot build is not loadable either
        return [f"(cannot build the model: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"]
    groups: dict[int, list[str]] = {}
    for key, tensor in lm.state_dict(keep_vars=True).items():
        groups.setdefault(id(tensor), []).append(key)
    prefix = f"{lm.base_model_prefix}." if getattr(lm, "base_model_prefix", "") else None

    def present(key: str) -> bool:
        return key in stored or (prefix is not None and key.startswith(prefix) and key[len(prefix):] in stored)

    return sorted(keys[0] for keys in groups.values() if not any(present(k) for k in keys))


def _stored_names(path: Path) -> set[str]:
    """Tensor names a checkpoint stores (safetensors index or headers; GGUF tensor table)."""
    if path.suffix == ".gguf":
        from embscope.formats.gguf import open_gguf

        return set(open_gguf(path).tensors)
    from embscope.formats.safetensors import read_header, weight_map

    wm = weight_map(path)
    if wm is not None:
        return set(wm)
    return {name for f in sorted(path.glob("*.safetensors")) for name in read_header(f)}


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
        from embscope.formats.gguf import open_gguf
        from embscope.models.gguf_model import build_causal_lm, can_build

        lm = build_causal_lm(path) if can_build(open_gguf(path)) else _from_gguf(path)
    else:
        from transformers import AutoModelForCausalLM

        lm, info = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, trust_remote_code=False,
                                                        output_loading_info=True)
        refuse_missing(info.get("missing_keys"), path)
    lm.eval()
    _CACHE.clear()  # one model at a time
    _CACHE[key] = lm
    return lm


def _from_gguf(path: Path):
    """A float32 transformers model from a GGUF file, built the same way with or without
    ``accelerate``: the config, an empty model from it, then the dequantised tensors.

    ``from_pretrained(gguf_file=...)`` (the path transformers takes when ``accelerate`` is
    installed) marks the model as quantised with gguf, and ``save_pretrained`` then refuses it
    ("not serializable"), which broke ``--apply``/``--repair`` on GGUF models; the model built here
    carries no quantiser and saves like any other.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    with _memoised_gguf():
        config = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name, trust_remote_code=False)
        with no_init_weights():  # every weight is overwritten below (missing ones are refused)
            lm = AutoModelForCausalLM.from_config(config, dtype=torch.float32, trust_remote_code=False)
        # Its converter draws a tqdm bar of its own, which transformers' switch does not reach;
        # our step line already reports this step.
        saved, gguf_utils.tqdm = gguf_utils.tqdm, lambda items, **_: items
        try:
            tensors = gguf_utils.load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=lm)["tensors"]
        finally:
            gguf_utils.tqdm = saved
    fill_weights(lm, {k: torch.as_tensor(v, dtype=torch.float32) for k, v in tensors.items()}, path)
    return lm


@contextmanager
def _memoised_gguf():
    """Within the block, ``gguf.GGUFReader`` and ``gguf.get_tensor_name_map`` return one object per
    argument tuple.

    transformers' GGUF path parses the file twice (config, then tensors) and builds a
    ``TensorNameMap`` once per submodule of the model (SmolLM2: 397 times); both are read-only once
    built, so sharing them changes no value: the state dict is bit-identical. SmolLM2-135M's
    load took 34.5 CPU-s without this and 11.0 with it (2 cores).
    """
    import functools

    import gguf
    import numpy as np

    saved = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict = {}

    class PlainReader(saved[0]):
        """Slices a plain ndarray view of the memory map: each ``np.memmap`` slice costs a Python
        ``__array_finalize__`` call, and the reader slices once per vocabulary string."""

        def __setattr__(self, name, value):
            if name == "data" and isinstance(value, np.memmap):
                value = value.view(np.ndarray)
            super().__setattr__(name, value)

    def reader(path, mode="r"):
        key = (str(path), mode)
        if key not in readers:
            readers[key] = PlainReader(path, mode)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.lru_cache(maxsize=None)(saved[1])
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = saved


@contextmanager
def fastest_threads(width: int = 576, dtype: str = "float32", *models):
    """Within the block, torch's and numba's thread count is the one a forward pass of a model
    ``width`` wide in ``dtype`` runs fastest at here and now (:func:`embscope.machine.best_threads`,
    ``kind="forward"``: 1 or the process's count); restored afterwards; it yields the counts the
    forward passes ran on, one per pass (the first: the block's start). With ``models``, each
    forward pass of their decoders looks again (a lookup while the verdict is fresh, a new
    measurement after :data:`embscope.machine.REPROBE_SECONDS`), so a long step that began while
    another process held a core takes the core back once it is free.

    A forward pass is thousands of ops, each split over the intra-op threads and done only when
    its slowest share is. When another process holds a core, every op waits for a descheduled
    thread's time slice: on this project's shared 2-core machine, with another job running, a
    230-token forward of SmolLM2-135M took 9.5 s with 2 threads and 0.95 s with 1; on an idle
    machine 2 threads run its batched forwards 1.5–1.8× faster than 1. Results do not depend on
    the choice beyond float rounding (the verdicts and figures were the same).
    """
    import torch

    from embscope.machine import best_threads, threads

    used: list[int] = []

    def look(_module, _args):
        n = best_threads(width, dtype, kind="forward")
        if n != torch.get_num_threads():
            torch.set_num_threads(n)
        used.append(n)

    with threads(best_threads(width, dtype, kind="forward")):
        hooks = [getattr(m, m.base_model_prefix, m).register_forward_pre_hook(look) for m in models]
        used.append(torch.get_num_threads())
        try:
            yield used
        finally:
            for h in hooks:
                h.remove()


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
