"""Ray Data back end of :mod:`embscope.corpus.engine` (imported only for ``Engine("ray")``).

The shard list becomes a Ray Dataset (``from_items``, one shard per block). ``map_batches`` runs an
actor pool: each actor unpickles the pass's mapper (with its own tokenizer copy) once, then per
shard reads the file, tokenises and counts. Partials come back to this process, which merges them
in shard order (fertility, token counts); term counts are reduced on the cluster by
``groupby("key").aggregate(Sum("count"), Min("first"))`` and only keys counted ``min_count``
times or more come back. Each shard's corpus report rides along as one extra row (key
``"\x00report:<shard>"``), so one Ray Data job does the whole pass.

Ray itself is optional (``pip install 'embscope[ray]'``). On a cluster, embscope and the corpus
files must be reachable from every node under the same paths.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
from pathlib import Path

from embscope.corpus.backend import Engine, EngineError
from embscope.corpus.shards import map_shard, read_shard

_SCHEMA = None  # pyarrow schema of term-count rows, built on first use


def init(engine: Engine):
    """Connect to ``engine.ray_address`` / ``$RAY_ADDRESS``, or start a local Ray that listens on
    the loopback interface only (:func:`_loopback_only`)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # never phone home
    address = engine.ray_address or os.environ.get("RAY_ADDRESS")
    if address:
        _reachable(address)  # before importing Ray: a dead address fails in seconds
    try:
        import ray
    except ImportError:
        raise EngineError("--engine ray needs Ray: pip install 'embscope[ray]'") from None
    if ray.is_initialized():
        return ray
    quiet = {"log_to_driver": False, "logging_level": logging.WARNING}
    saved = _sigterm_handler()
    try:
        if address:
            ray.init(address=address, **quiet)
        else:
            # Workers import this same embscope (a source checkout as well as an install).
            here = str(Path(__file__).resolve().parents[2])
            path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
            with _loopback_only():
                ray.init(num_cpus=engine.workers or os.cpu_count() or 1, include_dashboard=False,
                         _node_ip_address="127.0.0.1",
                         runtime_env={"env_vars": {"PYTHONPATH": path, "RAY_USAGE_STATS_ENABLED": "0"}},
                         **quiet)
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = f"Ray at {address!r}" if address else "a local Ray"
        raise EngineError(f"cannot start or reach {where}: {str(e).splitlines()[0]}; check "
                          "--ray-address / RAY_ADDRESS (`ray status` on the head node)") from None
    finally:
        _restore_sigterm(saved)
    import ray.data

    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    return ray


#: seconds to wait for a TCP connection to ``--ray-address`` before ``ray.init`` (which would
#: retry for minutes on an address where nothing listens)
CONNECT_SECONDS = 5.0


def _reachable(address: str) -> None:
    """A one-line :class:`EngineError` unless something accepts TCP connections at ``host:port``
    (``ray://host:port`` too); ``auto`` and addresses without a port are left to Ray."""
    import socket

    target = address.removeprefix("ray://")
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_SECONDS):
            return
    except (OSError, ValueError, OverflowError) as e:
        why = getattr(e, "strerror", None) or str(e) or type(e).__name__
        raise EngineError(f"cannot reach Ray at {address!r} ({why}); check --ray-address / RAY_ADDRESS "
                          "(`ray status` on the head node)") from None


def _sigterm_handler():
    """The SIGTERM handler now (``ray.init`` installs its own, which exits with status 15 and no
    message; the CLI's handler turns SIGTERM into a clean "terminated" line)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.getsignal(signal.SIGTERM)


def _restore_sigterm(saved) -> None:
    import signal

    if saved is not None:
        try:
            signal.signal(signal.SIGTERM, saved)
        except (ValueError, TypeError):
            pass


@contextlib.contextmanager
def _loopback_only():
    """While a local Ray starts: keep its node address 127.0.0.1, so every server it starts (GCS,
    raylet, object manager, workers, agents) listens on the loopback interface only.

    On Linux, Ray 2.60 turns a node address of 127.0.0.1 into the host's routable address (so that
    other nodes could join) and its gRPC servers then listen on all interfaces. Ray keeps 127.0.0.1
    where multi-node clusters are off (``ray._private.ray_constants.ENABLE_RAY_CLUSTER``, from
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``, read when Ray is imported: the default on macOS and
    Windows). That switch is turned off here for the start only and put back afterwards, so a later
    ``ray.init(address=...)`` in this process is unaffected; a Ray without it starts as before.
    """
    from ray._private import ray_constants

    if not hasattr(ray_constants, "ENABLE_RAY_CLUSTER"):
        yield
        return
    before = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before


def _actors(ray, engine: Engine, n_items: int) -> int:
    cpus = int(ray.cluster_resources().get("CPU", 1))
    return max(1, min(n_items, engine.workers or cpus, cpus))


def _dataset(ray, shards):
    import ray.data

    items = [{"index": s.index, "shard": pickle.dumps(s, protocol=5)} for s in shards]
    if not items:
        return None, 0
    return ray.data.from_items(items, override_num_blocks=len(items)), len(items)


class _Worker:
    """One actor: the pass's function, unpickled once (its tokenizer copy lives here)."""

    def __init__(self, payload: bytes):
        os.environ.setdefault("RAYON_NUM_THREADS", "1")
        os.environ.setdefault("EMBSCOPE_QUIET", "1")
        self.fn, self.options, self.batch_size = pickle.loads(payload)


class _MapWorker(_Worker):
    def __call__(self, batch):
        import numpy as np

        out_i, out_r = [], []
        for i, blob in zip(batch["index"], batch["shard"]):
            result = map_shard(self.fn, pickle.loads(blob), self.options, self.batch_size)
            out_i.append(int(i))
            out_r.append(pickle.dumps(result, protocol=5))
        return {"index": np.array(out_i, dtype=np.int64), "result": np.array(out_r, dtype=object)}


def ray_map(engine: Engine, shards, mapper, options, batch_size):
    """``(partial, report)`` per shard, in shard order (a reorder buffer holds early arrivals)."""
    ray = init(engine)
    ds, n = _dataset(ray, shards)
    if ds is None:
        return
    payload = pickle.dumps((mapper, options, batch_size), protocol=5)
    import ray.data

    out = ds.map_batches(_MapWorker, fn_constructor_args=(payload,), batch_size=1, num_cpus=1,
                         compute=ray.data.ActorPoolStrategy(size=_actors(ray, engine, n)))
    waiting: dict[int, bytes] = {}
    nxt = 0
    for row in out.iter_rows():
        waiting[int(row["index"])] = row["result"]
        while nxt in waiting:
            yield pickle.loads(waiting.pop(nxt))
            nxt += 1


def _schema():
    global _SCHEMA
    if _SCHEMA is None:
        import pyarrow as pa

        _SCHEMA = pa.schema([("key", pa.string()), ("count", pa.int64()), ("first", pa.string())])
    return _SCHEMA


#: key prefix of the one row per shard that carries its corpus report (terms never start so)
_REPORT = "\x00report:"


class _CountWorker(_Worker):
    """Term-count chunks as rows; plus one row per shard carrying its corpus report (base64)."""

    def __call__(self, batch):
        import base64

        import pyarrow as pa

        tables = []
        for i, blob in zip(batch["index"], batch["shard"]):
            shard = pickle.loads(blob)
            batches, report = read_shard(shard, self.options, self.batch_size)
            for chunk in self.fn(batches, int(i)):
                keys, counts, firsts = zip(*chunk) if chunk else ((), (), ())
                tables.append(pa.table({"key": list(keys), "count": list(counts), "first": list(firsts)},
                                       schema=_schema()))
            blob = base64.b64encode(pickle.dumps(report, protocol=5)).decode("ascii")
            tables.append(pa.table({"key": [f"{_REPORT}{int(i):010d}"], "count": [0], "first": [blob]},
                                   schema=_schema()))
        return pa.concat_tables(tables)


def _kept(min_count: int):
    def keep(t):
        import pyarrow.compute as pc

        return t.filter(pc.or_(pc.greater_equal(t["count"], min_count), pc.starts_with(t["key"], _REPORT)))
    return keep


def ray_count(engine: Engine, shards, chunker, options, batch_size, min_count: int):
    """``({key: (count, first)}, [report per shard in order])`` via one Ray Data job:
    map_batches (count) → groupby(key).aggregate(Sum(count), Min(first)) → filter."""
    import base64

    import ray.data
    from ray.data.aggregate import Min, Sum

    ray = init(engine)
    ds, n = _dataset(ray, shards)
    if ds is None:
        return {}, []
    payload = pickle.dumps((chunker, options, batch_size), protocol=5)
    parts = max(1, min(n, int(ray.cluster_resources().get("CPU", 1))))
    counted = (ds.map_batches(_CountWorker, fn_constructor_args=(payload,), batch_size=1,
                              batch_format="numpy", num_cpus=1,
                              compute=ray.data.ActorPoolStrategy(size=_actors(ray, engine, n)))
               .groupby("key", num_partitions=parts)
               .aggregate(Sum("count", alias_name="count"), Min("first", alias_name="first"))
               .map_batches(_kept(min_count), batch_format="pyarrow"))
    out, reports = {}, []
    for t in counted.iter_batches(batch_format="pyarrow", batch_size=65536):
        for k, c, f in zip(t["key"].to_pylist(), t["count"].to_pylist(), t["first"].to_pylist()):
            if k.startswith(_REPORT):
                reports.append((k, pickle.loads(base64.b64decode(f))))
            else:
                out[k] = (int(c), f)
    return out, [r for _, r in sorted(reports, key=lambda kr: kr[0])]
