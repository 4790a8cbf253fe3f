"""Is an initialisation safe? Norms, nearest neighbours, and what the new rows do to the model's output.

Three checks per strategy:

1. **Norm percentile.** For each new row, the share of trained rows whose norm is at most its norm
   (0–100). Rows far outside the trained range (a percentile of 0 or 100) behave unlike any token
   the model has seen. Example: trained norms [1, 2, 3, 4], new norm 2.5 → 50.
2. **Nearest existing tokens.** Top-5 trained rows by cosine; a reader can judge whether
   " cholecystitis" sits near " gall", " bladder", "itis" — or near noise.
3. **Next-token KL and new-token mass** (causal LMs whose full weights load). On held-out text
   that contains none of the new terms the inputs are unchanged, so the final hidden states h are
   unchanged; only the softmax gains the new output rows r_j (the new input rows for tied models):

       p_new(i) = exp(l_i) / (Z_old + Σ_j exp(h·r_j)),   l_i = h·w_i,  Z_old = Σ_i exp(l_i)

   hence, per position, with the new-token mass m = Σ_j p_new(j):

       KL(p_old ‖ p_new) = Σ_i p_old(i) ln(p_old(i)/p_new(i)) = ln(Z_new / Z_old) = −ln(1 − m).

   Hewitt (2021) asks for KL ≈ 0: the extended model should predict old text as before. A large m
   means the new rows will dominate generation. Both are averaged over all positions of the
   held-out text; the maximum over positions is reported too (computed with the held-out pass,
   :mod:`embscope.extension.bpb`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from embscope.records import Record

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: general English text, a few hundred tokens, used when no held-out text is given; sentences that
#: contain a new term are dropped before use (the inputs must not change)
HELD_OUT_TEXT = (
    "The old bridge across the river was built more than a century ago, and it still carries "
    "traffic every day. In the morning, people walk to the market to buy bread, fruit and fresh "
    "vegetables. The town council met on Tuesday to discuss the budget for the coming year. "
    "Several members argued that the library needed new books and longer opening hours. "
    "Meanwhile, the weather turned cold, and the first snow fell on the hills north of the town. "
    "Children built a snowman in the park while their parents watched from a bench. "
    "A small train runs along the coast, stopping at fishing villages where boats return at dusk. "
    "The museum opened an exhibition about the history of printing, with machines that still work. "
    "Visitors can set their own names in metal type and print a card to take home. "
    "In the evening, a choir sang in the church square, and the music carried across the water. "
    "Good software is written for people to read, and only then for machines to run. "
    "She opened the window, looked at the quiet street, and decided to write a long letter to her "
    "brother, who had moved to a city on the other side of the country."
)

#: neighbours listed per new row
TOP_K = 5


@dataclass
class RowDiagnostics(Record):
    """How new or re-initialised rows sit among the trained ones (checks 1 and 3 of the module
    docstring); the rows of ``repair`` and, with the measured figures, of each strategy."""

    #: the initialisation strategy (``subword-mean``, …)
    name: str
    #: median over the new rows of their norm's percentile among trained rows (0–100; ~50 is typical)
    norm_percentile_median: float | None
    #: min / max of those percentiles (0 or 100: rows outside the trained range)
    norm_percentile_min: float | None
    norm_percentile_max: float | None
    #: median cosine to the nearest trained row (higher: the row sits among known tokens)
    nearest_cosine_median: float | None
    #: mean and max KL(p_old ‖ p_new) per position on held-out text, nats (lower is better; ≈0 is
    #: safe); null without the whole model
    kl: float | None = None
    kl_max: float | None = None
    #: mean and max probability mass on the new tokens per position (lower is safer)
    new_token_mass: float | None = None
    new_token_mass_max: float | None = None
    #: per term (a few only): its nearest trained tokens, ``[[token, cosine], …]``
    examples: dict[str, list[list[str | float | None]]] = field(default_factory=dict)
    #: untied models: the same two figures for the output rows
    output_norm_percentile_median: float | None = None
    output_nearest_cosine_median: float | None = None

    def add_output(self, output: "RowDiagnostics") -> None:
        """Take the output rows' two figures from their own diagnostics (untied models)."""
        self.output_norm_percentile_median = output.norm_percentile_median
        self.output_nearest_cosine_median = output.nearest_cosine_median


@dataclass
class StrategyRecord(RowDiagnostics):
    """One initialisation strategy of the extension: its rows' diagnostics and, with the whole model,
    what they do to it (:mod:`embscope.extension.evaluate`; the score: :mod:`embscope.extension.choose`).
    Null: not measured (no whole model, no held-out text, or over the disturbance bound)."""

    #: positions of general text the disturbance (kl, new-token mass) was measured on
    disturbance_positions: int | None = None
    #: bits per byte on general text with the new tokens (lower is better), its change against the
    #: original model and that change's paired standard error
    general_bits_per_byte: float | None = None
    general_bits_per_byte_change: float | None = None
    general_bits_per_byte_change_se: float | None = None
    #: mean KL(original ‖ extended) of the next token at the new term, nats (lower is better), its
    #: 90th percentile, and the share of contexts whose most likely next token agrees (higher is better)
    fidelity_kl: float | None = None
    fidelity_kl_p90: float | None = None
    fidelity_top1: float | None = None
    #: the same two at the positions after the term
    fidelity_kl_after: float | None = None
    fidelity_top1_after: float | None = None
    #: held-out corpus contexts measured, and positions after the term per context (mean)
    fidelity_contexts: int | None = None
    fidelity_after_positions: float | None = None
    #: bits per byte on the held-out corpus text (lower is better) and its standard error
    bits_per_byte: float | None = None
    bits_per_byte_se: float | None = None
    #: its change against the original model (lower is better) and the paired standard error
    bits_per_byte_change: float | None = None
    bits_per_byte_change_se: float | None = None
    #: tokens per byte of the held-out corpus text with the new tokens, and its change (lower: fewer tokens)
    tokens_per_byte: float | None = None
    tokens_per_byte_change: float | None = None
    #: held-out corpus bytes behind ``bits_per_byte_change``
    score_bytes: int | None = None
    #: score = score_corpus + score_general + score_reading, bits per byte (lower is better)
    score: float | None = None
    #: its parts: Δ bits per byte on corpus text, on general text, and the reading cost of the new tokens
    score_corpus: float | None = None
    score_general: float | None = None
    score_reading: float | None = None


def norm_percentiles(new_rows: "torch.Tensor", trained_norms: "torch.Tensor") -> "torch.Tensor":
    """(n,) percentile (0–100) of each new row's norm among trained-row norms.

    >>> import torch
    >>> norm_percentiles(torch.tensor([[2.5, 0.0]]), torch.tensor([1.0, 2.0, 3.0, 4.0])).tolist()
    [50.0]
    """
    import torch

    ref = trained_norms.sort().values
    pos = torch.searchsorted(ref, new_rows.norm(dim=1).contiguous(), right=True)
    return pos.double() / max(len(ref), 1) * 100.0


def hidden_and_logits(lm, ids: Sequence[int]):
    """``(h, logits)`` of a causal LM on one token sequence: (T, d) inputs to the LM head and the
    (T, V) logits, captured with a forward hook (no assumption on where the final norm sits)."""
    import torch

    captured = {}
    head = lm.get_output_embeddings()
    hook = head.register_forward_hook(lambda _m, inp, _out: captured.__setitem__("h", inp[0]))
    try:
        with torch.no_grad():
            logits = lm(input_ids=torch.tensor([list(ids)])).logits[0].float()  # (T, V)
    finally:
        hook.remove()
    return captured["h"][0].float(), logits


def row_diagnostics(name: str, new_rows: "torch.Tensor", ctx, terms: Sequence[str],
                    token_strings: Sequence[str], n_examples: int = 8,
                    nearest: "tuple[torch.Tensor, torch.Tensor] | None" = None) -> RowDiagnostics:
    """Norm percentiles and nearest trained tokens of ``new_rows`` (n, d) against ``ctx.matrix``.

    ``nearest``: ``nearest_trained(ctx, new_rows, TOP_K)`` when the caller already has it (one
    pass over the matrix for the rows of several strategies at once).
    """
    from embscope.extension.init import nearest_trained, trained_norms

    pct = norm_percentiles(new_rows, trained_norms(ctx))
    sims, ids = nearest if nearest is not None else nearest_trained(ctx, new_rows, TOP_K)
    examples = {terms[k]: [[token_strings[int(i)], round(float(s), 3)] for s, i in zip(sims[k], ids[k])]
                for k in range(min(n_examples, len(terms)))}
    return RowDiagnostics(
        name=name,
        norm_percentile_median=round(float(pct.median()), 2),
        norm_percentile_min=round(float(pct.min()), 2),
        norm_percentile_max=round(float(pct.max()), 2),
        nearest_cosine_median=round(float(sims[:, 0].median()), 4),
        examples=examples,
    )
