"""The command line: a thin skin over the library.

Each command parses options, makes one library call, prints or writes the result. Commands live in
:mod:`embscope.commands` (one module per concern, each with ``register(app)``); errors of the
:class:`~embscope.errors.EmbscopeError` family become a one-line ``error: ...`` and exit code 2 here,
in one place.
"""

from __future__ import annotations

import importlib
import sys

import typer

from embscope.errors import EmbscopeError

app = typer.Typer(
    name="embscope",
    help="Look inside a language model's vocabulary: weak token rows, per-language cost, "
    "vocabulary extension, RoPE and KV-cache budgets.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # plain help text: rich's help formatter alone costs about a second of imports per call
    rich_markup_mode=None,
)

# Command modules, in the order their commands appear in --help.
_COMMAND_MODULES = [
    "embscope.commands.audit",
    "embscope.commands.scan",
    "embscope.commands.check",
    "embscope.commands.diff",
    "embscope.commands.languages",
    "embscope.commands.extend",
    "embscope.commands.rope",
    "embscope.commands.report",
    "embscope.commands.export",
    "embscope.commands.models",
]

for _name in _COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def _version(value: bool) -> None:
    if value:
        from embscope import __version__

        typer.echo(f"embscope {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="print the version and exit")) -> None:
    """Look inside a language model's vocabulary: weak token rows, per-language cost, vocabulary
    extension, RoPE and KV-cache budgets."""


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 2 user error, 130 interrupted, 141 stdout closed).

    Usage errors (unknown option, bad value) become ``error: <message> (see '… --help')`` and
    exit code 2; :class:`EmbscopeError` from the library becomes ``error: <message>`` and exit code
    2; any other exception (a bug) one ``error: unexpected …`` line and exit code 2, with the
    traceback under ``--verbose``.
    """
    import warnings

    import os

    from embscope import progress
    from embscope.output import Terminated, handle_sigterm

    handle_sigterm()
    chosen = progress.chosen_mode()  # -q/-v hold for this call only: a notebook's next call is as before
    pipe = _stdout_pipe()
    usage_error = _usage_error_class()
    shown, usage = warnings.showwarning, usage_error.show
    warnings.showwarning = _warning_line
    usage_error.show = _usage_line
    try:
        app(args=argv, standalone_mode=True)
    except EmbscopeError as err:
        typer.secho(f"error: {_one_line(err.cli_message())}", err=True, fg=typer.colors.RED)
        return 2
    except BrokenPipeError:  # a write outside click's own handler
        return _stdout_closed()
    except Exception as exc:  # noqa: BLE001 - never exit 1 (the code for findings) on a crash
        return _crashed(exc, sys.argv[1:] if argv is None else argv)
    except Terminated:
        typer.secho("terminated: nothing was written", err=True, fg=typer.colors.YELLOW)
        return 143
    except KeyboardInterrupt:
        return _interrupted()
    except SystemExit as exc:  # typer always ends this way in standalone mode
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if code == 1 and _reader_gone(pipe):  # click's and rich's exit(1) on EPIPE
            return _stdout_closed()
        return _interrupted() if code == 130 else code
    finally:
        warnings.showwarning = shown
        usage_error.show = usage
        progress.set_mode(chosen)
        if pipe is not None:
            os.close(pipe)
    return 0


def _usage_error_class():
    """The ``UsageError`` class typer raises: its own copy of click's (typer ≥ 0.26), else click's."""
    try:
        from typer._click.exceptions import UsageError
    except ImportError:  # pragma: no cover - an older typer on click itself
        from click.exceptions import UsageError
    return UsageError


def _usage_line(self, file=None) -> None:
    """A usage error (unknown option, a value out of range) as one ``error: …`` line naming the
    command's help, instead of click's four lines."""
    where = self.ctx.command_path if self.ctx is not None else "embscope"
    message = _one_line(self.format_message()).replace("Value error, ", "")
    typer.secho(f"error: {message} (see '{where} --help')", err=True, fg=typer.colors.RED)


def _crashed(exc: BaseException, argv: list[str]) -> int:
    """An exception no check turned into an :class:`EmbscopeError`: one line and exit code 2 (the
    traceback too with ``--verbose`` on the commands that have it, ``EMBSCOPE_TRACEBACK=1`` on the
    others), so CI never reads a crash as findings (exit 1)."""
    import os
    import traceback

    verbose = _has_verbose(argv)
    if verbose and ("--verbose" in argv or "-v" in argv):
        traceback.print_exception(exc, file=sys.stderr)
    text = _one_line(str(exc))
    text = text if len(text) <= 300 else text[:297] + "..."
    how = "rerun with --verbose for the traceback" if verbose else \
        "rerun with EMBSCOPE_TRACEBACK=1 for the traceback"
    if os.environ.get("EMBSCOPE_TRACEBACK") and not verbose:
        traceback.print_exception(exc, file=sys.stderr)
    typer.secho(f"error: unexpected {type(exc).__name__}" + (f": {text}" if text else "") + " — nothing was "
                f"written; this is a bug in embscope: {how} and report it", err=True, fg=typer.colors.RED)
    return 2


def _has_verbose(argv: list[str]) -> bool:
    """Whether the command ``argv`` names (``export projector`` included) has a ``--verbose``
    option, so the crash line advises it only where it exists."""
    cmd = typer.main.get_command(app)
    for word in argv:
        sub = getattr(cmd, "commands", {}).get(word)
        if sub is None:
            break
        cmd = sub
    return any("--verbose" in getattr(p, "opts", ()) for p in getattr(cmd, "params", ()))


def _warning_line(message, category, filename, lineno, file=None, line=None) -> None:
    """A library warning (``CorpusWarning``: files skipped) as one ``warning: …`` line, not Python's
    ``path:line: Category: …`` followed by the source line that raised it."""
    typer.secho(f"warning: {_one_line(str(message))}", err=True, fg=typer.colors.YELLOW)


def _one_line(text: str) -> str:
    """Messages are one line; a library message that is not (a wrapped exception) is folded."""
    return " ".join(text.split())


#: the exit code of a command whose stdout was closed before it finished (``cmd | head``): 128 +
#: SIGPIPE, what a shell reports for a process the signal ends; never 1, which means "findings"
STDOUT_CLOSED = 141


def _stdout_pipe() -> int | None:
    """A duplicate of stdout's descriptor when stdout is a pipe (else None): click and rich point
    stdout at ``/dev/null`` when a write fails with EPIPE, so whether the pipe's reader has gone is
    asked of this copy (:func:`_reader_gone`)."""
    import os
    import stat

    try:
        fd = sys.stdout.fileno()
        return os.dup(fd) if stat.S_ISFIFO(os.fstat(fd).st_mode) else None
    except (OSError, ValueError, AttributeError):
        return None


def _reader_gone(pipe: int | None) -> bool:
    """Whether the reader of the pipe ``pipe`` writes to has closed it (``poll`` reports POLLERR on
    the write end of a pipe without readers)."""
    import select

    if pipe is None:
        return False
    try:
        p = select.poll()
        p.register(pipe, select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in p.poll(0))
    except (OSError, ValueError):
        return False


def _stdout_closed() -> int:
    """A closed stdout (the reader of a pipe has gone): no message (the reader asked for no more),
    stdout pointed at ``/dev/null`` so the interpreter's last flush cannot fail again, and
    :data:`STDOUT_CLOSED`: the command's own code is not known, as it was stopped mid-way."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return STDOUT_CLOSED


def _interrupted() -> int:
    typer.secho("interrupted: nothing was written", err=True, fg=typer.colors.YELLOW)
    return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
