"""``--init auto``: which strategy to write, by one score over the figures that predict the fine-tune.

    score = Δbpb(held-out corpus text) + Δbpb(general text) + reading        (bits per byte, lower is better)

- **Δbpb(held-out corpus text)**: the extended model's bits per byte on held-out text of the
  corpus minus the original model's, zero-shot: where a fine-tune on that corpus starts from;
- **Δbpb(general text)**: the same on general text (UDHR English, shipped): what the new rows cost
  text the fine-tune is not about. Text without a new term only gains the new output rows'
  probability, so this is ≥ 0 there: it measures the disturbance in bits per byte;
- **reading** = ρ · (KL_term + n · KL_after) / ln 2: the fidelity KLs of :mod:`.fidelity` (nats per
  occurrence of a new token, at the term and at each of the n ≤ 3 positions after it, mean over
  held-out contexts) times ρ, the new tokens per byte of held-out corpus text: the bits per byte
  by which the extended model's predictions after a new token differ from what the original
  model predicted after its pieces. It is the part of the first figure that a sampled next
  token measures noisily, measured against the whole distribution.

All three are bits per byte of text, so they add without weights. Worked example (SmolLM2-135M +
corpora/medical, 200 terms, 404 new tokens, ρ = 0.0148 new tokens per byte): ``mean`` Δ +0.034
(corpus), +0.000002 (general), KL 3.44 at the term and 1.66 after (n = 2.08) → reading
0.0148 · 6.89 / 0.693 = 0.147 → score 0.181; ``distil`` −0.044 + 0.00015 + 0.085 = 0.041.

``bench/init_trial.py`` checks the score against a short fine-tune of the new rows (bench/README.md,
"Initialisation trial"): the strategy with the lowest score started and stayed lowest; the order
after 30 steps swapped ``knn-pull`` (score 0.207) ahead of ``mean`` / ``hewitt`` (0.181), which the
score leaves as it is: neither is near the pick, and their zero-shot figures all favour ``mean``.

Only strategies whose rows leave old text predicted as before are recommended: mean
KL(p_old ‖ p_new) on general text at most :data:`KL_BOUND` nats and no position where the new
tokens take more than :data:`MASS_BOUND` of the probability. Scores measured on the full
held-out sample win over scores of the screening sample (:mod:`.evaluate`). Without the figures
(the whole model did not load) nothing can be judged, and ``subword-mean`` (FVT, the common
default) is written.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from embscope.text.numbers import plain

if TYPE_CHECKING:  # pragma: no cover
    from embscope.extension.diagnostics import StrategyRecord

#: most mean KL (nats) on held-out general text a recommended strategy may cause: 0.01 nats is
#: about 1 % relative change of a typical next-token probability, well above the 1e-5..1e-4 of
#: rows near the trained mean and below the 0.1 of rows rescaled to the median norm (init.py)
KL_BOUND = 0.01
#: most new-token probability mass at any held-out position
MASS_BOUND = 0.5
#: written when nothing was measured
FALLBACK = "subword-mean"


def within(kl: float | None, mass: float | None) -> bool:
    """A disturbance of mean KL ``kl`` and largest new-token mass ``mass`` is within bounds (an
    unknown figure counts as within)."""
    return (kl is None or kl <= KL_BOUND) and (mass is None or mass <= MASS_BOUND)


def bounded(d: dict[str, Any]) -> bool:
    """The strategy's measured figures (a dict of :mod:`.evaluate`) have their disturbance within bounds."""
    return within(d.get("kl"), d.get("new_token_mass_max"))


def reading_cost(d: dict[str, Any], per_byte: float) -> float | None:
    """ρ · (KL_term + n · KL_after) / ln 2 (bits per byte; module docstring), or None unmeasured.

    >>> round(reading_cost({"fidelity_kl": 3.44, "fidelity_kl_after": 1.66, "fidelity_after_positions": 2.08}, 0.0148), 3)
    0.147
    """
    kl = d.get("fidelity_kl")
    if kl is None:
        return None
    after = (d.get("fidelity_kl_after") or 0.0) * (d.get("fidelity_after_positions") or 0.0)
    return per_byte * (kl + after) / math.log(2)


def score(d: dict[str, Any], per_byte: float) -> dict[str, float] | None:
    """``{score, score_corpus, score_general, score_reading}`` (bits per byte) of one strategy's
    figures, or None when a part is missing."""
    corpus, general = d.get("bits_per_byte_change"), d.get("general_bits_per_byte_change")
    reading = reading_cost(d, per_byte)
    if corpus is None or general is None or reading is None:
        return None
    return {"score": round(corpus + general + reading, 5), "score_corpus": corpus, "score_general": general,
            "score_reading": round(reading, 5)}


def _fmt(r: "StrategyRecord") -> str:
    se = r.bits_per_byte_change_se
    corpus = f"{r.score_corpus:+.4f}" + (f" ± {se:.4f}" if se else "")
    return (f"score {r.score:+.4f} bits/byte = corpus {corpus} + general {r.score_general:+.5f} "
            f"+ reading {r.score_reading:.4f}")


def recommend(strategies: "dict[str, StrategyRecord]") -> tuple[str, str]:
    """``(name, why)`` for the strategies' records (``summary.strategies``, each with its
    :func:`score` fields; ``score_bytes``: the corpus bytes its Δbpb was measured on).

    >>> from embscope.extension.diagnostics import StrategyRecord
    >>> def rec(name, **figures):
    ...     return StrategyRecord(name, 50.0, 1.0, 99.0, 0.5, **figures)
    >>> recommend({"mean": rec("mean", score=0.5, kl=1e-5, score_corpus=0.04, score_general=1e-5, score_reading=0.46),
    ...            "distil": rec("distil", score=0.2, kl=2e-5, score_corpus=-0.07, score_general=2e-5, score_reading=0.27),
    ...            "loud": rec("loud", score=0.1, kl=0.2, score_corpus=0.0, score_general=0.0, score_reading=0.1)})[0]
    'distil'
    """
    measured = {n: r for n, r in strategies.items() if "/" not in n and r.score is not None}
    if not measured:
        return FALLBACK, (f"no score was measured (the whole model did not load or no held-out text holds a "
                          f"new term); {FALLBACK} is written by default")
    ok = {n: r for n, r in measured.items() if within(r.kl, r.new_token_mass_max)}
    pool = ok or measured
    most = max(r.score_bytes or 0 for r in pool.values())
    full = {n: r for n, r in pool.items() if (r.score_bytes or 0) == most}
    ranked = sorted(full, key=lambda n: full[n].score)
    best = ranked[0]
    r = pool[best]
    parts = [f"{best}: {_fmt(r)}"]
    if len(ranked) > 1:
        nxt = full[ranked[1]]
        gap = nxt.score - r.score
        parts.append(f"next {ranked[1]} {nxt.score:+.4f} (+{gap:.4f})")
        se = max(r.bits_per_byte_change_se or 0.0, nxt.bits_per_byte_change_se or 0.0)
        if gap <= se:
            parts.append(f"within noise: the lead is inside one standard error ({se:.4f}) of the corpus "
                         f"figure, so {best} and {ranked[1]} are not told apart on this sample")
    rest = sorted(set(pool) - set(full))
    if rest:
        parts.append(f"{', '.join(rest)} scored on the screening sample only, behind these")
    if r.kl is not None:
        parts.append(f"disturbance KL {plain(r.kl)} nats on general text (bound {KL_BOUND})")
    left = sorted(set(measured) - set(ok))
    if ok and left:
        parts.append(f"over the disturbance bound: {', '.join(left)}")
    if not ok:
        parts.append(f"no strategy kept the disturbance under KL {KL_BOUND} and mass {MASS_BOUND}")
    return best, "; ".join(parts)


def general_note(strategies: "dict[str, StrategyRecord]", source: str) -> str | None:
    """The plain statement when every measured strategy makes general text worse, else None."""
    vals = {n: r.general_bits_per_byte_change for n, r in strategies.items()
            if r.general_bits_per_byte_change is not None}
    if vals and all(v > 0 for v in vals.values()):
        lo, hi = min(vals.values()), max(vals.values())
        return (f"every strategy makes bits per byte on general text ({source}) worse than the original model: "
                f"{plain(lo, sign=True)} to {plain(hi, sign=True)} bits per byte")
    return None


def ordered(strategies: "dict[str, StrategyRecord]", first: str) -> "dict[str, StrategyRecord]":
    """The strategies, ``first`` first, the rest by score (unscored last, by fidelity KL)."""
    def key(n):
        r = strategies[n]
        return (r.score is None, r.score if r.score is not None else (r.fidelity_kl or 0.0))

    rest = sorted((n for n in strategies if n != first), key=key)
    return {n: strategies[n] for n in ([first] if first in strategies else []) + rest}
