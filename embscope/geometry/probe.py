"""The tile plan of an exact search, chosen from this CPU's measured GEMM rates
(:func:`embscope.machine.gemm_rates`), never assumed from the CPU's name or flags.

:func:`plan_tiles` turns the rates into a plan for a search of ``rows × n × d`` multiply-adds:
float32, or bfloat16 screening whose rows that the 16-bit error bound cannot decide are screened
again in bfloat16 (their expected share, ``unsafe``, is measured by the caller on its sample;
a search of some rows screens once, :func:`embscope.geometry.exact.screened_knn`). The
plan with the lower estimated time wins; its estimate and the rates go into the graph's record,
so the bench can report the share of the machine's GEMM rate a search reached.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from embscope.geometry.records import TilesRecord
from embscope.machine import GemmRates, gemm_rates, threads

__all__ = ["GemmRates", "TilePlan", "gemm_rates", "plan_tiles", "threads"]


@dataclass(frozen=True)
class TilePlan:
    """How an exact search runs: tile dtype, threads, and the estimate it was chosen by."""

    #: ``float32`` or ``bfloat16``
    dtype: str
    #: intra-op threads (torch and numba)
    threads: int
    #: estimated seconds of the products (bf16: including the second screen of unsafe rows)
    estimate_seconds: float
    #: the rates the choice was made from
    rates: GemmRates = field(repr=False)
    #: the unsafe share the bf16 estimate assumed
    unsafe: float = 0.0

    def torch_dtype(self):
        import torch

        return torch.bfloat16 if self.dtype == "bfloat16" else torch.float32

    def record(self) -> TilesRecord:
        """The plan's record (``threads``: the rates' best count per dtype)."""
        return TilesRecord(tile_dtype=self.dtype, estimate_seconds=round(float(self.estimate_seconds), 2),
                           unsafe_share=round(float(self.unsafe), 4), **self.rates.record())


def plan_tiles(macs: float, d: int, *, unsafe: float, redo_macs: float | None = None) -> TilePlan:
    """The faster way to do ``macs`` multiply-adds of similarity tiles at width ``d``.

    ``unsafe``: expected share of rows whose bf16 candidates the error bound cannot decide (they
    are screened again in bf16, ``redo_macs`` for all rows: default ``macs``); 0 for a search of
    some rows, which screens once. Example: the all-rows search of the real 7B rows has 70 % of
    rows with 64 neighbours within 0.005 of their 10th, so ``unsafe`` ≈ 1 and bf16 pays only
    where it is more than twice as fast as float32.
    """
    rates = gemm_rates(d)
    r32, r16 = rates.rate("float32"), rates.rate("bfloat16")
    t32 = 2 * macs / max(r32, 1e-9) / 1e9
    redo = macs if redo_macs is None else redo_macs
    t16 = 2 * (macs + unsafe * redo) / r16 / 1e9 if r16 > 0 else float("inf")
    if t16 < t32:
        return TilePlan("bfloat16", rates.threads["bfloat16"], t16, rates, unsafe)
    return TilePlan("float32", rates.threads["float32"], t32, rates, unsafe)
