"""Corpus passes at scale: one process vs all local cores vs Ray, on plain and compressed shards.

Generates a corpus of ``--mb`` MB (default 2000) under a temp folder: ``--shards`` jsonl shards of
sentences drawn with a fixed seed from the shipped corpora (UDHR in all its languages and the
medical texts), with a ``lang`` field; then a ``.jsonl.zst`` copy of the same shards. Each is
counted by the fertility pass (:func:`embscope.languages.fertility.measure`, llama3 tokenizer,
HF ``tokenizers``) and/or the term-counting pass
(:func:`embscope.extension.candidates.corpus_candidates`, ``max_ngram=2``), three ways:

- ``one process``: ``Engine("local", workers=1)``;
- ``local N``: ``Engine("local", workers=N)``, N = ``--workers`` (default: all cores);
- ``ray local``: ``Engine("ray", workers=N)`` on a Ray started here (its start-up is timed apart).

Each run's result is checked equal to the one-process result. MB/s is corpus MB (uncompressed
UTF-8 text bytes) per wall second; the load average is printed beside every row. On a shared
machine wall time says little, so the CPU seconds of this process and its worker processes are
printed too: MB per CPU-second is the per-core rate, whatever the load (not for Ray, whose
workers are not this process's children). The corpus is deleted at the end.

    python bench/corpus.py --mb 2000          # the full bench (long on a 2-core machine)
    python bench/corpus.py --mb 16            # a quick check
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("EMBSCOPE_QUIET", "1")


def sentences() -> list[dict]:
    out = []
    for f in sorted((ROOT / "corpora").glob("*/*.jsonl")):
        for line in f.read_text("utf-8").splitlines():
            rec = json.loads(line)
            for part in rec["text"].split("\n"):
                if part.strip():
                    out.append({"text": part, "lang": rec.get("lang") or f.stem})
    return out


def generate(folder: Path, total_mb: int, shards: int, seed: int = 0) -> int:
    """``shards`` files ``part-NNNNN.jsonl`` of random sentences; returns text bytes written."""
    pool = sentences()
    rng = random.Random(seed)
    per_shard = total_mb * 1_000_000 // shards
    total = 0
    folder.mkdir(parents=True, exist_ok=True)
    for s in range(shards):
        size = 0
        with (folder / f"part-{s:05d}.jsonl").open("w", encoding="utf-8") as f:
            while size < per_shard:
                block = [pool[rng.randrange(len(pool))] for _ in range(2000)]
                f.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in block))
                size += sum(len(r["text"].encode("utf-8")) for r in block)
        total += size
    return total


def compress(src: Path, dst: Path) -> None:
    import zstandard

    dst.mkdir(parents=True, exist_ok=True)
    cctx = zstandard.ZstdCompressor(level=3)
    for f in sorted(src.glob("*.jsonl")):
        with f.open("rb") as i, open(dst / (f.name + ".zst"), "wb") as o:
            cctx.copy_stream(i, o)


def load() -> str:
    return "%.1f" % os.getloadavg()[0]


def run(kind: str, corpus: Path, engine, vocab, tok):
    from embscope.extension.candidates import corpus_candidates
    from embscope.languages.fertility import measure

    t, c = time.perf_counter(), os.times()
    if kind == "fertility":
        res = measure([vocab], corpus, engine=engine)
        out = (res.table, res.token_counts)
    else:
        out = corpus_candidates(tok, corpus, max_ngram=2, min_freq=5, engine=engine)[0]
    e = os.times()
    cpu = (e.user - c.user) + (e.system - c.system) + (e.children_user - c.children_user) + \
        (e.children_system - c.children_system)
    return out, time.perf_counter() - t, cpu


def same(kind, a, b) -> bool:
    import numpy as np

    if kind == "fertility":
        return a[0].equals(b[0]) and all(np.array_equal(a[1][k], b[1][k]) for k in a[1])
    return a == b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=2000, help="corpus size in MB of text")
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--passes", default="fertility,terms")
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--keep", type=Path, help="generate here and keep it (default: a temp folder, deleted)")
    args = ap.parse_args()

    from embscope.languages.engine import Engine
    from embscope.tokenizer.load import load_vocabulary

    vocab = load_vocabulary("llama3")
    tok = vocab.tok
    base = args.keep or Path(tempfile.mkdtemp(prefix="embscope-bench-corpus-"))
    try:
        t = time.perf_counter()
        nbytes = generate(base / "plain", args.mb, args.shards)
        compress(base / "plain", base / "zst")
        on_disk = {k: sum(f.stat().st_size for f in (base / k).iterdir()) for k in ("plain", "zst")}
        print(f"corpus: {nbytes / 1e6:.0f} MB of text in {args.shards} shards; jsonl {on_disk['plain'] / 1e6:.0f} MB, "
              f".jsonl.zst {on_disk['zst'] / 1e6:.0f} MB; generated in {time.perf_counter() - t:.0f} s")
        engines = [("one process", Engine(workers=1)), (f"local {args.workers}", Engine(workers=args.workers))]
        if not args.no_ray:
            t = time.perf_counter()
            from embscope.languages.ray_engine import init

            init(Engine("ray", workers=args.workers))
            print(f"ray: import + local start {time.perf_counter() - t:.1f} s (load {load()})")
            engines.append(("ray local", Engine("ray", workers=args.workers)))
        print("\n| pass | input | engine | wall s | MB/s | vs one process | CPU s | MB per CPU-s | equal | load |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for kind in args.passes.split(","):
            for variant in ("plain", "zst"):
                ref = ref_s = None
                for name, engine in engines:
                    out, secs, cpu = run(kind, base / variant, engine, vocab, tok)
                    if ref is None:
                        ref, ref_s = out, secs
                    label = "jsonl" if variant == "plain" else "jsonl.zst"
                    # CPU time of this process and its reaped children; Ray's workers are not ours
                    ray = engine.kind == "ray"
                    cpu_s = "n/a" if ray else f"{cpu:.1f}"
                    per_cpu = "n/a" if ray else f"{nbytes / 1e6 / cpu:.2f}"
                    print(f"| {kind} | {label} | {name} | {secs:.1f} | {nbytes / 1e6 / secs:.2f} | "
                          f"{ref_s / secs:.2f}× | {cpu_s} | {per_cpu} | {same(kind, ref, out)} | {load()} |",
                          flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
