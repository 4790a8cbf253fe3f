"""Per-row indicators of under-trained token rows, and one score that combines them.

A row that the training never (or rarely) updated keeps traces of that: it is small (weight decay
shrank it), it points where the other never-seen rows point, and it sits apart from the trained
rows or in a tight knot of other untrained ones. The indicators, one value per matrix row:

``in_norm``, ``out_norm``
    ``|E_i|`` and ``|U_i|`` (L2) of the input embedding and, when untied, the output matrix.
``zero_row``
    every entry ``|x| ≤ 1e-16`` (in the input row, or in the output row when untied).
``ref_sim``
    the Magikarp reference indicator (Land & Bartolo 2024, "Fishing for Magikarp: Automatically
    Detecting Under-trained Tokens in Large Language Models", §3.1): remove the first principal
    component ``c`` from every row of ``M`` (the output matrix when untied, else the tied matrix),
    ``m'_i = m_i − (m_i·c) c``, take the mean ``r`` of ``m'`` over rows known to be unused, and
    report ``cos(m'_i, r)``. Example: rows (1, 0.1), (1, 0.2), (1, −0.2) with c = (1, 0) and the
    last row as reference: ``m'`` = (0, 0.1), (0, 0.2), (0, −0.2), so ref_sim = −1, −1, 1.
    ``c`` is the top right-singular vector of the normal rows (no centring: it is the shared
    component that all rows carry, which would otherwise make every cosine close to 1).
``isolation``, ``knn_sim_k``
    ``1 − mean_j cos(x_i, x_j)`` over the k nearest neighbours, and the similarity to the k-th.

Reference set (``reference_ids``): given ids, else padding rows past the tokenizer, tokens named
like placeholders (``<|reserved_special_token_3|>``, ``[unused7]``, ``<|extra_12|>``,
``<unused5>``) and zero rows. With none, ``ref_sim`` is NaN and the score uses the others.

Score (``undertrained_score``, higher = more under-trained): the mean of robust z-scores
``z(v) = (v − median) / (1.4826 · MAD)`` fitted on *normal* rows, of

- ``−log ‖m_i − μ‖``, the distance from the mean trained row ``μ`` (of the output matrix when
  untied, else the tied matrix): rows training barely moved stay near the common centre;
- the *knot* term ``1 − isolation`` = mean cosine to the k nearest rows: never-seen rows receive
  the same gradient (only the softmax denominator's push) and collapse together — MiniLM's
  ``[unusedN]`` rows have neighbour cosine ≈ 0.99, SmolLM2's code-artifact merges likewise;
- ``ref_sim`` when a reference set exists.

Far-isolated rows (high ``isolation``) are reported but do not raise the score: on SmolLM2 they
are frequent short word-starts (`` Le``, `` co``), well trained and merely distinctive.
1.4826·MAD estimates the standard deviation of a normal distribution, so z = 3 is "three
sigmas" while a few hundred outliers do not move the scale. Zero rows are always flagged.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: zero-row tolerance: exact zeros and denormal dust (a trained fp32/bf16 weight is never this small)
ZERO_TOL = 1e-16
#: names of placeholder tokens that tokenizers reserve and training data never contains
UNUSED_NAME = re.compile(r"^(<\|reserved_special_token_\d+\|>|\[unused\d+\]|<\|extra_\d+\|>|<unused\d+>"
                         r"|<\|reserved_\d+\|>|<\|unused_?\d+\|>)$")
#: default flag threshold on ``undertrained_score`` (see :data:`THRESHOLD_NOTE`)
DEFAULT_THRESHOLD = 2.5
THRESHOLD_NOTE = ("score ≥ 2.5: the indicators' mean robust z-score is 2.5 sigmas above the typical normal row. "
                  "Measured: MiniLM flags 993 of its 994 [unusedN] rows, plus 5.6 % of other normal rows, mostly "
                  "CJK, Hangul jamo and Tamil pieces of this English model; SmolLM2 flags 17 of 48 822 normal "
                  "rows, all code-artifact merges such as 'MetaInfoClass', ' InstancePreprocess', 'swigfaiss'")
#: rows per block when scanning a matrix (keeps temporaries to ~ block × d floats)
BLOCK = 16384


@dataclass
class Reference:
    """The rows taken as known-unused for the Magikarp indicator."""

    #: row ids (sorted)
    ids: list[int]
    #: where they came from: ``given``, ``padding``, ``unused-names``, ``zero-rows`` (joined by
    #: ``+``), or ``none``
    source: str


@dataclass
class Indicators:
    """Per-row indicator columns (numpy arrays of length n_rows) and what was fitted."""

    in_norm: np.ndarray
    #: NaN everywhere when tied
    out_norm: np.ndarray
    zero_row: np.ndarray
    #: Magikarp reference similarity, higher = more like the unused rows; NaN without reference
    ref_sim: np.ndarray
    #: 1 − mean cosine to the k nearest rows, higher = more isolated
    isolation: np.ndarray
    #: cosine to the k-th nearest row, lower = more isolated
    knn_sim_k: np.ndarray
    #: combined robust z-score, higher = more under-trained
    undertrained_score: np.ndarray
    flagged: np.ndarray
    threshold: float
    reference: Reference
    #: median and scale per component (fitted on normal rows), for the summary
    fit: dict[str, Any] = field(default_factory=dict)


def zero_rows(m: "torch.Tensor", tol: float = ZERO_TOL) -> np.ndarray:
    """True where every entry of the row has ``|x| ≤ tol``."""
    import torch

    out = [(m[s:s + BLOCK].abs() <= tol).all(dim=1) for s in range(0, m.shape[0], BLOCK)]
    return torch.cat(out).cpu().numpy()


def reference_ids(categories: list[str], strings: list[str], zero: np.ndarray,
                  unused_ids: list[int] | None = None) -> Reference:
    """Find the known-unused rows (see the module docstring); ``unused_ids`` overrides."""
    n = len(categories)
    if unused_ids is not None:
        ids = sorted({int(i) for i in unused_ids if 0 <= int(i) < n})
        return Reference(ids, "given" if ids else "none")
    found: dict[str, set[int]] = {
        "padding": {i for i, c in enumerate(categories) if c == "padding"},
        "unused-names": {i for i, s in enumerate(strings) if s and UNUSED_NAME.match(s)},
        "zero-rows": {int(i) for i in np.flatnonzero(zero)},
    }
    ids = sorted(set().union(*found.values()))
    source = "+".join(k for k, v in found.items() if v) or "none"
    return Reference(ids, source)


#: rows sampled to estimate the first principal direction (the shared component of an uncentred
#: embedding matrix is carried by every row; 32k rows pin it down to ~1e-3 in angle)
DIRECTION_SAMPLE = 32768


def first_direction(m: "torch.Tensor", rows: np.ndarray, iters: int = 30, seed: int = 0) -> "torch.Tensor":
    """Top right-singular vector of ``m[rows]`` by power iteration on ``MᵀM``.

    At most :data:`DIRECTION_SAMPLE` rows (a seeded sample) are converted to float32 once; the
    iteration then costs two (s, d) mat-vecs per step. The sign is fixed so that the mean row
    projects positively (reproducible output).
    """
    import torch

    g = torch.Generator().manual_seed(seed)
    rows = np.asarray(rows)
    if len(rows) > DIRECTION_SAMPLE:
        rows = np.sort(rows[torch.randperm(len(rows), generator=g)[:DIRECTION_SAMPLE].numpy()])
    x = m[torch.as_tensor(rows, device=m.device)].float()                   # (s, d)
    v = torch.randn(m.shape[1], generator=g).to(m.device)
    for _ in range(iters):
        w = x.T @ (x @ v)
        v = w / torch.linalg.vector_norm(w).clamp_min(1e-30)
    v = v.double()
    return v if float(x.double().sum(0) @ v) >= 0 else -v


def reference_similarity(m: "torch.Tensor", ref: list[int], direction: "torch.Tensor") -> np.ndarray | None:
    """``cos(m'_i, mean_{j∈ref} m'_j)`` with ``m' = m − (m·c) c`` (Magikarp, see module docstring)."""
    import torch

    c = direction
    r = m[torch.as_tensor(ref, device=m.device)].double()
    r = r - (r @ c).unsqueeze(1) * c
    r = r.mean(0)
    if float(torch.linalg.vector_norm(r)) < 1e-12:
        return None  # the reference rows are all zero (or cancel out): no direction to compare to
    r = r / torch.linalg.vector_norm(r)
    out = []
    for s in range(0, m.shape[0], BLOCK):
        blk = m[s:s + BLOCK].double()
        blk = blk - (blk @ c).unsqueeze(1) * c
        nrm = torch.linalg.vector_norm(blk, dim=1)
        out.append(torch.where(nrm > 0, (blk @ r) / nrm.clamp_min(1e-300), torch.zeros_like(nrm)))
    return torch.cat(out).cpu().numpy()


def centre_distances(m: "torch.Tensor", fit_rows: np.ndarray) -> np.ndarray:
    """``‖m_i − μ‖₂`` per row, ``μ`` the mean of ``fit_rows``; float32 in row blocks.

    >>> import torch; centre_distances(torch.tensor([[1.0, 0.0], [3.0, 0.0]]), np.array([0, 1])).tolist()
    [1.0, 1.0]
    """
    import torch

    idx = torch.from_numpy(np.asarray(fit_rows))
    mu = torch.zeros(m.shape[1], dtype=torch.float64)
    for s in range(0, len(idx), BLOCK):
        mu += m[idx[s:s + BLOCK].to(m.device)].double().sum(0).cpu()
    mu = (mu / max(len(idx), 1)).float().to(m.device)
    out = np.empty(m.shape[0], dtype=np.float64)
    for s in range(0, m.shape[0], BLOCK):
        out[s:s + BLOCK] = torch.linalg.vector_norm(m[s:s + BLOCK].float() - mu, dim=1).cpu().numpy()
    return out


def robust_z(values: np.ndarray, fit: np.ndarray) -> tuple[np.ndarray, float, float]:
    """``(v − median) / (1.4826 · MAD)`` with median and MAD over ``values[fit]``.

    Example: fit values [1, 2, 3, 4, 100] → median 3, MAD 1, so 100 ↦ (100 − 3) / 1.4826 ≈ 65.4.
    Returns (z, median, scale). A zero MAD falls back to the standard deviation, then to 1.
    """
    v = values[fit]
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return np.full_like(values, np.nan, dtype=np.float64), math.nan, math.nan
    med = float(np.median(v))
    scale = 1.4826 * float(np.median(np.abs(v - med)))
    if not scale > 0:
        scale = float(np.std(v)) or 1.0
    return (values - med) / scale, med, scale


def compute_indicators(embed: "torch.Tensor", output: "torch.Tensor | None", categories: list[str],
                       strings: list[str], neighbor_sims: np.ndarray, *, unused_ids: list[int] | None = None,
                       threshold: float = DEFAULT_THRESHOLD) -> Indicators:
    """All indicator columns for one model. ``neighbor_sims`` (n, k) from the kNN graph of ``embed``.

    ``categories`` one per row (``normal`` rows fit the z-scores); ``strings`` the display string
    per row (for placeholder names).
    """
    n = embed.shape[0]
    cats = np.asarray(categories)
    normal = cats == "normal"
    if not normal.any():
        normal = np.ones(n, dtype=bool)
    from embscope.tables import row_norms

    in_norm = row_norms(embed).astype(np.float64)
    zero = zero_rows(embed)
    if output is not None:
        out_norm = row_norms(output).astype(np.float64)
        zero |= zero_rows(output)
    else:
        out_norm = np.full(n, np.nan)
    m = output if output is not None else embed
    ref = reference_ids(categories, strings, zero, unused_ids)

    # The direction is fitted on normal, non-reference rows (the trained population).
    fit_rows = normal.copy()
    fit_rows[ref.ids] = False
    if not fit_rows.any():
        fit_rows = np.ones(n, dtype=bool)
    if ref.ids:
        c = first_direction(m, np.flatnonzero(fit_rows))
        ref_sim = reference_similarity(m, ref.ids, c)
    else:
        ref_sim = None
    has_ref = ref_sim is not None
    if not has_ref:
        ref_sim = np.full(n, np.nan)

    sims = np.asarray(neighbor_sims, dtype=np.float64)
    isolation = 1.0 - sims.mean(axis=1)
    knn_k = sims[:, -1].copy()

    # Distance from the trained centre, ‖m_i − μ‖ with μ the mean normal row: rows that training
    # barely moved stay near where initialisation and weight decay left them, close to μ.
    centre_dist = centre_distances(m, np.flatnonzero(fit_rows))
    parts = {"neg_log_centre_dist": -np.log(np.maximum(centre_dist, 1e-30)),
             "knot": -isolation}
    if has_ref:
        parts["ref_sim"] = ref_sim
    zs, fit = [], {}
    for name, v in parts.items():
        z, med, scale = robust_z(v, fit_rows)
        zs.append(z)
        fit[name] = {"median": med, "scale": scale}
    score = np.mean(np.vstack(zs), axis=0)
    flagged = (score >= threshold) | zero
    return Indicators(in_norm=in_norm, out_norm=out_norm, zero_row=zero, ref_sim=ref_sim,
                      isolation=isolation, knn_sim_k=knn_k, undertrained_score=score, flagged=flagged,
                      threshold=threshold, reference=ref, fit=fit)
