"""Output folders: claimed safely, written aside, renamed into place, never destroying other data.

:func:`claim` is the one way embscope writes a folder:

1. **Refuse what is not ours.** An existing non-empty ``out`` is replaced only with ``force``, and
   only when it carries the marker file :data:`MARKER` that embscope writes into every folder it
   makes. Even then it never replaces ``/``, the home folder, the working directory or any of its
   ancestors, or any input of the run (model, corpus, tokenizer) or a folder that holds one.
2. **One writer at a time.** An exclusive ``flock`` on ``.<name>.lock`` beside the folder: a second
   run on the same ``out`` is refused while the first runs. The kernel drops the lock when a process
   dies, so a crash never leaves a stale lock.
3. **Nothing half-written.** The folder is built as ``.<name>.<pid>.partial`` (private while being
   written) and renamed over ``out`` at the end; an error, Ctrl-C or SIGTERM removes it.
   ``.partial`` folders of dead processes (identified by the pid in their marker) are removed on
   the next claim of the same ``out``. Replacing an earlier folder renames it aside
   (``.<name>.<pid>.old``) before the new one goes in; a process killed between the two renames
   leaves it there, and the next claim puts it back (or removes it once the new one is in place).
4. **No write follows a symlink.** Files are created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` inside the
   claimed folder (:func:`write_new`); files replaced in an existing folder go through a temporary
   name made the same way and :func:`os.replace`, which replaces a link rather than its target.
"""

from __future__ import annotations

import datetime as _dt
import errno
import json
import os
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from embscope import signals
from embscope.errors import InputError, OutputError
from embscope.records import to_json
from embscope.signals import Terminated  # noqa: F401 - re-exported for the CLI

DEFAULT_ROOT = Path("reports")
#: written into every folder embscope makes; ``--force`` replaces only folders that carry it
MARKER = ".embscope"
_PARTIAL = ".partial"


class DefaultFolder:
    """The folder a command writes when ``--out`` is not given: ``reports/<name>[-<kind>]-<UTC time>``
    (:func:`default_out`, once the model's name is known)."""

    def __repr__(self) -> str:
        return "DEFAULT_OUT"


#: ``out=DEFAULT_OUT``: write the run to ``reports/<name>[-<kind>]-<UTC time>``
DEFAULT_OUT = DefaultFolder()


def default_out(name: str, kind: str = "") -> Path:
    """``reports/<name>[-<kind>]-<UTC timestamp>``, e.g. ``reports/smollm2-135m-20261129T160455Z``."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name).strip("-.") or "model"
    return DEFAULT_ROOT / "-".join(p for p in (safe, kind, stamp) if p)


# ------------------------------------------------------------------------------------------------
# marker


def read_marker(folder: Path) -> dict[str, Any] | None:
    """The marker of an embscope folder, or ``None`` (absent, a symlink, not ours, unreadable)."""
    path = Path(folder) / MARKER
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, 65536)
    finally:
        os.close(fd)
    try:
        marker = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return marker if isinstance(marker, dict) and marker.get("tool") == "embscope" else None


def _marker(kind: str) -> dict[str, Any]:
    from embscope import __version__

    return {"tool": "embscope", "version": __version__, "kind": kind, "pid": os.getpid(),
            "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}


# ------------------------------------------------------------------------------------------------
# safe writes


def write_new(path: Path, data: bytes | str) -> None:
    """Create ``path`` and write ``data``; never follows a symlink, never reuses an existing file."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        raise OutputError(f"{path} appeared while embscope was writing it; another process is writing "
                          "into this folder: stop it and run again") from None
    except OSError as err:
        raise _os_error(err, path) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
    except OSError as err:
        raise _os_error(err, path) from None


def replace_file(path: Path, data: bytes | str) -> None:
    """Replace ``path`` atomically: write a fresh temporary beside it, then :func:`os.replace`.

    The temporary is created exclusively and without following links, and ``os.replace`` swaps the
    directory entry, so a symlink at ``path`` (or at a guessable temporary name) is never followed.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        write_new(tmp, data)
        os.replace(tmp, path)
    except OSError as err:
        raise _os_error(err, path) from None
    finally:
        if tmp.exists() or tmp.is_symlink():
            tmp.unlink(missing_ok=True)


def json_text(data: Any) -> str:
    """JSON text as embscope writes it: indented, UTF-8, NaN/inf as null."""
    return json.dumps(to_json(data), indent=2, ensure_ascii=False) + "\n"


def write_json(path: Path, data: Any) -> None:
    """Write JSON (NaN/inf as null) into a new file (:func:`write_new`)."""
    write_new(path, json_text(data))


def write_parquet(path: Path, frame, metadata: dict[str, str] | None = None) -> None:
    """Write a polars frame as Parquet into a new file, with ``metadata`` in the file's key-value
    metadata (embscope stamps ``embscope.schema_version`` there)."""
    import io

    import pyarrow.parquet as pq

    table = frame.to_arrow()
    if metadata:
        meta = dict(table.schema.metadata or {})
        meta.update({k.encode(): v.encode() for k, v in metadata.items()})
        table = table.replace_schema_metadata(meta)
    buf = io.BytesIO()
    pq.write_table(table, buf)
    write_new(path, buf.getvalue())


def _os_error(err: OSError, path: Path) -> OutputError:
    if err.errno == errno.ENOSPC:
        return OutputError(f"no space left on the device while writing {path}; free some space or pass "
                           "another --out")
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return OutputError(f"cannot write {path} ({err.strerror}); pass a writable --out")
    if err.errno == errno.ELOOP:
        return OutputError(f"{path} is a symbolic link; embscope does not write through links: remove it")
    return OutputError(f"cannot write {path} ({err.strerror or err}); pass another --out")


# ------------------------------------------------------------------------------------------------
# claiming a folder


def _protected(out: Path, inputs: Iterable[Path]) -> str | None:
    """Why ``out`` may never be replaced, or ``None``."""
    home = Path.home().resolve()
    cwd = Path.cwd().resolve()
    if out == Path(out.anchor):
        return "it is the file-system root"
    if out == home:
        return "it is your home folder"
    if out == cwd or out in cwd.parents:
        return "it is the working directory or holds it"
    for p in inputs:
        try:
            p = Path(p).expanduser().resolve()
        except OSError:
            continue
        if out == p or out in p.parents:
            return f"it is an input of this run or holds one ({p})"
    return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _clean_stale(parent: Path, name: str) -> list[str]:
    """Remove ``.<name>.<pid>.partial`` folders of dead embscope processes; return their names."""
    removed = []
    prefix = f".{name}."
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for e in entries:
        if not (e.name.startswith(prefix) and e.name.endswith(_PARTIAL)) or e.is_symlink() or not e.is_dir():
            continue
        marker = read_marker(Path(e.path))
        pid = marker.get("pid") if marker else None
        if isinstance(pid, int) and not _pid_alive(pid):
            shutil.rmtree(e.path, ignore_errors=True)
            removed.append(e.name)
    return removed


def _recover_swap(parent: Path, name: str) -> list[str]:
    """Finish a :func:`_swap` that a killed process left between its two renames: its earlier
    folder, renamed aside to ``.<name>.<pid>.old``, is put back when ``<name>`` is missing (killed
    after the first rename), or removed when ``<name>`` is there (killed after the second). Only a
    folder of that name, of a dead pid, that carries embscope's marker is touched; return what was
    restored or removed (``restored:``/``removed:`` and its name)."""
    import re

    done = []
    pattern = re.compile(rf"\.{re.escape(name)}\.(\d+)\.old")
    try:
        entries = sorted(os.scandir(parent), key=lambda e: e.name)
    except OSError:
        return done
    for e in entries:
        m = pattern.fullmatch(e.name)
        if not m or e.is_symlink() or not e.is_dir() or _pid_alive(int(m.group(1))):
            continue
        if read_marker(Path(e.path)) is None:  # not a folder embscope made: leave it
            continue
        out = parent / name
        if not os.path.lexists(out):
            os.rename(e.path, out)
            done.append(f"restored: {e.name}")
        else:
            shutil.rmtree(e.path, ignore_errors=True)
            done.append(f"removed: {e.name}")
    return done


@contextmanager
def _lock(parent: Path, name: str, out: Path) -> Iterator[None]:
    import fcntl

    path = parent / f".{name}.lock"
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as err:
            raise _os_error(err, path) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutputError(f"another embscope run is writing {out}; wait for it to finish or pass "
                              "another --out") from None
        # the file may have been unlinked by the previous holder between our open and flock
        try:
            same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        yield
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
        os.close(fd)


def check_target(out: str | Path, *, force: bool = False, inputs: Iterable[str | Path] = ()) -> None:
    """Refuse ``out`` now, before any work, for the reasons :func:`claim` would (nothing is created)."""
    out = Path(out).expanduser()
    if out.is_symlink():
        raise OutputError(f"{out} is a symbolic link; embscope does not write through links: pass a real folder")
    out = out.absolute()
    if not out.exists():
        return
    if not out.is_dir():
        raise OutputError(f"{out} exists and is not a folder; pass another --out")
    why = _protected(out.resolve(), [Path(p) for p in inputs])
    if why:
        raise OutputError(f"refusing to write into {out}: {why}; pass another --out")
    if any(out.iterdir()):
        if not force:
            raise OutputError(f"{out} already exists and is not empty; pass another --out, or "
                              "--force to replace an earlier embscope output folder")
        if read_marker(out) is None:
            raise OutputError(f"refusing to replace {out}: it is not an embscope output folder "
                              f"(no {MARKER} marker); pass another --out")


def check_distinct(targets: Iterable[tuple[str, str | Path | None]]) -> None:
    """``[(flag, folder or None), ...]``: the run's output folders must be different and neither
    inside another, or the last one written would replace (or sit inside) another's files.

    >>> check_distinct([("--out", "r"), ("--apply", "r/m")])
    Traceback (most recent call last):
    ...
    embscope.errors.OutputError: apply_to r/m is inside out r: the run would write one over the other; pass two separate folders
    """
    named = [(flag, str(p), Path(p).expanduser().resolve()) for flag, p in targets if p is not None]
    for i, (fa, ta, a) in enumerate(named):
        for fb, tb, b in named[i + 1:]:
            if a == b:
                raise OutputError(f"{fb} {tb} is the same folder as {fa}: the run would replace its own output; "
                                "pass two separate folders")
            for (fx, tx, x), (fy, ty, y) in (((fa, ta, a), (fb, tb, b)), ((fb, tb, b), (fa, ta, a))):
                if y in x.parents:
                    raise OutputError(f"{fx} {tx} is inside {fy} {ty}: the run would write one over the other; "
                                    "pass two separate folders")


@contextmanager
def claim(out: str | Path, *, force: bool = False, inputs: Iterable[str | Path] = (),
          kind: str = "report") -> Iterator[Path]:
    """Claim ``out`` and yield a private temporary folder that becomes ``out`` on success.

    Args:
        out: the folder to write; must not exist, or be empty, or (with ``force``) be an embscope
            folder (it carries :data:`MARKER`) that is not protected (see the module docstring).
        force: replace an existing embscope folder.
        inputs: paths the run reads (model, corpora, tokenizers): ``out`` may not be one of them or
            hold one.
        kind: what the folder holds, recorded in the marker (``audit``, ``scan``, ``extend``, …).
    Raises:
        OutputError: ``out`` is refused, locked by another run, or not writable.
    """
    inputs = list(inputs)
    out = Path(out).expanduser()
    if out.is_symlink():
        raise OutputError(f"{out} is a symbolic link; embscope does not write through links: pass a real folder")
    out = out.absolute()
    parent, name = out.parent, out.name
    if not name or name in (".", ".."):
        raise OutputError(f"{out} cannot be an output folder; pass a new folder name with --out")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(f"cannot create {parent} ({err.strerror}); pass a writable --out") from None
    out = parent.resolve() / name
    with _lock(parent.resolve(), name, out):
        _recover_swap(parent, name)
        check_target(out, force=force, inputs=inputs)
        replace = out.exists()
        _clean_stale(parent, name)
        tmp = parent / f".{name}.{os.getpid()}{_PARTIAL}"
        try:
            os.mkdir(tmp, 0o700)  # private while written: nobody can plant links inside
        except FileExistsError:  # our own pid: a leftover of an earlier run in this process
            shutil.rmtree(tmp)
            os.mkdir(tmp, 0o700)
        except OSError as err:
            raise _os_error(err, tmp) from None
        try:
            write_json(tmp / MARKER, _marker(kind))
            yield tmp
        except OSError as err:  # only an error about the folder being written is an output error
            shutil.rmtree(tmp, ignore_errors=True)
            if _about(err, (tmp, out)):
                raise _os_error(err, out) from None
            raise InputError(f"cannot read {err.filename or 'an input'} ({err.strerror or err}); check the "
                             "path") from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        try:
            signals.raise_pending()  # a stop that landed inside native code: publish nothing
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o777 & ~umask)  # a report is meant to be shared
            if replace:
                _swap(tmp, out)
            else:
                os.rename(tmp, out)
        except OSError as err:
            shutil.rmtree(tmp, ignore_errors=True)
            raise _os_error(err, out) from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def _about(err: OSError, folders) -> bool:
    """Whether ``err`` names a file inside one of ``folders`` (or names none: assume the output)."""
    names = [n for n in (err.filename, getattr(err, "filename2", None)) if n is not None]
    if not names:
        return err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
    for n in names:
        try:
            p = Path(os.fsdecode(n)).absolute()
        except (TypeError, ValueError):
            continue
        if any(p == f or f in p.parents for f in map(Path, folders)):
            return True
    return False


def _swap(tmp: Path, out: Path) -> None:
    """Put ``tmp`` where ``out`` is: rename ``out`` aside, rename ``tmp`` in, delete the old one."""
    if not any(out.iterdir()):
        os.rmdir(out)
        os.rename(tmp, out)
        return
    old = out.with_name(f".{out.name}.{os.getpid()}.old")
    os.rename(out, old)
    try:
        os.rename(tmp, out)
    except OSError:
        os.rename(old, out)
        raise
    shutil.rmtree(old, ignore_errors=True)


def handle_sigterm() -> None:
    """Install the CLI's signal handlers (see :mod:`embscope.signals`)."""
    signals.install()
