"""Unicode scripts from the UCD (``regex``) against the hand-written name table it replaced.

Prints, in one run: the table build time; how many assigned code points (Python ``unicodedata``
categories other than Cn/Co/Cs) the two disagree on, with the most common (old, new) pairs; and
the time ``script_of`` takes over every token string of a vocabulary (default: the Gemma-3-270M
GGUF, 262,144 tokens), old and new side by side.

    python bench/script_table.py [--gguf PATH] [--old-commit 846bb74]

The old implementation is read from git history (``git show COMMIT:embscope/text/script.py``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import types
import unicodedata
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def old_module(commit: str) -> types.ModuleType:
    src = subprocess.run(["git", "show", f"{commit}:embscope/text/script.py"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    mod = types.ModuleType("old_script")
    exec(compile(src, "old_script.py", "exec"), mod.__dict__)
    return mod


def gguf_tokens(path: str) -> list[str]:
    import gguf

    reader = gguf.GGUFReader(path)
    field = reader.fields["tokenizer.ggml.tokens"]
    return [bytes(field.parts[i]).decode("utf-8", "replace") for i in field.data]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default="/work/cache/gguf/gemma-3-270m-q4_k_m.gguf")
    ap.add_argument("--old-commit", default="846bb74")
    args = ap.parse_args()
    print(f"load: {os.getloadavg()[0]:.2f}")
    from embscope.text import script as new

    t = time.perf_counter()
    new._table()
    print(f"UCD table build: {time.perf_counter() - t:.3f} s")
    old = old_module(args.old_commit)
    t = time.perf_counter()
    old._table()
    print(f"old name table build: {time.perf_counter() - t:.3f} s")

    assigned = [cp for cp in range(0x110000)
                if unicodedata.category(chr(cp)) not in ("Cn", "Co", "Cs")]
    pairs = Counter()
    for cp in assigned:
        a, b = old.char_script(chr(cp)), new.char_script(chr(cp))
        if a != b:
            pairs[(a, b)] += 1
    print(f"assigned code points (unicodedata {unicodedata.unidata_version}): {len(assigned):,}; "
          f"old vs new disagree on {sum(pairs.values()):,}")
    for (a, b), n in pairs.most_common(15):
        print(f"  {n:>7,}  old {a:<12} new {b}")
    print(f"  U+1720: old {old.char_script(chr(0x1720))}, new {new.char_script(chr(0x1720))}; "
          f"'日本語のテキストです': old {old.dominant_script('日本語のテキストです')}, "
          f"new {new.dominant_script('日本語のテキストです')}")

    if Path(args.gguf).is_file():
        t = time.perf_counter()
        tokens = gguf_tokens(args.gguf)
        print(f"{len(tokens):,} token strings read in {time.perf_counter() - t:.1f} s")
        labels = {}
        for name, mod in (("old", old), ("new", new)):
            t = time.perf_counter()
            labels[name] = [mod.script_of(s) for s in tokens]
            dt = time.perf_counter() - t
            print(f"script_of over the vocabulary, {name}: {dt:.3f} s; "
                  f"top labels {Counter(labels[name]).most_common(6)}")
        changed = Counter((a, b) for a, b in zip(labels["old"], labels["new"]) if a != b)
        print(f"token labels that changed: {sum(changed.values()):,}; most common {changed.most_common(8)}")
    print(f"load: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
