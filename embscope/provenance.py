"""Where a result came from: embscope's version and git commit, library versions, input hashes.

Every output folder records this in ``summary.json`` so a figure can be traced to the exact code,
libraries and bytes that produced it (lm-evaluation-harness records the same for its results).

Fingerprints are BLAKE2b-128 digests (Aumasson et al., RFC 7693). A matrix is hashed over its raw
bytes in its stored dtype, so the fingerprint identifies the weights themselves, whichever file
format carried them. Corpus files up to :data:`FULL_HASH_BYTES` are hashed whole; larger ones by
size, modification time and their first and last MiB (marked ``"partial": true``).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import platform
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: libraries whose versions change results; recorded in every summary
LIBRARIES = ("torch", "transformers", "tokenizers", "faiss-cpu", "faiss-gpu-cu12", "polars", "numpy",
             "umap-learn")
#: corpus files up to this size are hashed whole (a few seconds at most)
FULL_HASH_BYTES = 256 * 2**20
#: bytes per hashing step (bounded memory for memory-mapped matrices)
BLOCK = 64 * 2**20

_TENSOR_DIGESTS: dict[tuple[int, int, str], str] = {}


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


def run_stamp(command: str) -> dict[str, Any]:
    """``{version, git, created_utc, python, command}`` of this embscope run."""
    from embscope import __version__

    return {"version": __version__, "git": git_hash(),
            "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "python": platform.python_version(), "command": command}


def tensor_digest(t) -> str:
    """BLAKE2b-128 of a tensor's raw bytes in its stored dtype, read in blocks.

    Cached per (storage address, size, dtype), so the runner and the kNN cache hash a matrix once.

    >>> import torch; tensor_digest(torch.zeros(2, 2)) == tensor_digest(torch.zeros(2, 2))
    True
    """
    import torch

    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    key = (t.data_ptr(), t.numel() * t.element_size(), str(t.dtype))
    if key in _TENSOR_DIGESTS and key[0] != 0:
        return _TENSOR_DIGESTS[key]
    flat = t.reshape(-1).view(torch.uint8).numpy() if t.numel() else b""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{tuple(t.shape)}|{t.dtype}|".encode())
    mv = memoryview(flat)
    for start in range(0, len(mv), BLOCK):
        h.update(mv[start:start + BLOCK])
    digest = h.hexdigest()
    if key[0] != 0:
        _TENSOR_DIGESTS[key] = digest
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


def tree_digest(root: Path, files: Iterable[Path] | None = None) -> dict[str, Any]:
    """``{files, bytes, blake2b}`` over a file or a folder's files (sorted by relative path)."""
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
    out = {"files": n, "bytes": size, "blake2b": h.hexdigest()}
    if partial:
        out["partial"] = True
    return out
