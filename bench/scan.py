"""The scan's goal runs, each a fresh process of the command, with a per-step profile.

    python bench/scan.py [--runs real7b,gemma] [--knn auto] [--avx2] [--keep DIR] [--flips]

Runs (empty ``EMBSCOPE_CACHE`` each, numba's caches as ``scripts/install.sh`` leaves them):

- ``real7b``: ``scan --model real7b-head-65740.gguf --no-map`` — the first 65,740 rows of
  DeepSeek-R1-Distill-Qwen-7B's LM head as a tied GGUF (``bench/real7b.py --write-model``; the
  file is looked up in ``$EMBSCOPE_BENCHDATA/real7b`` or passed with ``--real7b``);
- ``gemma``: ``scan --model gemma3-270m`` with the map (262,144 × 640).

Per run: wall and CPU seconds of the whole process (user + system, the map's process included),
peak RSS, the load average before and after, and per heavy step its wall seconds, the process's
CPU seconds during it (all threads; the map's own process for the map) and the share of the
machine's GEMM rate it reached: its multiply-adds (the join's screen n²(p + 1)/2 over the tiles
it did not skip plus d per candidate pair scored; m·n·d for an exact search of m rows; the
symmetric all-rows search n(n + 4096)/2·d) × 2 / seconds, against the fastest rate the probe
(:func:`embscope.machine.gemm_rates`) measured at that width in any dtype. The base graph, the
indicators and the map are not products; their share is left blank.

``--avx2`` runs the command with the AVX2 class emulated (``ATEN_CPU_CAPABILITY=avx2``,
``ONEDNN_MAX_CPU_ISA=AVX2``, ``MKL_ENABLE_INSTRUCTIONS=AVX2``, ``NUMBA_CPU_NAME=haswell``, numba's
cache in a separate folder) and prints what the child saw: torch's CPU capability and the probe's
float32 and bfloat16 rates (bf16 falls to a fraction of float32 when the emulation took effect).
The step timers are wrappers installed in the child around the library's functions; they change
no result.

``--flips`` runs each command a second time with ``--knn exact`` (also from an empty cache) and
counts the rows whose decisions differ: ``flagged``, ``isolated`` and ``flag_reason`` of
``tokens.parquet`` (the goal: 0).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AVX2_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
            "NUMBA_CPU_NAME": "haswell"}
RUNS = ("real7b", "gemma")


# ---------------------------------------------------------------------------------------------- child


def _child(profile_path: str, argv: list[str]) -> int:
    """Run the CLI with step timers installed; write the steps to ``profile_path``."""
    sys.path.insert(0, str(ROOT))
    import torch

    import embscope.geometry.certify as certify
    import embscope.geometry.certify_search as certify_search
    import embscope.geometry.exact as exact
    import embscope.geometry.indicators as indicators
    import embscope.geometry.join as join
    import embscope.geometry.layout as layout
    import embscope.geometry.scan as scan
    from embscope.cli import main

    steps: dict[str, dict[str, float]] = {}

    def add(name, wall, cpu, macs=0.0, d=0, sys_s=0.0, **extra):
        s = steps.setdefault(name, {"wall": 0.0, "cpu": 0.0, "sys": 0.0, "macs": 0.0, "d": d, "calls": 0})
        s["wall"] += wall
        s["cpu"] += cpu
        s["sys"] += sys_s
        s["macs"] += macs
        s["calls"] += 1
        s.update(extra)

    def timed(name, fn, macs=None):
        def wrapper(*a, **kw):
            t, c, s0 = time.perf_counter(), time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_stime
            out = fn(*a, **kw)
            m, d, extra = macs(a, kw, out) if macs else (0.0, 0, {})
            add(name, time.perf_counter() - t, time.process_time() - c, m, d,
                resource.getrusage(resource.RUSAGE_SELF).ru_stime - s0, **extra)
            return out
        return wrapper

    def join_macs(a, kw, out):
        n, d = a[0].shape
        info = out.info
        share = 1 - info.tiles_skipped / max(1, info.tiles)
        return n * n * (info.width + 1) / 2 * share + info.candidates_scored * d, d, {"width": info.width,
                                                                                      "candidates": info.candidates_scored}

    def search_macs(a, kw, out):
        self = a[0]
        n, d = self.xn.shape
        return out * n * d, d, {}

    def sym_macs(a, kw, out):
        n, d = a[0].shape
        return n * (n + exact.SYMMETRIC_BLOCK) / 2 * d, d, {}

    join.near_duplicates = timed("join", join.near_duplicates, join_macs)
    certify.base_graph = timed("base graph", certify.base_graph)
    certify_search.Search.search = timed("exact search (certified rows)", certify_search.Search.search, search_macs)
    exact.symmetric_knn = timed("exact search (all rows)", exact.symmetric_knn, sym_macs)
    indicators.prepare = timed("indicators", indicators.prepare)
    scan.compute_indicators = timed("indicators", scan.compute_indicators)
    result = layout.LayoutJob.result

    def layout_result(self):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = result(self)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        add("map (own process)", float(out[1].seconds),
            (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), sys_s=after.ru_stime - before.ru_stime)
        return out

    layout.LayoutJob.result = layout_result
    rc = main(argv)
    from embscope.machine import _CACHE

    rates = {str(w): r.gflops for w, r in _CACHE.items()}
    Path(profile_path).write_text(json.dumps({
        "steps": steps, "rates": rates, "capability": torch.backends.cpu.get_cpu_capability(),
        "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}), encoding="utf-8")
    return rc


# --------------------------------------------------------------------------------------------- parent


def _rates(d: int, env: dict) -> dict[str, float]:
    """The probe's rates at width ``d`` in a fresh process under ``env``."""
    code = ("import json; from embscope.machine import gemm_rates; import torch; r = gemm_rates(%d); "
            "print(json.dumps({'gflops': r.gflops, 'capability': torch.backends.cpu.get_cpu_capability()}))" % d)
    res = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def run_once(name: str, model: str, args: list[str], env: dict, work: Path) -> dict:
    out, prof = work / f"{name}-report", work / f"{name}-profile.json"
    cache = work / f"{name}-cache"
    shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    env = dict(env, EMBSCOPE_CACHE=str(cache))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(prof), "scan", "--model", model,
           "--out", str(out), "-q", *args]
    load0 = os.getloadavg()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode not in (0, 1):
        sys.stderr.write(res.stdout[-3000:] + res.stderr[-3000:])
        raise SystemExit(f"command failed: {' '.join(cmd)}")
    summary = json.loads((out / "summary.json").read_text())
    geo = summary["sections"]["tokens"]["geometry"]
    return {"tokens": out / "tokens.parquet", "wall": wall, "cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "load": (load0[0], os.getloadavg()[0]), "timings": summary["timings"], "geo": geo,
            "profile": json.loads(prof.read_text())}


def report(name: str, r: dict) -> None:
    geo, prof = r["geo"], r["profile"]
    knn = geo.get("knn") or {}
    cert = knn.get("certificate") or {}
    flagged = sum(v for v in (geo.get("flagged") or {}).get("by_category", {}).values())
    print(f"\n### {name}: {r['wall']:.1f} s wall, {r['cpu']:.1f} CPU-s, peak RSS {prof['rss'] / 2**30:.2f} GiB, "
          f"load {r['load'][0]:.2f} → {r['load'][1]:.2f}, torch CPU capability {prof['capability']}")
    rates = {int(w): g for w, g in prof["rates"].items()}
    print("probe GFLOPS: " + "; ".join(f"d={w}: " + ", ".join(f"{k} {v:.0f}" for k, v in g.items())
                                       for w, g in sorted(rates.items())))
    print(f"kNN {knn.get('method')} {knn.get('seconds')} s (estimated {knn.get('estimated_seconds')}); "
          f"base {cert.get('base')}; exact rows {cert.get('exact_rows')}; flagged {flagged}, "
          f"isolated {(geo.get('flagged') or {}).get('isolated')}; steps {r['timings']}")
    lay = geo.get("layout")
    if lay:
        print(f"map: {lay}")
    print("\n| step | wall s | CPU s (system) | GFLOPS | share of the machine's best GEMM rate |")
    print("|---|---|---|---|---|")
    for step, s in prof["steps"].items():
        share = ""
        gf = ""
        if s["macs"] and s["wall"] > 0:
            g = 2 * s["macs"] / s["wall"] / 1e9
            d = s["d"]
            w = min(rates, key=lambda x: abs(x - max(d, 256))) if rates else None
            best = max(rates[w].values()) if w is not None else float("nan")
            gf, share = f"{g:.0f}", f"{100 * g / best:.0f} % of {best:.0f}"
        print(f"| {step} | {s['wall']:.1f} | {s['cpu']:.1f} ({s['sys']:.1f}) | {gf} | {share} |")


DECISIONS = ("flagged", "isolated", "flag_reason")


def flips(a: Path, b: Path) -> dict[str, int]:
    """Rows whose decisions differ between two runs' ``tokens.parquet``: ``flagged``,
    ``isolated``, ``flag_reason`` of the rows either run flagged, and (documented as approximate
    for rows not searched exactly, not a decision) the ``family``/``drift`` labels of unflagged rows."""
    import polars as pl

    x, y = pl.read_parquet(a, columns=list(DECISIONS)), pl.read_parquet(b, columns=list(DECISIONS))
    rx, ry = x["flag_reason"].fill_null(""), y["flag_reason"].fill_null("")
    either = x["flagged"] | y["flagged"]
    return {"flagged": int((x["flagged"] != y["flagged"]).sum()), "isolated": int((x["isolated"] != y["isolated"]).sum()),
            "flag_reason of flagged rows": int(((rx != ry) & either).sum()),
            "family/drift label of unflagged rows (approximate)": int(((rx != ry) & ~either).sum())}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return _child(argv[1], argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default=",".join(RUNS))
    ap.add_argument("--knn", default="auto")
    ap.add_argument("--avx2", action="store_true", help="emulate the AVX2 class (module docstring)")
    ap.add_argument("--real7b", type=Path,
                    default=Path(os.environ.get("EMBSCOPE_BENCHDATA", "/work/benchdata")) / "real7b"
                    / "real7b-head-65740.gguf")
    ap.add_argument("--keep", type=Path)
    ap.add_argument("--flips", action="store_true", help="count decision flips against --knn exact")
    args = ap.parse_args(argv)
    work = args.keep or Path(tempfile.mkdtemp(prefix="embscope-scan-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", EMBSCOPE_QUIET="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    if args.avx2:
        env.update(AVX2_ENV, NUMBA_CACHE_DIR=str(Path(tempfile.gettempdir()) / "embscope-numba-avx2"))
    seen = _rates(640, env)
    print(f"machine: {os.cpu_count()} cores; torch CPU capability {seen['capability']}; probe at d=640: "
          + ", ".join(f"{k} {v:.0f}" for k, v in seen["gflops"].items()) + " GFLOPS")
    try:
        for name in args.runs.split(","):
            if name not in RUNS:
                raise SystemExit(f"unknown run {name!r}: use {', '.join(RUNS)}")
            model, extra = (str(args.real7b), ["--no-map"]) if name == "real7b" else ("gemma3-270m", [])
            r = run_once(name, model, [*extra, "--knn", args.knn], env, work)
            report(f"{name} ({'AVX2 emulated' if args.avx2 else 'native'}, --knn {args.knn})", r)
            if args.flips:
                ex = run_once(f"{name}-exact", model, ["--no-map", "--knn", "exact"], env, work)
                report(f"{name} ({'AVX2 emulated' if args.avx2 else 'native'}, --knn exact)", ex)
                print(f"decisions that differ from --knn exact: {flips(r['tokens'], ex['tokens'])}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
