"""SIGTERM and Ctrl-C that always stop a run, even when they land inside native code.

Python runs a signal handler between bytecodes of the main thread. When that moment falls inside
a callback from C (numba's compiler, which calls back into Python through ctypes, does this), an
exception raised by the handler is printed as "Exception ignored …" and dropped: the run goes on
and writes its report although the user asked it to stop.

So the handlers here also *record* the signal, and :func:`raise_pending` raises it again at the
next safe point: the end of each step, each progress tick, and just before an output folder is
published (``output.claim``). A stopped run therefore never publishes an output. The "Exception
ignored" report of the dropped stop is not printed: the user sees the one "terminated" line.
"""

from __future__ import annotations

import signal
import sys

_pending: int | None = None


class Terminated(BaseException):
    """Raised in the main thread on SIGTERM, so the same clean-up as Ctrl-C runs."""


def _on_sigterm(signum, frame):  # pragma: no cover - exercised through a subprocess test
    global _pending
    _pending = signal.SIGTERM
    raise Terminated()


def _on_sigint(signum, frame):  # pragma: no cover - exercised through a subprocess test
    global _pending
    _pending = signal.SIGINT
    raise KeyboardInterrupt


def _unraisable(previous):
    def hook(info) -> None:
        if _pending is not None and isinstance(info.exc_value, (Terminated, KeyboardInterrupt)):
            return  # recorded: raise_pending delivers it
        previous(info)

    hook.embscope = True
    return hook


def install() -> None:
    """Turn SIGTERM into :class:`Terminated`, and record Ctrl-C, for the process's main thread.

    A SIGINT that is ignored (a background job inherits it so) stays ignored; a SIGINT handler
    someone else installed stays theirs. A stop recorded by an earlier run in this process is
    forgotten.
    """
    clear()
    if not getattr(sys.unraisablehook, "embscope", False):
        sys.unraisablehook = _unraisable(sys.unraisablehook)
    try:
        signal.signal(signal.SIGTERM, _on_sigterm)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _on_sigint)
    except ValueError:  # not the main thread
        pass


def raise_pending() -> None:
    """Raise the stop a handler recorded but could not deliver (see the module docstring)."""
    if _pending is None:
        return
    if _pending == signal.SIGTERM:
        raise Terminated()
    raise KeyboardInterrupt


def clear() -> None:
    """Forget a recorded signal (after the run that received it has been stopped)."""
    global _pending
    _pending = None
