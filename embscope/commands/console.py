"""The consoles commands print through: a suggested command and a table value are never cut.

Rich wraps every line at the console's width, 80 columns when stdout is a pipe or a log file, and a
table squeezes its cells into ellipses to fit. A command split over two lines runs half of itself
when pasted, and ``+0.04…`` is not a number. So:

- in a pipe (not a terminal), the console is :data:`PIPE_WIDTH` wide: lines and tables keep their
  full length, one line per line (what a log and ``grep`` want);
- in a terminal, :func:`print_whole` prints a line with rich's ``soft_wrap``: no newline is
  inserted, the terminal folds it for display only and a copy of it is the one line.

>>> import io
>>> from rich.console import Console
>>> buf = io.StringIO()
>>> print_whole(Console(file=buf, width=20), "→ embscope diff smollm2-135m TUNED --data x.jsonl")
>>> buf.getvalue().count("\\n")
1
"""

from __future__ import annotations

from typing import Any

#: a pipe's width: wider than any line or table a command prints, so rich never wraps or elides
PIPE_WIDTH = 100_000


def console(stderr: bool = False, **kwargs: Any):
    """A rich Console on stdout (``stderr``: on stderr): the terminal's width in a terminal,
    :data:`PIPE_WIDTH` elsewhere."""
    from rich.console import Console

    con = Console(stderr=stderr, **kwargs)
    if not con.is_terminal and "width" not in kwargs:
        con = Console(stderr=stderr, width=PIPE_WIDTH, **kwargs)
    return con


def print_whole(con, text) -> None:
    """Print ``text`` (str or rich Text) as one line that no width cuts: a command to copy."""
    con.print(text, soft_wrap=True)
