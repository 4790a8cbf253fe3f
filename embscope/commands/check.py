"""``embscope check --model M --data train.jsonl``: ready to fine-tune? A gate for CI.

Exit codes: 0 when no finding reaches ``--fail-on`` (default ``error``), 1 when one does, 2 for a
usage or input error (a bad option, unreadable data, a model that does not load).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from embscope.api import check as run_check
from embscope.commands.bottom import print_bottom_line
from embscope.commands.findings import FailOn, FailOnOpt, finish, print_findings
from embscope.commands.options import CHECK, LOAD, SCAN, ModelOpt, print_repair, run_command


@run_command(run_check, *LOAD, "no_scan", *(n for n in SCAN if n != "no_map"), *CHECK, "text_field", "engine",
             "workers", "ray_address", writes=False)
def check(
    model: ModelOpt,
    data: Annotated[list[Path], typer.Option("--data", "-d", help="training data: jsonl/json/Parquet/Arrow file, folder or glob (messages, ShareGPT conversations, Alpaca, prompt/completion, preference, KTO or text records); repeat for several")],
    fail_on: FailOnOpt = FailOn.error,
    options=None,
    common=None,
) -> None:
    """Ready to fine-tune? Read the training data as the trainer will and report every vocabulary hazard."""
    res = run_check(model, [str(p) for p in data], out=common.out, force=common.force, **options)
    finish(res, res.summary.sections.readiness, fail_on, common.as_json, lambda: _print(res))


def _print(res) -> None:
    from embscope.commands.console import console
    from rich.text import Text

    record = res.summary.sections.readiness
    con = console()
    formats = ", ".join(f"{n} {k}" for k, n in record.data.formats.items())
    limit = f"{record.context} ({record.context_from})" if record.context else "unknown"
    con.print(Text(f"Ready to fine-tune with {record.trainer.name}? {record.examples} examples ({formats}), "
                   f"{record.sequences} sequences, {record.tokens} tokens ({record.label_tokens} in the loss), "
                   f"longest {record.lengths.max}, limit {limit}; template: {record.template}; "
                   f"PAD {record.pad.token!r} ({record.pad.how})"))
    con.print(Text(f"ids as {record.reference}", style="dim"))
    for name, part in record.splits.items():
        con.print(Text(f"  split {name}: {part.examples} examples, {part.tokens} tokens, template: "
                       f"{part.template}, worst: {part.worst or 'nothing'}"))
    if not record.findings:
        con.print(Text("no findings: nothing in the data hits a known vocabulary hazard", style="green"))
    print_findings(con, record.findings)
    if res.folder is not None:
        typer.echo(f"wrote {res.folder}/findings.parquet, summary.json, index.html")
    print_repair(res)
    print_bottom_line(res.summary)


def register(app: typer.Typer) -> None:
    app.command("check")(check)
