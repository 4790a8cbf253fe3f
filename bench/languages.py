"""The language commands at the breadth of a ~400-language corpus: ``fertility --tokenizer gpt2`` and
``compare`` of three tokenizers, end to end (the pass, the intervals, the tables, the report).

Goals (2 cores): fertility ≤ 60 s, compare of three tokenizers ≤ 2 min, over every language.

The scaled corpus copies the shipped UDHR files (68 languages) under new language codes
(``<code>x<k>``, each record's ``lang`` rewritten) until it holds ``--languages`` of them, in a temp
folder deleted afterwards; ``--shipped`` times the shipped 68 languages instead. Each command runs
in its own process (``embscope.api`` as a user calls it, ``--out`` a temp folder), timed from the
call to its return.

    python bench/languages.py                   # 408 languages
    python bench/languages.py --languages 136   # quicker
    python bench/languages.py --shipped
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
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("EMBSCOPE_QUIET", "1")

#: the three tokenizers of the compare row: byte-level BPE of three sizes and two backends
COMPARE = ("gpt2", "cl100k_base", "llama3")


def scaled(folder: Path, languages: int) -> int:
    """Write ``languages`` language files (UDHR copies under new codes) into ``folder``."""
    src = sorted((ROOT / "corpora" / "udhr").glob("*.jsonl"))
    n = 0
    for k in range(languages // len(src) + 1):
        for path in src:
            if n >= languages:
                return n
            code = path.stem if k == 0 else f"{path.stem}x{k}"
            recs = [json.loads(line) for line in path.read_text("utf-8").splitlines()]
            (folder / f"{code}.jsonl").write_text(
                "".join(json.dumps({**r, "lang": code}, ensure_ascii=False) + "\n" for r in recs), "utf-8")
            n += 1
    return n


def child(which: str, corpus: str, out: str) -> None:
    from embscope import api

    t0 = time.perf_counter()
    if which == "fertility":
        res = api.fertility("gpt2", corpus, out=out, force=True)
    else:
        res = api.compare(list(COMPARE), corpus, out=out, force=True)
    dt = time.perf_counter() - t0
    langs = res.tables["languages"]["language"].n_unique()
    print(json.dumps({"seconds": dt, "languages": langs, "rows": res.tables["languages"].height,
                      "comparisons": res.tables["comparisons"].height if "comparisons" in res.tables else 0}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--languages", type=int, default=408, help="languages of the scaled corpus (default 408)")
    ap.add_argument("--shipped", action="store_true", help="the shipped UDHR (68 languages) instead")
    ap.add_argument("--child", choices=("fertility", "compare"), help=argparse.SUPPRESS)
    ap.add_argument("--corpus", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.corpus, args.out)
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="embscope-bench-languages-"))
    try:
        if args.shipped:
            corpus = str(ROOT / "corpora" / "udhr")
        else:
            (tmp / "corpus").mkdir()
            scaled(tmp / "corpus", args.languages)
            corpus = str(tmp / "corpus")
        rows = []
        for which, goal in (("fertility", 60), ("compare", 120)):
            proc = subprocess.run([sys.executable, __file__, "--child", which, "--corpus", corpus,
                                   "--out", str(tmp / which)], capture_output=True, text=True, check=False)
            if proc.returncode:
                print(proc.stderr[-3000:])
                return 1
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            rows.append((which, goal, r))
            print(f"  {which}: {r['seconds']:.1f} s", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load = os.getloadavg()[0]
    print(f"\n{'command':<44}{'languages':>10}{'seconds':>9}{'goal':>6}  met")
    for which, goal, r in rows:
        label = "fertility --tokenizer gpt2" if which == "fertility" else "compare " + " ".join(f"-t {t}" for t in COMPARE)
        print(f"{label:<44}{r['languages']:>10}{r['seconds']:>9.1f}{goal:>6}  {'yes' if r['seconds'] <= goal else 'NO'}")
    print(f"({os.cpu_count()} cores, load average {load:.1f} at the end: timings under that load)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
