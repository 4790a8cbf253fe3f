"""Loading a 7B model's vocabulary matrices: ``embscope.load_model`` vs what a user would otherwise do.

    python bench/load.py [--checkpoint DIR] [--skip-transformers]

Builds a Qwen2-7B-shaped checkpoint (``bench/make_checkpoint.py --full-size``: all 28 layers, ~15.2 GB of shards as published,
152064 x 3584 bf16 embed_tokens in shard 1 and lm_head in shard 4) in a temporary folder, then runs
each method in its own fresh Python process and reports wall time and peak RSS (``ru_maxrss`` of that
process, so imports and the interpreter count for every method alike):

- ``embscope``:      ``embscope.load_model(folder, device="cpu")`` (matrices + tokenizer, float32);
- ``safe_open``:     ``safetensors.safe_open`` on the two shards, ``get_tensor`` for the two names
                     (a user who knows the tensor names and shard layout);
- ``transformers``:  ``AutoModelForCausalLM.from_pretrained(folder)`` then
                     ``get_input_embeddings().weight`` / ``get_output_embeddings().weight``
                     (the usual way; it builds all 28 layers, initialising the ones the file lacks).

Ratios are transformers / method (higher = the method is cheaper). Goal for embscope: >= 10x faster,
<= 1/5 of transformers' peak RSS. Files are in the page cache for every method (written just before).
The temporary checkpoint is deleted at the end unless ``--checkpoint`` named an existing one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Each snippet loads the two matrices of the folder in sys.argv[1] into ``mats``.
METHODS = {
    "embscope": """
import sys, embscope
m = embscope.load_model(sys.argv[1], device="cpu")
mats = [m.embed] + ([] if m.output is None else [m.output])
""",
    "safe_open": """
import sys, json, os
from safetensors import safe_open
folder = sys.argv[1]
wm = json.load(open(os.path.join(folder, "model.safetensors.index.json")))["weight_map"]
mats = []
for name in ("model.embed_tokens.weight", "lm_head.weight"):
    with safe_open(os.path.join(folder, wm[name]), framework="pt") as f:
        mats.append(f.get_tensor(name))
""",
    "transformers": """
import sys
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
mats = [model.get_input_embeddings().weight, model.get_output_embeddings().weight]
""",
}

# Every method then reads every element once (float32 sums over 4096-row blocks, so no full-size
# temporary), as any analysis would; a memory-mapped tensor that is never read would look free.
FOOTER = """
import json, resource, time, torch
with torch.no_grad():
    checks = [sum(float(b.sum(dtype=torch.float32)) for b in t.split(4096)) for t in mats]
shapes = [tuple(t.shape) for t in mats]
print("RESULT " + json.dumps({"load_s": time.perf_counter() - _t0, "shapes": shapes,
      "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def run_method(name: str, folder: Path) -> dict:
    """Run one method in a fresh interpreter; wall time (incl. start-up) measured here."""
    code = "import time; _t0 = time.perf_counter()\n" + METHODS[name] + FOOTER
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "EMBSCOPE_QUIET": "1", "PYTHONPATH": str(ROOT),
           "TRANSFORMERS_VERBOSITY": "error"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return {"method": name, "error": f"exit {proc.returncode}: " + " | ".join(tail)}
    return {"method": name, "wall_s": wall, **json.loads(line[len("RESULT "):])}


def print_table(results: list[dict]) -> None:
    base = next((r for r in results if r["method"] == "transformers" and "error" not in r), None)
    print(f"\n{'method':<14}{'wall s':>9}{'load s':>9}{'peak RSS GiB':>14}{'speed-up':>10}{'RSS ratio':>11}")
    for r in results:
        if "error" in r:
            print(f"{r['method']:<14}  failed: {r['error']}")
            continue
        speed = f"{base['wall_s'] / r['wall_s']:.1f}x" if base else "-"
        rss = f"{base['peak_rss'] / r['peak_rss']:.1f}x" if base else "-"
        print(f"{r['method']:<14}{r['wall_s']:>9.1f}{r['load_s']:>9.1f}{r['peak_rss'] / 2**30:>14.2f}"
              f"{speed:>10}{rss:>11}")
    print("(speed-up and RSS ratio: transformers / method; higher is better)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", type=Path, help="reuse this generated checkpoint (kept afterwards)")
    ap.add_argument("--skip-transformers", action="store_true", help="skip the slow full-model baseline")
    args = ap.parse_args(argv)
    sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
    from make_checkpoint import make_checkpoint

    tmp = None
    folder = args.checkpoint
    try:
        if folder is None or not (folder / "model.safetensors.index.json").is_file():
            if folder is None:
                tmp = Path(tempfile.mkdtemp(prefix="embscope-7b-"))
                folder = tmp / "qwen2-7b"
            t0 = time.perf_counter()
            make_checkpoint(folder, full_size=True)
            size = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
            print(f"checkpoint: {folder} ({size / 1e9:.2f} GB of shards, written in {time.perf_counter() - t0:.0f} s)")
        methods = [m for m in METHODS if not (args.skip_transformers and m == "transformers")]
        results = []
        for name in methods:
            print(f"running {name} ...", flush=True)
            results.append(run_method(name, folder))
        print_table(results)
        ok = {r["method"]: r for r in results if "error" not in r}
        if {"embscope", "transformers"} <= ok.keys():
            e, t = ok["embscope"], ok["transformers"]
            print(f"goal >= 10x faster: {'met' if t['wall_s'] / e['wall_s'] >= 10 else 'NOT met'}; "
                  f"goal <= 1/5 peak RSS: {'met' if t['peak_rss'] / e['peak_rss'] >= 5 else 'NOT met'}")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
