"""Loading Gemma-3-270M's GGUF vocabulary (262144 pieces): embscope cold / warm vs transformers.

    python bench/tokenizer_load.py [--gguf FILE]

Each method runs in its own fresh Python process (imports count alike); wall time and CPU time
(user + system) of the load call are printed, with the load average, because the development
machine is shared:

- ``transformers``: ``AutoTokenizer.from_pretrained(dir, gguf_file=…)`` (what embscope did before
  it rebuilt GGUF tokenizers itself);
- ``cold``: :func:`embscope.tokenizer.load.load_tokenizer_file` with an empty tokenizer cache
  (parses the GGUF metadata, derives ~515k merges from the piece scores, writes the cache);
- ``warm``: the same call again (reads the cached ``tokenizer.json``).

Ratios are transformers / method. Goal: warm ≤ 3 s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, os, resource, sys, time
sys.path.insert(0, sys.argv[1])
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
method, path = sys.argv[2], sys.argv[3]
if method == "transformers":
    from transformers import AutoTokenizer
    c, t = cpu(), time.perf_counter()
    AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path), trust_remote_code=False)
else:
    from embscope.tokenizer.load import load_tokenizer_file
    c, t = cpu(), time.perf_counter()
    load_tokenizer_file(path)
print(json.dumps({"wall": time.perf_counter() - t, "cpu": cpu() - c}))
"""


def run(method: str, path: Path, env: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), method, str(path)], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", type=Path, help="default: the gemma3-270m demo model (assembled in the user cache)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.gguf is None:
        from embscope.models.resolve import resolve

        args.gguf = resolve("gemma3-270m").path
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "EMBSCOPE_CACHE": tmp, "HF_HUB_OFFLINE": "1"}
        res = {m: run(m, args.gguf, env) for m in ("transformers", "cold", "warm")}
    base = res["transformers"]["wall"]
    print(f"{args.gguf.name}, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print("| method | wall s | cpu s | transformers / method |")
    print("|---|---|---|---|")
    for m, r in res.items():
        print(f"| {m} | {r['wall']:.2f} | {r['cpu']:.2f} | {base / r['wall']:.1f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
