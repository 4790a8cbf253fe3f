"""RoPE maths read from a config: scaling parameters, per-pair wavelengths, extension risk.

RoPE (Su et al. 2021, "RoFormer", arXiv:2104.09864) rotates dimension pair ``i`` of a ``d``-dim
rotary head by angle ``p * theta**(-2i/d)`` at position ``p``; pair ``i`` therefore has wavelength

    lambda_i = 2*pi * theta**(2i/d),   i = 0 .. d/2 - 1

A pair whose wavelength exceeds the trained context never turned once in training; scaling
schemes (linear/PI, NTK "dynamic", YaRN arXiv:2309.00071, Llama-3 "llama3", LongRoPE
arXiv:2402.13753) stretch the long wavelengths. :mod:`embscope.context` combines these with the
KV-cache and parameter figures.
"""

from __future__ import annotations

import math


def risk_band(ratio: float) -> tuple[str, str]:
    """(band, advice) for a context-extension ratio ``claimed / original``.

    >>> risk_band(16.0)[0]
    'high'
    """
    if ratio <= 1:
        return "none", "claimed context equals the trained context"
    if ratio <= 2:
        return "minor", "small extension; usually fine without further training"
    if ratio <= 4:
        return "moderate", "YaRN recovers most quality with a short fine-tune"
    if ratio <= 8:
        return "significant", "needs long-context fine-tuning to hold quality"
    return "high", "verify long-context recall (needle-in-a-haystack) before relying on it"


def rope_parameters(config: dict) -> dict:
    """One rope dict {rope_type, rope_theta, factor, ...} from v4 or v5 configs.

    v5 keeps everything in ``rope_parameters``, possibly per layer type
    (``{"full_attention": {...}, "sliding_attention": {...}}``); the full-attention entry decides
    long-context reach. v4 keeps ``rope_theta`` top-level and scaling in ``rope_scaling``.
    """
    params = config.get("rope_parameters")
    if isinstance(params, dict) and params:
        if all(isinstance(v, dict) for v in params.values()):
            params = params.get("full_attention") or next(iter(params.values()))
        out = dict(params)
        out.setdefault("rope_theta", config.get("rope_theta"))
        return out
    out = dict(config.get("rope_scaling") or {})
    out["rope_theta"] = config.get("rope_theta", out.get("rope_theta"))
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
                s = (original / wl - low_ff) / (high_ff - low_ff)
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
        if isinstance(ext, list) and len(ext) == len(lam):
            return [x * float(f) for x, f in zip(lam, ext)]
    return list(lam)
