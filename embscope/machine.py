"""How fast this CPU multiplies, measured in this process: every dtype and thread-count choice of
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

Two choices come from the rates, and neither may hang on a busy moment:

- **the dtype** (:func:`fast_dtype`): bf16 where it runs at least :data:`BF16_GAIN` times float32's
  rate. The measured ratio is far from that bar on both CPU classes (4–5× with AVX512-BF16 or
  AMX, 0.2–0.3× on AVX2, where bf16 is emulated), and both dtypes are timed in the same probe,
  best of :data:`REPEATS`, so a neighbour's burst does not flip it; and it is decided once per
  width for the process: the same inputs give the same figures on a quiet and on a busy machine;
- **the thread count** (:func:`best_threads`): measured again by a step that starts more than
  :data:`REPROBE_SECONDS` after the last verdict, so a busy moment (another process holding a
  core, such as the map's layout process beside the audit) never pins a whole run to one thread,
  and a step that starts while a core is taken does not stall on two. :func:`gemm_rates` keeps
  its rates, measuring again only a one-thread verdict, and only in the dtype it chose.
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
#: bf16 is chosen only where it runs at least this many times float32's rate (a wrong "bf16" on a
#: CPU that emulates it costs 3–10×; a wrong "float32" at most the measured gain)
BF16_GAIN = 1.5
#: a thread-count verdict older than this is measured again (seconds; :func:`best_threads`, and
#: :func:`gemm_rates` for a one-thread verdict)
REPROBE_SECONDS = 10.0

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
    #: ``time.monotonic()`` when it was measured
    at: float = 0.0

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
    """The GEMM rates of this CPU at width ``d`` (cached per process; a one-thread verdict is
    measured again after :data:`REPROBE_SECONDS`: see the module docstring)."""
    import torch

    width = max(MIN_PROBE_WIDTH, int(d))
    old = _CACHE.get(width)
    if old is not None and (torch.get_num_threads() == 1 or time.monotonic() - old.at < REPROBE_SECONDS
                            or old.threads[_dtype_of(old)] > 1):
        return old
    t0 = time.perf_counter()
    before = torch.get_num_threads()
    counts = sorted({1, before})
    # measured again (a one-thread verdict gone stale): only the dtype the process chose; the
    # other keeps its rates (an emulated bf16 product at width 3584 costs ~0.6 s a run)
    rates: dict[str, float] = {} if old is None else dict(old.gflops)
    kept = None if old is None else ("bfloat16" if _dtype_of(old) == "float32" else "float32")
    try:
        for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
            if name == kept:
                continue
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
    out = GemmRates(d=width, gflops=rates, threads=threads, seconds=time.perf_counter() - t0, at=time.monotonic())
    _CACHE[width] = out
    return out


def _dtype_of(r: GemmRates) -> str:
    return "bfloat16" if r.rate("bfloat16") >= BF16_GAIN * r.rate("float32") else "float32"


_DTYPE: dict[int, str] = {}


def fast_dtype(d: int) -> str:
    """``"bfloat16"`` where products of width ``d`` run at least :data:`BF16_GAIN` times float32's
    rate here (:func:`gemm_rates`, each dtype at its best thread count), else ``"float32"``;
    decided once per width for the process, so one run never mixes the two."""
    width = max(MIN_PROBE_WIDTH, int(d))
    if width not in _DTYPE:
        _DTYPE[width] = _dtype_of(gemm_rates(width))
    return _DTYPE[width]


_THREADS: dict[tuple[int, str, str], tuple[int, float]] = {}


def _time_ops(dtype, d: int, threads: int) -> float:
    """Runs per second of a forward-like chain (8 × a (256 × d) @ (d × d) product, SiLU, a
    multiply-add and a layer norm: 32 short ops, each a parallel region whose slowest thread
    decides) with ``threads`` threads."""
    import torch

    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    a = torch.randn(256, d, generator=g).to(dtype)
    w = (torch.randn(d, d, generator=g) / d ** 0.5).to(dtype)
    t = time.perf_counter()
    x = a
    for _ in range(8):
        x = torch.nn.functional.layer_norm(torch.nn.functional.silu(x @ w) * 0.5 + a, (d,))
    return 1.0 / max(time.perf_counter() - t, 1e-9)


def others_running(samples: int = 9, gap: float = 0.002) -> int | None:
    """Runnable threads of other processes now: the median over ``samples`` reads, ``gap`` seconds
    apart after a short pause, of the kernel's ``procs_running`` (``/proc/stat``: every runnable
    thread of the machine) less this process's own runnable threads (``/proc/self/task/*/stat``
    state ``R``: the reading thread, and an OpenMP worker still spinning after the last parallel
    region, which subtracting only the reader counted as another process's: on a quiet machine a
    step then ran on one thread); None where there is no ``/proc/stat``."""
    import statistics

    counts = []
    time.sleep(4 * gap)
    try:
        for _ in range(samples):
            with open("/proc/stat", encoding="ascii") as f:
                total = next(int(line.split()[1]) for line in f if line.startswith("procs_running"))
            counts.append(max(0, total - _own_running()))
            time.sleep(gap)
    except (OSError, StopIteration, ValueError):
        return None
    return int(statistics.median(counts))


def _own_running() -> int:
    """This process's threads in state ``R`` (running or runnable), at least 1 (the caller)."""
    import os

    n = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat", encoding="ascii", errors="replace") as f:
                n += f.read().rsplit(")", 1)[1].split()[0] == "R"
        except (OSError, IndexError):  # the thread ended between the listing and the read
            continue
    return max(n, 1)


def _cores() -> int:
    import os

    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _measure_threads(timer, dtype: str, width: int, many: int) -> int:
    """1 or ``many``: 1 when other processes' runnable threads leave fewer than ``many`` cores free
    (:func:`others_running`), else the count ``timer`` runs faster, the two timed in turn, the
    median of :data:`REPEATS` runs each (a run that caught a blip, fast or slow, does not decide)."""
    import statistics

    import torch

    others = others_running()
    if others is not None and others + many > _cores():
        return 1
    torch_dtype = torch.bfloat16 if dtype == "bfloat16" else torch.float32
    runs: dict[int, list[float]] = {1: [], many: []}
    now = torch.get_num_threads()
    try:
        timer(torch_dtype, width, many)  # first call: allocations, kernel selection
        for _ in range(REPEATS):
            for t in (many, 1):
                runs[t].append(timer(torch_dtype, width, t))
    finally:
        torch.set_num_threads(now)
    return many if statistics.median(runs[many]) > THREAD_GAIN * statistics.median(runs[1]) else 1


#: the thread counts :func:`threads` blocks replaced, outermost first
_OUTER: list[int] = []


def _ceiling() -> int:
    """The thread count of the process outside every :func:`threads` block: the most a probe offers."""
    import torch

    return _OUTER[0] if _OUTER else torch.get_num_threads()


def best_threads(d: int, dtype: str = "float32", *, kind: str = "products") -> int:
    """The thread count (1 or the process's count, :func:`_ceiling`) that runs work of width ``d`` in ``dtype``
    fastest *now*, kept for :data:`REPROBE_SECONDS`, then measured again: a step that starts while
    another process holds a core runs on one thread, the next one, once the core is free, on all.

    ``kind``: ``products`` (large products: exact search, nearest rows; the GEMM probe's verdict
    while it is fresh, else the two counts timed again, 30–300 ms) or ``forward`` (a model's
    forward passes: thousands of short ops, each waiting for its slowest thread, so a busy core
    costs far more than in one large product; :func:`_time_ops` at width ≤ 1024, 50–150 ms). On
    this project's 2-core machine, quiet, two threads ran the forward chain 1.7–1.9× faster than
    one; with one core busy, 0.7–1.0×. Where the kernel tells how many other threads are runnable
    (:func:`others_running`), more threads than the free cores are never chosen: at load 4–5 on
    2 cores, SmolLM2's verification forwards ran at 42 tokens/s on 2 threads (quiet: ~2,700),
    though the best of three 30 ms timings had found two threads faster."""
    width = max(MIN_PROBE_WIDTH, int(d)) if kind == "products" else min(max(MIN_PROBE_WIDTH, int(d)), 1024)
    many = _ceiling()
    if many == 1:
        return 1
    now = time.monotonic()
    key = (width, dtype, kind)
    if key in _THREADS and now - _THREADS[key][1] < REPROBE_SECONDS:
        return _THREADS[key][0]
    rates = gemm_rates(width) if kind == "products" else None
    if rates is not None and now - rates.at < REPROBE_SECONDS:
        others = others_running()
        n = 1 if others is not None and others + many > _cores() else rates.threads.get(dtype, 1)
    else:
        n = _measure_threads(_time_product if kind == "products" else _time_ops, dtype, width, many)
    _THREADS[key] = (n, time.monotonic())
    return n


@contextmanager
def threads(n: int):
    """torch's intra-op threads and numba's threads set to ``n`` inside the block, restored after."""
    import numba
    import torch

    before_t, before_n = torch.get_num_threads(), numba.get_num_threads()
    _OUTER.append(before_t)
    try:
        torch.set_num_threads(max(1, n))
        numba.set_num_threads(max(1, min(n, numba.config.NUMBA_NUM_THREADS)))
        yield
    finally:
        _OUTER.pop()
        torch.set_num_threads(before_t)
        numba.set_num_threads(before_n)
