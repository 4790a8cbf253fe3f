"""Progress bars and step timings, shared by every long step.

Library code reports progress through :func:`track`, :func:`bar` and :class:`Steps`; all print to
stderr. What they print depends on the mode:

- **quiet** (``--quiet``, or ``EMBSCOPE_QUIET=1``): nothing;
- on a **terminal**: rich progress bars with a total, a rate and an ETA, and one line per step;
- **without a terminal** (a pipe, a log file, CI): one plain line per step, and for long loops a
  line every :data:`LINE_EVERY_S` seconds (``  kNN tiles 40/128 (31 %), ETA 52 s``);
- **verbose** (``--verbose``): as above, plus log lines from the library (``embscope`` logger).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from embscope import signals

T = TypeVar("T")

#: without a terminal, a long loop prints at most one line this often (seconds)
LINE_EVERY_S = 15.0

_MODE: str | None = None  # None: from the environment


def set_mode(mode: str | None) -> None:
    """``"quiet"``, ``"verbose"`` or ``None`` (normal). Verbose also shows ``embscope`` log lines."""
    global _MODE
    _MODE = mode
    if mode == "verbose":
        import logging

        logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
        logging.getLogger("embscope").setLevel(logging.INFO)


def chosen_mode() -> str | None:
    """The mode :func:`set_mode` chose for this process (None: read from the environment)."""
    return _MODE


def mode() -> str:
    """``quiet``, ``bar`` (terminal), ``lines`` (no terminal)."""
    if _MODE == "quiet" or (_MODE is None and os.environ.get("EMBSCOPE_QUIET") == "1"):
        return "quiet"
    return "bar" if sys.stderr.isatty() else "lines"


def enabled() -> bool:
    return mode() != "quiet"


def _console():
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def _fmt_s(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


@contextmanager
def bar(total: float | None, description: str, *, unit: str = "") -> Iterator[Callable[[float], None]]:
    """A progress bar advanced by hand: ``with bar(n_bytes, "reading", unit="B") as advance: advance(k)``.

    Each ``advance`` is also a point where a stop that landed inside native code is raised again
    (:func:`embscope.signals.raise_pending`).

    >>> with bar(3, "demo") as advance:
    ...     for _ in range(3): advance(1)
    """
    m = mode()
    if m == "quiet":
        yield lambda n=1: signals.raise_pending()
        return
    if m == "lines":
        state = {"done": 0.0, "last": time.perf_counter(), "t0": time.perf_counter()}

        def advance(n: float = 1) -> None:
            signals.raise_pending()
            state["done"] += n
            now = time.perf_counter()
            if now - state["last"] >= LINE_EVERY_S:
                state["last"] = now
                done, el = state["done"], now - state["t0"]
                if total:
                    eta = el * (total - done) / done if done else float("nan")
                    msg = (f"  {description} {_amount(done, unit, False)}/{_amount(total, unit)} "
                           f"({100 * done / total:.0f} %), ETA {_fmt_s(eta)}")
                else:
                    msg = f"  {description} {_amount(done, unit)} after {_fmt_s(el)}"
                print(msg, file=sys.stderr, flush=True)

        yield advance
        return
    from rich.progress import (BarColumn, DownloadColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    count = [DownloadColumn()] if unit == "B" else [MofNCompleteColumn(), TextColumn(unit)]
    with Progress(TextColumn("  {task.description}"), BarColumn(), *count, TimeElapsedColumn(),
                  TimeRemainingColumn(), console=_console(), transient=True) as progress:
        task = progress.add_task(description, total=total)

        def advance_bar(n: float = 1) -> None:
            signals.raise_pending()
            progress.advance(task, n)

        yield advance_bar


def _amount(x: float, unit: str, named: bool = True) -> str:
    """``12.3 MiB`` for bytes, ``40 tiles`` for a named unit (the name left out when ``named`` is False).

    >>> _amount(3 * 2**20, "B"), _amount(1234, "rows"), _amount(40, "rows", False), _amount(2**20, "B", False)
    ('3.0 MiB', '1,234 rows', '40', '1.0')
    """
    if unit == "B":
        return f"{x / 2**20:,.1f} MiB" if named else f"{x / 2**20:,.1f}"
    return f"{x:,.0f} {unit}" if unit and named else f"{x:,.0f}"


def track(items: Iterable[T], *, total: int | None = None, description: str = "working",
          unit: str = "") -> Iterator[T]:
    """Yield ``items`` while drawing a progress bar (see :func:`bar`); ``unit`` names what one
    item is (``tiles``, ``texts``), shown beside the count.

    >>> list(track(range(3), description="demo", unit="items"))
    [0, 1, 2]
    """
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with bar(total, description, unit=unit) as advance:
        for item in items:
            yield item
            advance(1)


class Steps:
    """Times named steps and prints one line per step: ``✓ load  3.2 s``.

    ``timings`` maps step name to seconds, in the order the steps ran; it goes into summary.json.
    """

    def __init__(self, *, verbose: bool | None = None, announce: str | None = None):
        """``announce``: print one line as each step starts, ``  · <announce>: <label> …`` (the
        parts of a long step, so a person sees which part runs), and no ✓ lines."""
        self.timings: dict[str, float] = {}
        self.verbose = enabled() if verbose is None else (verbose and enabled())
        self.announce = announce if announce is not None and enabled() else None

    @contextmanager
    def step(self, name: str, description: str | None = None):
        """Time the ``with`` body as step ``name``; its line ends ``✓`` — or reads ``– … nothing to
        report`` when the body called the handle's ``nothing(why)``: a step that found nothing never
        shows a check mark (the reason follows as the run's error or one of its warnings)."""
        label = description or name
        t0 = time.perf_counter()
        if self.verbose:
            _console().print(f"[bold]→[/] {_plain(label)} …")
        elif self.announce:
            part = f"{name} ({description})" if description and description != name else name
            _console().print(f"[dim]  · {_plain(self.announce)}: {_plain(part)} …[/]")
        handle = _StepHandle()
        yield handle
        signals.raise_pending()
        dt = time.perf_counter() - t0
        self.timings[name] = round(dt, 3)
        if self.verbose and handle.why is not None:
            _console().print(f"[yellow]–[/] {_plain(label)}: nothing to report  [dim]{dt:.1f} s[/]")
        elif self.verbose:
            _console().print(f"[green]✓[/] {_plain(label)}  [dim]{dt:.1f} s[/]")

    def skip(self, name: str, why: str) -> None:
        if self.verbose:
            _console().print(f"[yellow]–[/] {name}: skipped ({_plain(why)})")


class _StepHandle:
    """What a step's ``with`` body may say about its outcome (see :meth:`Steps.step`)."""

    why: str | None = None

    def nothing(self, why: str) -> None:
        """The step ran and found nothing to report, because ``why``."""
        self.why = why


def _plain(text: str) -> str:
    """User-supplied text (paths, specs) shown literally, not as rich markup."""
    from rich.markup import escape

    return escape(text)
