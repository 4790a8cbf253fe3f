"""The on-disk kNN graph cache: a key that identifies the matrix, validated loads, safe writes.

Key: a 128-bit hash over the shape, dtype, ``k``, method, cache version and the digest of *every
byte* of the matrix (:func:`embscope.provenance.tensor_digest`: XXH3-128, 0.33 CPU-s for a
152064×3584 bf16 matrix, or BLAKE2b without xxhash, 1.4–1.6 CPU-s; the hash's name is part of the
key). The same digest is the run's input fingerprint, computed once. Two matrices that differ in one
value get different keys.

A cached file ``<key>.npz`` (no pickle) is used only if it passes :func:`validate`: ``neighbors``
int64 of shape (n, k) with every id in ``[0, n)`` and never the row itself, ``sims`` float32 of
shape (n, k), finite, within [-1 - 1e-3, 1 + 1e-3] and descending, and a metadata record whose
``k`` matches. Anything else is rebuilt, with one log line on the ``embscope.knn`` logger.

Writes go to a temporary name *inside* the cache folder, created with ``O_EXCL | O_NOFOLLOW``
(never through a symlink, never over another run's file), then renamed over ``<key>.npz``; on any
failure the temporary file is removed, so a folder or an unwritable file sitting at the cache
path costs nothing but the rebuild.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from embscope.geometry.graph import KnnGraph

#: bumped when a method's output changes (2: IVF scan keeps self until the end; 3: full-byte key;
#: 4: the key wraps embscope.provenance.tensor_digest; 5: approximate graphs never short of k
#: neighbours, the certified graph with its ``exact`` mask, the measured tile plan; 6: the metadata
#: is the graph's KnnRecord, so entries of 5 are never looked up and are rebuilt; 7: the certified
#: graph's base is NN-descent, the inverted-file methods and their record fields are gone)
CACHE_VERSION = 7
#: slack on the cosine range when validating cached similarities
SIM_SLACK = 1e-3

log = logging.getLogger("embscope.knn")


def default_cache_dir() -> Path:
    """``$EMBSCOPE_CACHE/knn`` or ``~/.cache/embscope/knn``."""
    base = os.environ.get("EMBSCOPE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "embscope")
    return Path(base) / "knn"


def matrix_key(x: "torch.Tensor", k: int, method: str) -> str:
    """32-hex key of ``x``'s shape, dtype and all its bytes (:func:`embscope.provenance.tensor_digest`),
    with ``k``, ``method`` and the cache version.

    Example: two (1000, 8) matrices equal except for one entry get different keys.
    """
    from embscope.provenance import tensor_digest

    head = json.dumps([list(x.shape), str(x.dtype), k, method, CACHE_VERSION, tensor_digest(x)]).encode()
    return hashlib.blake2b(head, digest_size=16).hexdigest()


def validate(neighbors: np.ndarray, sims: np.ndarray, meta: dict[str, Any], n: int, k: int) -> str | None:
    """Why a cached graph cannot be used for an (n, ·) matrix and ``k``, or None when it can."""
    if meta.get("k") != k:
        return f"k {meta.get('k')!r} != {k}"
    if neighbors.dtype != np.int64 or neighbors.shape != (n, k):
        return f"neighbors {neighbors.dtype} {neighbors.shape}, expected int64 {(n, k)}"
    if sims.dtype != np.float32 or sims.shape != (n, k):
        return f"sims {sims.dtype} {sims.shape}, expected float32 {(n, k)}"
    if n and (neighbors.min() < 0 or neighbors.max() >= n):
        return "neighbour ids out of range"
    if (neighbors == np.arange(n)[:, None]).any():
        return "a row is its own neighbour"
    if not np.isfinite(sims).all():
        return "non-finite similarities"
    if n and (sims.min() < -1 - SIM_SLACK or sims.max() > 1 + SIM_SLACK):
        return "similarities outside [-1, 1]"
    if k > 1 and (np.diff(sims, axis=1) > SIM_SLACK).any():
        return "similarities not in descending order"
    return None


def load(path: Path, n: int, k: int) -> tuple[np.ndarray, np.ndarray, dict[str, Any]] | None:
    """(neighbors, sims, meta) from a valid cache file, else None (logged when the file exists).
    Arrays saved with ``extra`` come back in ``meta["extra"]`` (a per-row bool mask must have n
    entries, or the file is rebuilt)."""
    if not path.is_file():
        if path.exists() or path.is_symlink():
            log.warning("kNN cache %s is not a regular file; rebuilding the graph", path)
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            neighbors, sims = z["neighbors"], z["sims"]
            meta = json.loads(str(z["meta"]))
            extra = {name[2:]: z[name] for name in z.files if name.startswith("x_")}
        if not isinstance(meta, dict):
            raise ValueError("meta is not a record")
        if any(v.dtype == np.bool_ and v.shape != (n,) for v in extra.values()):
            raise ValueError("a per-row mask of the wrong length")
        if extra:
            meta["extra"] = extra
    except (OSError, KeyError, ValueError, EOFError) as e:
        log.warning("kNN cache %s is unreadable (%s); rebuilding the graph", path, e)
        return None
    why = validate(neighbors, sims, meta, n, k)
    if why is not None:
        log.warning("kNN cache %s is invalid (%s); rebuilding the graph", path, why)
        return None
    return neighbors, sims, meta


def save(path: Path, neighbors: np.ndarray, sims: np.ndarray, meta: dict[str, Any],
         extra: dict[str, np.ndarray] | None = None) -> bool:
    """Write ``path`` atomically; True on success. Failures only cost a rebuild next time.
    ``extra``: more arrays (no object dtypes), read back by :func:`load`."""
    tmp = path.parent / f".{path.stem}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and not path.is_file():
            log.warning("kNN cache path %s is not a regular file; the graph is not cached", path)
            return False
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(tmp, flags, 0o644)
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, neighbors=neighbors, sims=sims, meta=np.array(json.dumps(meta)),
                     **{f"x_{name}": v for name, v in (extra or {}).items()})
        os.replace(tmp, path)
        return True
    except OSError as e:
        log.warning("kNN cache %s not written (%s)", path, e)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False


def load_graph(path: Path, n: int, k: int) -> "KnnGraph | None":
    """The :class:`~embscope.geometry.graph.KnnGraph` cached at ``path`` (marked ``cached``, its
    ``exact`` mask when saved with one), or None: no file, an invalid one (:func:`load`), or
    metadata that is not a :class:`~embscope.geometry.knn_record.KnnRecord` (logged; rebuilt)."""
    from dataclasses import replace

    from embscope.geometry.graph import KnnGraph
    from embscope.geometry.knn_record import KnnRecord
    from embscope.records import RecordError

    hit = load(path, n, k)
    if hit is None:
        return None
    neighbors, sims, meta = hit
    try:
        info = KnnRecord.from_dict(meta.get("info"), where="info")
    except RecordError as e:
        log.warning("kNN cache %s holds no valid record (%s); rebuilding the graph", path, e)
        return None
    return KnnGraph(neighbors=neighbors, sims=sims, info=replace(info, cached=True),
                    exact=meta.get("extra", {}).get("exact"))


def save_graph(path: Path, graph: "KnnGraph") -> bool:
    """:func:`save` of ``graph``: its arrays, its record as the metadata, its ``exact`` mask if any."""
    extra = None if graph.exact is None else {"exact": graph.exact}
    return save(path, graph.neighbors, graph.sims, {"k": graph.info.k, "info": graph.info.to_dict()}, extra=extra)
