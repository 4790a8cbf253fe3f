"""``embscope diff`` measured: the 7B-shaped pair, and real fine-tunes of SmolLM2-135M.

    python bench/diff.py pair [--dir DIR] [--rows 152064] [--hidden 3584]
    python bench/diff.py finetune [--dir DIR] [--steps 30]

``pair``: BASE is the Qwen2-7B-shaped checkpoint of ``bench/make_checkpoint.py`` (152,064 × 3584 bf16
embed_tokens and lm_head, in shards 1 and 4 of four); TUNED is a copy of it with 5 % of the rows of
both matrices moved by 1 % of their norm (bf16, written in place in the copied shards). Each method
runs in a fresh process after the shards were read once (page cache warm): the ``embscope diff``
command (``--languages none --json``), and what a user would otherwise write — ``safe_open`` both
files, ``get_tensor``, float32, ``torch.linalg.vector_norm`` of the difference and a cosine per row.
Printed: wall and CPU seconds (user + system of the child), peak RSS, the load average, and the rows
each counts as moved (the script with the floor embscope measured).

``finetune``: the whole SmolLM2-135M (from the demo GGUF, float32), extended with the medical
candidates (``extend --apply``, top 20), then trained ``--steps`` AdamW steps (lr 1e-3) on medical
lines holding every new token: once with every weight trainable, once with LoRA on q_proj/v_proj only
(PEFT: the embedding frozen). Printed: the findings of ``embscope diff`` in both settings, the moved
and new-moved counts, and the GGUF → safetensors conversions (float32 and bf16) against the GGUF.

Run under the heavy lock (bench/README.md): ``flock /tmp/embscope-heavy.lock nice -n 5 python bench/diff.py pair``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

NAIVE = r'''
import sys, torch, json
from safetensors import safe_open
from pathlib import Path
floor = float(sys.argv[3])
moved = {}
for which, key in (("input", "model.embed_tokens.weight"), ("output", "lm_head.weight")):
    mats = []
    for folder in sys.argv[1:3]:
        idx = json.loads((Path(folder) / "model.safetensors.index.json").read_text())["weight_map"]
        with safe_open(str(Path(folder) / idx[key]), "pt") as f:
            mats.append(f.get_tensor(key).float())
    b, t = mats
    d = torch.linalg.vector_norm(t - b, dim=1)
    n = torch.linalg.vector_norm(b, dim=1)
    rel = d / n.clamp_min(1e-30)
    cos = torch.nn.functional.cosine_similarity(t, b, dim=1)
    moved[which] = int((rel > floor).sum())
    del mats, b, t, d, n, rel, cos
print(json.dumps(moved))
'''


def _child(cmd: list[str]) -> tuple[float, float, int, str]:
    """(wall s, CPU s, peak RSS bytes, stdout) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env={**os.environ, "EMBSCOPE_QUIET": "1"})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, after.ru_maxrss * 1024, out.stdout


def _perturb(folder: Path, share: float = 0.05, scale: float = 0.01, seed: int = 1) -> int:
    """Move ``share`` of the rows of embed_tokens and lm_head by ``scale`` × their norm, in place."""
    import numpy as np
    import torch

    from embscope.formats.safetensors import read_header

    wm = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    rng = np.random.default_rng(seed)
    n_moved = 0
    for key in ("model.embed_tokens.weight", "lm_head.weight"):
        path = folder / wm[key]
        header = read_header(path)
        info = header[key]
        rows, dim = info["shape"]
        with open(path, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
        start = 8 + n + info["data_offsets"][0]
        mm = np.memmap(path, dtype=np.uint16, mode="r+", offset=start, shape=(rows, dim))
        real = min(rows, 151_643)  # the tokenizer's rows, not the zero padding
        ids = np.sort(rng.choice(real, size=int(share * real), replace=False))
        x = torch.from_numpy(np.array(mm[ids]).view(np.int16)).view(torch.bfloat16).float()
        noise = torch.from_numpy(rng.standard_normal(x.shape).astype(np.float32))
        noise *= scale * x.norm(dim=1, keepdim=True) / noise.norm(dim=1, keepdim=True)
        mm[ids] = (x + noise).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        mm.flush()
        n_moved += len(ids)
    return n_moved // 2


def pair(args) -> None:
    import make_checkpoint as mc

    base, tuned = args.dir / "base", args.dir / "tuned"
    if not (base / "planted.json").is_file():
        mc.make_checkpoint(base, rows=args.rows, hidden=args.hidden)
    if not (tuned / "perturbed.json").is_file():
        shutil.rmtree(tuned, ignore_errors=True)
        shutil.copytree(base, tuned)
        moved = _perturb(tuned)
        (tuned / "perturbed.json").write_text(json.dumps({"rows_moved_per_matrix": moved}))
    planted = json.loads((tuned / "perturbed.json").read_text())["rows_moved_per_matrix"]
    for f in [*base.glob("*.safetensors"), *tuned.glob("*.safetensors")]:  # warm the page cache
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass
    cmd = [sys.executable, "-m", "embscope", "diff", str(base), str(tuned), "--languages", "none", "--json", "-q",
           "--device", "cpu", "--fail-on", "never"]
    w1, c1, r1, out = _child(cmd)
    rec = json.loads(out)["data"]
    floors = {k: m["floor"]["floor"] for k, m in rec["matrices"].items()}
    got = {k: m["moved"] for k, m in rec["matrices"].items()}
    w2, c2, r2, out2 = _child([sys.executable, "-c", NAIVE, str(base), str(tuned), str(floors["input"])])
    naive = json.loads(out2)
    load = os.getloadavg()[0]
    print(f"| method | wall s | CPU s | peak RSS GiB | rows moved (input, output) |")
    print(f"|---|---|---|---|---|")
    print(f"| `embscope diff` (the command: both matrices, floor, map, findings) | {w1:.1f} | {c1:.1f} | {r1 / 2**30:.2f} | {got.get('input')}, {got.get('output')} |")
    print(f"| safe_open + float32 + norms (input and head) | {w2:.1f} | {c2:.1f} | {r2 / 2**30:.2f} | {naive['input']}, {naive['output']} |")
    print(f"\n{args.rows} × {args.hidden} bf16 pair, {planted} rows moved per matrix (planted); floors {floors}; "
          f"embscope steps {rec['seconds']}; load average {load:.1f}; CPU s / wall s embscope {c1 / w1:.2f}")


def finetune(args) -> None:
    import embscope
    import finetune as ft

    w = args.dir
    w.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    base = ft.cut_model(w / "smollm2-f32", layers=None) if not (w / "smollm2-f32" / "config.json").is_file() else w / "smollm2-f32"
    bf16 = ft.cut_model(w / "smollm2-bf16", layers=None, dtype="bfloat16") if not (w / "smollm2-bf16" / "config.json").is_file() else w / "smollm2-bf16"
    manifest = ft.extend(base, w / "ext", top=20)
    texts = ft.training_texts(w / "ext", manifest["token_ids"])
    data = ft.write_jsonl(texts, w / "train.jsonl")
    t1 = time.perf_counter()
    ft.train(w / "ext", texts, w / "full", steps=args.steps)
    t2 = time.perf_counter()
    ft.train(w / "ext", texts, w / "lora", steps=args.steps, mode="lora-attention")
    t3 = time.perf_counter()
    print(f"extended with {manifest['n_added']} tokens; {len(texts)} training texts; prepare {t1 - t0:.0f} s, "
          f"full fine-tune {t2 - t1:.0f} s, LoRA {t3 - t2:.0f} s ({args.steps} steps each)\n")
    print("| setting | input rows moved | new rows moved | used rows moved | findings |")
    print("|---|---|---|---|---|")
    cases = [("embedding trainable (full fine-tune)", base, w / "full", dict(manifest=str(w / "ext"), data=str(data))),
             ("embedding frozen (LoRA on attention)", w / "ext", w / "lora", dict(data=str(data))),
             ("GGUF → safetensors float32", "smollm2-135m", base, {}),
             ("GGUF → safetensors bf16", "smollm2-135m", bf16, {}),
             ("safetensors bf16 → GGUF", bf16, "smollm2-135m", {})]
    for name, b, t, kw in cases:
        r = embscope.diff(str(b), str(t), languages="none", scan=False, **kw).summary.sections.diff
        m = r.matrices["input"]
        used = f"{r.data.used_moved} / {r.data.used_rows}" if r.data else "—"
        found = "; ".join(f"{f.code} ({f.severity}, {f.count})" for f in r.findings) or "none"
        print(f"| {name} | {m.moved} / {m.rows} (floor {m.floor.floor:.3g}, {m.floor.lineage}) | "
              f"{m.new_moved} / {r.new_rows} | {used} | {found} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    p = sub.add_parser("pair")
    p.add_argument("--dir", type=Path, default=Path(os.environ.get("EMBSCOPE_CACHE", Path.home() / ".cache" / "embscope")) / "bench" / "diff-pair")
    p.add_argument("--rows", type=int, default=152064)
    p.add_argument("--hidden", type=int, default=3584)
    f = sub.add_parser("finetune")
    f.add_argument("--dir", type=Path, default=Path("/tmp") / "embscope-bench-diff-finetune")
    f.add_argument("--steps", type=int, default=30)
    args = ap.parse_args(argv)
    (pair if args.what == "pair" else finetune)(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
