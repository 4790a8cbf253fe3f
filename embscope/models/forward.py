"""Forward passes of the whole model on the CPU at the precision this CPU runs fastest.

A CPU with native bfloat16 arithmetic (AVX512-BF16, AMX) multiplies bf16 matrices several times
faster than float32 (the development machine's plain torch GEMM: 959 against 209 GFLOPS on two
threads); one without it emulates bf16 and is ~10× *slower* (AVX2: 6 against 56 GFLOPS). So the
precision is measured, never assumed (:func:`fast_dtype`): the GEMM-rate probe of
:mod:`embscope.machine` at the model's hidden width, the same measurement every other 16-bit
choice of a run is made from, decided once per width for the process.

When bf16 pays, :func:`low_precision_copy` makes a copy of the model whose body (embeddings,
attention, MLP, norms' weights) holds bf16 parameters while its LM head stays the float32 weight
of the original (shared, not copied) and multiplies the final hidden state in float32: the head
is where probabilities are decided, and bf16 logits are coarse (a logit of 20 is stored to ±0.06,
a ±6 % error in its probability). Buffers (rotary frequencies, Gemma's embedding scale) are copied
as they are, in their own dtype. The original float32 model is untouched; callers whose decision
must equal float32's re-run the rows near their cut on it (:mod:`embscope.geometry.verify`).
"""

from __future__ import annotations

from typing import Any


def model_shape(lm) -> tuple[int, int]:
    """(hidden, intermediate) of a transformers model's config (the MLP's product)."""
    cfg = lm.config
    hidden = int(getattr(cfg, "hidden_size", 0) or 512)
    inner = int(getattr(cfg, "intermediate_size", 0) or 4 * hidden)
    return hidden, inner


def fast_dtype(lm) -> "Any":
    """``torch.bfloat16`` where this CPU multiplies products of the model's hidden width at least
    :data:`embscope.machine.BF16_GAIN` times faster in bf16 than in float32
    (:func:`embscope.machine.fast_dtype`), else ``torch.float32``."""
    import torch

    from embscope.machine import fast_dtype as measured

    return torch.bfloat16 if measured(model_shape(lm)[0]) == "bfloat16" else torch.float32


def _float32_head(weight, bias):
    import torch

    class Head(torch.nn.Module):
        """``logits = h·Wᵀ (+ b)`` in float32 from a lower-precision hidden state ``h``."""

        def __init__(self):
            super().__init__()
            self.weight, self.bias = weight, bias

        def forward(self, h):
            return torch.nn.functional.linear(h.float(), self.weight, self.bias)

    return Head()


def low_precision_copy(lm, dtype):
    """A copy of ``lm`` with every parameter in ``dtype`` except the LM head, which keeps the
    original's float32 weight (shared) and computes the logits in float32. Tied weights stay tied
    in the body (one bf16 copy); buffers keep their dtype. Eval mode, no gradients."""
    import copy

    import torch

    head = lm.get_output_embeddings()
    memo: dict[int, Any] = {}
    for p in lm.parameters():
        if id(p) not in memo:
            memo[id(p)] = torch.nn.Parameter(p.detach().to(dtype), requires_grad=False)
    low = copy.deepcopy(lm, memo)
    low.set_output_embeddings(_float32_head(head.weight.detach(), None if head.bias is None else head.bias.detach()))
    return low.eval()
