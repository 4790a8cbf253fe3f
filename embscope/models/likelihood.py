"""Code lengths of token sequences under the whole causal LM, in bits.

Each sequence ``[s, t_1, …, t_n]`` starts with a start token ``s`` (the model's BOS, or EOS where
it has none: :func:`start_token`) that is given, not scored; every token after it is::

    bits = Σ_{i=1..n} −log₂ p(t_i | s, t_<i)

Worked example: a model that gives each of 3 tokens probability ½ spends 3 bits on them.

**Batches.** Sequences are sorted by length and cut into batches of similar length (padding
within a quarter of their tokens, plus 8), at most :data:`CHUNK` sequences and
:data:`BATCH_TOKENS` padded tokens (:func:`batches`), so little padding is computed (a batch of UDHR's 8 first English units padded to the longest computed 4.7 times
their tokens) and a batch's attention scores stay bounded. Padding goes on the right: a causal model's real
positions never attend to the padding after them, and a right-padded row's positions are its own
0..L−1, so each row's figures are those of the sequence alone (up to float rounding).

**Logits.** The final hidden states are multiplied by the LM head in float32, :data:`LOGIT_ROWS`
positions at a time (Gemma's final soft-capping applied), and ``−ln p = logsumexp(l) − l_t``
summed per sequence in float64.

**Device and precision.** On a GPU the model runs in float32. On a CPU the body runs in the dtype
this CPU multiplies fastest at the model's width (:func:`embscope.models.forward.fast_dtype`:
bfloat16 only where it is measured at least 1.5× float32's rate), as a copy whose LM head stays
the float32 original (:func:`~embscope.models.forward.low_precision_copy`), on the thread count
measured fastest now (:func:`~embscope.models.fullmodel.fastest_threads`) — the same choices the
verification's prompting makes (:mod:`embscope.geometry.verify`). ``precision="float32"`` forces
float32 everywhere.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

#: sequences per forward pass, at most (:func:`embscope.extension.fidelity._length_chunks`' default)
CHUNK = 32
#: padded tokens per forward pass, at most: on a CPU a SmolLM2-135M batch of 4,096 tokens holds
#: ~0.3 GB of activations; a GPU takes eight times as many
BATCH_TOKENS = 4096
GPU_BATCH_TOKENS = 8 * BATCH_TOKENS
#: positions per logits block: 128 × 262,144 float32 (Gemma-3's vocabulary) = 128 MiB; 8× on a GPU
LOGIT_ROWS = 128
#: the precisions :func:`sequence_bits` accepts
PRECISIONS = ("auto", "float32", "bfloat16")
#: the precision when none is asked for (module docstring): ``auto``. On corpora/udhr's English,
#: SmolLM2-135M's bfloat16 body gave 0.8621 bits per byte against float32's 0.8611
PRECISION = "auto"


@dataclass
class SequenceBits:
    """What :func:`sequence_bits` measured."""

    #: (n,) float64: bits per sequence (its start token not scored)
    bits: "np.ndarray"
    #: where the forward passes ran (``cpu``, ``cuda``)
    device: str
    #: the dtype of the model's body in those passes (the head is float32 in every case)
    dtype: str
    #: the most threads a forward pass ran on (CPU; None on a GPU)
    threads: int | None
    #: wall seconds of the passes
    seconds: float


def start_token(config: dict) -> tuple[int | None, str]:
    """``(id, "bos" | "eos")``: the token a scored text follows: the model's BOS, or its EOS where
    it has none; ``(None, "none")`` without either (a list of EOS ids: the first).

    >>> start_token({"bos_token_id": 1, "eos_token_id": 2}), start_token({"eos_token_id": [7, 8]})
    ((1, 'bos'), (7, 'eos'))
    """
    for key, name in (("bos_token_id", "bos"), ("eos_token_id", "eos")):
        v = config.get(key)
        if isinstance(v, list) and v:
            v = v[0]
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            return v, name
    return None, "none"


def batches(lengths: Sequence[int], *, size: int = CHUNK, tokens: int = BATCH_TOKENS, slack: float = 1.25) -> list[list[int]]:
    """Indices by increasing length, cut into batches of at most ``size`` sequences and ``tokens``
    padded tokens whose padding stays within ``slack − 1`` of their real tokens plus 8 (a longer
    sequence alone).

    >>> batches([5, 1, 3, 40], size=3, tokens=12)
    [[1, 2], [0], [3]]
    """
    out: list[list[int]] = []
    cur: list[int] = []
    real = 0
    for i in sorted(range(len(lengths)), key=lambda i: (lengths[i], i)):
        n = max(lengths[i], 1)
        padded = (len(cur) + 1) * n
        if cur and (len(cur) >= size or padded > tokens or padded - (real + n) > (slack - 1) * (real + n) + 8):
            out.append(cur)
            cur, real = [], 0
        cur.append(i)
        real += n
    return out + ([cur] if cur else [])


def ratio_se(y: "np.ndarray", b: "np.ndarray") -> tuple[float, float]:
    """``(Σy / Σb, its standard error)`` over n pairs (bits y_t and bytes B_t of n texts): a ratio
    estimator, whose standard error by the delta method (Cochran, *Sampling Techniques*, 1977,
    §6.3) is ``sqrt(n/(n − 1) · Σ_t (y_t − r·B_t)²) / Σ_t B_t``; SE 0 for n < 2, NaN without bytes.

    >>> import numpy as np
    >>> [round(v, 3) for v in ratio_se(np.array([10.0, 30.0]), np.array([10.0, 10.0]))]
    [2.0, 1.0]
    """
    import numpy as np

    total = float(b.sum())
    if total <= 0:
        return float("nan"), float("nan")
    r = float(y.sum()) / total
    n = len(y)
    if n < 2:
        return r, 0.0
    return r, float(np.sqrt(n / (n - 1) * float(((y - r * b) ** 2).sum())) / total)


def _decoder_and_head(lm):
    """``(decoder, (V, d) head weight, bias or None, final soft-cap or None)`` of a ``*ForCausalLM``."""
    head = lm.get_output_embeddings()
    bias = getattr(head, "bias", None)
    cap = getattr(lm.config, "final_logit_softcapping", None) or None
    return (getattr(lm, lm.base_model_prefix), head.weight.detach(), None if bias is None else bias.detach().float(),
            None if cap is None else float(cap))


def _precision(lm, device: str, precision: str):
    import torch

    if precision == "auto":
        if device != "cpu":
            return torch.float32
        from embscope.models.forward import fast_dtype

        return fast_dtype(lm)
    return getattr(torch, precision)


def sequence_bits(lm, seqs: Sequence[Sequence[int]], *, device: str = "cpu", precision: str | None = None) -> SequenceBits:
    """Bits of each token sequence (its first token given, the rest scored; module docstring) under
    ``lm``, a transformers ``*ForCausalLM`` (left on the CPU afterwards).

    Args:
        lm: the whole model, float32 (:func:`embscope.models.fullmodel.load_causal_lm`).
        seqs: token id sequences, each starting with the start token (:func:`start_token`).
        device: ``cpu`` or ``cuda``.
        precision: ``auto`` (module docstring), ``float32`` or ``bfloat16`` (the body; the head is
            float32); None: :data:`PRECISION`.
    """
    import numpy as np
    import torch

    from embscope.models.forward import low_precision_copy, model_shape
    from embscope.models.fullmodel import fastest_threads
    from embscope.progress import bar

    t0 = time.perf_counter()
    dtype = _precision(lm, device, precision or PRECISION)
    out = np.zeros(len(seqs), dtype=np.float64)
    lm.to(device)
    low = low_precision_copy(lm, dtype) if dtype != torch.float32 else None
    net = low if low is not None else lm
    base, head, bias, cap = _decoder_and_head(net)
    head = head.float()
    bias = None if bias is None else bias.to(device)
    body = str(dtype).replace("torch.", "")
    lengths = [len(s) for s in seqs]
    gpu = device != "cpu"
    rows = LOGIT_ROWS * (8 if gpu else 1)
    threads = (fastest_threads(model_shape(lm)[0], body, net) if not gpu else nullcontext([]))
    try:
        with threads as used, torch.no_grad(), bar(len(seqs), "scoring text with the model", unit="texts") as advance:
            for idx in batches(lengths, tokens=GPU_BATCH_TOKENS if gpu else BATCH_TOKENS):
                width = max(lengths[i] for i in idx)
                ids = torch.zeros(len(idx), width, dtype=torch.long)
                mask = torch.zeros(len(idx), width, dtype=torch.long)
                for r, i in enumerate(idx):
                    ids[r, :lengths[i]] = torch.tensor(list(seqs[i]), dtype=torch.long)
                    mask[r, :lengths[i]] = 1
                h = base(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state  # (B, L, d)
                # the state at position j predicts the token at j + 1: (M, d) states, (M,) targets
                keep = mask[:, 1:].bool()
                states = h[:, :-1][keep.to(device)]
                targets = ids[:, 1:][keep].to(device)
                owner = torch.arange(len(idx))[:, None].expand(-1, width - 1)[keep].to(device)
                nll = torch.zeros(len(idx), dtype=torch.float64, device=device)
                for a in range(0, states.shape[0], rows):
                    lg = states[a:a + rows].float() @ head.T  # (rows, V) float32
                    if bias is not None:
                        lg = lg + bias
                    if cap is not None:  # Gemma 2's final soft-capping
                        lg = torch.tanh(lg / cap) * cap
                    t = targets[a:a + rows]
                    part = (torch.logsumexp(lg, 1) - lg.gather(1, t[:, None])[:, 0]).double()
                    nll.index_add_(0, owner[a:a + rows], part)
                out[idx] = nll.cpu().numpy() / np.log(2)
                advance(len(idx))
    finally:
        lm.to("cpu")
        del low
    return SequenceBits(bits=out, device=device, dtype=body, threads=max(used) if used else None,
                        seconds=round(time.perf_counter() - t0, 3))
