"""Bytes and seconds to read a hub model's embedding and head: range requests against whole shards.

    python bench/hub_ranges.py WORK_DIR [--full-size] [--vocab-rows 152064] [--hidden 3584]

Writes the Qwen2-7B-shaped checkpoint of ``bench/make_checkpoint.py`` into ``WORK_DIR/repo`` (once;
``--full-size``: all 28 layers, 15.2 GB, so the two shards holding the matrices are as large as the
published ones), serves it from a loopback hub in its own process (``tests/hub_server.py``;
``HF_ENDPOINT`` points there), then times, each in a fresh HF cache and embscope cache:

1. ``--download ranges`` (the default): resolve (config, tokenizer, index, two headers, two
   tensors), then the same again (everything cached: no request expected);
2. ``--download full``: the two whole shards into the HF cache (today's behaviour before ranges).

Reports body bytes the server sent (all files; the safetensors files alone), wall and CPU seconds
of this process (the server's CPU is its own), and the ratio of safetensors bytes to the two
matrices' bytes (goal ≤ 1.05). Both loads must give bit-identical matrices. The result is printed
as JSON and written to ``WORK_DIR/hub_ranges.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPO_ID = "Qwen/Qwen2-7B"


def _stats(url: str, reset: bool = False) -> dict:
    import urllib.request

    with urllib.request.urlopen(url + ("/__reset" if reset else "/__stats"), timeout=30) as r:
        return json.load(r)


def _sent(stats: dict) -> dict:
    tensors = sum(r[-1] for r in stats["requests"] if r[1].endswith(".safetensors"))
    return {"bytes_all": stats["bytes_sent"], "bytes_safetensors": tensors, "requests": len(stats["requests"])}


def _timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, round(time.perf_counter() - w, 2), round(time.process_time() - c, 2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", type=Path)
    ap.add_argument("--full-size", action="store_true", help="all 28 layers (15.2 GB of shards)")
    ap.add_argument("--vocab-rows", type=int, default=152064)
    ap.add_argument("--hidden", type=int, default=3584)
    args = ap.parse_args(argv)
    work = args.work.resolve()
    repo = work / "repo"
    sys.path.insert(0, str(ROOT))
    if not (repo / "planted.json").is_file():
        from bench.make_checkpoint import make_checkpoint

        _, w, c = _timed(lambda: make_checkpoint(repo, rows=args.vocab_rows, hidden=args.hidden,
                                                 full_size=args.full_size))
        print(f"wrote {repo} in {w} s wall, {c} s CPU", file=sys.stderr)
    shards = json.loads((repo / "model.safetensors.index.json").read_text())["weight_map"]
    holding = sorted({shards["model.embed_tokens.weight"], shards["lm_head.weight"]})
    matrices = 2 * args.vocab_rows * args.hidden * 2  # bf16
    whole = sum((repo / s).stat().st_size for s in holding)

    server = subprocess.Popen([sys.executable, "-m", "tests.hub_server", REPO_ID, str(repo)], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    url = server.stdout.readline().strip()
    os.environ.update(HF_ENDPOINT=url, NO_PROXY="127.0.0.1", HF_HUB_OFFLINE="0", EMBSCOPE_QUIET="1")
    os.environ.pop("HF_TOKEN", None)
    import torch
    from huggingface_hub import constants

    # huggingface_hub reads HF_ENDPOINT once, at import (make_checkpoint may have imported it)
    constants.ENDPOINT, constants.HF_HUB_OFFLINE = url, False
    constants.HUGGINGFACE_CO_URL_TEMPLATE = url + "/{repo_id}/resolve/{revision}/{filename}"

    from embscope.models.load import load_model
    from embscope.models.resolve import resolve

    def fresh(name: str) -> None:
        for d in (work / f"hf-{name}", work / f"cache-{name}"):
            shutil.rmtree(d, ignore_errors=True)
        constants.HF_HUB_CACHE = str(work / f"hf-{name}")
        os.environ["EMBSCOPE_CACHE"] = str(work / f"cache-{name}")

    out: dict = {"repo": REPO_ID, "full_size": args.full_size, "matrix_bytes": matrices,
                 "shards_holding_matrices": holding, "whole_shard_bytes": whole, "load": os.getloadavg()}
    try:
        _stats(url, reset=True)
        fresh("ranges")
        r, w, c = _timed(lambda: resolve(REPO_ID, download="ranges"))
        m, lw, lc = _timed(lambda: load_model(r, device="cpu"))
        out["ranges"] = {**_sent(_stats(url, reset=True)), "resolve_wall_s": w, "resolve_cpu_s": c,
                         "load_wall_s": lw, "load_cpu_s": lc, "source": m.source}
        out["ranges"]["ratio_to_matrices"] = round(out["ranges"]["bytes_safetensors"] / matrices, 5)
        r2, w, c = _timed(lambda: resolve(REPO_ID, download="ranges"))
        out["ranges_second_run"] = {**_sent(_stats(url, reset=True)), "resolve_wall_s": w, "resolve_cpu_s": c}
        sparse = [work / "cache-ranges" / "hub" / REPO_ID.replace("/", "--") / r.hub["commit"] / s for s in holding]
        out["ranges"]["sparse_copy_disk_bytes"] = sum(p.stat().st_blocks * 512 for p in sparse)
        embed, head = m.embed.clone(), m.output.clone()
        del m
        fresh("full")
        r, w, c = _timed(lambda: resolve(REPO_ID, download="full"))
        f, lw, lc = _timed(lambda: load_model(r, device="cpu"))
        out["full"] = {**_sent(_stats(url, reset=True)), "resolve_wall_s": w, "resolve_cpu_s": c,
                       "load_wall_s": lw, "load_cpu_s": lc, "source": f.source}
        out["full"]["ratio_to_matrices"] = round(out["full"]["bytes_safetensors"] / matrices, 5)
        out["identical_matrices"] = bool(torch.equal(embed, f.embed) and torch.equal(head, f.output))
        out["load_after"] = os.getloadavg()
    finally:
        server.terminate()
        server.wait(30)
    text = json.dumps(out, indent=2)
    (work / "hub_ranges.json").write_text(text)
    print(text)
    return 0 if out.get("identical_matrices") else 1


if __name__ == "__main__":
    raise SystemExit(main())
