"""Read only the embedding and head tensors of a hub checkpoint, with HTTP range requests.

A safetensors shard is ``u64 N`` + ``N bytes of JSON header`` + data, and the header gives every
tensor's ``data_offsets``; so two small requests (the first :data:`HEAD_PREFETCH` bytes, then the
rest of the header when it is longer) say where ``model.embed_tokens.weight`` and ``lm_head.weight``
lie, and one ``Range: bytes=a-b`` request per tensor brings exactly those bytes. For Qwen2-7B that
is 2 × 152064 × 3584 × 2 B = 2.18 GB instead of the two whole shards that hold them (7.6 GB).

Where the bytes go: a *sparse* copy of each shard, ``<cache>/hub/<org>--<name>/<commit>/<shard>``,
created at the shard's full size with only the fetched ranges written (the file system stores
nothing for the holes), beside the repo's small files (config, tokenizer, index) linked from the HF
cache. The folder is an ordinary model folder to the rest of embscope: :mod:`embscope.formats.safetensors`
validates the header against the file's size and memory-maps the tensors, as for a full download.
``<shard>.ranges.json`` records, per tensor, the byte range and that it is complete, with the
file's ETag (the hub's sha256 of the whole file for LFS files), size and commit; a tensor is read
from the copy only when the manifest says it is complete, so a hole is never mistaken for data.
The cache is keyed by repo, commit and tensor: a second run reads nothing from the network.

Every request goes through ``huggingface_hub`` (:func:`~huggingface_hub.hf_hub_url`,
:func:`~huggingface_hub.get_hf_file_metadata`, :func:`~huggingface_hub.utils.build_hf_headers`,
:func:`~huggingface_hub.get_session`), so the user's token, ``HF_ENDPOINT``, proxies and
``HF_HUB_OFFLINE`` apply as they do to ``hf download``. Checked on the way: the HEAD's commit equals
the snapshot's, every ranged answer is ``206`` with a ``Content-Range`` naming the asked range and
the HEAD's size, and the byte count of each tensor equals ``prod(shape) × itemsize`` of the header
(:func:`embscope.formats.safetensors.read_header`). A connection dropped mid-tensor is resumed from
the last byte written (within the bounds below). A server that ignores ``Range``
(answers ``200`` with the whole file) is a one-line error naming ``--download full``.

A GGUF file on the hub (spec ``org/name/file.gguf``) is read the same way by :func:`fetch_gguf`:
its metadata and tensor table (a growing prefix, parsed by :mod:`embscope.formats.gguf`), then the
``token_embd`` and ``output`` ranges.

Bounds (``docs/limits.md``): every request is made and checked by :class:`~embscope.models.hub_remote.Remote`
within the run's :class:`~embscope.models.hub_remote.HubBudget` (deadlines, a minimum rate, a cap
on answers without a new byte, no ``Content-Encoding``); a safetensors header longer than
:data:`embscope.formats.safetensors.MAX_HEADER`, or GGUF metadata longer than
``gguf-metadata-bytes``, is refused from the lengths it declares, before the bytes are asked for.

A failed read leaves nothing in the cache: the sparse copy and its manifest are removed, unless the
manifest already holds complete tensors, which are kept (the interrupted range is never marked
complete, so it is never read).
"""

from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from embscope.errors import ModelFileError, SpecError
from embscope.models.hub_remote import HubBudget, Remote

__all__ = ["Fetched", "HubBudget", "cached", "cached_commit", "fetch_gguf", "fetch_tensors", "link_small_files",
           "read_manifest", "repo_cache"]

#: bytes asked for first: the length prefix and, for every real shard, its whole header
#: (Qwen2-7B's headers are 10–40 KB; a longer one costs a second request)
HEAD_PREFETCH = 1 << 16
#: first bytes of a GGUF file read for its metadata (a 150k-token vocabulary takes 3–5 MB); doubled
#: until the metadata and tensor table fit
GGUF_PREFETCH = 1 << 22


@dataclass
class Fetched:
    """What one run read from the hub for one file (recorded in the provenance)."""

    #: file name in the repo
    filename: str
    #: the file's ETag (sha256 of the whole file for LFS files), as the hub sent it
    etag: str | None
    #: size of the whole file, bytes
    size: int
    #: ``{tensor: [begin, end]}`` absolute byte ranges held in the sparse copy
    tensors: dict[str, list[int]] = field(default_factory=dict)
    #: bytes this run received for this file (0 when everything came from the cache)
    bytes_read: int = 0
    #: HTTP requests this run made for this file
    requests: int = 0


def _discard(copy: Path, doc: dict[str, Any] | None) -> None:
    """After a failed read: remove the sparse copy and its manifest unless the manifest holds
    complete tensors (kept; the interrupted range is not marked complete, so it is never read).
    A folder left with no copy at all loses its links to the HF cache too, and goes, as do the
    empty folders above it (``<org>--<name>``)."""
    if doc is not None and any(t.get("complete") for t in doc.get("tensors", {}).values()):
        return
    for path in (copy, _manifest_path(copy)):
        try:
            path.unlink()
        except OSError:
            pass
    folder = copy.parent
    try:
        entries = list(folder.iterdir())
        if any(not e.is_symlink() for e in entries):
            return  # another copy (or a file embscope did not write) lives there
        for e in entries:
            e.unlink()
        folder.rmdir()
        folder.parent.rmdir()  # <org>--<name>, when no other revision or refs/ is there
    except OSError:
        pass


def repo_cache(root: Path, repo_id: str, commit: str) -> Path:
    """``root/<org>--<name>/<commit>``: where the sparse copies of one revision live.

    >>> repo_cache(Path("/c"), "Qwen/Qwen2-7B", "abc").as_posix()
    '/c/Qwen--Qwen2-7B/abc'
    """
    return Path(root) / repo_id.replace("/", "--") / commit


def _manifest_path(copy: Path) -> Path:
    return copy.with_name(copy.name + ".ranges.json")


def read_manifest(copy: Path) -> dict[str, Any] | None:
    """The ``.ranges.json`` of a sparse copy, or ``None`` when absent or unreadable."""
    try:
        doc = json.loads(_manifest_path(copy).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("tensors"), dict) else None


def _write_manifest(copy: Path, doc: dict[str, Any]) -> None:
    path = _manifest_path(copy)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


def cached(copy: Path, names: list[str]) -> bool:
    """Whether the sparse copy holds every tensor in ``names`` completely (no network needed)."""
    doc = read_manifest(copy)
    if doc is None or not copy.is_file() or copy.stat().st_size != doc.get("size"):
        return False
    return doc.get("header") is True and all(doc["tensors"].get(n, {}).get("complete") for n in names)


def fetch_tensors(repo_id: str, commit: str, filename: str, names: "list[str] | Callable", folder: Path,
                  budget: HubBudget | None = None) -> Fetched:
    """Make ``folder/filename`` a sparse copy holding the header and the tensors ``names``.

    ``names`` may be a function of the validated header returning the names (an unsharded
    checkpoint, whose tensors no index lists); the manifest remembers what it chose. ``budget``:
    the run's bounds (default: the defaults of ``docs/limits.md``).

    Reads nothing when the manifest says they are all there (see :func:`cached`); otherwise one
    HEAD, the header (one or two ranged GETs, unless cached) and one ranged GET per missing tensor.
    The header's length is checked against :data:`~embscope.formats.safetensors.MAX_HEADER` and
    the file's size before the rest of it is asked for.

    Raises:
        ModelFileError: a header that does not parse or does not hold ``names``, a server without
            ``Range`` support, a dropped connection that does not resume, a size that changed, a
            bound of the module docstring.
        SpecError: the hub refused the file (gated, missing, no token).
    """
    from embscope.formats.safetensors import MAX_HEADER, read_header

    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / filename
    doc = read_manifest(copy)
    pick = names if callable(names) else None
    if pick is not None:
        names = list(doc.get("picked") or ["?"]) if doc is not None else ["?"]
    if doc is not None and cached(copy, names):
        t = {n: doc["tensors"][n]["range"] for n in names}
        return Fetched(filename, doc.get("etag"), int(doc["size"]), t)
    remote = Remote(repo_id, filename, commit, budget)
    try:
        if doc is None or doc.get("etag") != remote.etag or doc.get("size") != remote.size \
                or not copy.is_file() or copy.stat().st_size != remote.size:
            doc = {"repo": repo_id, "commit": commit, "filename": filename, "etag": remote.etag,
                   "size": remote.size, "header": False, "tensors": {}}
            with open(copy, "wb") as fh:  # a fresh sparse file of the remote size: holes read as zeros
                fh.truncate(remote.size)
            _write_manifest(copy, doc)
        fd = os.open(copy, os.O_RDWR)
        try:
            names = _fetch_header_and_tensors(remote, doc, copy, fd, names, pick, MAX_HEADER, read_header)
        finally:
            os.close(fd)
    except BaseException:  # an error, Ctrl-C: nothing unverified stays behind
        _discard(copy, doc)
        raise
    return Fetched(filename, remote.etag, remote.size, {n: doc["tensors"][n]["range"] for n in names},
                   bytes_read=remote.bytes_read, requests=remote.requests)


def _fetch_header_and_tensors(remote: Remote, doc: dict[str, Any], copy: Path, fd: int, names, pick,
                              max_header: int, read_header) -> list[str]:
    filename, repo_id = remote.filename, remote.repo_id
    if not doc["header"]:
        remote.fetch(0, min(remote.size, HEAD_PREFETCH), fd)
        (n,) = struct.unpack("<Q", os.pread(fd, 8, 0))
        if n > max_header:  # before the rest is asked for
            raise ModelFileError(f"{filename} of {repo_id} claims a {n:,}-byte header, more than the {max_header:,} "
                                 "bytes a safetensors header may take (docs/limits.md); the file is damaged or "
                                 "not a safetensors file, nothing more was read")
        if 8 + n > remote.size:
            raise ModelFileError(f"{filename} of {repo_id} claims a {n:,}-byte header but is "
                                 f"{remote.size:,} bytes; not a safetensors file")
        if 8 + n > HEAD_PREFETCH:
            remote.fetch(HEAD_PREFETCH, 8 + n, fd)
        doc["prefix"] = max(8 + n, min(remote.size, HEAD_PREFETCH))  # bytes [0, prefix) are here
    header = read_header(copy)  # validates every tensor's dtype, shape and range against the size
    (n,) = struct.unpack("<Q", os.pread(fd, 8, 0))
    doc["header"], doc["header_bytes"] = True, 8 + n
    if pick is not None:
        names = doc["picked"] = pick(header)
    _write_manifest(copy, doc)
    for name in names:
        if name not in header:
            raise ModelFileError(f"the index says {name} is in {filename} of {repo_id}, but its header "
                                 "does not list it; the repo is inconsistent")
        b, e = (8 + n + o for o in header[name]["data_offsets"])
        entry = doc["tensors"].get(name)
        if entry and entry.get("complete") and entry.get("range") == [b, e]:
            continue
        prefix = doc.get("prefix", 0)
        remote.fetch(max(b, prefix) if b <= prefix else b, e, fd)  # the prefetch may hold its start
        doc["tensors"][name] = {"range": [b, e], "complete": True, "dtype": header[name]["dtype"],
                                "shape": header[name]["shape"]}
        _write_manifest(copy, doc)
    return names


def link_small_files(snapshot: Path, folder: Path) -> None:
    """Symlink the snapshot's small files (config, tokenizer, index; never shards) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for src in snapshot.iterdir():
        if src.suffix == ".safetensors" or not src.is_file():
            continue
        dst = folder / src.name
        if dst.is_symlink() or dst.exists():
            if dst.is_symlink() and os.path.realpath(dst) == os.path.realpath(src):
                continue
            dst.unlink()
        dst.symlink_to(src.resolve())


def cached_commit(root: Path, repo_id: str, revision: str = "main") -> str | None:
    """The commit ``revision`` pointed to when a GGUF file was last read (``refs/<revision>``)."""
    try:
        commit = (Path(root) / repo_id.replace("/", "--") / "refs" / revision).read_text().strip()
    except OSError:
        return None
    return commit if re.fullmatch(r"[0-9a-f]{40}", commit) else None


def _read_header(remote: "Remote", copy: Path, doc: dict, fd: int, limit: int):
    """``(parsed GGUF, bytes of the prefix held)``: the prefix of ``copy`` fetched and grown until
    its metadata and tensor table parse (:func:`fetch_gguf`), the manifest ``doc`` kept current."""
    from embscope.formats.gguf import GGUFTruncated, open_gguf

    filename, repo_id = remote.filename, remote.repo_id
    have = int(doc.get("prefix", 0))
    want = max(have, min(remote.size, GGUF_PREFETCH, limit))
    while True:
        if want > have:
            remote.fetch(have, want, fd)
            have = doc["prefix"] = want
            _write_manifest(copy, doc)
        try:
            return open_gguf(copy, end=have), have
        except GGUFTruncated as short:
            if short.need > limit:
                raise ModelFileError(
                    f"the metadata and tensor table of {filename} of {repo_id} take at least "
                    f"{short.need:,} bytes by the lengths they declare, more than the limit of {limit:,} "
                    f"(real GGUF files take a few MB); the file is damaged or hostile, {have:,} bytes "
                    f"were read. Raise it with --limit gguf-metadata-bytes={short.need}") from None
            if short.need > remote.size:
                raise ModelFileError(
                    f"{filename} of {repo_id} declares {short.need:,} bytes of metadata but is "
                    f"{remote.size:,} bytes; the file is truncated or damaged") from None
            want = min(remote.size, max(short.need, min(2 * have, limit)))


def fetch_gguf(repo_id: str, filename: str, root: Path, *, online: bool,
               budget: HubBudget | None = None) -> tuple[Path, Fetched, str]:
    """A sparse copy of a hub GGUF file holding its metadata, tensor table and ``token_embd`` /
    ``output`` tensors; returns ``(path, what was read, commit)``.

    The metadata (tokenizer arrays included) has no length prefix: the first :data:`GGUF_PREFETCH`
    bytes are read and parsed (:func:`embscope.formats.gguf.open_gguf` with ``end``: nothing past
    the bytes held is read), and while the parse runs past them the prefix grows to at least what
    the lengths read so far declare (:class:`~embscope.formats.gguf.GGUFTruncated` ``need``), and at
    least doubles. A declared size past ``budget.gguf_metadata_bytes`` is refused before it is asked
    for. Then one ranged GET per tensor. Offline, or when the copy for the commit ``main`` last
    named is complete, nothing is read.
    """
    commit = cached_commit(root, repo_id)
    if commit is not None:
        copy = repo_cache(root, repo_id, commit) / filename
        doc = read_manifest(copy)
        if doc is not None and doc.get("picked") and cached(copy, doc["picked"]):
            return copy, Fetched(filename, doc.get("etag"), int(doc["size"]),
                                 {n: doc["tensors"][n]["range"] for n in doc["picked"]}), commit
    if not online:
        raise SpecError(f"{filename} of {repo_id} is not in the embscope cache ({root})")
    budget = budget or HubBudget()
    remote = Remote(repo_id, filename, None, budget)
    commit = remote.commit
    folder = repo_cache(root, repo_id, commit)
    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / filename
    doc = read_manifest(copy)
    try:
        if doc is None or doc.get("etag") != remote.etag or doc.get("size") != remote.size \
                or not copy.is_file() or copy.stat().st_size != remote.size:
            doc = {"repo": repo_id, "commit": commit, "filename": filename, "etag": remote.etag,
                   "size": remote.size, "header": False, "prefix": 0, "tensors": {}}
            with open(copy, "wb") as fh:
                fh.truncate(remote.size)
        fd = os.open(copy, os.O_RDWR)
        try:
            g, have = _read_header(remote, copy, doc, fd, budget.gguf_metadata_bytes)
            names = ["token_embd.weight"] + (["output.weight"] if "output.weight" in g.tensors else [])
            if names[0] not in g.tensors:
                raise ModelFileError(f"{filename} of {repo_id} has no token_embd.weight tensor; pass a "
                                     "language-model GGUF")
            doc["header"], doc["header_bytes"], doc["picked"] = True, g.header_bytes, names
            for name in names:
                t = g.tensors[name]
                b, e = t.offset, t.offset + t.nbytes
                entry = doc["tensors"].get(name)
                if not (entry and entry.get("complete") and entry.get("range") == [b, e]):
                    remote.fetch(max(b, have) if b <= have else b, e, fd)
                    doc["tensors"][name] = {"range": [b, e], "complete": True, "ggml_type": t.ggml_type,
                                            "shape": list(t.shape)}
                _write_manifest(copy, doc)
        finally:
            os.close(fd)
    except BaseException:  # an error, Ctrl-C: nothing unverified stays behind
        _discard(copy, doc)
        raise
    refs = Path(root) / repo_id.replace("/", "--") / "refs"
    refs.mkdir(parents=True, exist_ok=True)
    (refs / "main").write_text(commit)
    return copy, Fetched(filename, remote.etag, remote.size, {n: doc["tensors"][n]["range"] for n in names},
                         bytes_read=remote.bytes_read, requests=remote.requests), commit
