"""How fast this CPU multiplies, measured once per process: every dtype and thread-count choice of
a heavy step (exact search's tiles, the extension's and the languages step's nearest-row screens)
comes from this measurement, never from the CPU's name or flags.

The same torch build runs on CPUs whose 16-bit arithmetic differs by two orders of magnitude:
on a Xeon with AMX, a plain bf16 GEMM (4096 × 3584 @ 3584 × 8192) runs at 959 GFLOPS on 2 cores
against 209 in fp32; on an AVX2-only EPYC bf16 is about ten times *slower* than fp32. And on a
shared machine two threads can be slower than one (each op waits for a descheduled thread).

:func:`gemm_rates` times ``(512 × d) @ (d × 2048)`` products (``d`` the matrix's width, at least
256 so the product is not all overhead) in float32 and bfloat16, with one thread and with torch's
current count, best of :data:`REPEATS` runs each (one descheduled run does not decide); about
0.1–0.4 s in all, cached per width for the process. bf16 is skipped after one run when it is
slower than float32 (the AVX2 case: no point measuring it further). How a search turns the rates
into a plan: :mod:`embscope.geometry.probe`.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

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
        """The rates' part of the tile plan's record (``geometry.records.TilesRecord``)."""
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
