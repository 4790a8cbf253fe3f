"""RoPE maths read from a config: scaling parameters, per-pair wavelengths, extension bands.

RoPE (Su et al. 2021, "RoFormer", arXiv:2104.09864) rotates dimension pair ``i`` of a ``d``-dim
rotary head by angle ``p * theta**(-2i/d)`` at position ``p``; pair ``i`` therefore has wavelength

    lambda_i = 2*pi * theta**(2i/d),   i = 0 .. d/2 - 1

A pair whose wavelength exceeds the trained context never turned once in training; scaling
schemes (linear/PI, NTK "dynamic", YaRN arXiv:2309.00071, Llama-3 "llama3", LongRoPE
arXiv:2402.13753) stretch the long wavelengths. :mod:`embscope.context.summary` combines these with
the KV-cache and parameter figures; docs/context.md explains every field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from embscope.config import positive_int, positive_number
from embscope.errors import ModelFileError
from embscope.records import Record
ModelFileError

#: extension-ratio bands: (upper bound of max context / trained context, band, what it means)
BANDS = (
    (1.0, "none", "the maximum context is the trained context"),
    (2.0, "up to 2x", "positions reach up to twice the trained context"),
    (4.0, "up to 4x", "positions reach up to 4 times the trained context"),
    (8.0, "up to 8x", "positions reach up to 8 times the trained context"),
    (math.inf, "over 8x", "positions reach more than 8 times the trained context"),
)


def extension_band(ratio: float | None, declared: bool | None = None) -> tuple[str, str]:
    """(band, meaning) of an extension ratio ``max context / trained context``.

    The band says how far the positions are stretched past pre-training, nothing more. Whether
    that is a risk depends on whether the model was trained at the longer length, which the
    ratio cannot tell: ``declared`` (the config's ``max_position_embeddings`` covers the maximum
    context, as in Llama-3.1's 131072 with llama3 scaling from 8192) means the published model
    ships with that length — its authors adapted it (Llama-3.1: continued pre-training at 128k);
    ``declared=False`` (the scaling reaches past ``max_position_embeddings``, as with the YaRN
    block Qwen2.5 suggests adding) means the length rests on the scaling method alone.

    >>> extension_band(16.0, declared=True)[0]
    'over 8x'
    >>> extension_band(None)[0]
    'unknown'
    """
    if ratio is None:
        return "unknown", ("the config does not state the context the model was pre-trained at "
                           "(max_position_embeddings is only the configured maximum)")
    band, meaning = next((b, m) for top, b, m in BANDS if ratio <= top)
    if band == "none":
        return band, meaning
    if declared:
        meaning += ("; the config declares this length (max_position_embeddings), so the published "
                    "model was adapted to it: the band measures the stretch, not untrained positions")
    elif declared is False:
        meaning += ("; the scaling reaches past the configured max_position_embeddings, so quality "
                    "there rests on the scaling method alone: check long-context recall before relying on it")
    return band, meaning


def _scaling_dict(value: Any, key: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ModelFileError(f"config {key}={value!r} is not an object (e.g. {{\"rope_type\": \"linear\", "
                             "\"factor\": 2.0}); fix or remove it in config.json")
    return dict(value)


def rope_parameters(config: dict) -> dict:
    """One validated rope dict {rope_type, rope_theta, factor, ...} from v4 or v5 configs.

    v5 keeps everything in ``rope_parameters``, possibly per layer type
    (``{"full_attention": {...}, "sliding_attention": {...}}``); the full-attention entry decides
    long-context reach. v4 keeps ``rope_theta`` top-level and scaling in ``rope_scaling``.
    Raises ModelFileError for a non-object scaling entry, a non-numeric or non-positive
    ``factor``, or a ``rope_theta`` that is not a number > 1.
    """
    params = config.get("rope_parameters")
    if params is not None:
        params = _scaling_dict(params, "rope_parameters")
    if params:
        key = "rope_parameters"
        if all(isinstance(v, dict) for v in params.values()):
            name = "full_attention" if isinstance(params.get("full_attention"), dict) else next(iter(params))
            params, key = params[name], f"rope_parameters.{name}"
        out = dict(params)
        out.setdefault("rope_theta", config.get("rope_theta"))
    else:
        key = "rope_scaling"
        out = _scaling_dict(config.get("rope_scaling"), "rope_scaling")
        if config.get("rope_theta") is not None:
            out["rope_theta"] = config["rope_theta"]
    out["factor"] = positive_number(out, "factor", default=1.0, prefix=f"{key}.")
    out["rope_theta"] = positive_number(out, "rope_theta", minimum=1.0)
    for name in ("low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow"):
        positive_number(out, name, prefix=f"{key}.")
    positive_int(out, "original context", "original_max_position_embeddings", required=False,
                 where=f"config {key}:")
    return out


def rope_type(params: dict) -> str:
    kind = str(params.get("rope_type") or params.get("type") or "default").lower()
    return {"su": "longrope", "mrope": "default", "dynamic-ntk": "dynamic"}.get(kind, kind)


def rope_wavelengths(theta: float, rotary_dim: int) -> list[float]:
    """lambda_i = 2*pi*theta**(2i/d) for i in 0..d/2-1 (tokens per full turn of pair i).

    >>> [round(x, 2) for x in rope_wavelengths(10000.0, 4)]
    [6.28, 628.32]
    """
    return [2 * math.pi * theta ** (2 * i / rotary_dim) for i in range(rotary_dim // 2)]


def scaled_wavelengths(lam: list[float], kind: str, params: dict, *, theta: float, rotary_dim: int,
                       original: int, claimed: int) -> list[float]:
    """Wavelengths after the scaling type's frequency change (as transformers' rope init does it).

    - linear (position interpolation): every lambda * factor.
    - dynamic (NTK-aware): base becomes theta * (factor*L/L0 - (factor-1))**(d/(d-2)), taken at the
      claimed length L.
    - llama3: lambda < L0/high_freq_factor unchanged, > L0/low_freq_factor times factor, smooth
      blend between (Meta's Llama 3.1 rule; defaults low 1, high 4).
    - yarn: per-pair ramp between interpolation (lambda*factor) and extrapolation (lambda) set by
      beta_fast=32 / beta_slow=1 rotations within L0 (Peng et al. 2023, eq. for gamma).
    - longrope: lambda_i * long_factor[i].
    """
    factor = float(params.get("factor") or 1.0)
    if kind == "linear":
        return [x * factor for x in lam]
    if kind == "dynamic" and claimed > original:
        base = theta * ((factor * claimed / original) - (factor - 1)) ** (rotary_dim / (rotary_dim - 2))
        return rope_wavelengths(base, rotary_dim)
    if kind == "llama3":
        low_ff = float(params.get("low_freq_factor", 1.0))
        high_ff = float(params.get("high_freq_factor", 4.0))
        low_wl, high_wl = original / low_ff, original / high_ff
        out = []
        for wl in lam:
            if wl < high_wl:
                out.append(wl)
            elif wl > low_wl:
                out.append(wl * factor)
            else:  # blend inverse frequencies: (1-s)/factor + s, s = (L0/wl - low)/(high - low)
                s = (original / wl - low_ff) / (high_ff - low_ff) if high_ff != low_ff else 1.0
                out.append(wl / ((1 - s) / factor + s))
        return out
    if kind == "yarn":
        beta_fast = float(params.get("beta_fast") or 32)
        beta_slow = float(params.get("beta_slow") or 1)

        def corr_dim(rotations: float) -> float:  # pair index that turns `rotations` times in L0
            return rotary_dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

        low, high = corr_dim(beta_fast), corr_dim(beta_slow)
        if params.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, rotary_dim - 1)
        if high == low:
            high += 0.001  # avoid a zero-width ramp
        out = []
        for i, wl in enumerate(lam):
            ramp = min(max((i - low) / (high - low), 0.0), 1.0)  # 0: extrapolate, 1: interpolate
            inv = (1 - ramp) / wl + ramp / (wl * factor)
            out.append(1 / inv)
        return out
    if kind == "longrope":
        ext = params.get("long_factor") if claimed > original else params.get("short_factor")
        if isinstance(ext, list) and len(ext) == len(lam) and all(
                isinstance(f, (int, float)) and not isinstance(f, bool) and math.isfinite(f) and f > 0 for f in ext):
            return [x * float(f) for x, f in zip(lam, ext)]
    return list(lam)


def pairs_in_trained_range(lam: list[float], scaled: list[float], trained: int, claimed: int) -> int:
    """Rotary pairs whose angles up to the maximum context were all reached in training.

    Pair ``i`` qualifies when it turned a full circle within the trained context ``L0`` (raw
    ``lambda_i <= L0``: every angle was seen), or when its largest angle at the maximum context
    ``L`` after scaling, ``2*pi*L/lambda'_i``, is no larger than its largest trained angle,
    ``2*pi*L0/lambda_i``. Linear scaling with factor ``L/L0`` keeps every pair in range; a
    default (unscaled) RoPE run past ``L0`` loses the slow pairs.

    >>> pairs_in_trained_range([10.0, 1000.0], [10.0, 1000.0], trained=100, claimed=200)
    1
    >>> pairs_in_trained_range([10.0, 1000.0], [20.0, 2000.0], trained=100, claimed=200)
    2
    """
    return sum(1 for raw, new in zip(lam, scaled) if raw <= trained or claimed / new <= trained / raw * (1 + 1e-9))


@dataclass
class RopeSummary(Record):
    """The rotary position encoding of a model (absent for learned or ALiBi positions)."""

    #: scaling type: default, linear, dynamic, yarn, longrope, llama3
    rope_type: str
    #: base theta (larger = longer wavelengths)
    theta: float
    #: scaling factor from the config (1.0 when unscaled)
    factor: float
    #: rotary dimensions per head (``head_dim`` unless partial rotary; MLA: ``qk_rope_head_dim``)
    rotary_dim: int
    #: wavelength of each rotary pair in tokens, unscaled: 2*pi*theta**(2i/d)
    wavelengths: list[float]
    #: the same after the scaling type's frequency change (equal to ``wavelengths`` for default)
    wavelengths_scaled: list[float]
    #: pairs whose raw wavelength fits in the trained context (turned at least once in training);
    #: ``None`` when the trained context is unknown
    pairs_full_turn_trained: int | None
    #: pairs whose angles up to the maximum context were all reached in training (see
    #: :func:`pairs_in_trained_range`); ``None`` when the trained context is unknown
    pairs_in_trained_range: int | None




def rope_summary(params: dict, rotary_dim: int, *, trained: int | None, reference: int | None,
                 claimed: int | None) -> RopeSummary:
    """Wavelengths and pair counts of ``params`` (from :func:`rope_parameters`).

    ``reference`` is the length the scaling maths is relative to (the stated original context, or
    ``max_position_embeddings`` as transformers assumes); ``trained`` the stated trained context.
    """
    kind = rope_type(params)
    theta = float(params.get("rope_theta") or 10000.0)
    lam = scaled = []
    full = in_range = None
    if rotary_dim >= 2:
        lam = rope_wavelengths(theta, rotary_dim)
        ref = reference or claimed or 1
        scaled = scaled_wavelengths(lam, kind, params, theta=theta, rotary_dim=rotary_dim,
                                    original=ref, claimed=claimed or ref)
        if trained:
            full = sum(1 for x in lam if x <= trained)
            in_range = pairs_in_trained_range(lam, scaled, trained, claimed or trained)
    return RopeSummary(rope_type=kind, theta=theta, factor=float(params.get("factor") or 1.0),
                       rotary_dim=rotary_dim, wavelengths=lam, wavelengths_scaled=scaled,
                       pairs_full_turn_trained=full, pairs_in_trained_range=in_range)
