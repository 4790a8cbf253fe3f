"""The token rows of a model that is training, read where they are (no copy of the whole matrix).

A fine-tune holds its input embedding (and untied head) as a plain ``nn.Embedding`` / ``nn.Linear``
weight, or behind one of PEFT's wrappers (peft 0.21, ``peft/utils/other.py`` and
``peft/tuners/*/layer.py``). Row ``i`` of the matrix the forward pass really uses is:

=============================  ==============================================================
wrapper                        row ``i``
=============================  ==============================================================
none                           ``W[i]``
``ModulesToSaveWrapper``       ``W'[i]`` of the active trainable copy (``modules_to_save``)
``TrainableTokensWrapper``     ``Δ[j]`` when ``i = token_indices[j]``, else ``W[i]``
(``trainable_token_indices``)  (``W.index_copy(0, token_indices, Δ)``)
LoRA on the embedding          ``W[i] + s · A[:, i]ᵀ Bᵀ``, A (r, V), B (d, r), s = α / r
                               (``lora.Embedding.get_delta_weight`` is ``(B A)ᵀ s``)
LoRA on the head               ``W[i] + s · B[i] A``, A (r, d), B (V, r)
=============================  ==============================================================

:func:`rows` gives those rows for a set of ids, ``(k, d)`` float32 on the module's device, without
forming the merged matrix; :func:`row_norms` the ``(V,)`` norms, block by block;
:func:`trainable_rows` which rows any parameter that requires a gradient can change.
:func:`write_matrices` saves the effective matrices as a model folder embscope reads (config,
tokenizer, ``model.safetensors`` with only the embedding and head).

>>> import torch
>>> emb = torch.nn.Embedding(4, 2)
>>> with torch.no_grad():
...     _ = emb.weight.copy_(torch.tensor([[3.0, 4.0], [0, 0], [1, 0], [0, 2]]))
>>> rows(emb, torch.tensor([0, 3])).tolist(), row_norms(emb).tolist()
([[3.0, 4.0], [0.0, 2.0]], [5.0, 0.0, 1.0, 2.0])
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: rows per block when a whole matrix is read (norms, the saved copy): (8192, 4096) float32 is 128 MiB
BLOCK = 8192
#: the names the saved copy gives its tensors (embscope.models.names finds them in any family)
EMBED_NAME, HEAD_NAME = "model.embed_tokens.weight", "lm_head.weight"


def active(module):
    """The module the forward pass runs: a ``ModulesToSaveWrapper``'s active trainable copy (its
    original when adapters are disabled), else ``module`` itself."""
    while hasattr(module, "modules_to_save") and hasattr(module, "original_module"):
        names = list(getattr(module, "active_adapters", None) or [])
        if getattr(module, "disable_adapters", False) or not names or names[0] not in module.modules_to_save:
            module = module.original_module
        else:
            module = module.modules_to_save[names[0]]
    return getattr(module, "token_adapter", module)  # TrainableTokensWrapper → its layer


def _adapters(m) -> list[str]:
    if getattr(m, "disable_adapters", False) or getattr(m, "merged", False):
        return []
    names = getattr(m, "active_adapters", None) or []
    return [names] if isinstance(names, str) else list(names)


def _leaf(module):
    """The plain layer under the active module's LoRA or trainable-tokens wrapping."""
    m = active(module)
    while hasattr(m, "base_layer"):
        m = m.base_layer
    return m


def base_weight(module) -> "torch.Tensor":
    """The weight the active module's rows start from (a LoRA or trainable-tokens layer's base)."""
    return _leaf(module).weight


def _plain(module) -> bool:
    """The forward uses the base weight as it is: no adapter merges anything into its rows."""
    m = active(module)
    return m is _leaf(module) and not _adapters(m)


def rows(module, ids: "torch.Tensor") -> "torch.Tensor":
    """Rows ``ids`` (k,) of the matrix ``module``'s forward uses, (k, d) float32 (module docstring)."""
    import torch

    m = active(module)
    with torch.no_grad():
        w = base_weight(module)
        ids = ids.to(w.device)
        out = w[ids].float()
        for name in _adapters(m):
            if hasattr(m, "trainable_tokens_delta") and name in m.token_indices:
                index = torch.as_tensor(m.token_indices[name], device=w.device)
                pos = torch.full((w.shape[0],), -1, dtype=torch.int64, device=w.device)
                pos[index] = torch.arange(len(index), device=w.device)
                p = pos[ids]
                hit = p >= 0
                out[hit] = m.trainable_tokens_delta[name][p[hit]].float().to(w.device)
            elif hasattr(m, "lora_embedding_A") and name in m.lora_embedding_A:
                a, b = m.lora_embedding_A[name], m.lora_embedding_B[name]  # (r, V), (d, r)
                out += m.scaling[name] * (a[:, ids].T.float() @ b.T.float())
            elif hasattr(m, "lora_A") and name in m.lora_A:
                a, b = m.lora_A[name].weight, m.lora_B[name].weight  # (r, d), (V, r)
                out += m.scaling[name] * (b[ids].float() @ a.float())
    return out


def row_norms(module) -> "torch.Tensor":
    """(V,) float32 Euclidean norms of the effective rows (NaN/Inf where a row is not finite),
    :data:`BLOCK` rows at a time."""
    import torch

    w = base_weight(module)
    n = w.shape[0]
    plain = _plain(module)
    out = torch.empty(n, dtype=torch.float32, device=w.device)
    with torch.no_grad():
        for a in range(0, n, BLOCK):
            b = min(a + BLOCK, n)
            block = w[a:b] if plain else rows(module, torch.arange(a, b, device=w.device))
            out[a:b] = torch.linalg.vector_norm(block, dim=1, dtype=torch.float32)
    return out


def trainable_rows(module, ids: np.ndarray) -> np.ndarray:
    """Per id: some parameter that requires a gradient can change that row of ``module``."""
    m = active(module)
    out = np.full(len(ids), bool(base_weight(module).requires_grad))
    for name in _adapters(m):
        if hasattr(m, "trainable_tokens_delta") and name in m.token_indices:
            if m.trainable_tokens_delta[name].requires_grad:
                out |= np.isin(ids, np.asarray(m.token_indices[name]))
        elif hasattr(m, "lora_embedding_A") and name in m.lora_embedding_A:
            out |= bool(m.lora_embedding_A[name].requires_grad or m.lora_embedding_B[name].requires_grad)
        elif hasattr(m, "lora_A") and name in m.lora_A:
            out |= bool(m.lora_A[name].weight.requires_grad or m.lora_B[name].weight.requires_grad)
    return out


@dataclass
class Matrices:
    """The input embedding module of a training model and its head module (None when tied)."""

    embed: Any
    head: Any | None

    @property
    def tied(self) -> bool:
        return self.head is None


def matrices(model) -> Matrices:
    """``model``'s embedding and head modules (``get_input_embeddings`` / ``get_output_embeddings``,
    which PEFT models pass through); the head is None when it shares the embedding's weight."""
    embed = model.get_input_embeddings()
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None:
        w, h = base_weight(embed), base_weight(head)
        if h is w or (h.shape == w.shape and h.data_ptr() == w.data_ptr()):
            head = None
    return Matrices(embed=embed, head=head)


def _full(module) -> "torch.Tensor":
    """The effective matrix on the CPU in its stored dtype (float32 where an adapter is merged in)."""
    import torch

    w = base_weight(module)
    if _plain(module):
        return w.detach().to("cpu", copy=True).contiguous()
    parts = [rows(module, torch.arange(a, min(a + BLOCK, w.shape[0]), device=w.device)).cpu()
             for a in range(0, w.shape[0], BLOCK)]
    return torch.cat(parts).contiguous()


def write_matrices(model, tokenizer, out: Path, *, manifest: Path | None = None) -> Path:
    """Save ``model``'s effective embedding (and untied head) with its config and ``tokenizer``
    (as it is now: the PAD a trainer set included) as a folder embscope loads; copy the
    extension ``manifest`` beside them (rewritten to point at this folder). Returns ``out``."""
    from safetensors.torch import save_file

    mats = matrices(model)
    out.mkdir(parents=True, exist_ok=True)
    config = _config(model)
    config["tie_word_embeddings"] = mats.tied
    config["vocab_size"] = int(base_weight(mats.embed).shape[0])
    (out / "config.json").write_text(json.dumps(config, indent=1, default=str), encoding="utf-8")
    if tokenizer is not None:
        tokenizer.save_pretrained(str(out))
    tensors = {EMBED_NAME: _full(mats.embed)}
    if mats.head is not None:
        tensors[HEAD_NAME] = _full(mats.head)
    save_file(tensors, str(out / "model.safetensors"))
    if manifest is not None:
        doc = json.loads(manifest.read_text(encoding="utf-8"))
        (out / manifest.name).write_text(json.dumps({**doc, "folder_copy_of": str(manifest.parent)}, indent=1),
                                         encoding="utf-8")
    return out


def _config(model) -> dict:
    """The transformers config of ``model`` (a PEFT model's base) as a dict."""
    cfg = getattr(model, "config", None)
    if cfg is None and hasattr(model, "get_base_model"):
        cfg = model.get_base_model().config
    return cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg or {})


def source_folder(model) -> Path | None:
    """The local folder ``model`` was loaded from (``name_or_path``; a PEFT model's base), if it is one."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    name = getattr(base, "name_or_path", None) or getattr(getattr(base, "config", None), "_name_or_path", None)
    if not name:
        return None
    p = Path(str(name)).expanduser()
    return p if p.is_dir() else None
