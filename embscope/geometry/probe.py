"""How fast this CPU multiplies tiles, measured once per process: the tile dtype and thread count
of exact search are chosen from the measurement, never assumed from the CPU's name or flags.

The same torch build runs on CPUs whose 16-bit arithmetic differs by two orders of magnitude:
on a Xeon with AMX, a plain bf16 GEMM (4096 × 3584 @ 3584 × 8192) runs at 959 GFLOPS on 2 cores
against 209 in fp32; on an AVX2-only EPYC bf16 is about ten times *slower* than fp32. And on a
shared machine two threads can be slower than one (each op waits for a descheduled thread).

:func:`gemm_rates` times ``(512 × d) @ (d × 2048)`` products (``d`` the matrix's width, at least
256 so the product is not all overhead) in float32 and bfloat16, with one thread and with torch's
current count, best of :data:`REPEATS` runs each (one descheduled run does not decide); about
0.1–0.4 s in all, cached per width for the process. bf16 is skipped after one run when it is
slower than float32 (the AVX2 case: no point measuring it further).

:func:`plan_tiles` turns the rates into a plan for a search of ``rows × n × d`` multiply-adds:
float32, or bfloat16 screening whose rows that the 16-bit error bound cannot decide are screened
again in bfloat16 (their expected share, ``unsafe``, is measured by the caller on its sample;
a search of some rows screens once, :func:`embscope.geometry.exact.screened_knn`). The
plan with the lower estimated time wins; its estimate and the rates go into the graph's record,
so the bench can report the share of the machine's GEMM rate a search reached.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from embscope.geometry.records import TilesRecord

#: timed runs per (dtype, threads); the fastest counts
REPEATS = 3
#: more threads are used only when they run the probe this many times faster than one
THREAD_GAIN = 1.3
#: products narrower than this are timed at this width (a 50-wide product is all call overhead)
MIN_PROBE_WIDTH = 256

_CACHE: dict[int, "GemmRates"] = {}


@dataclass(frozen=True)
class GemmRates:
    """Measured GEMM rates on this machine, now."""

    #: the width the products were timed at
    d: int
    #: ``"<dtype>@<threads>"`` -> GFLOPS (2 flops per multiply-add)
    gflops: dict[str, float]
    #: dtype -> the thread count it runs fastest at
    threads: dict[str, int]
    #: seconds the probe took
    seconds: float = 0.0

    def rate(self, dtype: str) -> float:
        """GFLOPS of ``dtype`` at its best thread count (0 when not measured)."""
        t = self.threads.get(dtype)
        return self.gflops.get(f"{dtype}@{t}", 0.0) if t else 0.0

    def record(self) -> dict[str, Any]:
        """The rates' part of :class:`~embscope.geometry.records.TilesRecord`."""
        return {"gflops": {k: round(v, 1) for k, v in self.gflops.items()}, "threads": dict(self.threads),
                "probe_seconds": round(self.seconds, 3)}


def _time_product(dtype, d: int, threads: int) -> float:
    """GFLOPS of one ``(512 × d) @ (d × 2048)`` product in ``dtype`` with ``threads`` threads."""
    import torch

    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    a = torch.randn(512, d, generator=g).to(dtype)
    b = torch.randn(2048, d, generator=g).to(dtype)
    a @ b.T  # first call: allocations, kernel selection
    t = time.perf_counter()
    a @ b.T
    return 2 * 512 * 2048 * d / max(time.perf_counter() - t, 1e-9) / 1e9


def gemm_rates(d: int) -> GemmRates:
    """The GEMM rates of this CPU at width ``d`` (cached per process; see the module docstring)."""
    import torch

    width = max(MIN_PROBE_WIDTH, int(d))
    if width in _CACHE:
        return _CACHE[width]
    t0 = time.perf_counter()
    before = torch.get_num_threads()
    counts = sorted({1, before})
    rates: dict[str, float] = {}
    try:
        for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
            for t in counts:
                best = 0.0
                for _ in range(REPEATS):
                    best = max(best, _time_product(dtype, width, t))
                    if name == "bfloat16" and best < 0.5 * rates.get(f"float32@{t}", 0.0):
                        break  # far slower than fp32 (no native bf16): one run says enough
                rates[f"{name}@{t}"] = best
    finally:
        torch.set_num_threads(before)
    threads = {}
    for name in ("float32", "bfloat16"):
        many, one = rates.get(f"{name}@{before}", 0.0), rates.get(f"{name}@1", 0.0)
        threads[name] = before if many > THREAD_GAIN * one else 1
    out = GemmRates(d=width, gflops=rates, threads=threads, seconds=time.perf_counter() - t0)
    _CACHE[width] = out
    return out


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


@contextmanager
def threads(n: int):
    """torch's intra-op threads and numba's threads set to ``n`` inside the block, restored after."""
    import numba
    import torch

    before_t, before_n = torch.get_num_threads(), numba.get_num_threads()
    try:
        torch.set_num_threads(max(1, n))
        numba.set_num_threads(max(1, min(n, numba.config.NUMBA_NUM_THREADS)))
        yield
    finally:
        torch.set_num_threads(before_t)
        numba.set_num_threads(before_n)
