"""Where a corpus pass runs: in this process, on local worker processes, or on Ray — same numbers.

Every corpus pass (fertility, term counting for extension candidates, token counts) is a *map* over
shards and an exact *reduce*:

- a **shard** is one corpus file (:func:`embscope.corpus.stream.corpus_files`: files in corpus
  order). With ``sample_bytes`` the sample has to be taken in corpus order, so this process reads
  the (small) sample itself and hands it out in shards of about :data:`~embscope.corpus.shards.UNIT_BYTES`;
- **map** (``mapper(batches) → partial``) tokenises and counts one shard's batches, with the
  worker's own copy of the tokenizer;
- **reduce** (``reducer(earlier, later) → merged``) merges partials in shard order: sums add, and
  the few order-dependent samples (e.g. the first 200 texts of a language checked for round-trips)
  are replayed in order — so the result equals one pass over the corpus, bit for bit.

Term counting (:func:`count_keys`) reduces by key instead: each shard's counts go out in chunks of
at most ``chunk_keys`` distinct keys; locally the chunks are sorted runs on disk merged k-way, on
Ray a ``groupby`` — exact counts either way, in bounded memory.

Engines (:class:`Engine`):

- ``Engine("local", workers=1)``: this process only;
- ``Engine("local", workers=N)``: N spawned processes (``multiprocessing`` "spawn": safe with
  threads and on every OS); at most ``2 × N`` shards are in flight, so memory stays bounded;
  ``workers=None`` picks all cores (``os.cpu_count()``) when the corpus is large enough to pay for
  starting them (:data:`AUTO_MIN_BYTES`), else one process;
- ``Engine("ray", ray_address=...)``: Ray Data — ``from_items(shards)`` → ``map_batches``
  (an actor pool; each actor holds one tokenizer copy, reads its shards, tokenises and counts) →
  partials merged here in shard order, or ``groupby(key).aggregate(Sum, Min)`` for term counts.
  It connects to ``ray_address`` or ``$RAY_ADDRESS``; without either it starts a local Ray
  (``num_cpus`` = ``workers`` or all cores, no dashboard, listening on loopback only, usage stats
  off). The files must be readable at the same path from every node (a shared filesystem).
"""

from __future__ import annotations

import heapq
import os
import pickle
import shutil
import tempfile
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from embscope.corpus.backend import ENGINES, Engine, EngineError  # noqa: F401 - re-exported
from embscope.corpus.shards import Shard, corpus_shards, map_shard, read_shard
from embscope.corpus.stream import CorpusRead, corpus_files, finish
from embscope.corpus.readers import ReadOptions

#: ``workers=None`` uses one process for corpora smaller than this (starting a worker costs ~1 s)
AUTO_MIN_BYTES = 32 << 20
#: most sorted runs merged at once (open files); more are merged in rounds
MERGE_FAN_IN = 64


def _workers(engine: Engine, corpus, options) -> int:
    if engine.workers is not None:
        return engine.workers
    files = corpus_files(corpus, options)
    size = sum(os.path.getsize(f.path) for f in files)
    return 1 if size < AUTO_MIN_BYTES or len(files) < 2 else (os.cpu_count() or 1)


# ------------------------------------------------------------------ local processes

_STATE: dict = {}


def _init_worker(state: dict):
    from embscope.children import die_with_parent

    if state.get("parent"):
        die_with_parent(state["parent"])  # a stopped run leaves no worker computing for it
    # One tokenizer thread per process: N processes already use the N cores.
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("EMBSCOPE_QUIET", "1")
    _STATE.update(state)


def _pool_map(shard):
    return map_shard(_STATE["fn"], shard, _STATE["options"], _STATE["batch_size"], _STATE.get("tick"))


def _pool_chunks(shard):
    return _chunks_to_runs(_STATE["fn"], shard, _STATE["options"], _STATE["batch_size"], _STATE["spill"],
                           _STATE.get("tick"))


class _Bytes:
    """A pass's progress in bytes (:func:`embscope.progress.bar`, unit ``B``): each shard weighs
    :func:`~embscope.corpus.shards.shard_bytes`, advanced as a file read in this process goes
    (the bytes of the texts handed out, capped at the file's size: a jsonl file's keys and quotes
    are counted when it ends) and completed when the shard's result comes back; the total is the
    corpus's size on disk (unknown for a sampled pass).

    Results come back in shard order, so the sizes queue in the order the shards go out."""

    def __init__(self, shards, advance):
        self.sizes: deque = deque()
        self.advance, self.shown = advance, 0
        self.shards = self._sized(shards)

    def _sized(self, shards):
        from embscope.corpus.shards import shard_bytes

        for shard in shards:
            self.sizes.append(shard_bytes(shard))
            yield shard

    def tick(self, read: int) -> None:
        """A file read in this process has given ``read`` bytes so far."""
        n = min(read, self.sizes[0] if self.sizes else 0) - self.shown
        if n > 0:
            self.advance(n)
            self.shown += n

    def done(self) -> None:
        """The oldest shard's result came back."""
        size = self.sizes.popleft() if self.sizes else 0
        self.advance(max(size - self.shown, 0))
        self.shown = 0


def _pass_total(corpus, sample_bytes, options) -> int | None:
    """The progress bar's total: the corpus files' size on disk; ``None`` for a sampled pass."""
    if sample_bytes is not None:
        return None
    return sum(os.path.getsize(f.path) for f in corpus_files(corpus, options))


def _ordered(shards: Iterable[Shard], work, workers: int, state: dict) -> Iterator:
    """``work(shard)`` for every shard, results in shard order, at most 2 × workers in flight.

    ``state`` (the mapper, read options, …) goes to each worker once, not with every shard.
    """
    if workers == 1:
        _STATE.clear()  # a progress hook of an earlier pass must not outlive it
        _STATE.update(state)
        for shard in shards:
            yield work(shard)
        return
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"), initializer=_init_worker,
                             initargs=({**state, "parent": os.getpid()},)) as pool:
        window: deque = deque()
        for shard in shards:
            window.append(pool.submit(work, shard))
            if len(window) >= 2 * workers:
                yield window.popleft().result()
        while window:
            yield window.popleft().result()


# ------------------------------------------------------------------ the two kinds of pass


def run_pass(corpus, mapper: Callable, reducer: Callable, *, engine: Engine | None = None,
             sample_bytes: int | None = None, batch_size: int = 512,
             options: ReadOptions | None = None, description: str = "reading corpus"):
    """Map ``mapper`` over the corpus's shards and merge the partials in order with ``reducer``.

    Args:
        corpus: file, folder or glob, or a list of them.
        mapper: ``mapper(batches) → partial``; picklable (a module-level function or a
            ``functools.partial`` of one) for worker processes and Ray.
        reducer: ``reducer(earlier, later) → merged``; must be exact and order-aware.
        engine: :class:`Engine` (default: local, automatic workers).
        sample_bytes, batch_size, options: as :func:`embscope.corpus.stream.iter_corpus`.

    Returns:
        ``(merged, report)``; ``merged`` is ``mapper(iter([]))`` for a corpus with no shard.

    Raises:
        CorpusError: the corpus holds no usable text.
    """
    from embscope.progress import bar

    engine = engine or Engine()
    options = options or ReadOptions()
    report = CorpusRead()
    merged = None
    with bar(_pass_total(corpus, sample_bytes, options), description, unit="B") as advance:
        progress = _Bytes(corpus_shards(corpus, sample_bytes, batch_size, options, report), advance)
        if engine.kind == "ray":
            from embscope.corpus.ray_engine import ray_map

            results = ray_map(engine, progress.shards, mapper, options, batch_size)
        else:
            workers = _workers(engine, corpus, options)
            state = {"fn": mapper, "options": options, "batch_size": batch_size}
            results = _ordered(progress.shards, _pool_map, workers,
                               {**state, "tick": progress.tick} if workers == 1 else state)
        for partial, shard_report in results:
            progress.done()
            report.merge(shard_report)
            merged = partial if merged is None else reducer(merged, partial)
    finish(corpus, report, stacklevel=3)
    return (merged if merged is not None else mapper(iter([]))), report


def count_keys(corpus, chunker: Callable, *, min_count: int = 1, engine: Engine | None = None,
               sample_bytes: int | None = None, batch_size: int = 512,
               options: ReadOptions | None = None, spill_dir: str | Path | None = None,
               description: str = "counting terms") -> tuple[dict[str, tuple[int, str]], CorpusRead]:
    """Exact ``key → (count, first)`` over the corpus, for keys counted at least ``min_count`` times.

    ``chunker(batches, shard_index)`` yields chunks: lists of ``(key, count, first)`` where
    ``first`` is a string whose minimum over the chunks marks the occurrence to keep (e.g. the
    zero-padded shard index and position of the first occurrence). A chunk's keys are distinct;
    the same key may recur in later chunks — counts add up, ``first`` takes the minimum.

    Memory: each chunk is sorted and written as a run under ``spill_dir`` (a temporary folder by
    default), and the runs are merged k-way (:data:`MERGE_FAN_IN` at a time), so the memory is
    one chunk per worker plus the keys returned. On Ray the chunks are rows of a Ray Dataset,
    reduced by ``groupby("key").aggregate(Sum("count"), Min("first"))``.
    """
    from embscope.progress import bar

    engine = engine or Engine()
    options = options or ReadOptions()
    report = CorpusRead()
    shards = corpus_shards(corpus, sample_bytes, batch_size, options, report)
    if engine.kind == "ray":
        from embscope.corpus.ray_engine import ray_count

        out, reports = ray_count(engine, shards, chunker, options, batch_size, min_count)
        for r in reports:
            report.merge(r)
        finish(corpus, report, stacklevel=3)
        return out, report
    own = spill_dir is None
    spill = Path(tempfile.mkdtemp(prefix="embscope-terms-") if own else spill_dir)
    spill.mkdir(parents=True, exist_ok=True)
    try:
        workers = _workers(engine, corpus, options)
        runs: list[str] = []
        with bar(_pass_total(corpus, sample_bytes, options), description, unit="B") as advance:
            progress = _Bytes(shards, advance)
            state = {"fn": chunker, "options": options, "batch_size": batch_size, "spill": str(spill)}
            for shard_runs, shard_report in _ordered(progress.shards, _pool_chunks, workers,
                                                     {**state, "tick": progress.tick} if workers == 1 else state):
                progress.done()
                report.merge(shard_report)
                runs += shard_runs
        finish(corpus, report, stacklevel=3)
        return {k: (n, first) for k, n, first in merge_runs(runs, spill) if n >= min_count}, report
    finally:
        if own:
            shutil.rmtree(spill, ignore_errors=True)


# ------------------------------------------------------------------ sorted runs


def _chunks_to_runs(chunker, shard: Shard, options, batch_size, spill: str, tick=None):
    batches, report = read_shard(shard, options, batch_size, tick)
    runs = []
    for j, chunk in enumerate(chunker(batches, shard.index)):
        path = os.path.join(spill, f"run-{shard.index:09d}-{j:05d}.pkl")
        _write_run(path, sorted(chunk))
        runs.append(path)
    return runs, report


def _write_run(path: str, rows: Iterable) -> None:
    """A run file: pickled blocks of sorted ``(key, count, first)`` rows (our own files only)."""
    with open(path, "wb") as f:
        block: list = []
        for row in rows:
            block.append(row)
            if len(block) >= 8192:
                pickle.dump(block, f, protocol=5)
                block = []
        if block:
            pickle.dump(block, f, protocol=5)


def _read_run(path: str) -> Iterator[tuple[str, int, str]]:
    with open(path, "rb") as f:
        while True:
            try:
                block = pickle.load(f)
            except EOFError:
                return
            yield from block


def _merge_sorted(iters) -> Iterator[tuple[str, int, str]]:
    """Merge sorted runs: one row per key, counts summed, the least ``first``."""
    key = None
    n, first = 0, ""
    for k, c, f in heapq.merge(*iters):
        if k != key:
            if key is not None:
                yield key, n, first
            key, n, first = k, c, f
        else:
            n += c
            first = min(first, f)
    if key is not None:
        yield key, n, first


def merge_runs(runs: list[str], spill: Path) -> Iterator[tuple[str, int, str]]:
    """Exact k-way merge of sorted run files, in rounds of :data:`MERGE_FAN_IN` runs."""
    level = 0
    while len(runs) > MERGE_FAN_IN:
        merged = []
        for i in range(0, len(runs), MERGE_FAN_IN):
            out = str(spill / f"merge-{level}-{i:09d}.pkl")
            _write_run(out, _merge_sorted(_read_run(r) for r in runs[i:i + MERGE_FAN_IN]))
            merged.append(out)
        runs, level = merged, level + 1
    yield from _merge_sorted(_read_run(r) for r in runs)


def map_shards(shards: Iterable[Shard], mapper: Callable, *, engine: Engine | None = None,
               workers: int = 1, description: str = "working") -> Iterator:
    """``mapper(batches)`` for shards whose batches this process already made (``Shard(batches=…)``),
    results in shard order: here, on ``workers`` local processes, or on Ray. For passes over
    records rather than corpus texts (the training-data check), which read and shape the records
    here and hand out the work."""
    from embscope.progress import track

    engine = engine or Engine()
    options = ReadOptions()
    if engine.kind == "ray":
        from embscope.corpus.ray_engine import ray_map

        results = ray_map(engine, shards, mapper, options, 1)
    else:
        results = _ordered(shards, _pool_map, max(1, workers), {"fn": mapper, "options": options, "batch_size": 1})
    for partial, _ in track(results, description=description, unit="shards"):
        yield partial
