"""Shards: the units of work both engines hand out (:mod:`embscope.corpus.engine` locally,
:mod:`embscope.corpus.ray_engine` on Ray).

A shard is one corpus file, which the worker reads itself, or, for a sampled pass (the sample must
be taken in corpus order), a list of batches this process already read, about :data:`UNIT_BYTES`
of text each.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from embscope.corpus.stream import CorpusRead, corpus_files, iter_file, past_corpus_limit

#: a sampled pass hands out its texts in shards of about this many bytes
UNIT_BYTES = 4 << 20


@dataclass
class Shard:
    index: int
    file: Any = None  # SourceFile: the worker reads it
    batches: list | None = None  # or: batches the driver already read (sampled pass)


def corpus_shards(corpus, sample_bytes, batch_size, options, report) -> Iterator[Shard]:
    """Shards in corpus order. Sampled: read here (bounded by sample_bytes × languages)."""
    from collections import Counter

    files = corpus_files(corpus, options, report)
    if sample_bytes is None:
        index = 0
        for f in files:
            if not past_corpus_limit(f, options, report):  # checked as the shards' reports come back
                yield Shard(index, file=f)
                index += 1
        return
    used: Counter = Counter()
    unit: list = []
    size = index = 0
    for f in files:
        if past_corpus_limit(f, options, report):
            continue
        for batch in iter_file(f, options=options, batch_size=batch_size, report=report,
                               sample_bytes=sample_bytes, used=used):
            unit.append(batch)
            size += sum(len(t) for t in batch.texts)
            if size >= UNIT_BYTES:
                yield Shard(index, batches=unit)
                unit, size, index = [], 0, index + 1
    if unit:
        yield Shard(index, batches=unit)


def shard_bytes(shard: Shard) -> int:
    """What a shard weighs on the progress bar: its file's size on disk, or the UTF-8 bytes of the
    texts of a sampled shard."""
    import os

    if shard.batches is not None:
        return sum(len(t.encode("utf-8")) for b in shard.batches for t in b.texts)
    try:
        return os.path.getsize(shard.file.path)
    except OSError:
        return 0


def read_shard(shard: Shard, options, batch_size, tick=None) -> tuple[Iterable, CorpusRead]:
    """``(batches, report)`` of one shard. ``tick(bytes)`` is called after each batch of a file
    read here, with the UTF-8 bytes of the texts handed out so far (the progress bar of a pass in
    this process: what was worked on, not what the reader read ahead)."""
    report = CorpusRead()
    if shard.batches is not None:
        return iter(shard.batches), report
    batches = iter_file(shard.file, options=options, batch_size=batch_size, report=report)
    return (batches if tick is None else _ticking(batches, report, tick)), report


def _ticking(batches, report: CorpusRead, tick):
    for b in batches:
        yield b
        tick(report.bytes)


def map_shard(mapper, shard: Shard, options, batch_size, tick=None):
    """Worker side of :func:`embscope.corpus.engine.run_pass`: ``(partial, report)`` of one shard."""
    batches, report = read_shard(shard, options, batch_size, tick)
    return mapper(batches), report
