"""Output folders: written atomically, stamped with provenance.

Every command that writes a folder builds it under a hidden temporary sibling and renames it into
place at the end (:func:`atomic_folder`), so an error, Ctrl-C or a full disk never leaves a
half-written report. :func:`provenance` records what produced the folder.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from embscope.errors import OutputError

DEFAULT_ROOT = Path("reports")


def default_out(name: str, kind: str = "") -> Path:
    """``reports/<name>[-<kind>]-<UTC timestamp>``, e.g. ``reports/smollm2-135m-20261129T160455Z``."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name).strip("-.") or "model"
    return DEFAULT_ROOT / "-".join(p for p in (safe, kind, stamp) if p)


@contextmanager
def atomic_folder(out: Path, *, force: bool = False) -> Iterator[Path]:
    """Yield a temporary folder; on success it becomes ``out``, on any error it is removed.

    ``out`` must not exist (or be an empty folder), unless ``force`` replaces it.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out} exists and is not a folder; pass another --out")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise OutputError(f"{out} already exists and is not empty; pass another --out or --force")
    parent = out.parent if str(out.parent) else Path(".")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=parent))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; a report is meant to be shared
    except OSError as exc:
        raise OutputError(f"cannot write under {parent}: {exc.strerror}; pass a writable --out") from None
    try:
        yield tmp
        if out.exists():  # empty, or --force
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_json(path: Path, data: Any) -> None:
    """Write JSON with sorted-stable formatting; NaN/inf become null (JSON has neither)."""
    Path(path).write_text(json.dumps(_clean(data), indent=2, ensure_ascii=False) + "\n", "utf-8")


def _clean(x: Any) -> Any:
    import math

    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if hasattr(x, "item") and callable(x.item) and getattr(x, "ndim", 1) == 0:
        return _clean(x.item())
    if isinstance(x, Path):
        return str(x)
    return x


def git_hash() -> str | None:
    """The embscope checkout's commit, when it runs from one."""
    here = Path(__file__).resolve().parent
    try:
        res = subprocess.run(["git", "-C", str(here), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() or None if res.returncode == 0 else None


def provenance(parameters: dict[str, Any]) -> dict[str, Any]:
    """Version, git hash, time and parameters of a run (the ``embscope`` key of summary.json)."""
    import platform

    from embscope import __version__

    return {"version": __version__, "git": git_hash(),
            "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "python": platform.python_version(), "parameters": parameters}
