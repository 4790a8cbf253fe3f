"""What :func:`embscope.load_model` returns: the embedding matrices and what is known about them.

Only the input embedding and, when untied, the output (LM-head) matrix are ever loaded — never the
whole model. ``embed`` and ``output`` keep the checkpoint's dtype (bf16 for most checkpoints;
float32 for dequantised GGUF): on CUDA they live on the GPU, on CPU they are memory-mapped from the
file. Analyses convert row chunks to float32 (``matrix[a:b].float()``), never the whole matrix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from embscope.tokenizer.base import Vocabulary


@dataclass
class LoadedModel:
    """Matrices plus provenance. Shapes: ``embed`` (V, d); ``output`` (V, d) or ``None`` when tied."""

    #: the spec the user gave (alias, hub id, folder, file)
    spec: str
    #: short name used for report folders and tables, e.g. ``"qwen2-7b"``
    name: str
    #: where the weights came from: ``alias``, ``hub-cache``, ``folder``, ``gguf``, ``package``
    source: str
    #: the folder or file the weights were read from
    path: str
    #: architecture family (``llama``, ``qwen2``, ``bert``, ...) or ``None`` when unknown
    arch: str | None
    #: HF ``config.json`` as a dict (for GGUF: a config synthesised from the metadata)
    config: dict[str, Any]
    #: (V, d) input embedding
    embed: "torch.Tensor"
    #: (V, d) output matrix, ``None`` when tied to ``embed``
    output: "torch.Tensor | None"
    tied: bool
    #: dtype as stored in the checkpoint (``bfloat16``, ``float32``, ``Q8_0``, ...)
    dtype: str
    #: ``cpu`` or ``cuda[:n]``
    device: str
    #: the tokenizer, or ``None`` when the model ships none
    vocab: "Vocabulary | None"
    #: tensor names read, e.g. ``{"embed": "model.embed_tokens.weight", "output": "lm_head.weight"}``
    tensor_names: dict[str, str | None] = field(default_factory=dict)
    #: files opened to read the tensors (a test proves a shard without them is never opened)
    files_read: list[str] = field(default_factory=list)
    #: seconds spent loading
    load_seconds: float = 0.0

    @property
    def categories(self) -> list[str]:
        """One category per matrix row (see :mod:`embscope.tokenizer.base`), ``padding`` past the
        tokenizer. Computed on first use (a reachability pass over the vocabulary)."""
        cached = self.__dict__.get("_categories")
        if cached is None:
            cats = list(self.vocab.categories()) if self.vocab is not None else ["normal"] * self.n_rows
            cats = cats[:self.n_rows] + ["padding"] * (self.n_rows - len(cats))  # ids past the rows: none
            self.__dict__["_categories"] = cached = cats
        return cached

    @property
    def n_rows(self) -> int:
        return int(self.embed.shape[0])

    @property
    def dim(self) -> int:
        return int(self.embed.shape[1])

    @property
    def n_tokens(self) -> int:
        """Tokenizer size (``n_rows`` when the model ships no tokenizer)."""
        return len(self.vocab) if self.vocab is not None else self.n_rows

    def token_strings(self) -> list[str]:
        """Display string per matrix row (``""`` for padding rows): computed once (a run asks for
        them five times: 1.5 s each on a 262k vocabulary), a fresh list each call."""
        cached = self.__dict__.get("_token_strings")
        if cached is None:
            n = self.n_tokens
            if self.vocab is None:
                cached = [f"<row {i}>" for i in range(self.n_rows)]
            else:
                shown = self.vocab.displays()
                cached = [shown[i] if i < n else "" for i in range(self.n_rows)]
            self.__dict__["_token_strings"] = cached
        return list(cached)
