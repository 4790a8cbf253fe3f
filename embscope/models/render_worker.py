"""Chat templates rendered in a child process that can be stopped: a hard deadline and a memory
limit around :mod:`embscope.models.template_sandbox`.

A template can spend its time inside one builtin call (``lipsum(200000)``, a ``%`` format of a
huge width, ``str.join`` of a long list): the call holds the interpreter, so nothing in the
rendering process can interrupt it, and a thread cannot be stopped. So each rendering runs in one
long-lived worker process (started on first use, ~0.1 s):

- the parent waits for the answer at most the bounds' seconds plus :data:`GRACE`; past that the
  worker is killed (and started again for the next rendering) and the rendering is refused;
- the worker's address space is capped at :data:`MEMORY` (``RLIMIT_AS``): an allocation past it
  raises ``MemoryError`` there, which refuses the rendering (the worker then exits and is started
  again, its heap being suspect);
- a worker that dies (a crash) refuses the rendering that killed it.

The sandbox's own checks still refuse most templates in microseconds, with the exact reason; the
process is the bound for what they cannot see.

Protocol, over the worker's stdin/stdout: the worker writes ``R`` once ready; each request is
``u64 length + pickle((number, template or None, messages, variables, bounds))``, the template's
text sent with its number the first time only (the parent's own data: the worker is the one
reading it); each answer is one byte (``T`` text, ``R`` refused, ``X`` refused for memory: the worker exits,
``F`` failed), ``u64 length`` and the payload: the text as UTF-8 (lone surrogates passed through), the refusal
message, or JSON ``{"type", "message", "lineno"}`` of the exception.

Only what a strict in-process rendering cannot bound comes here (:mod:`embscope.models.chat_template`):
real templates never do. Cost: one round trip per rendering, 40-80 µs on the machine of
``bench/README.md`` (``bench/chat_render.py``). Without ``select`` on pipes (Windows) the
rendering runs in-process, with the sandbox's checks only.
"""

from __future__ import annotations

import atexit
import json
import os
import pickle
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

#: address space of the rendering process, bytes: 60 times the largest rendered conversation (16 Mi
#: characters, up to 4 bytes each) and the interpreter's ~30 MB
MEMORY = 1 << 30
#: seconds past the bounds' deadline before the worker is killed (the sandbox's own clock refuses
#: first, with its message, whenever the template is not stuck in one call)
GRACE = 1.0
#: seconds a new worker may take to start (an interpreter and Jinja: ~0.1 s; more on a loaded machine)
START_SECONDS = 60.0
#: templates one worker keeps (each is sent once; a run renders one or two)
MAX_TEMPLATES = 64
_U64 = struct.Struct("<Q")


class Answer:
    """What the worker said: ``kind`` ``text``, ``refused`` or ``failed``; for ``failed``, the
    exception's type name, message and template line."""

    def __init__(self, kind: str, text: str = "", error: dict[str, Any] | None = None):
        self.kind, self.text, self.error = kind, text, error or {}


class _Worker:
    """One rendering process and the pipes to it (used under :data:`_LOCK`)."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        #: templates this worker holds, by the number it knows them by (sent once each)
        self.templates: dict[str, int] = {}
        self._pending = b""  # bytes read past the last answer's end (none in practice)

    def start(self) -> None:
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])  # the embscope this process runs
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen([sys.executable, "-m", "embscope.models.render_worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=env, start_new_session=True, bufsize=0)
        if self._read(1, time.monotonic() + START_SECONDS) != b"R":
            self.stop()
            raise OSError("the chat-template rendering process did not start")

    def stop(self) -> None:
        if self.proc is not None:
            try:
                self.proc.kill()
            except OSError:
                pass
            self.proc.wait()
            for pipe in (self.proc.stdin, self.proc.stdout):
                try:
                    pipe.close()
                except OSError:
                    pass
            self.proc = None
            self.templates = {}
            self._pending = b""

    def _read(self, n: int, deadline: float) -> bytes | None:
        """``n`` bytes from the worker; None when it ended first; TimeoutError past ``deadline``."""
        import select

        fd = self.proc.stdout.fileno()
        buf = bytearray(self._pending)
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
            chunk = os.read(fd, max(n - len(buf), 1 << 16))  # a whole small answer in one read
            if not chunk:
                return None
            buf += chunk
        self._pending = bytes(buf[n:])
        return bytes(buf[:n])

    def _send(self, payload: bytes) -> None:
        fd = self.proc.stdin.fileno()
        view = memoryview(_U64.pack(len(payload)) + payload)
        while view:
            view = view[os.write(fd, view):]

    def ask(self, template: str, request: tuple, seconds: float) -> Answer:
        for attempt in range(2):  # a worker that ended since the last request is started again
            if self.proc is None or self.proc.poll() is not None \
                    or (template not in self.templates and len(self.templates) >= MAX_TEMPLATES):
                self.stop()
                self.start()
            known = self.templates.get(template)
            first = known is None
            if first:
                known = self.templates[template] = len(self.templates)
            try:
                self._send(pickle.dumps((known, template if first else None, *request), protocol=5))
                break
            except OSError:
                self.stop()
                if attempt:
                    raise
        deadline = time.monotonic() + seconds + GRACE
        try:
            head = self._read(9, deadline)
            body = self._read(_U64.unpack(head[1:])[0], deadline + GRACE) if head is not None else None
        except TimeoutError:
            self.stop()
            return Answer("refused", f"render refused: the template ran past {seconds:g} s on one conversation")
        if head is None or body is None:
            code = self.proc.wait()
            self.stop()
            how = f"signal {-code}" if code < 0 else f"exit code {code}"
            return Answer("refused", f"render refused: the template stopped the rendering process ({how})")
        kind = head[:1]
        if kind == b"T":
            return Answer("text", body.decode("utf-8", "surrogatepass"))
        if kind in (b"R", b"X"):
            if kind == b"X":  # the worker ran out of memory and is exiting
                self.stop()
            return Answer("refused", body.decode("utf-8", "replace"))
        return Answer("failed", error=json.loads(body))


_LOCK = threading.Lock()
_WORKER = _Worker()


def _stop_at_exit() -> None:
    with _LOCK:
        _WORKER.stop()


atexit.register(_stop_at_exit)


def render(template: str, messages: list, variables: dict[str, Any], bounds) -> Answer:
    """Render in the worker process (see the module docstring); ``bounds`` a
    :class:`~embscope.models.template_sandbox.Bounds`."""
    if os.name == "nt":  # no select() on pipes: in-process, the sandbox's checks only
        return _answer_here(template, messages, variables, bounds)
    request = (messages, variables, tuple(bounds.__dict__.values()))
    with _LOCK:
        return _WORKER.ask(template, request, bounds.seconds)


def _answer_here(template: str, messages: list, variables: dict[str, Any], bounds) -> Answer:
    from embscope.models.template_sandbox import RenderRefused, render_here

    try:
        return Answer("text", render_here(template, messages, bounds=bounds, **variables))
    except RenderRefused as err:
        return Answer("refused", str(err))
    except MemoryError:
        return Answer("refused", f"render refused: the template needs more than {MEMORY >> 20:,} MiB of memory",
                      {"memory": True})
    except Exception as err:  # noqa: BLE001 - whatever the template raised, handed back
        return Answer("failed", error=describe(err))


def describe(err: BaseException) -> dict[str, Any]:
    """An exception as the worker hands it back: its type name, message (cut) and template line."""
    lineno = getattr(err, "lineno", None)
    return {"type": type(err).__name__, "message": str(err)[:2000],
            "lineno": lineno if isinstance(lineno, int) else None}


def _limit_memory(limit: int) -> None:
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):  # not enforced here (macOS): the deadline still holds
        pass


def _read_exact(stream, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = stream.read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def main() -> int:
    """The worker: answer requests until stdin closes (the parent exited or stopped it)."""
    _limit_memory(MEMORY)
    from embscope.models.template_sandbox import Bounds, environment

    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but answers goes to the parent
    environment()  # Jinja imported and the environment built before the parent's clock starts
    out.write(b"R")
    out.flush()
    templates: dict[int, str] = {}
    while True:
        head = _read_exact(inp, 8)
        if head is None:
            return 0
        body = _read_exact(inp, _U64.unpack(head)[0])
        if body is None:
            return 0
        known, template, messages, variables, bounds = pickle.loads(body)
        template = templates.setdefault(known, template) if template is not None else templates[known]
        answer = _answer_here(template, messages, variables, Bounds(*bounds))
        if answer.kind == "text":
            kind, payload = b"T", answer.text.encode("utf-8", "surrogatepass")
        elif answer.kind == "refused":
            kind, payload = b"X" if answer.error.get("memory") else b"R", answer.text.encode("utf-8", "replace")
        else:
            kind, payload = b"F", json.dumps(answer.error).encode("utf-8")
        out.write(kind + _U64.pack(len(payload)) + payload)
        out.flush()
        if kind == b"X":
            return 0  # a heap that ran out is not worth keeping


if __name__ == "__main__":
    raise SystemExit(main())
