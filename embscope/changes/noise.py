"""The noise floor: how far a row that training never touched can still lie from its base row, given
the formats the two matrices are stored in — measured on the model's own rows, not assumed.

A row read from a bf16 checkpoint, cast to fp16 or re-quantised to a GGUF type moves a little
without any training. For BASE stored as format A and TUNED as format B, on a sample of shared rows
(base rows ``b``, tuned rows ``t``) we measure

- ``e_AB = ‖rt_B(b) − b‖ / ‖b‖``: what storing BASE's values in B costs (``rt_F`` is F's round
  trip: a cast and back, or quantise then dequantise);
- ``e_BA = ‖rt_A(t) − t‖ / ‖t‖``: what storing TUNED's values in A costs;
- the *lineage*: the share of sampled rows with ``rt_B(b) == t`` bit for bit (TUNED holds BASE's
  values, cast to B: every checkpoint fine-tuned from BASE) and with ``rt_A(t) == b`` (BASE holds
  TUNED's values quantised to A: a GGUF of the tuned model's source).

The floor is :data:`MARGIN` × the :data:`QUANTILE` of ``e_AB`` when TUNED descends from BASE (at
least :data:`LINEAGE_SHARE` of the sample is exact), of ``e_BA`` when BASE descends from TUNED,
and of ``e_AB + e_BA`` (both conversions from a common source: the triangle bound) otherwise. A
row is ``moved`` when its relative change exceeds the floor. Example: SmolLM2's Q8_0 GGUF against
its bf16 conversion: every sampled row is exact under the cast, ``e_AB`` (bf16 rounding) has a
99.9th percentile of 0.00165, the floor is 0.00248; against a float32 conversion it is 0.

Round trips: float casts through torch (round to nearest even); the GGUF types gguf-py can quantise
(Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, BF16) exactly as gguf-py does; the K-quants and the IQ/TQ/FP4 types,
which gguf-py can only dequantise, by a proxy at the type's bits and block size (round to nearest
on a max-abs or min-max scale), coarser than llama.cpp's quantisers, which search for scales
(``ggml-quants.c``) — so the floor errs high there and says ``proxy``.
"""

from __future__ import annotations

import numpy as np

from embscope.changes.record import NoiseFloor

#: the quantile of the per-row round-trip error the floor is set at
QUANTILE = 0.999
#: the floor is this many times that quantile: room for the rows the sample did not measure
MARGIN = 1.5
#: rows measured (evenly spaced over the shared rows, zero rows left out)
SAMPLE = 2048
#: share of sampled rows that must round-trip bit for bit for one input to descend from the other
LINEAGE_SHARE = 0.05
#: transformers' ``mean_resizing`` draws new rows from N(mean, 1e-9 Σ) (``modeling_utils``
#: ``_init_added_embeddings_weights_with_mean``)
MEAN_RESIZE_VAR = 1e-9

#: lossless formats: a float32 holds every value they hold
FLOATS = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64",
          "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
#: GGUF types gguf-py quantises (its reference quantisers)
GGUF_EXACT = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")
#: proxy for the other GGUF types: (bits, values per scale, min-max (asymmetric) scale)
GGUF_PROXY = {"Q6_K": (6, 16, False), "Q5_K": (5, 32, True), "Q4_K": (4, 32, True), "Q3_K": (3, 16, False),
              "Q2_K": (2, 16, True), "Q8_K": (8, 256, False), "IQ4_NL": (4, 32, False), "IQ4_XS": (4, 32, False),
              "IQ3_S": (3, 32, False), "IQ3_XXS": (3, 32, False), "IQ2_S": (2, 32, False), "IQ2_XS": (2, 32, False),
              "IQ2_XXS": (2, 32, False), "IQ1_S": (2, 32, False), "IQ1_M": (2, 32, False), "TQ1_0": (2, 256, False),
              "TQ2_0": (2, 256, False), "MXFP4": (4, 32, False), "NVFP4": (4, 16, False)}
#: a format nobody describes: measured as 4-bit blocks of 32, and said so
UNKNOWN_PROXY = (4, 32, True)


def canonical(fmt: str) -> str:
    """A stored dtype in one spelling: ``bfloat16``/``BF16`` → ``BF16``, ``float32`` → ``F32``.

    >>> canonical("bfloat16"), canonical("torch.float16"), canonical("Q8_0")
    ('BF16', 'F16', 'Q8_0')
    """
    f = str(fmt).replace("torch.", "")
    names = {v: k for k, v in FLOATS.items()}
    return names.get(f, f.upper() if f.lower() in ("f32", "f16", "bf16", "f64") else f)


def method(fmt: str) -> str:
    """``exact`` when the round trip is the format's own, ``proxy`` otherwise."""
    fmt = canonical(fmt)
    return "exact" if fmt in FLOATS or fmt in GGUF_EXACT else "proxy"


def round_trip(x: np.ndarray, fmt: str) -> np.ndarray:
    """``x`` (k, d) float32 stored in ``fmt`` and read back as float32."""
    import torch

    fmt = canonical(fmt)
    if fmt in ("F32", "F64"):
        return x
    if fmt in FLOATS:
        return torch.from_numpy(x).to(getattr(torch, FLOATS[fmt])).float().numpy()
    if fmt in GGUF_EXACT and x.shape[1] % 32 == 0:
        import gguf

        q = gguf.GGMLQuantizationType[fmt]
        return np.asarray(gguf.quants.dequantize(gguf.quants.quantize(x, q), q), dtype=np.float32).reshape(x.shape)
    bits, group, asym = GGUF_PROXY.get(fmt, UNKNOWN_PROXY)
    return _proxy(x, bits, group, asym)


def _proxy(x: np.ndarray, bits: int, group: int, asym: bool) -> np.ndarray:
    """Round to nearest on ``2**bits`` levels per block of ``group`` values: min-max scale when
    ``asym`` (``v = m + s·q``, q in 0..2^b−1), else max-abs (``v = s·q``, q in −(2^(b−1)−1)..2^(b−1)−1)."""
    k, d = x.shape
    pad = (-d) % group
    v = np.pad(x, ((0, 0), (0, pad))).reshape(k, -1, group).astype(np.float64)  # (k, blocks, group)
    if asym:
        lo, hi = v.min(axis=2, keepdims=True), v.max(axis=2, keepdims=True)
        s = (hi - lo) / (2 ** bits - 1)
        s[s == 0] = 1
        out = lo + np.round((v - lo) / s) * s
    else:
        top = 2 ** (bits - 1) - 1 if bits > 1 else 1
        s = np.abs(v).max(axis=2, keepdims=True) / top
        s[s == 0] = 1
        out = np.clip(np.round(v / s), -top, top) * s
    return out.reshape(k, -1)[:, :d].astype(np.float32)


def measure(base: np.ndarray, tuned: np.ndarray, base_format: str, tuned_format: str) -> NoiseFloor:
    """The floor for one matrix from sampled row pairs ``base``/``tuned`` (k, d) float32 (see the
    module docstring).

    >>> import numpy as np
    >>> b = np.random.default_rng(0).normal(size=(64, 64)).astype(np.float32)
    >>> measure(b, b.copy(), "F32", "F32").floor
    0.0
    """
    A, B = canonical(base_format), canonical(tuned_format)
    keep = (np.abs(base).max(axis=1) > 0) & (np.abs(tuned).max(axis=1) > 0) & np.isfinite(tuned).all(axis=1)
    b, t = base[keep], tuned[keep]
    k = len(b)
    if k == 0:
        return NoiseFloor(floor=0.0, base_format=A, tuned_format=B, lineage="no rows to measure", exact_share=0.0,
                          rows=0, quantile=QUANTILE, margin=MARGIN, e_base_in_tuned=0.0, e_tuned_in_base=0.0,
                          method="exact")
    b_in_t, t_in_b = round_trip(b, B), round_trip(t, A)
    e_ab = np.linalg.norm(b_in_t - b, axis=1) / np.linalg.norm(b, axis=1)
    e_ba = np.linalg.norm(t_in_b - t, axis=1) / np.linalg.norm(t, axis=1)
    x_ab = float(np.mean((b_in_t == t).all(axis=1)))
    x_ba = float(np.mean((t_in_b == b).all(axis=1)))
    q = lambda e: float(np.quantile(e, QUANTILE))  # noqa: E731
    if x_ab >= LINEAGE_SHARE:
        lineage, share, err = "tuned descends from base", x_ab, q(e_ab)
    elif x_ba >= LINEAGE_SHARE:
        lineage, share, err = "base descends from tuned", x_ba, q(e_ba)
    else:
        lineage, share, err = "independent", max(x_ab, x_ba), q(e_ab + e_ba)
    how = "exact" if method(A) == method(B) == "exact" else "proxy"
    return NoiseFloor(floor=float(MARGIN * err), base_format=A, tuned_format=B, lineage=lineage,
                      exact_share=round(share, 4), rows=k, quantile=QUANTILE, margin=MARGIN,
                      e_base_in_tuned=q(e_ab), e_tuned_in_base=q(e_ba), method=how)


def mean_floor(mean: np.ndarray, trace_cov: float, tuned_format: str, floor: float) -> float:
    """The floor for new rows judged against the mean row (no initial rows given): transformers'
    ``mean_resizing`` draws them from N(μ, 1e-9 Σ), so an untrained one lies about
    √(1e-9 · tr Σ) from μ; four times that, relative to ‖μ‖, plus the cast to TUNED's format and the
    shared rows' floor."""
    m = float(np.linalg.norm(mean))
    if m == 0:
        return floor
    spread = 4 * np.sqrt(MEAN_RESIZE_VAR * max(trace_cov, 0.0)) / m
    cast = float(np.linalg.norm(round_trip(mean[None].astype(np.float32), tuned_format)[0] - mean)) / m
    return float(max(floor, MARGIN * (spread + cast)))


def sample_ids(n_shared: int, k: int = SAMPLE) -> np.ndarray:
    """``k`` row ids evenly spaced over ``0..n_shared-1`` (all of them when there are fewer)."""
    if n_shared <= k:
        return np.arange(n_shared, dtype=np.int64)
    return np.unique(np.linspace(0, n_shared - 1, k).astype(np.int64))
