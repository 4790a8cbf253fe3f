"""Opening untrusted model files: regular files only, sizes checked before anything is read.

A model folder is user input. A FIFO named ``model.safetensors`` would block ``open()`` forever,
``/dev/zero`` never ends, a ``/proc`` file reports size 0 and then yields bytes, a directory cannot
be read at all. So every model, config, index and tokenizer file goes through :func:`open_regular`:

1. ``os.stat`` (following symlinks: the HF cache links snapshots to blobs) must say ``S_ISREG``,
   and the size must lie in ``[min_bytes, max_bytes]``;
2. the file is opened with ``O_NONBLOCK`` (a FIFO swapped in after the check still cannot block
   the open) and ``fstat`` must show the same regular file, so a swap between 1 and 2 is caught;
3. reads of small files (:func:`read_bytes`) stop at ``max_bytes + 1`` and must match the size the
   file reported (``/proc`` and ``/sys`` files do not).

JSON from these files is parsed by :func:`read_json`, which turns every way of being wrong —
invalid UTF-8, invalid JSON, nesting deep enough to exhaust Python's recursion limit — into one
:class:`~embscope.errors.ModelFileError` line.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import IO, Any

from embscope.errors import ModelFileError

#: config.json, index files, tokenizer_config.json: real ones are kilobytes to a few MB
MAX_JSON_BYTES = 64 * 2**20


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_regular(path: Path, *, what: str = "model file", min_bytes: int = 1,
                  max_bytes: int | None = None) -> os.stat_result:
    """``os.stat`` of ``path``; a one-line :class:`ModelFileError` unless it is a regular file of
    ``min_bytes`` to ``max_bytes`` bytes."""
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ModelFileError(f"{what} {path} does not exist (or is a broken link); re-download it") from None
    except OSError as exc:
        raise ModelFileError(f"cannot read {what} {path}: {exc.strerror}") from None
    _check_stat(st, path, what, min_bytes, max_bytes)
    return st


def _check_stat(st: os.stat_result, path: Path, what: str, min_bytes: int, max_bytes: int | None) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise ModelFileError(f"{what} {path} is {_kind(st.st_mode)}, not a regular file; pass a real file")
    if str(path.resolve()).startswith(("/proc/", "/sys/")):
        raise ModelFileError(f"{what} {path} lives in a kernel file system ({path.resolve()}); pass a real file")
    if st.st_size < min_bytes:
        raise ModelFileError(f"{what} {path} has {st.st_size} bytes, fewer than the {min_bytes} any valid "
                             "one has; re-download it")
    if max_bytes is not None and st.st_size > max_bytes:
        raise ModelFileError(f"{what} {path} has {st.st_size:,} bytes, more than the {max_bytes:,} "
                             "accepted for it; is it the right file?")


def open_regular(path: Path, *, what: str = "model file", min_bytes: int = 1,
                 max_bytes: int | None = None) -> IO[bytes]:
    """Open a regular file for binary reading, after the checks of :func:`check_regular`."""
    path = Path(path)
    before = check_regular(path, what=what, min_bytes=min_bytes, max_bytes=max_bytes)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ModelFileError(f"cannot open {what} {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino):
            raise ModelFileError(f"{what} {path} changed while it was being opened; try again")
        _check_stat(st, path, what, min_bytes, max_bytes)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: Path, *, what: str = "model file", min_bytes: int = 1,
               max_bytes: int = MAX_JSON_BYTES) -> bytes:
    """The whole of a small regular file; its length must match the size it reports."""
    with open_regular(path, what=what, min_bytes=min_bytes, max_bytes=max_bytes) as fh:
        size = os.fstat(fh.fileno()).st_size
        data = fh.read(max_bytes + 1)
    if len(data) != size:
        raise ModelFileError(f"{what} {path} reported {size} bytes but {len(data)} were read; "
                             "it changed while being read, or is not a plain file")
    return data


def file_identity(path: Path | str) -> tuple:
    """What makes two reads of ``path`` read the same bytes, for a per-process memo: its real path,
    inode, size and mtime (ns). A file rewritten in place changes its mtime (and mostly its size)."""
    st = os.stat(path)
    return (os.path.realpath(path), st.st_ino, st.st_size, st.st_mtime_ns)


def parse_json(data: bytes, *, where: str, fix: str = "re-download it") -> Any:
    """JSON from untrusted bytes; any failure (encoding, syntax, nesting) is one error line."""
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ModelFileError(f"{where} is not UTF-8 text; {fix}") from None
    except json.JSONDecodeError as exc:
        raise ModelFileError(f"{where} is not valid JSON ({exc.msg} at line {exc.lineno}); {fix}") from None
    except RecursionError:
        raise ModelFileError(f"{where} nests JSON too deeply to be a real file; {fix}") from None


def read_json(path: Path, *, what: str = "model file", max_bytes: int = MAX_JSON_BYTES,
              fix: str = "re-download it") -> Any:
    """Parse a small JSON file with the checks of :func:`read_bytes` and :func:`parse_json`."""
    data = read_bytes(path, what=what, min_bytes=1, max_bytes=max_bytes)
    return parse_json(data, where=str(path), fix=fix)


def inside(folder: Path, name: object, *, where: str) -> Path:
    """``folder / name`` for a file name read from an untrusted index; refuses non-strings, absolute
    paths and ``..`` — anything that could point outside ``folder``.

    >>> inside(Path("/m"), "model-00001-of-00002.safetensors", where="index").as_posix()
    '/m/model-00001-of-00002.safetensors'
    """
    from pathlib import PurePosixPath

    if not isinstance(name, str) or not name or "\0" in name or "\\" in name:
        raise ModelFileError(f"{where} names the file {name!r}, which is not a file name; re-download it")
    rel = PurePosixPath(name)
    if rel.is_absolute() or ".." in rel.parts:
        raise ModelFileError(f"{where} points to {name!r}, outside the model folder; refused "
                             "(re-download the index from a source you trust)")
    return Path(folder) / rel
