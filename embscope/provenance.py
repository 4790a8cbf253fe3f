"""Where a result came from: embscope's version and git commit, library versions, input hashes.

Every output folder records this in ``summary.json`` so a figure can be traced to the exact code,
libraries and bytes that produced it (lm-evaluation-harness records the same for its results).

Fingerprints are 128-bit digests: a matrix by XXH3-128 (xxhash) or, without it, BLAKE2b (Aumasson
et al., RFC 7693), over its raw bytes in its stored dtype, so the fingerprint identifies the weights
themselves, whichever file format carried them; files by BLAKE2b. Corpus files up to :data:`FULL_HASH_BYTES` are hashed whole; larger ones by
size, modification time and their first and last MiB (marked ``"partial": true``).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import platform
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embscope.records import Record

#: libraries whose versions change results; recorded in every summary
LIBRARIES = ("torch", "transformers", "tokenizers", "faiss-cpu", "faiss-gpu-cu12", "polars", "numpy",
             "umap-learn")
#: corpus files up to this size are hashed whole (a few seconds at most)
FULL_HASH_BYTES = 256 * 2**20
#: bytes per hashing step (bounded memory for memory-mapped matrices)
BLOCK = 64 * 2**20

#: id(tensor) → (weak reference, version counter, digest); an entry is used only while the reference
#: still points at that tensor and its version is unchanged
_TENSOR_DIGESTS: dict[int, tuple[Any, int, str]] = {}


@dataclass
class RunStamp(Record):
    """The embscope run a result came from (``summary.json`` → ``embscope``)."""

    #: embscope's version
    version: str
    #: the checkout's commit (null outside a git checkout)
    git: str | None
    #: when the run started, ISO 8601 in UTC
    created_utc: str
    #: the Python version
    python: str
    #: the command (``audit``, ``scan``, ``check``, …)
    command: str


@dataclass
class TreeDigest(Record):
    """The digest of a file or of a folder's files."""

    #: files hashed
    files: int
    #: their bytes
    bytes: int
    #: BLAKE2b-128 over each file's relative path and digest, in path order
    blake2b: str
    #: some file was larger than FULL_HASH_BYTES: its size, mtime and first and last MiB were hashed
    partial: bool = False


def git_hash() -> str | None:
    """The embscope checkout's commit, when it runs from one."""
    here = Path(__file__).resolve().parent
    try:
        res = subprocess.run(["git", "-C", str(here), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return (res.stdout.strip() or None) if res.returncode == 0 else None


def library_versions() -> dict[str, str]:
    """``{distribution: version}`` for the installed :data:`LIBRARIES`."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in LIBRARIES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            continue
    return out


def stamp(command: str) -> RunStamp:
    """The :class:`RunStamp` of this embscope run."""
    from embscope import __version__

    return RunStamp(version=__version__, git=git_hash(),
                    created_utc=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                    python=platform.python_version(), command=command)


def run_stamp(command: str) -> dict[str, Any]:
    """:func:`stamp` as the JSON the written model folders' manifests hold."""
    return stamp(command).to_dict()


def _new_hash():
    """(name, factory) of the fastest available 128-bit hash: XXH3-128 (xxhash), else BLAKE2b."""
    try:
        import xxhash

        return "xxh3_128", xxhash.xxh3_128
    except ImportError:
        return "blake2b", lambda: hashlib.blake2b(digest_size=16)


def tensor_digest(t) -> str:
    """``"<hash>:<32 hex>"`` over a tensor's shape, dtype and every byte in its stored dtype.

    The rows are read in blocks of :data:`BLOCK` bytes straight from the tensor's memory (bf16 as
    its raw 16-bit patterns; no float32 copy), in two halves hashed on two threads (both hashes drop
    the GIL on large blocks) whose digests are hashed together: a two-leaf hash tree. XXH3-128 takes
    about 0.3 CPU-s for a 152064×3584 bf16 matrix (1.09 GB), BLAKE2b about 1.5. The result is cached
    per tensor object and its version counter (which every in-place edit bumps), so the runner's
    fingerprint and the kNN cache key hash a matrix once, and an edited or new tensor never reuses
    an old digest.

    >>> import torch; tensor_digest(torch.zeros(2, 2)) == tensor_digest(torch.zeros(2, 2))
    True
    """
    import numpy as np
    import torch

    cached = _TENSOR_DIGESTS.get(id(t))
    if cached is not None and cached[0]() is t and cached[1] == t._version:
        return cached[2]
    x = t.detach()
    if x.device.type != "cpu":
        x = x.cpu()
    x = x.contiguous()
    name, new = _new_hash()
    n = x.shape[0] if x.ndim else 1
    flat = x.reshape(n, -1) if x.numel() else x.reshape(0, 1)
    row_bytes = max(1, flat.shape[1] * x.element_size()) if n else 1
    step = max(1, BLOCK // row_bytes)

    def block(s: int, e: int):
        b = flat[s:e]
        if b.dtype in (torch.bfloat16, torch.float16):
            b = b.view(torch.int16)
        return memoryview(np.ascontiguousarray(b.numpy())).cast("B")

    def leaf(s: int, e: int) -> bytes:
        h = new()
        for b0 in range(s, e, step):
            h.update(block(b0, min(b0 + step, e)))
        return h.digest()

    half = (n // 2 // step) * step or n  # each leaf hashes whole blocks
    if 0 < half < n:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(2) as pool:
            leaves = list(pool.map(lambda se: leaf(*se), [(0, half), (half, n)]))
    else:
        leaves = [leaf(0, n)]
    root = hashlib.blake2b(f"{tuple(x.shape)}|{x.dtype}|{name}".encode(), digest_size=16)
    for lf in leaves:
        root.update(lf)
    digest = f"{name}:{root.hexdigest()}"
    import weakref

    key = id(t)
    _TENSOR_DIGESTS[key] = (weakref.ref(t, lambda _, k=key: _TENSOR_DIGESTS.pop(k, None)), t._version, digest)
    return digest


def file_digest(path: Path) -> dict[str, Any]:
    """``{bytes, blake2b[, partial]}`` of one file (see the module docstring for large files)."""
    path = Path(path)
    st = path.stat()
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        if st.st_size <= FULL_HASH_BYTES:
            while chunk := fh.read(BLOCK):
                h.update(chunk)
            return {"bytes": st.st_size, "blake2b": h.hexdigest()}
        h.update(f"{st.st_size}|{st.st_mtime_ns}|".encode())
        h.update(fh.read(2**20))
        fh.seek(-(2**20), os.SEEK_END)
        h.update(fh.read(2**20))
    return {"bytes": st.st_size, "blake2b": h.hexdigest(), "partial": True}


def tree_digest(root: Path, files: Iterable[Path] | None = None) -> TreeDigest:
    """The :class:`TreeDigest` of a file or a folder's files (sorted by relative path)."""
    root = Path(root)
    if files is None:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    h = hashlib.blake2b(digest_size=16)
    n = size = 0
    partial = False
    for f in files:
        d = file_digest(f)
        rel = f.name if root.is_file() else str(f.relative_to(root))
        h.update(f"{rel}\0{d['blake2b']}\n".encode())
        n += 1
        size += d["bytes"]
        partial |= bool(d.get("partial"))
    return TreeDigest(files=n, bytes=size, blake2b=h.hexdigest(), partial=partial)


def rows_digest(matrix, ids) -> str:
    """:func:`tensor_digest` of the rows ``ids`` of ``matrix`` as float32: what an ``extend --apply``
    manifest records of the new rows it wrote (``rows_digest``)."""
    import torch

    return tensor_digest(matrix[torch.as_tensor(list(ids), dtype=torch.int64)].float().contiguous())
