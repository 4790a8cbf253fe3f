"""What ``check`` and ``diff`` share: the ``--fail-on`` gate, the findings as printed and as JSON.

Exit codes of both: 0 when no finding reaches ``--fail-on`` (default ``error``), 1 when one does, 2
for a usage or input error.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Annotated

import typer

from embscope.commands.options import print_json, print_warnings
from embscope.readiness.record import SEVERITIES


#: the severities a finding may have, gravest first, and ``never``
FailOn = enum.Enum("FailOn", {v: v for v in (*reversed(SEVERITIES), "never")}, type=str)


FailOnOpt = Annotated[FailOn, typer.Option("--fail-on", help="exit 1 when a finding reaches this severity (never: always 0)")]


def finish(res, record, fail_on, as_json: bool, show: Callable[[], None]) -> None:
    """Print the warnings, then the record (``--json``: its findings, the rest as ``data``, the
    folder and the exit code; else ``show()``); exit 1 when a finding reaches ``fail_on``."""
    from embscope.readiness.record import as_json as findings_json
    from embscope.readiness.record import reaches

    print_warnings(res.warnings)
    failed = reaches(record.findings, fail_on.value)
    if as_json:
        body = record.to_dict()
        body.pop("findings")
        print_json({"findings": findings_json(record.findings), "data": body,
                    "folder": str(res.folder) if res.folder else None, "exit": 1 if failed else 0,
                    "bottom_line": res.summary.bottom_line})
    else:
        show()
    if failed:
        raise typer.Exit(1)


#: ids shown per finding (the record keeps up to 50)
SHOWN_IDS = 8


def print_findings(con, findings) -> None:
    """One block per finding: severity, code (and split) and message; ids with their tokens (and,
    where counted, their uses as an input and as a label); examples; fix."""
    from rich.text import Text

    from embscope.commands.console import print_whole
    from embscope.report.escape import display_token

    style = {"error": "red", "warning": "yellow", "info": "cyan"}
    for f in findings:
        line = Text()
        line.append(f"{f.severity:<8}", style=style.get(f.severity))
        line.append(f" {f.code}{f' [{f.split}]' if f.split else ''}: ", style="bold")
        line.append(f.message)
        con.print(line)
        if f.ids:
            uses = (zip(f.input_counts, f.label_counts) if f.input_counts else [None] * len(f.ids))
            shown = ", ".join(f"{i} {display_token(t)}" + (f" (input {u[0]}, label {u[1]})" if u else "")
                              for i, t, u in list(zip(f.ids, f.tokens, uses))[:SHOWN_IDS])
            rows = max(f.rows or 0, len(f.ids))
            more = f" (+{rows - SHOWN_IDS:,} more: {rows:,} rows in all)" if rows > SHOWN_IDS else ""
            con.print(Text(f"         ids: {shown}{more}"))
        if f.examples:
            con.print(Text(f"         examples: {', '.join(map(str, f.examples))}"))
        print_whole(con, Text(f"         fix: {f.fix}"))
