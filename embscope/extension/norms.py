"""Per-script norm correction: any strategy's new rows rescaled to the norm of the model's rows in
their script (``--init NAME+norm``, or ``--norm-correction`` for every strategy).

Averaging shrinks rows (the mean of k unrelated vectors has about 1/√k of their norm), and a
script the model knows little has rows of its own typical norm. NVIDIA's tokenizer-extension
recipe therefore corrects the new input rows' norm to that of the target script's existing rows
(https://docs.nvidia.com/nemotron/nightly/tokenizer-extension/reference/init-embeddings-config.html).
Here, per new token of script s (:func:`embscope.text.script.script_of` of its text):

    x ← x · n̄_s / ‖x‖,   n̄_s = mean ‖E[j]‖ over the trained rows j whose text is in script s,

with n̄ over every trained row where the model has fewer than :data:`MIN_ROWS` rows in s (a
byte-level vocabulary holds few whole characters of a script it barely learned) or the token has
no script (digits, punctuation, mixed). Example: rows in Devanagari with norms [2, 4] → a new
Devanagari row [0.3, 0.4] (norm 0.5) becomes [1.8, 2.4] (norm 3).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: fewest trained rows of a script whose mean norm is used; below it, every trained row's
#: (a mean of 20 norms is within ~5 % of the script's own when norms vary by ~20 %)
MIN_ROWS = 20
def script_norms(ctx, norms: "torch.Tensor") -> tuple[dict[str, tuple[float, int]], float]:
    """``({script: (mean norm, rows)}, mean norm of every trained row)`` of an
    :class:`~embscope.extension.init.InitContext`, ``norms`` its trained rows' norms in id order;
    memoised per context."""
    if "script_norms" in ctx.memo:
        return ctx.memo["script_norms"]
    import torch

    from embscope.text.script import script_of

    ids = torch.nonzero(ctx.trained).flatten().tolist()
    texts = ctx.token_text or []
    acc: dict[str, list[float]] = defaultdict(list)
    for i, n in zip(ids, norms.tolist()):
        s = script_of(texts[i]) if i < len(texts) else "none"
        if s not in ("none", "mixed"):
            acc[s].append(n)
    out = ({s: (sum(v) / len(v), len(v)) for s, v in acc.items()}, float(norms.mean()) if len(norms) else 1.0)
    ctx.memo["script_norms"] = out
    return out


def target_norms(ctx, norms: "torch.Tensor") -> "torch.Tensor":
    """(n_new,) the norm each new row is rescaled to (module docstring)."""
    import torch

    from embscope.text.script import script_of

    per_script, overall = script_norms(ctx, norms)
    terms = ctx.terms or [""] * len(ctx.pieces)
    out = []
    for t in terms:
        mean, n = per_script.get(script_of(t), (overall, 0))
        out.append(mean if n >= MIN_ROWS else overall)
    return torch.tensor(out, dtype=torch.float32)


def norm_correct(ctx, rows: "torch.Tensor", norms: "torch.Tensor") -> "torch.Tensor":
    """``rows`` (n_new, d) rescaled to :func:`target_norms`."""
    target = target_norms(ctx, norms)
    return rows.float() * (target / rows.float().norm(dim=1).clamp_min(1e-12))[:, None]
