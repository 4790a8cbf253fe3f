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

**Many rows.** The work grows with the rows (one fit context each), so a language-sized extension
(10,000 rows: ~135×10¹² multiply-adds on SmolLM2-135M) would exceed any fixed budget. Given the
rows' corpus counts (``priority``), a fit over its budget fits the most frequent rows whose
contexts fit in the budget (:func:`within_budget`) and leaves the rest at their start: the rows
that carry most of the text are fitted, and the work stays what the budget says at any row count.
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
#: a backward pass costs about twice its forward pass (Kaplan et al. 2020, "Scaling laws for
#: neural language models", §2.1: 2N multiply-adds forward, 4N backward per token)
BACKWARD = 2


class OverBudget(SpecError):
    """``distil`` would do more work than its budget (``auto`` leaves it out, saying why)."""


def work(lm, ctxs: Sequence["TermContext"], steps: int | None = None) -> float:
    """The fit's work in 10¹² multiply-adds, known before it runs: the model's parameters ×
    (each context's tokens once for the reference pass + ``steps`` × (1 + :data:`BACKWARD`) × its
    1 + AFTER suffix positions). A count of work, not of seconds: whether ``auto`` runs ``distil``
    depends on the model and the corpus, never on the machine's load.

    SmolLM2-135M + corpora/medical (404 contexts): about 2.4.
    """
    steps = STEPS if steps is None else steps
    params = sum(p.numel() for p in lm.parameters())  # tied weights once
    tokens = sum(len(c.prefix) + len(c.pieces) + len(c.after) + steps * (1 + BACKWARD) * (1 + len(c.after))
                 for c in ctxs)
    return tokens * params / 1e12


def within_budget(lm, ctxs: Sequence["TermContext"], priority: Sequence[float], budget: float,
                  steps: int | None = None) -> list["TermContext"]:
    """The contexts of the highest-``priority`` terms (``priority[term]``: its corpus count) whose
    :func:`work` adds up to at most ``budget`` (10¹² multiply-adds), most frequent first.

    Example: three terms of counts [5, 50, 9] and one context each of work 0.4 under budget 1.0 →
    the contexts of terms 1 and 2.
    """
    per_term: dict[int, list] = {}
    for c in ctxs:
        per_term.setdefault(c.term, []).append(c)
    out, used = [], 0.0
    for term in sorted(per_term, key=lambda t: -float(priority[t]) if t < len(priority) else 0.0):
        need = work(lm, per_term[term], steps)
        if used + need > budget:
            continue
        out.extend(per_term[term])
        used += need
    return out


def _chunks(ctxs: Sequence["TermContext"], size: int):
    """Contexts sorted by term, cut at term boundaries after ``size`` contexts."""
    order = sorted(ctxs, key=lambda c: c.term)
    out, cur = [], []
    for c in order:
        if len(cur) >= size and c.term != cur[-1].term:
            out.append(cur)
            cur = []
        cur.append(c)
    if cur:
        out.append(cur)
    return out


def fit_rows(lm, ctxs: Sequence["TermContext"], start: "torch.Tensor", new_ids: Sequence[int], *,
             steps: int | None = None, lr: float = LR, budget: float | None = None,
             priority: Sequence[float] | None = None, report: dict | None = None) -> "torch.Tensor":
    """(n_terms, d) rows fitted from ``start`` on ``ctxs`` (see the module docstring);
    ``steps`` defaults to :data:`STEPS`, read at call time.

    ``budget`` (10¹² multiply-adds): a fit whose :func:`work` is over it fits only the most
    frequent rows that fit in it when ``priority`` (per term, its corpus count) is given and the
    budget is above 0 (:func:`within_budget`); otherwise it raises :class:`OverBudget` before any
    forward pass. ``report`` receives ``rows_fitted`` and ``work`` (what was spent).
    """
    from embscope.extension.fidelity import old_vocabulary, parts
    from embscope.progress import bar

    steps = STEPS if steps is None else steps
    rows = start.detach().float().clone()
    if not ctxs or steps < 1:
        return rows
    if budget is not None and priority is not None and budget > 0 and work(lm, ctxs, steps) > budget:
        ctxs = within_budget(lm, ctxs, priority, budget, steps)
    if report is not None:
        report.update(rows_fitted=len({c.term for c in ctxs}), work=round(work(lm, ctxs, steps), 4))
    if budget is not None:
        need = work(lm, ctxs, steps)
        if need > budget:
            raise OverBudget(f"distil needs ~{need:.3g}×10^12 multiply-adds ({len(ctxs)} contexts, {steps} steps), "
                             f"over its budget of {budget:g}" + (" (audit keeps its extension step short)"
                                                                 if budget == 0 else "")
                             + "; name it (--init distil) or raise --distil-work to run it")
    p = old_vocabulary(parts(lm), new_ids)
    step_size = lr * float(rows.norm(dim=1).median()) / rows.shape[1] ** 0.5
    with bar(len(ctxs), f"fitting {rows.shape[0]:,} rows", unit="contexts") as advance:
        return _fit(p, rows, ctxs, steps, step_size, advance)


def _fit(p, rows, ctxs, steps: int, step_size: float, advance):
    """The fitting loop of :func:`distil`, chunk by chunk (``advance`` ticks per context fitted)."""
    import torch

    from embscope.extension.fidelity import log_probs, new_token_hidden, reference

    for chunk in _chunks(ctxs, CHUNK):
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
        advance(len(chunk))
    return rows
