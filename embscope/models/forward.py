"""Forward passes of the whole model on the CPU at the precision this CPU runs fastest.

A CPU with native bfloat16 arithmetic (AVX512-BF16, AMX) multiplies bf16 matrices several times
faster than float32 (the development machine's plain torch GEMM: 959 against 209 GFLOPS on two
threads); one without it emulates bf16 and is ~10× *slower* (AVX2: 6 against 56 GFLOPS). So the
precision is measured, never assumed (:func:`bf16_gain`): a product of the model's own MLP shape,
(256, hidden) @ (hidden, intermediate), timed in both types on this machine, now.

When bf16 pays, :func:`low_precision_copy` makes a copy of the model whose body (embeddings,
attention, MLP, norms' weights) holds bf16 parameters while its LM head stays the float32 weight
of the original (shared, not copied) and multiplies the final hidden state in float32: the head
is where probabilities are decided, and bf16 logits are coarse (a logit of 20 is stored to ±0.06,
a ±6 % error in its probability). Buffers (rotary frequencies, Gemma's embedding scale) are copied
as they are, in their own dtype. The original float32 model is untouched; callers whose decision
must equal float32's re-run the rows near their cut on it (:mod:`embscope.geometry.verify`).
"""

from __future__ import annotations

import time
from typing import Any

#: bf16 is used only when the probe runs this many times faster than float32 (a wrong "bf16" on
#: a machine where it is emulated costs ~10×; a wrong "float32" at most the measured gain)
BF16_GAIN = 1.5
#: rows of the probe product (a batch of 32 rows × 8 tokens)
PROBE_ROWS = 256
#: probe runs per dtype (the fastest counts: one descheduled run does not decide)
PROBE_REPEATS = 3

_GAIN: dict[tuple, float] = {}


def bf16_gain(hidden: int, inner: int) -> float:
    """``t_float32 / t_bf16`` of the product (:data:`PROBE_ROWS`, hidden) @ (hidden, inner) with
    torch's current thread count, the fastest of :data:`PROBE_REPEATS` runs each (a few ms on a
    small model). Kept per shape and thread count for the process."""
    import torch

    key = (hidden, inner, torch.get_num_threads())
    if key not in _GAIN:
        g = torch.Generator().manual_seed(0)
        a = torch.randn(PROBE_ROWS, hidden, generator=g)
        w = torch.randn(hidden, inner, generator=g) / hidden ** 0.5
        best = {}
        for dtype in (torch.float32, torch.bfloat16):
            x, m = a.to(dtype), w.to(dtype)
            x @ m  # first call: kernel selection, packing buffers
            runs = []
            for _ in range(PROBE_REPEATS):
                t = time.perf_counter()
                for _ in range(4):
                    x @ m
                runs.append(time.perf_counter() - t)
            best[dtype] = min(runs)
        _GAIN[key] = best[torch.float32] / max(best[torch.bfloat16], 1e-9)
    return _GAIN[key]


def model_shape(lm) -> tuple[int, int]:
    """(hidden, intermediate) of a transformers model's config (the MLP's product)."""
    cfg = lm.config
    hidden = int(getattr(cfg, "hidden_size", 0) or 512)
    inner = int(getattr(cfg, "intermediate_size", 0) or 4 * hidden)
    return hidden, inner


def fast_dtype(lm) -> "Any":
    """``torch.bfloat16`` when this CPU multiplies the model's MLP shape at least
    :data:`BF16_GAIN` times faster in bf16 than in float32, else ``torch.float32``."""
    import torch

    return torch.bfloat16 if bf16_gain(*model_shape(lm)) >= BF16_GAIN else torch.float32


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
