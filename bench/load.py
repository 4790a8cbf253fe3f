"""Loading a 7B model's vocabulary matrices: ``embscope.load_model`` vs what a user would otherwise do;
and a GGUF's whole model: embscope's own build vs transformers' GGUF loaders.

    python bench/load.py [--checkpoint DIR] [--skip-transformers]
    python bench/load.py --whole-model smollm2-135m,gemma3-270m [--repeats 3]

``--whole-model``: each method in its own fresh process, timed from the interpreter's start to a
float32 ``*ForCausalLM`` in eval mode, then one forward pass on a fixed prompt (not timed) whose
logits are compared with those of transformers' converter (``equal``: bit for bit). Methods:

- ``embscope``:                ``embscope.models.fullmodel.load_causal_lm`` (the GGUF parsed once
                               by embscope's reader, shared with the matrices' load; built by
                               :mod:`embscope.models.gguf_model`), after ``embscope.load_model``;
- ``transformers converter``:  ``AutoConfig.from_pretrained(gguf_file=…)``, an empty model, then
                               ``load_gguf_checkpoint(return_tensors=True)`` (dequantised float32; the
                               path embscope took before);
- ``transformers from_pretrained``: ``AutoModelForCausalLM.from_pretrained(dir, gguf_file=…,
                               dtype=torch.float32)``, what a user writes.

The embscope row includes the matrices' load (tokenizer and embedding) a run does anyway; the
``model only`` column is the whole-model step alone (what the audit's step costs). CPU seconds
are the child's user + system time.

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


# Each snippet builds the float32 causal LM of the GGUF model alias in sys.argv[1] as ``lm``; ``_t1``
# marks the start of the whole-model step (after the imports and, for embscope, the matrices' load).
WHOLE = {
    "embscope": """
import sys, embscope
m = embscope.load_model(sys.argv[1], device="cpu")
from embscope.models.fullmodel import load_causal_lm
_t1 = time.perf_counter()
lm = load_causal_lm(m)
""",
    "transformers converter": """
import sys, torch
from pathlib import Path
from embscope.models.resolve import resolve
path = Path(resolve(sys.argv[1]).path)
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
_t1 = time.perf_counter()
config = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
lm = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
state = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=lm)["tensors"]
lm.load_state_dict({k: torch.as_tensor(v, dtype=torch.float32) for k, v in state.items()}, strict=False)
if config.tie_word_embeddings:
    lm.tie_weights()
lm.eval()
""",
    "transformers from_pretrained": """
import sys, torch
from pathlib import Path
from embscope.models.resolve import resolve
path = Path(resolve(sys.argv[1]).path)
from transformers import AutoModelForCausalLM
_t1 = time.perf_counter()
lm = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
""",
}

WHOLE_FOOTER = """
import hashlib, json, resource, torch
_t2 = time.perf_counter()
usage = resource.getrusage(resource.RUSAGE_SELF)
with torch.no_grad():
    logits = lm(input_ids=torch.arange(1, 65)[None]).logits.float().numpy()
print("RESULT " + json.dumps({"load_s": _t2 - _t0, "model_s": _t2 - _t1, "cpu_s": usage.ru_utime + usage.ru_stime,
      "peak_rss": usage.ru_maxrss * 1024, "logits": hashlib.sha256(logits.tobytes()).hexdigest()}))
"""


def run_whole(name: str, model: str) -> dict:
    """One whole-model method in a fresh interpreter (CPU seconds: the child's own, to the model)."""
    return _run_child(name, WHOLE[name] + WHOLE_FOOTER, model)


def whole_model_table(models: list[str], repeats: int) -> None:
    """The whole-model table: per model and method, the fastest of ``repeats`` fresh processes."""
    print(f"load average {os.getloadavg()[0]:.1f}")
    print("\n| model | method | process wall s | model only s | CPU s | peak RSS GiB | logits equal | vs converter (wall, model only) |")
    print("|---|---|---|---|---|---|---|---|")
    for model in models:
        rows = []
        for name in WHOLE:
            runs = [run_whole(name, model) for _ in range(repeats)]
            ok = [r for r in runs if "error" not in r]
            rows.append(min(ok, key=lambda r: r["load_s"]) if ok else runs[0])
        ref = next((r for r in rows if r["method"] == "transformers converter" and "error" not in r), None)
        for r in rows:
            if "error" in r:
                print(f"| {model} | {r['method']} | failed: {r['error']} | | | | | |")
                continue
            ratio = (f"{ref['load_s'] / r['load_s']:.2f}×, {ref['model_s'] / r['model_s']:.2f}×" if ref else "-")
            same = "yes" if ref and r["logits"] == ref["logits"] else "no"
            print(f"| {model} | {r['method']} | {r['load_s']:.2f} | {r['model_s']:.2f} | {r['cpu_s']:.2f} | "
                  f"{r['peak_rss'] / 2**30:.2f} | {same} | {ratio} |", flush=True)
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}; fastest of {repeats} runs per method")


def run_method(name: str, folder: Path) -> dict:
    """Run one method in a fresh interpreter; wall time (incl. start-up) measured here."""
    return _run_child(name, METHODS[name] + FOOTER, str(folder))


def _run_child(name: str, body: str, arg: str) -> dict:
    """``python -c body arg`` offline and quiet; its ``RESULT {json}`` line, with the wall time."""
    code = "import time; _t0 = time.perf_counter()\n" + body
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "EMBSCOPE_QUIET": "1", "PYTHONPATH": str(ROOT),
           "TRANSFORMERS_VERBOSITY": "error"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, arg], capture_output=True, text=True, env=env)
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
    ap.add_argument("--whole-model", metavar="ALIASES", help="comma-separated GGUF aliases: the whole-model table only")
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes per whole-model method (fastest kept)")
    args = ap.parse_args(argv)
    if args.whole_model:
        whole_model_table(args.whole_model.split(","), args.repeats)
        return 0
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
