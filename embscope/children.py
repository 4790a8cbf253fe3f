"""Child processes that end with the run that started them.

A run starts helper processes (the map's layout, :class:`~embscope.geometry.layout.LayoutJob`;
the corpus pass's workers, :mod:`embscope.corpus.engine`). When the run stops early — SIGTERM
landing while a section is half-built, a crash, SIGKILL — nothing may keep computing for it: a
layout child left behind ran on for 14-35 s after its run had exited. Two sides:

- in the child, :func:`die_with_parent`: Linux's ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (the kernel
  kills the child when the parent dies, SIGKILL included), then a check that the parent did not
  die before the call (the child would have been re-parented: ``getppid()`` differs); elsewhere a
  daemon thread that polls ``getppid()`` every :data:`POLL` seconds;
- in the parent, :func:`track`: every tracked process still running at interpreter exit is
  terminated (``atexit``), so a normal exit after an exception never leaves one behind either.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import threading

#: seconds between two looks at the parent where the kernel cannot watch it (not Linux)
POLL = 0.5
#: ``PR_SET_PDEATHSIG`` from ``<linux/prctl.h>``
_PR_SET_PDEATHSIG = 1

_tracked: list[subprocess.Popen] = []
_lock = threading.Lock()


def die_with_parent(parent: int) -> None:
    """Make this (child) process end when process ``parent`` ends (module docstring)."""
    armed = False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        armed = libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux
        pass
    if os.getppid() != parent:  # the parent is already gone
        os._exit(1)
    if not armed:
        def watch() -> None:
            import time

            while os.getppid() == parent:
                time.sleep(POLL)
            os._exit(1)

        threading.Thread(target=watch, daemon=True, name="embscope-parent-watch").start()


def track(proc: subprocess.Popen) -> subprocess.Popen:
    """Terminate ``proc`` at this interpreter's exit if it is still running; returns it."""
    with _lock:
        _tracked[:] = [p for p in _tracked if p.poll() is None]
        _tracked.append(proc)
    return proc


@atexit.register
def _end_tracked() -> None:
    with _lock:
        live = [p for p in _tracked if p.poll() is None]
        _tracked.clear()
    for p in live:
        try:
            p.terminate()
        except OSError:
            continue
    for p in live:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
