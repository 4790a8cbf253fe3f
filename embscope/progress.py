"""Progress bars and step timings, shared by every long step.

Library code reports progress through :func:`track` and :class:`Steps`; both print to stderr with
rich and stay silent when ``EMBSCOPE_QUIET=1`` or when stderr is not a terminal and
``EMBSCOPE_PROGRESS`` is not set (so tests and pipes get clean output).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")


def enabled() -> bool:
    if os.environ.get("EMBSCOPE_QUIET") == "1":
        return False
    if os.environ.get("EMBSCOPE_PROGRESS") == "1":
        return True
    return sys.stderr.isatty()


def _console():
    from rich.console import Console

    return Console(stderr=True)


def track(items: Iterable[T], *, total: int | None = None, description: str = "working") -> Iterator[T]:
    """Yield ``items`` while drawing a progress bar (a no-op when progress is disabled).

    >>> list(track(range(3), description="demo"))
    [0, 1, 2]
    """
    if not enabled():
        yield from items
        return
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    with Progress(TextColumn("  {task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TimeRemainingColumn(), console=_console(),
                  transient=True) as bar:
        task = bar.add_task(description, total=total)
        for item in items:
            yield item
            bar.advance(task)


class Steps:
    """Times named steps and prints one line per step: ``✓ load  3.2 s``.

    ``timings`` maps step name to seconds, in the order the steps ran; it goes into summary.json.
    """

    def __init__(self, *, verbose: bool | None = None):
        self.timings: dict[str, float] = {}
        self.verbose = enabled() if verbose is None else verbose

    @contextmanager
    def step(self, name: str, description: str | None = None):
        label = description or name
        t0 = time.perf_counter()
        if self.verbose:
            _console().print(f"[bold]→[/] {label} …")
        yield
        dt = time.perf_counter() - t0
        self.timings[name] = round(dt, 3)
        if self.verbose:
            _console().print(f"[green]✓[/] {label}  [dim]{dt:.1f} s[/]")

    def skip(self, name: str, why: str) -> None:
        if self.verbose:
            _console().print(f"[yellow]–[/] {name}: skipped ({why})")
