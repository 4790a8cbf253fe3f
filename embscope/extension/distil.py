"""``distil``: fit each new input row so the model reads the new token as it read the pieces.

Token Distillation (Dobler, Elliott & de Melo 2025, arXiv 2505.20133) learns a new token's input
embedding by matching what the frozen model computes from the old tokenization. Here the target
is the next-token distribution, at the term and at the :data:`~embscope.extension.contexts.AFTER`
tokens after it, on *fit* contexts (never the held-out ones the fidelity is measured on):

    min_r  mean_contexts Σ_positions KL( p(· | .., pieces, ..) ‖ q_r(· | .., new token, ..) )

over the old vocabulary, only r (the row) trainable, a few Adam steps from ``subword-mean``.
Each prefix is run once (no gradient) and its key/value cache reused, so a step costs the
forward and backward of 1 + AFTER positions per context. Rows of terms without a fit context
stay at their start. For tied models the fitted row is the output row too; the disturbance
checks of :mod:`.diagnostics` measure what that does to old text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from embscope.errors import SpecError

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from embscope.extension.contexts import TermContext

#: Adam steps per row: on SmolLM2-135M + corpora/medical (40 terms, 1 fit context each), 4 steps took
#: the held-out fidelity KL from 3.86 (subword-mean) to 1.62 nats, top-1 agreement 6 % → 38 %
STEPS = 4
#: Adam step size, as a fraction of the start rows' median per-element RMS (‖r‖ / √d)
LR = 0.1
#: contexts per chunk (all contexts of a term fall in one chunk, so chunks fit independently)
CHUNK = 48
#: contexts of the first chunk when a time budget applies: its wall time, per context, times
#: every context is the estimate the budget is checked against (the first chunk is kept)
PILOT = 8


class OverBudget(SpecError):
    """``distil`` would take longer than its budget (``auto`` leaves it out, saying why)."""


def _chunks(ctxs: Sequence["TermContext"], size: int, first: int | None = None):
    """Contexts sorted by term, cut at term boundaries after ``size`` contexts (the first chunk
    after ``first``, when given)."""
    order = sorted(ctxs, key=lambda c: c.term)
    out, cur = [], []
    for c in order:
        cap = first if first is not None and not out else size
        if len(cur) >= cap and c.term != cur[-1].term:
            out.append(cur)
            cur = []
        cur.append(c)
    if cur:
        out.append(cur)
    return out


def fit_rows(lm, ctxs: Sequence["TermContext"], start: "torch.Tensor", new_ids: Sequence[int], *,
             steps: int | None = None, lr: float = LR, budget: float | None = None) -> "torch.Tensor":
    """(n_terms, d) rows fitted from ``start`` on ``ctxs`` (see the module docstring);
    ``steps`` defaults to :data:`STEPS`, read at call time.

    ``budget`` (seconds): after the first chunk (:data:`PILOT` contexts) the whole fit's wall time
    is estimated (its time per context × the contexts); over the budget, :class:`OverBudget`.
    """
    import time

    from embscope.extension.fidelity import old_vocabulary, parts
    from embscope.progress import bar

    steps = STEPS if steps is None else steps
    rows = start.detach().float().clone()
    if not ctxs or steps < 1:
        return rows
    if budget is not None and budget <= 0:
        raise OverBudget("distil's time budget is 0 s here (audit keeps its extension step short); name it "
                         "(--init distil) or pass --distil-budget to run it")
    p = old_vocabulary(parts(lm), new_ids)
    step_size = lr * float(rows.norm(dim=1).median()) / rows.shape[1] ** 0.5
    with bar(len(ctxs), f"fitting {rows.shape[0]:,} rows", unit="contexts") as advance:
        return _fit(p, rows, ctxs, steps, step_size, budget, time.perf_counter(), advance)


def _fit(p, rows, ctxs, steps: int, step_size: float, budget, began: float, advance):
    """The fitting loop of :func:`distil`, chunk by chunk (``advance`` ticks per context fitted)."""
    import dataclasses
    import time

    import torch

    from embscope.extension.fidelity import log_probs, new_token_hidden, reference

    done = 0
    for k, chunk in enumerate(_chunks(ctxs, CHUNK, PILOT if budget is not None else None)):
        if k == 1 and budget is not None:
            took = time.perf_counter() - began
            estimate = took / done * len(ctxs)
            if estimate > budget:
                raise OverBudget(f"distil would take ~{estimate:.0f} s for {len(ctxs)} contexts ({took:.1f} s for the "
                                 f"first {done}), over its {budget:.0f} s budget; name it (--init distil) or raise "
                                 "--distil-budget to run it")
        terms = sorted({c.term for c in chunk})
        local = {t: j for j, t in enumerate(terms)}
        chunk = [dataclasses.replace(c, term=local[c.term]) for c in chunk]
        cache, mask, lengths, logp = reference(p, chunk)
        target = logp.exp()
        param = rows[terms].clone().requires_grad_(True)
        opt = torch.optim.Adam([param], lr=step_size)
        for _ in range(steps):
            with torch.enable_grad():
                logq = log_probs(p, new_token_hidden(p, cache, mask, lengths, chunk, param))
                loss = (target * (logp - logq)).sum(1).mean()
                (grad,) = torch.autograd.grad(loss, [param])
            param.grad = grad
            opt.step()
        rows[terms] = param.detach()
        done += len(chunk)
        advance(len(chunk))
    return rows
