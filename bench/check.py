"""``embscope check`` on a generated 100,000-conversation ``messages`` dataset, beside the
``tokenizers`` batch encoding of the same rendered text, in one run.

    python bench/check.py [--n 100000] [--keep DIR] [--one-process]

The dataset: conversations from ``scripts/build_corpora.py``'s generator (the shipped medical and
UDHR corpora; system turns, one to three exchanges), each joined with the exchanges of a second one
so that a record is about 1 KB: 100,000 records, about 100 MB of jsonl.

Timed, each in a fresh process (wall, CPU = user + system of that process and its threads):

1. ``python cli.py check --model smollm2-135m --data train.jsonl --json`` (kNN cache warmed first,
   as any second run finds it), once with ``--workers 2`` (worker processes, one shard of 2,048
   examples each at a time) and once in one process (the default; the tokenizer's own threads use
   every core); ``--one-process`` times only the default (a shorter run);
2. the floor: reading the jsonl, rendering every conversation with the same template
   (``embscope.models.chat_template.render``), and ``tokenizers.Tokenizer.encode_batch_fast`` on
   the rendered text: what the check cannot go below. Rendering and encoding are timed apart.

MB per CPU-second = dataset MB / CPU seconds. The machine's load average is printed beside them.
Goal: the check in at most 90 s on the 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FLOOR = r"""
import json, sys, time, resource
from embscope.models.load import load_model
from embscope.models.chat_template import read_chat_template, render, special_token_strings
m = load_model("smollm2-135m", device="cpu")
template, names = read_chat_template(m), special_token_strings(m)
t0 = time.perf_counter(); c0 = time.process_time()
convs = [json.loads(line)["messages"] for line in open(sys.argv[1], encoding="utf-8")]
t1 = time.perf_counter(); c1 = time.process_time()
texts = [render(template, c, add_generation_prompt=False, **names) for c in convs]
t2 = time.perf_counter(); c2 = time.process_time()
enc = m.vocab.tok.encode_batch_fast(texts, add_special_tokens=False)
t3 = time.perf_counter(); c3 = time.process_time()
print(json.dumps({"read": [t1 - t0, c1 - c0], "render": [t2 - t1, c2 - c1], "encode": [t3 - t2, c3 - c2],
                  "tokens": sum(len(e.ids) for e in enc), "rendered_mb": sum(len(t.encode()) for t in texts) / 1e6}))
"""


def write_dataset(path: Path, n: int) -> int:
    from scripts.build_corpora import chat_conversations

    convs = chat_conversations(ROOT / "corpora", n, seed=11)
    half = len(convs) // 2
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            a = convs[i % len(convs)]["messages"]
            b = [m for m in convs[(i + half) % len(convs)]["messages"] if m["role"] != "system"]
            f.write(json.dumps({"messages": a + b}, ensure_ascii=False) + "\n")
    return path.stat().st_size


def timed(argv: list[str], env=None) -> tuple[float, float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    res = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if res.returncode not in (0, 1):
        raise SystemExit(f"{argv} failed ({res.returncode}): {res.stderr[-2000:]}")
    return wall, cpu, res.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--keep", type=Path, help="keep the dataset here")
    ap.add_argument("--one-process", action="store_true", help="skip the --workers run (time the default only)")
    args = ap.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="embscope-bench-check-"))
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "train.jsonl"
    size = data.stat().st_size if data.exists() else write_dataset(data, args.n)
    mb = size / 1e6
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EMBSCOPE_QUIET": "1"}
    print(f"dataset: {args.n} conversations, {mb:.1f} MB; load average before: {os.getloadavg()}")
    small = folder / "warm.jsonl"
    small.write_text("".join(line for _, line in zip(range(10), open(data, encoding="utf-8"))), "utf-8")
    timed([sys.executable, "cli.py", "check", "--model", "smollm2-135m", "--data", str(small), "-q"], env)  # kNN cache
    load0 = os.getloadavg()
    wall1, cpu1, out1 = timed([sys.executable, "cli.py", "check", "--model", "smollm2-135m", "--data", str(data),
                               "--json", "-q"], env)
    body1 = json.loads(out1)
    load1 = os.getloadavg()
    wall, cpu, body = None, None, body1
    if not args.one_process:
        load0 = os.getloadavg()
        wall, cpu, out = timed([sys.executable, "cli.py", "check", "--model", "smollm2-135m", "--data", str(data),
                                "--json", "-q", "--workers", str(os.cpu_count() or 2)], env)
        body = json.loads(out)
    same = {k: v for k, v in body["data"].items() if k != "seconds"} == \
        {k: v for k, v in body1["data"].items() if k != "seconds"} and body["findings"] == body1["findings"]
    fw, fc, fout = timed([sys.executable, "-c", FLOOR, str(data)], env)
    floor = json.loads(fout)
    load2 = os.getloadavg()
    print(f"| what | wall s | CPU s | MB per CPU-s |\n|---|---|---|---|")
    if wall is not None:
        print(f"| embscope check --workers {os.cpu_count()} (whole command: load, scan from the kNN cache, read, "
              f"render, tokenize, findings) | {wall:.1f} | {cpu:.1f} | {mb / cpu:.2f} |")
        print(f"| of which the data pass (summary seconds) | {body['data']['seconds']:.1f} | | |")
    print(f"| embscope check (one process, the default) | {wall1:.1f} | {cpu1:.1f} | {mb / cpu1:.2f} |")
    print(f"| of which the data pass | {body1['data']['seconds']:.1f} | | |")
    r, e = floor["render"], floor["encode"]
    print(f"| floor: read jsonl | {floor['read'][0]:.1f} | {floor['read'][1]:.1f} | |")
    print(f"| floor: render every conversation | {r[0]:.1f} | {r[1]:.1f} | {mb / r[1]:.2f} |")
    print(f"| floor: tokenizers encode_batch_fast of the rendered text ({floor['rendered_mb']:.1f} MB) "
          f"| {e[0]:.1f} | {e[1]:.1f} | {floor['rendered_mb'] / max(e[1], 1e-9):.2f} |")
    print(f"tokens: check {body['data']['tokens']}, floor {floor['tokens']}; findings: "
          f"{[f['code'] for f in body['findings']]}")
    if wall is not None:
        print(f"same record on every core and in one process: {same}")
    print(f"load average before the timed check: {load0}, after the one-process check: {load1}, after the floor: "
          f"{load2}; goal <= 90 s wall (one process): {'met' if wall1 <= 90 else 'not met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
