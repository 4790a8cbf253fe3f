"""``--init auto``: which strategy to write, from what was measured.

Fidelity first, disturbance bounded: among the strategies whose rows leave old text predicted
as before — mean KL(p_old ‖ p_new) on held-out general text at most :data:`KL_BOUND` nats and no
position where the new tokens take more than :data:`MASS_BOUND` of the probability — the one
whose new token reads most like its pieces (lowest mean fidelity KL at the term; then higher
top-1 agreement; then lower bits per byte). Without fidelity figures (the whole model did not
load) nothing can be judged, and ``subword-mean`` (FVT, the common default) is written.

Example: ``mean`` fidelity 3.18 nats, ``distil`` 1.10 nats, both with KL 1e-5 on old text →
``distil``, "next best mean 3.18 nats (2.89× higher)".
"""

from __future__ import annotations

from typing import Any

#: most mean KL (nats) on held-out general text a recommended strategy may cause: 0.01 nats is
#: about 1 % relative change of a typical next-token probability, well above the 1e-5..1e-4 of
#: rows near the trained mean and below the 0.1 of rows rescaled to the median norm (init.py)
KL_BOUND = 0.01
#: most new-token probability mass at any held-out position
MASS_BOUND = 0.5
#: written when nothing was measured
FALLBACK = "subword-mean"


def bounded(d: dict[str, Any]) -> bool:
    """The strategy's disturbance is within bounds (unknown disturbance counts as within)."""
    kl, mass = d.get("kl"), d.get("new_token_mass_max")
    return (kl is None or kl <= KL_BOUND) and (mass is None or mass <= MASS_BOUND)


def _key(d: dict[str, Any]):
    return (d["fidelity_kl"], -(d.get("fidelity_top1") or 0.0), d.get("bits_per_byte") or float("inf"))


def recommend(strategies: dict[str, dict[str, Any]]) -> tuple[str, str]:
    """``(name, why)`` for the figures per strategy (``summary["strategies"]``).

    >>> recommend({"mean": {"fidelity_kl": 3.0, "kl": 1e-5}, "distil": {"fidelity_kl": 1.0, "kl": 2e-5},
    ...            "loud": {"fidelity_kl": 0.5, "kl": 0.2}})[0]
    'distil'
    """
    measured = {n: d for n, d in strategies.items() if "/" not in n and d.get("fidelity_kl") is not None}
    if not measured:
        return FALLBACK, (f"no fidelity was measured (the whole model did not load or no held-out context "
                          f"holds a new term); {FALLBACK} is written by default")
    ok = {n: d for n, d in measured.items() if bounded(d)}
    pool = ok or measured
    ranked = sorted(pool, key=lambda n: _key(pool[n]))
    best = ranked[0]
    d = pool[best]
    parts = [f"{best}: fidelity KL {d['fidelity_kl']:.3g} nats at the term, top-1 agreement "
             f"{100 * (d.get('fidelity_top1') or 0):.0f} %"]
    if len(ranked) > 1:
        nxt = pool[ranked[1]]
        ratio = nxt["fidelity_kl"] / d["fidelity_kl"] if d["fidelity_kl"] > 0 else float("inf")
        parts.append(f"next best {ranked[1]} {nxt['fidelity_kl']:.3g} nats ({ratio:.2f}× higher)")
    if d.get("kl") is not None:
        parts.append(f"disturbance KL {d['kl']:.2g} nats on old text (bound {KL_BOUND})")
    left = sorted(set(measured) - set(ok))
    if ok and left:
        parts.append(f"over the disturbance bound: {', '.join(left)}")
    if not ok:
        parts.append(f"no strategy kept the disturbance under KL {KL_BOUND} and mass {MASS_BOUND}")
    return best, "; ".join(parts)


def ordered(strategies: dict[str, dict[str, Any]], first: str) -> dict[str, dict[str, Any]]:
    """The strategies, ``first`` first, the rest by fidelity KL (unmeasured last)."""
    rest = sorted((n for n in strategies if n != first),
                  key=lambda n: (strategies[n].get("fidelity_kl") is None, strategies[n].get("fidelity_kl") or 0.0))
    return {n: strategies[n] for n in ([first] if first in strategies else []) + rest}
