"""``embscope check --model M --data train.jsonl``: ready to fine-tune? A gate for CI.

Exit codes: 0 when no finding reaches ``--fail-on`` (default ``error``), 1 when one does, 2 for a
usage or input error (a bad option, unreadable data, a model that does not load).
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import typer

from embscope.commands.options import (CHECK, LOAD, SCAN, Force, Json, ModelOpt, Out, Quiet, Verbose, print_json,
                                       print_warnings, run_options, setup)


class FailOn(str, enum.Enum):
    error = "error"
    warning = "warning"
    info = "info"
    never = "never"


#: rank of a severity, for --fail-on
RANK = {"info": 0, "warning": 1, "error": 2, "never": 3}


@run_options(*LOAD, "no_scan", *SCAN, *CHECK, "text_field", "engine", "workers", "ray_address")
def check(
    model: ModelOpt,
    data: Annotated[list[Path], typer.Option("--data", "-d", help="training data: jsonl/json/Parquet/Arrow file, folder or glob (messages, ShareGPT conversations, Alpaca, prompt/completion or text records); repeat for several")],
    fail_on: Annotated[FailOn, typer.Option("--fail-on", help="exit 1 when a finding reaches this severity (never: always 0)")] = FailOn.error,
    out: Out = None,
    force: Force = False,
    as_json: Json = False,
    quiet: Quiet = False,
    verbose: Verbose = False,
    options=None,
) -> None:
    """Ready to fine-tune? Read the training data as the trainer will and report every vocabulary hazard."""
    from embscope.api import check as run_check

    setup(quiet, verbose)
    res = run_check(model, [str(p) for p in data], out=out, force=force, options=options)
    record = res.summary.sections.finetune
    print_warnings(res.warnings)
    failed = any(RANK[f.severity] >= RANK[fail_on.value] for f in record.findings)
    if as_json:
        body = record.to_dict()
        findings = [{k: f[k] for k in ("code", "severity", "ids", "tokens", "count", "examples", "fix", "message",
                                       "input_counts", "label_counts", "split")}
                    for f in body.pop("findings")]
        print_json({"findings": findings, "data": body, "folder": str(res.folder) if res.folder else None,
                    "exit": 1 if failed else 0})
    else:
        _print(record, res)
        if res.repair is not None:
            typer.echo(f"repaired model ({res.repair['format']}, {res.repair['n_repaired']} rows): {options.repair_to}")
    if failed:
        raise typer.Exit(1)


def _print(record, res) -> None:
    from rich.console import Console
    from rich.text import Text

    from embscope.report.escape import display_token

    con = Console()
    formats = ", ".join(f"{n} {k}" for k, n in record.data["formats"].items())
    limit = f"{record.context} ({record.context_from})" if record.context else "unknown"
    con.print(Text(f"Ready to fine-tune with {record.trainer['name']}? {record.examples} examples ({formats}), "
                   f"{record.sequences} sequences, {record.tokens} tokens ({record.label_tokens} in the loss), "
                   f"longest {record.lengths['max']}, limit {limit}; template: {record.template}; "
                   f"PAD {record.pad['token']!r} ({record.pad['how']})"))
    con.print(Text(f"ids as {record.reference}", style="dim"))
    for name, part in record.splits.items():
        con.print(Text(f"  split {name}: {part['examples']} examples, {part['tokens']} tokens, template: "
                       f"{part['template']}, worst: {part['worst'] or 'nothing'}"))
    if not record.findings:
        con.print(Text("no findings: nothing in the data hits a known vocabulary hazard", style="green"))
    style = {"error": "red", "warning": "yellow", "info": "cyan"}
    for f in record.findings:
        line = Text()
        line.append(f"{f.severity:<8}", style=style[f.severity])
        line.append(f" {f.code}{f' [{f.split}]' if f.split else ''}: ", style="bold")
        line.append(f.message)
        con.print(line)
        if f.ids:
            shown = ", ".join(f"{i} {display_token(t)}" + (f" (input {a}, label {b})" if f.input_counts else "")
                              for i, t, a, b in list(zip(f.ids, f.tokens, f.input_counts or [0] * len(f.ids),
                                                         f.label_counts or [0] * len(f.ids)))[:8])
            more = f" (+{len(f.ids) - 8})" if len(f.ids) > 8 else ""
            con.print(Text(f"         ids: {shown}{more}"))
        if f.examples:
            con.print(Text(f"         examples: {', '.join(map(str, f.examples))}"))
        con.print(Text(f"         fix: {f.fix}"))
    if res.folder is not None:
        typer.echo(f"wrote {res.folder}/findings.parquet, summary.json, index.html")


def register(app: typer.Typer) -> None:
    app.command("check")(check)
