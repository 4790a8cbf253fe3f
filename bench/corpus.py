"""Corpus passes at scale: one process vs all local cores vs Ray, on plain and compressed shards.

Generates a corpus of ``--mb`` MB (default 2000) under a temp folder: ``--shards`` jsonl shards of
sentences drawn with a fixed seed from the shipped corpora (UDHR in all its languages and the
medical texts), with a ``lang`` field; then a ``.jsonl.zst`` copy of the same shards. Each is
counted by the fertility pass (:func:`embscope.languages.fertility.measure`, llama3 tokenizer,
HF ``tokenizers``) and/or the term-counting pass
(:func:`embscope.extension.candidates.corpus_candidates`, ``max_ngram=2``), three ways:

- ``one process``: ``Engine("local", workers=1)`` (the Rust tokenizer may still use every core
  inside ``encode_batch``; term counting is Python on one core);
- ``local N``: ``Engine("local", workers=N)``, N = ``--workers`` (default: all cores);
- ``ray local``: ``Engine("ray", workers=N)`` on a Ray started for the run (its start is timed
  apart and not counted in the run).

Every run is a fresh process, so its peak memory is its own. Each result is checked equal to the
first run of its pass on this corpus — by default one process on the plain shards; the
compressed copy holds the same records in the same order, so its result must be equal too
("vs reference" is that run's wall time over this one's). Figures per run:

- MB/s: corpus MB (uncompressed UTF-8 text bytes) per wall second;
- CPU s: CPU seconds of the run's whole process tree — the bench process, the local workers, or
  Ray's GCS, raylet and the workers it starts — read from ``/proc`` every 0.5 s (see
  :class:`Meter`); MB per CPU-s is then the per-core rate, whatever else shares the machine;
- peak RSS: the largest sum of resident memory over that process tree, sampled every 0.5 s
  (shared pages, e.g. Ray's object store, count once per process that touches them);
- load: the 1-minute load average, mean of the samples taken during the run.

    python bench/corpus.py --mb 2000          # the full bench (hours on a 2-core machine)
    python bench/corpus.py --mb 16            # a quick check
    python bench/corpus.py --mb 2000 --keep /tmp/c --runs fertility/jsonl/local,terms/zst/local
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("EMBSCOPE_QUIET", "1")

PASSES = ("fertility", "terms")
INPUTS = {"jsonl": "plain", "zst": "zst"}
ENGINES = ("one", "local", "ray")


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


def prepare(base: Path, mb: int, shards: int) -> int:
    """Generate (or reuse, when ``base`` already holds this size) the corpus; its text bytes."""
    meta = base / "meta.json"
    want = {"mb": mb, "shards": shards}
    if meta.exists():
        info = json.loads(meta.read_text())
        if {k: info.get(k) for k in want} == want:
            print(f"corpus: reusing {base}")
            return info["bytes"]
    shutil.rmtree(base / "plain", ignore_errors=True)
    shutil.rmtree(base / "zst", ignore_errors=True)
    for f in base.glob("ref-*"):
        f.unlink()
    t = time.perf_counter()
    nbytes = generate(base / "plain", mb, shards)
    compress(base / "plain", base / "zst")
    meta.write_text(json.dumps({**want, "bytes": nbytes}))
    on_disk = {k: sum(f.stat().st_size for f in (base / k).iterdir()) for k in ("plain", "zst")}
    print(f"corpus: {nbytes / 1e6:.0f} MB of text in {shards} shards; jsonl {on_disk['plain'] / 1e6:.0f} MB, "
          f".jsonl.zst {on_disk['zst'] / 1e6:.0f} MB; generated in {time.perf_counter() - t:.0f} s")
    return nbytes


# ------------------------------------------------------------------ the process tree, from /proc

TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def _stats() -> dict[int, tuple[int, float, int]]:
    """pid → (ppid, its own CPU seconds, RSS bytes), every process."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                s = f.read()
        except OSError:
            continue
        rest = s[s.rindex(")") + 2:].split()  # fields from 3 (state) on
        out[int(d)] = (int(rest[1]), (int(rest[11]) + int(rest[12])) / TICK, int(rest[21]) * PAGE)
    return out


def _tree(stats, root: int) -> list[int]:
    """``root`` and its live descendants."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [root], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


class Meter:
    """Wall time, CPU seconds and peak RSS of this process tree, and the mean load, over a run.

    CPU: every process of the tree is sampled every 0.5 s and its last CPU reading kept, so a
    worker that exits during the run still counts (Ray's raylet ignores SIGCHLD, so the CPU time
    of the workers it started never reaches anyone's reaped-children total); a process loses at
    most its last half second.
    """

    def _sample(self):
        stats = _stats()
        tree = [p for p in _tree(stats, os.getpid()) if p in stats]
        for p in tree:
            self.last[p] = stats[p][1]
        self.peak = max(self.peak, sum(stats[p][2] for p in tree))

    def __enter__(self):
        self.last, self.peak, self.loads = {}, 0, []
        self._sample()
        self.start = dict(self.last)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.t0 = time.perf_counter()
        self._thread.start()
        return self

    def _loop(self):
        while not self._stop.wait(0.5):
            self._sample()
            self.loads.append(os.getloadavg()[0])

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.t0
        self._stop.set()
        self._thread.join()
        self._sample()
        self.cpu = sum(c - self.start.get(p, 0.0) for p, c in self.last.items())
        self.load = sum(self.loads) / len(self.loads) if self.loads else os.getloadavg()[0]


# ------------------------------------------------------------------ one run (a child process)


def engine_of(name: str, workers: int):
    from embscope.corpus.engine import Engine

    return {"one": Engine(workers=1), "local": Engine(workers=workers),
            "ray": Engine("ray", workers=workers)}[name]


def child(kind: str, corpus: Path, engine_name: str, workers: int, result: Path) -> dict:
    from embscope.extension.candidates import corpus_candidates
    from embscope.languages.fertility import CorpusPass, measure
    from embscope.models.vocabulary import load_vocabulary

    vocab = load_vocabulary("llama3")
    engine = engine_of(engine_name, workers)
    info: dict = {}
    if engine.kind == "ray":
        from embscope.corpus.ray_engine import init

        t = time.perf_counter()
        ray = init(engine)
        info["ray_start_s"] = round(time.perf_counter() - t, 1)
    with Meter() as m:
        if kind == "fertility":
            res = measure([vocab], corpus, read=CorpusPass(engine=engine))
            out = (res.table, res.token_counts)
        else:
            out = corpus_candidates(vocab.tok, corpus, max_ngram=2, min_freq=5, engine=engine)[0]
    if engine.kind == "ray":
        ray.shutdown()
    with result.open("wb") as f:
        pickle.dump(out, f, protocol=5)
    return {**info, "wall": m.wall, "cpu": m.cpu, "peak": m.peak, "load": m.load}


def same(kind, a, b) -> bool:
    import numpy as np

    if kind == "fertility":
        return a[0].equals(b[0]) and a[1].keys() == b[1].keys() and \
            all(np.array_equal(a[1][k], b[1][k]) for k in a[1])
    return a == b


def plan(args) -> list[tuple[str, str, str]]:
    """(pass, input, engine) runs. From the lists: per pass, the reference (one process on jsonl)
    first. With ``--runs``: in the order given."""
    if args.runs:
        runs = [tuple(r.split("/")) for r in args.runs.split(",")]
        for r in runs:
            if len(r) != 3 or r[0] not in PASSES or r[1] not in INPUTS or r[2] not in ENGINES:
                sys.exit(f"--runs: PASS/INPUT/ENGINE with PASS in {PASSES}, INPUT in {tuple(INPUTS)}, "
                         f"ENGINE in {ENGINES}; got {'/'.join(r)}")
        return runs
    runs = [(p, i, e) for p in args.passes.split(",") for i in args.inputs.split(",")
            for e in args.engines.split(",")]
    return sorted(runs, key=lambda r: (PASSES.index(r[0]), r[1:] != ("jsonl", "one")))


def reference(base: Path, kind: str, keep: tuple[Path, float, str] | None = None):
    """``(result, {"wall", "name"})`` of the reference run of a pass, or None: the first run of the
    pass on this corpus (``keep`` = its result file, wall time and name), stored beside the corpus,
    so a bench split over several invocations with ``--keep`` compares every run to the same."""
    pkl, info = base / f"ref-{kind}.pkl", base / f"ref-{kind}.json"
    if keep is not None:
        shutil.copyfile(keep[0], pkl)
        info.write_text(json.dumps({"wall": keep[1], "name": keep[2]}))
    if not pkl.exists():
        return None
    with pkl.open("rb") as f:
        return pickle.load(f), json.loads(info.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=2000, help="corpus size in MB of text")
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--passes", default="fertility,terms")
    ap.add_argument("--inputs", default="jsonl,zst")
    ap.add_argument("--engines", default="one,local,ray")
    ap.add_argument("--runs", help="explicit runs PASS/INPUT/ENGINE,... (instead of the three lists)")
    ap.add_argument("--keep", type=Path, help="generate here and keep it (reused when the size matches); "
                                              "default: a temp folder, deleted")
    ap.add_argument("--child", nargs=4, metavar=("PASS", "CORPUS", "ENGINE", "RESULT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, corpus, engine, result = args.child
        print(json.dumps(child(kind, Path(corpus), engine, args.workers, Path(result))))
        return

    runs = plan(args)
    base = args.keep or Path(tempfile.mkdtemp(prefix="embscope-bench-corpus-"))
    base.mkdir(parents=True, exist_ok=True)
    print(f"start: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    try:
        nbytes = prepare(base, args.mb, args.shards)
        mb = nbytes / 1e6
        print("\n| pass | input | engine | wall s | MB/s | vs reference | CPU s | MB per CPU-s | "
              "peak RSS MB | equal | load |")
        print("|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
        for kind, inp, eng in runs:
            result = base / f"result-{kind}-{inp}-{eng}.pkl"
            cmd = [sys.executable, __file__, "--workers", str(args.workers),
                   "--child", kind, str(base / INPUTS[inp]), eng, str(result)]
            done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True)
            stats = json.loads(done.stdout.strip().splitlines()[-1])
            with result.open("rb") as f:
                out = pickle.load(f)
            name = {"one": "one process", "local": f"local {args.workers}", "ray": "ray local"}[eng]
            label = f"{'jsonl' if inp == 'jsonl' else 'jsonl.zst'} {name}"
            ref = reference(base, kind)
            if ref is None:
                ref = reference(base, kind, keep=(result, stats["wall"], label))
                equal = "(reference)"
            else:
                equal = same(kind, ref[0], out)
            result.unlink()
            if "ray_start_s" in stats:
                name += f" (+{stats['ray_start_s']:.0f} s start)"
            print(f"| {kind} | {'jsonl' if inp == 'jsonl' else 'jsonl.zst'} | {name} | {stats['wall']:.0f} | "
                  f"{mb / stats['wall']:.2f} | {ref[1]['wall'] / stats['wall']:.2f}× | {stats['cpu']:.0f} | "
                  f"{mb / stats['cpu']:.2f} | {stats['peak'] / 1e6:.0f} | {equal} | {stats['load']:.1f} |",
                  flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
        print(f"end: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")


if __name__ == "__main__":
    main()
