"""Per-row evidence of under-training, each indicator with its side, and one score that any of them raises.

A row that the training never (or rarely) updated keeps traces of that: it is small (weight decay
shrank it and no gradient grew it back), it points where the other never-seen rows point, and it
sits in a tight knot with other untrained rows. One value per matrix row:

``in_norm`` — side **low**
    ``‖E_i‖₂`` of the input embedding (tied and untied models). Evidence ``z_in_norm`` is the robust
    z of ``−log ‖E_i‖``: a row at half the typical norm has ``−log`` larger by 0.69.
``out_norm`` — side **low**, untied models only
    ``‖U_i‖₂`` of the output (LM-head) row; ``z_out_norm`` as above.
``magikarp_sim`` — side **high**, needs a reference set (:mod:`embscope.geometry.reference`)
    Magikarp's indicator exactly as published (Land & Bartolo 2024, "Fishing for Magikarp:
    Automatically Detecting Under-trained Tokens in Large Language Models", §3.1; the
    ``cosine_distance_without_first_pc`` of ``cohere-ai/magikarp``): on the unembedding ``U`` (the
    tied matrix when tied), ``c`` = first principal component of the *centred* matrix (all rows,
    as a PCA fit), every row loses its component along ``c``: ``u'_i = u_i − (u_i·c) c`` (the rows
    themselves are not centred), ``r`` = mean of ``u'_j`` over the reference rows, and
    ``magikarp_sim_i = cos(u'_i, r)``. Magikarp reports ``1 − magikarp_sim`` (a distance).
    Example: rows (1, 0.1), (1, 0.2), (1, −0.2), (1, −0.1) have c = (0, 1) (the spread is along y),
    so u' = (1, 0) for all and every similarity is 1: the indicator sees only what varies.
``knot`` — side **high**
    mean cosine ``s`` to the k nearest rows of the input embedding (the kNN graph): never-seen rows
    get the same gradient (only the softmax denominator's push) and collapse together — MiniLM's
    ``[unusedN]`` rows sit at s ≈ 0.87 (median row 0.40), SmolLM2's code-artifact merges such as
    ``MetaInfoClass`` at s = 1.000. The evidence is the robust z of ``−log(1 − s)``: cosine is capped
    at 1, so on an anisotropic matrix (SmolLM2: median s = 0.70, robust sd 0.08) a raw z could never
    pass 3.9; the log spreads the last few hundredths (0.99 → 4.6, 0.999 → 6.9).
``collapse`` — the gate on ``knot`` (no evidence of its own), needs the neighbours' ids
    Mean relative distance to the ⌈k/2⌉ nearest rows, ``δ_i = mean_j ‖x_i − x_j‖ / ‖x_i‖`` (half
    the neighbourhood: a collapsed cluster of fewer than k + 1 rows still counts); with
    ``r = ‖x_j‖/‖x_i‖`` and ``s`` the cosine, ``‖x_i − x_j‖²/‖x_i‖² = 1 + r² − 2rs``, so it needs
    only the norms and the graph's cosines. A high ``knot`` has two causes that look alike to the
    cosine alone: rows that training never moved apart — they received the same update (a tied
    row that is never a target gets only the softmax normaliser's push ``p_i·h``, the same
    direction for all of them; Land & Bartolo 2024, §2) and sit at one point, with *equal norms*
    and a tiny spread — and a trained family of near-synonyms (runs of spaces, quote-punctuation
    pieces, month names in one script), whose rows training made similar but kept apart, with
    norms that differ by 5–20 %. The knot counts only when the neighbourhood is a collapse,
    ``δ ≤`` :data:`COLLAPSE_SPREAD`; otherwise ``family`` replaces ``knot`` in the reason, and a
    row that nothing else flags is not flagged. Example: ten neighbours at cosine 0.999 and equal norms
    give δ = √0.002 = 0.045 (a collapse); cosine 0.93 with norms 10 % apart give
    √(1 + 1.105² − 2·1.105·0.93) = 0.41 (a family). On SmolLM2 the code-artifact merges that
    prompting confirms have δ ≤ 0.17; the runs of spaces and newlines it does not, 0.3–0.45.
``drift`` — the gate on ``magikarp`` (no evidence of its own)
    Where the row's similarity lies between the trained rows and the known-unused ones:
    ``position_i = (magikarp_sim_i − m_trained) / (m_ref − m_trained)`` with the medians of the
    trained rows and of the reference rows (0: a typical trained row, 1: a typical unused row).
    A never-trained row sits with the unused rows (Gemma-3-270M: ``<unusedN>`` at median 0.990,
    the collapsed code identifiers and cuneiform signs at 0.989–0.991); a row that training moved
    partway has drifted toward the trained rows, and half of those can still be produced. The
    Magikarp evidence counts only at ``position ≥`` :data:`MAGIKARP_POSITION` (2/3); below, its
    reason reads ``drift`` and a row that nothing else flags is not flagged. Example (Gemma-3-270M:
    m_trained 0.297, m_ref 0.990): the cut is at similarity 0.759; ``z ≥ 4`` alone sat at 0.62.
    The 2/3 was chosen on the first 64 rows of a random sample of Gemma-3-270M's flags (precision
    0.83 at 1/2, 0.93 at 2/3) and measured on the rest (docs/undertrained.md).
``isolation`` — side **high**, its own flag (``isolated``), not part of the score
    ``1 − cos`` to the single nearest row: far from every row. On SmolLM2 the most isolated rows
    are frequent short word-starts, well trained and merely distinctive, so isolation alone says
    "look at this row", not "under-trained".

Every evidence value is a robust z against the *trained* rows (category ``normal`` and not in the
reference set): ``z = (v − median) / max(1.4826·MAD, floor)``, signed so that positive means
"more like an untrained row". 1.4826·MAD estimates a normal distribution's standard deviation
without letting a few hundred outliers move it; the floor (:data:`MIN_SCALE`) keeps a matrix whose
rows all have nearly the same norm (Gemma-3: median 1.0311, IQR 0.0005) from turning a 0.1 %
difference into "ten sigmas".

Score: ``undertrained_score = max(z_in_norm, z_out_norm, z_magikarp, z_knot)`` over the
indicators that exist: one strong signal is enough (a mean would dilute it: a row that only has a
weak input row, with a normal head and neighbourhood, would average to a third of its evidence).
``flagged`` = a zero row, or an indicator at or above the threshold that passes its gate: ``knot``
only as a collapse (``δ ≤`` :data:`COLLAPSE_SPREAD`), ``magikarp`` only at ``position ≥``
:data:`MAGIKARP_POSITION`; the norms have no gate. ``flag_reason`` names what fired, e.g.
``"in_norm+knot"``, ``"zero"``, ``"isolated"``, ``"family"`` (knot without collapse), ``"drift"``
(magikarp short of the unused rows); a row whose reason holds only ``family``/``drift`` is not
flagged. Prompting (:mod:`embscope.geometry.verify`) checks those rows too. What the cut means on each run (scale, share of
trained rows flagged per indicator) is measured and written into :attr:`Indicators.note`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from embscope.geometry.records import IndicatorFit, IndicatorRun, IndicatorsRecord

from embscope.geometry.principal import (_first_pc_exact, first_principal_component,  # noqa: F401
                                         magikarp_similarity, top_eigvec_subspace)
from embscope.geometry.reference import Reference, discover_reference
from embscope.models.rows import row_norms, zero_rows

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from embscope.tokenizer.base import Vocabulary

#: zero-row tolerance: exact zeros and denormal dust (a trained fp32/bf16 weight is never this small)
ZERO_TOL = 1e-16
#: default flag threshold on ``undertrained_score``, in robust sigmas of the trained rows
DEFAULT_THRESHOLD = 4.0
#: smallest robust scale per indicator: 0.02 in log-norm (a 2 % norm difference is never more than one
#: sigma), 0.01 in cosine, 0.05 in −log(1 − knot)
MIN_SCALE = {"in_norm": 0.02, "out_norm": 0.02, "magikarp": 0.01, "knot": 0.05, "isolation": 0.01}
#: evidence columns that raise the score, in report order
SCORED = ("in_norm", "out_norm", "magikarp", "knot")
#: largest mean relative distance to the k nearest rows at which a knot counts as a collapse
#: (δ = 0.2: cosine 0.98 at equal norms, or norms ±20 % at cosine 1)
COLLAPSE_SPREAD = 0.2
#: least position of a row's Magikarp similarity between the trained rows' median (0) and the
#: reference rows' median (1) at which the Magikarp indicator counts (see ``drift``)
MAGIKARP_POSITION = 2 / 3


@dataclass
class Indicators:
    """Per-row indicator columns (numpy arrays of length n_rows) and what was fitted."""

    in_norm: np.ndarray
    #: NaN everywhere when tied
    out_norm: np.ndarray
    zero_row: np.ndarray
    #: Magikarp's indicator, higher = more like the reference rows; NaN without reference
    magikarp_sim: np.ndarray
    #: mean cosine to the k nearest rows (higher = collapsed neighbourhood)
    knot: np.ndarray
    #: 1 − cosine to the nearest row (higher = farther from every row)
    isolation: np.ndarray
    #: cosine to the k-th nearest row
    knn_sim_k: np.ndarray
    #: evidence name (``in_norm``, ``out_norm``, ``magikarp``, ``knot``, ``isolation``) -> robust z,
    #: positive toward "untrained"; only the indicators that exist on this model
    z: dict[str, np.ndarray]
    #: max of the scored evidence, higher = more under-trained
    undertrained_score: np.ndarray
    flagged: np.ndarray
    #: z_isolation ≥ threshold (its own flag, not part of ``flagged``)
    isolated: np.ndarray
    #: what fired per row (``"knot+magikarp"``, ``"zero"``, ``"isolated"``), None where nothing did
    flag_reason: list[str | None]
    threshold: float
    reference: Reference
    #: median and scale per evidence (fitted on trained rows), rows fitted, per-indicator shares
    fit: dict[str, Any] = field(default_factory=dict)
    #: what the cut means on this run (one paragraph)
    note: str = ""
    #: mean relative distance ‖x_i − x_j‖/‖x_i‖ to the ⌈k/2⌉ nearest rows (the collapse gate); None
    #: without the neighbours' ids
    spread: np.ndarray | None = None


def robust_z(values: np.ndarray, fit: np.ndarray, floor: float = 0.0) -> tuple[np.ndarray, float, float]:
    """``(v − median) / max(1.4826 · MAD, floor)`` with median and MAD over ``values[fit]``.

    Example: fit values [1, 2, 3, 4, 100] → median 3, MAD 1, so 100 ↦ (100 − 3) / 1.4826 ≈ 65.4.
    Returns (z, median, scale). A zero scale (and no floor) falls back to the standard deviation,
    then to 1.
    """
    v = values[fit]
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return np.full_like(values, np.nan, dtype=np.float64), math.nan, math.nan
    med = float(np.median(v))
    scale = max(1.4826 * float(np.median(np.abs(v - med))), floor)
    if not scale > 0:
        scale = float(np.std(v)) or 1.0
    return (values - med) / scale, med, scale


def _back(name: str, med: float) -> float:
    """The fitted median on the indicator's own scale (norm, cosine)."""
    if not math.isfinite(med):
        return med
    if name.endswith("_norm"):
        return math.exp(-med)
    return 1.0 - math.exp(-med) if name == "knot" else med


def transform(name: str, v: np.ndarray) -> np.ndarray:
    """The scale an indicator's robust z is taken on: ``−log`` of the norms, ``−log(1 − knot)``
    (capped at 1 − 1e-6), the value itself otherwise. Example: knot 0.99 → 4.61."""
    if name.endswith("_norm"):
        return -np.log(np.maximum(v, 1e-30))
    if name == "knot":
        return -np.log(np.maximum(1.0 - v, 1e-6))
    return v


def evidence(raw: dict[str, np.ndarray], fit_rows: np.ndarray,
             fixed: dict[str, tuple[float, float]] | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Robust z per indicator, signed toward "untrained" (norms: low side, via ``−log``).

    ``fixed``: indicator -> (median, scale) on the transformed scale, used instead of fitting them
    on ``raw`` (the certified graph's sample estimates, :mod:`embscope.geometry.certify`)."""
    zs: dict[str, np.ndarray] = {}
    fit: dict[str, Any] = {}
    for name, v in raw.items():
        low = name.endswith("_norm")
        x = transform(name, v)
        if fixed and name in fixed:
            med, scale = fixed[name]
            z = (x - med) / scale
        else:
            z, med, scale = robust_z(x, fit_rows, MIN_SCALE.get(name, 0.0))
        zs[name] = z
        fit[name] = {"side": "low" if low else "high",
                     "median": _back(name, med), "scale": scale,
                     "scale_of": "-log(norm)" if low else "-log(1-knot)" if name == "knot" else "value"}
    return zs, fit


def fit_record(fit: dict[str, Any]) -> IndicatorsRecord:
    """The summary's record of :attr:`Indicators.fit` (:func:`evidence`'s fits, the drift gate's
    reference median, :func:`threshold_note`'s shares); a median or scale that is not finite is null."""
    def finite(v):
        return float(v) if v is not None and math.isfinite(v) else None

    def one(f: dict[str, Any]) -> IndicatorFit:
        return IndicatorFit(side=f["side"], median=finite(f["median"]), scale=finite(f["scale"]),
                            scale_of=f["scale_of"], reference_median=finite(f.get("reference_median")))

    run = fit.get("run")
    return IndicatorsRecord(**{name: one(f) for name, f in fit.items() if name != "run"},
                            run=IndicatorRun(**run) if run is not None else None)


def reasons(zs: dict[str, np.ndarray], zero: np.ndarray, threshold: float) -> list[str | None]:
    """Per row: the indicators at or above ``threshold`` joined by ``+`` (``zero``, ``isolated`` too)."""
    n = len(zero)
    names = [k for k in (*SCORED, "isolation") if k in zs]
    hits = {k: np.nan_to_num(zs[k], nan=-np.inf) >= threshold for k in names}
    any_hit = zero.copy()
    for h in hits.values():
        any_hit |= h
    out: list[str | None] = [None] * n
    for i in np.flatnonzero(any_hit):
        parts = ["zero"] if zero[i] else []
        parts += ["isolated" if k == "isolation" else k for k in names if hits[k][i]]
        out[i] = "+".join(parts)
    return out


def threshold_note(zs: dict[str, np.ndarray], fit_rows: np.ndarray, flagged: np.ndarray,
                   threshold: float) -> tuple[str, dict[str, Any]]:
    """What ``score ≥ threshold`` means on this run: the scale and the share of trained rows per
    indicator and in all (the max of several z-scores flags more than any single one)."""
    n_fit = int(fit_rows.sum())
    shares = {k: float((np.nan_to_num(zs[k][fit_rows], nan=-np.inf) >= threshold).mean()) if n_fit else 0.0
              for k in zs}
    share = float(flagged[fit_rows].mean()) if n_fit else 0.0
    gauss = 0.5 * math.erfc(threshold / math.sqrt(2))
    scored = [k for k in SCORED if k in zs]
    per = ", ".join(f"{k} {100 * shares[k]:.2f} %" for k in scored)
    iso = f"; isolation (own flag) {100 * shares['isolation']:.2f} %" if "isolation" in shares else ""
    note = (f"score ≥ {threshold:g}: at least one of {', '.join(scored)} lies {threshold:g} robust sigmas "
            f"(1.4826·MAD of the {n_fit:,} trained rows, floored) beyond the trained median on its side. "
            f"On this run the indicators flag {int(flagged[fit_rows].sum()):,} of {n_fit:,} trained rows "
            f"({100 * share:.2f} %; per indicator: {per}{iso}); a Gaussian would put "
            f"{100 * gauss:.3f} % beyond {threshold:g} sigmas per indicator")
    return note, {"trained_rows": n_fit, "trained_flagged_share": round(share, 5),
                  "per_indicator_share": {k: round(v, 5) for k, v in shares.items()},
                  "gaussian_tail": gauss}


def neighbour_spread(norms: np.ndarray, neighbors: np.ndarray, sims: np.ndarray) -> np.ndarray:
    """``δ_i = mean_j ‖x_i − x_j‖ / ‖x_i‖`` over the k nearest rows, from norms and cosines:
    ``√(1 + r² − 2rs)`` with ``r = ‖x_j‖/‖x_i‖`` (see ``collapse`` in the module docstring).
    Example: norms 1 and 1, cosine 0.98 → √0.04 = 0.2. Zero rows get NaN."""
    a = np.asarray(norms, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = a[np.asarray(neighbors)] / a[:, None]
        d = np.sqrt(np.maximum(1.0 + r * r - 2.0 * r * np.asarray(sims, dtype=np.float64), 0.0))
        out = d.mean(axis=1)
    out[~(a > 0)] = np.nan
    return out


@dataclass
class Prepared:
    """What the indicators need besides the kNN graph (computed once; the certified graph uses it
    before its graph exists)."""

    in_norm: np.ndarray
    out_norm: np.ndarray
    zero: np.ndarray
    reference: Reference
    #: rows the robust z's are fitted on: ``normal``, not in the reference, not zero
    fit_rows: np.ndarray
    #: Magikarp's similarity, NaN without a reference
    magikarp: np.ndarray
    #: whether Magikarp's indicator exists on this model
    has_magikarp: bool
    tied: bool


def prepare(embed: "torch.Tensor", output: "torch.Tensor | None", categories: Sequence[str],
            strings: Sequence[str], *, vocab: "Vocabulary | None" = None,
            unused_ids: Sequence[int] | None = None) -> Prepared:
    """Norms, zero rows, the reference set, the rows that fit the z's and Magikarp's similarity."""
    n = embed.shape[0]
    cats = np.asarray(categories)
    in_norm = row_norms(embed).astype(np.float64)
    zero = zero_rows(embed, ZERO_TOL)
    if output is not None:
        out_norm = row_norms(output).astype(np.float64)
        zero |= zero_rows(output, ZERO_TOL)
    else:
        out_norm = np.full(n, np.nan)
    ref = discover_reference(categories, strings, zero, vocab, unused_ids)

    fit_rows = cats == "normal"
    fit_rows[ref.ids] = False
    fit_rows &= ~zero
    if not fit_rows.any():
        fit_rows = ~zero if (~zero).any() else np.ones(n, dtype=bool)

    mk = magikarp_similarity(output if output is not None else embed, ref.ids) if ref.ids else None
    magikarp = np.full(n, np.nan) if mk is None else mk
    return Prepared(in_norm=in_norm, out_norm=out_norm, zero=zero, reference=ref, fit_rows=fit_rows,
                    magikarp=magikarp, has_magikarp=mk is not None, tied=output is None)


def _raw(prep: Prepared, knot: np.ndarray | None = None, isolation: np.ndarray | None = None) -> dict[str, np.ndarray]:
    raw = {"in_norm": prep.in_norm}
    if not prep.tied:
        raw["out_norm"] = prep.out_norm
    if prep.has_magikarp:
        raw["magikarp"] = prep.magikarp
    if knot is not None:
        raw["knot"] = knot
    if isolation is not None:
        raw["isolation"] = isolation
    return raw


def _drift(hits_mk: np.ndarray, prep: Prepared, fit: dict[str, Any]) -> np.ndarray:
    """Rows whose Magikarp evidence fired but stop short of the unused rows (the ``drift`` gate);
    records the reference rows' median in ``fit``."""
    live_ref = [i for i in prep.reference.ids if not prep.zero[i]]  # a zero row has no direction
    med_ref = float(np.nanmedian(prep.magikarp[live_ref])) if live_ref else math.nan
    med_fit = fit["magikarp"]["median"]
    fit["magikarp"]["reference_median"] = med_ref
    if not med_ref > med_fit:  # (NaN compares false: no gate)
        return np.zeros_like(hits_mk)
    position = (prep.magikarp - med_fit) / (med_ref - med_fit)
    return hits_mk & ~(position >= MAGIKARP_POSITION)


def graph_free_flags(prep: Prepared, threshold: float = DEFAULT_THRESHOLD) -> np.ndarray:
    """Rows flagged without the kNN graph: zero rows, and the norms' and Magikarp's evidence at or
    above ``threshold`` (Magikarp after its gate) — exactly the flags :func:`compute_indicators`
    raises from those indicators, whatever the graph."""
    zs, fit = evidence(_raw(prep), prep.fit_rows)
    flagged = prep.zero.copy()
    for name, z in zs.items():
        hit = np.nan_to_num(z, nan=-np.inf) >= threshold
        if name == "magikarp":
            hit &= ~_drift(hit, prep, fit)
        flagged |= hit
    return flagged


def collapse_spread(prep_norms: np.ndarray, neighbors: np.ndarray, sims: np.ndarray) -> np.ndarray:
    """The collapse gate's δ over the ⌈k/2⌉ nearest rows (:func:`neighbour_spread`)."""
    half = max(1, math.ceil(sims.shape[1] / 2))  # the collapse must hold half the neighbourhood
    return neighbour_spread(prep_norms, np.asarray(neighbors)[:, :half], np.asarray(sims)[:, :half])


@dataclass
class Neighbors:
    """What the kNN graph of ``embed`` gives :func:`compute_indicators`."""

    #: (n, k) cosine to each row's k nearest rows, sorted descending
    sims: np.ndarray
    #: (n, k) the same graph's row ids: turns on the collapse gate (None: no gate)
    ids: np.ndarray | None = None
    #: {``knot``/``isolation``: (median, scale)} on the transformed scale, used instead of fitting
    #: them on these rows (the certified graph's sample estimates); None: fitted here
    fit: dict[str, tuple[float, float]] | None = None


def compute_indicators(embed: "torch.Tensor", output: "torch.Tensor | None", categories: Sequence[str],
                       strings: Sequence[str], graph: "Neighbors | np.ndarray", *, vocab: "Vocabulary | None" = None,
                       unused_ids: Sequence[int] | None = None, threshold: float = DEFAULT_THRESHOLD,
                       prepared: Prepared | None = None) -> Indicators:
    """All indicator columns for one model. ``graph``: the kNN graph of ``embed``
    (:class:`Neighbors`: the (n, k) cosines sorted descending, the ids for the collapse gate, the
    fixed fits), or the (n, k) cosines alone (no collapse gate, fits from these rows);
    ``categories`` one per row (``normal`` rows not in the reference fit the
    z-scores); ``strings`` the display string per row (placeholder names); ``vocab`` finds byte
    tokens for the reference set. ``prepared``: :func:`prepare`'s result, when already computed.
    """
    if not isinstance(graph, Neighbors):
        graph = Neighbors(sims=graph)
    neighbors, knn_fit = graph.ids, graph.fit
    prep = prepared or prepare(embed, output, categories, strings, vocab=vocab, unused_ids=unused_ids)
    zero, fit_rows, ref, in_norm = prep.zero, prep.fit_rows, prep.reference, prep.in_norm

    sims = np.asarray(graph.sims, dtype=np.float64)
    knot = sims.mean(axis=1)
    isolation = 1.0 - sims[:, 0]
    zs, fit = evidence(_raw(prep, knot, isolation), fit_rows, fixed=knn_fit)

    scored = np.vstack([np.nan_to_num(zs[k], nan=-np.inf) for k in SCORED if k in zs])
    score = scored.max(axis=0)
    why = reasons(zs, zero, threshold)
    hits = {k: np.nan_to_num(zs[k], nan=-np.inf) >= threshold for k in SCORED if k in zs}
    spread = None
    if neighbors is not None:  # the collapse gate on the knot
        spread = collapse_spread(in_norm, neighbors, sims)
        family = hits["knot"] & ~(np.nan_to_num(spread, nan=np.inf) <= COLLAPSE_SPREAD)
        hits["knot"] = hits["knot"] & ~family
        for i in np.flatnonzero(family):
            why[i] = why[i].replace("knot", "family")
    if "magikarp" in hits:  # the position gate on the Magikarp indicator
        drift = _drift(hits["magikarp"], prep, fit)
        hits["magikarp"] = hits["magikarp"] & ~drift
        for i in np.flatnonzero(drift):
            why[i] = why[i].replace("magikarp", "drift")
    flagged = zero.copy()
    for h in hits.values():
        flagged |= h
    isolated = np.nan_to_num(zs["isolation"], nan=-np.inf) >= threshold
    note, shares = threshold_note(zs, fit_rows, flagged, threshold)
    fit["run"] = shares
    for tag in ("family", "drift"):
        fit["run"][f"{tag}_unflagged"] = int((np.asarray([w is not None and tag in w for w in why]) & fit_rows
                                              & ~flagged).sum())
    return Indicators(in_norm=in_norm, out_norm=prep.out_norm, zero_row=zero, magikarp_sim=prep.magikarp, knot=knot,
                      isolation=isolation, knn_sim_k=sims[:, -1].copy(), z=zs, undertrained_score=score,
                      flagged=flagged, isolated=isolated, flag_reason=why,
                      threshold=threshold, reference=ref, fit=fit, note=note, spread=spread)
