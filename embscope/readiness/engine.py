"""Where the check's rendering and tokenizing run: this process, local worker processes, or Ray.

The records are read and shaped here, in order (reading is a small share of the work); batches of
:data:`SHARD_EXAMPLES` examples go out as shards (:func:`embscope.corpus.engine.map_shards`), each
worker renders and tokenizes its shards with its own copy of the tokenizer and template, and the
partial counts come back in shard order and are merged exactly (:meth:`Encoded.merge`): the same
record as one process.

``workers=None`` (the default) keeps the work in this process: the tokenizer already encodes each
batch on every core (``encode_batch_fast``), and tokenizing is most of the work, so worker
processes only add their start-up, their copies and the shipping of examples. Measured on the
2-core machine (bench/check.py, 100,000 conversations): one process 99 s wall, 96 CPU-s; two
workers 173 s wall, 123 CPU-s. ``--workers N`` (N > 1) and ``--engine ray`` hand the shards out.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from embscope.corpus.backend import Engine
    from embscope.corpus.shapes import Example
    from embscope.readiness.encode import Encoded
    from embscope.readiness.sequences import Context

#: examples per shard handed to a worker
SHARD_EXAMPLES = 2048


def _map(ctx: "Context", watch: np.ndarray, batches) -> dict[str | None, "Encoded"]:
    """Worker side: one shard's examples (one batch per split) → ``{split: Encoded}``."""
    from embscope.readiness.encode import BATCH, encode_batch

    out: dict = {}
    state: dict = {}
    for examples in batches:
        for a in range(0, len(examples), BATCH):
            part = encode_batch(examples[a:a + BATCH], ctx, watch, state)
            key = examples[0].split if examples else None
            out[key] = out[key].merge(part) if key in out else part
    return out


def _shards(examples: Iterable["Example"]) -> Iterator:
    from embscope.corpus.shards import Shard

    index = 0
    pending: dict[str | None, list] = {}
    for ex in examples:
        pending.setdefault(ex.split, []).append(ex)
        if len(pending[ex.split]) >= SHARD_EXAMPLES:
            yield Shard(index, batches=[pending.pop(ex.split)])
            index += 1
    for rest in pending.values():
        if rest:
            yield Shard(index, batches=[rest])
            index += 1


def encode_all(examples: Iterable["Example"], ctx: "Context", watch: np.ndarray, *,
               engine: "Engine | None" = None) -> dict[str | None, "Encoded"]:
    """Every example rendered, tokenized and counted: ``{split: Encoded}`` (``{None: …}`` for data
    without splits), on ``engine`` (default: this process)."""
    from embscope.corpus.engine import map_shards
    from embscope.readiness.encode import encode_examples

    if engine is None or (engine.kind == "local" and (engine.workers or 1) == 1):
        return encode_examples(examples, ctx, watch)
    workers = engine.workers or os.cpu_count() or 1
    out: dict[str | None, Encoded] = {}
    mapper = functools.partial(_map, ctx, watch)
    for part in map_shards(_shards(examples), mapper, engine=engine, workers=workers,
                           description="rendering and tokenizing the training data"):
        for key, enc in part.items():
            out[key] = out[key].merge(enc) if key in out else enc
    return out
