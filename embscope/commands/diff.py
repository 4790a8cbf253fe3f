"""``embscope diff BASE TUNED [--data D] [--manifest M]``: what training changed, as a CI gate.

Exit codes as ``check``'s: 0 when no finding reaches ``--fail-on`` (default ``error``), 1 when one
does, 2 for a usage or input error (a bad option, a model that does not load, unreadable data).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from embscope.api import diff as run_diff
from embscope.commands.bottom import print_bottom_line
from embscope.commands.findings import FailOn, FailOnOpt, finish, print_findings
from embscope.commands.options import LOAD, run_command


@run_command(run_diff, *LOAD, "no_scan", "threshold", "unused_ids", "format", "text_field", "limit", "lang", writes=False)
def diff(
    base: Annotated[str, typer.Argument(help="the model training started from: alias, HF hub id, model folder or .gguf file")],
    tuned: Annotated[str, typer.Argument(help="the fine-tuned model (any model spec) or a PEFT adapter folder on BASE")],
    data: Annotated[Optional[list[Path]], typer.Option("--data", "-d", help="the training data (any format check reads): which rows it uses, and BASE's scan for untrained-still; repeat for several")] = None,
    manifest: Annotated[Optional[Path], typer.Option("--manifest", help="embscope_extension.json of `extend --apply` (or its folder): the initial rows of the added tokens (default: one found in BASE's folder, TUNED's or next to them whose terms are TUNED's tokens; else BASE's mean row)")] = None,
    languages: Annotated[str, typer.Option("--languages", help="per-language drift on this corpus: udhr (shipped), none, or a PATH")] = "udhr",
    tokens: Annotated[Optional[Path], typer.Option("--tokens", help="tokens.parquet of an earlier scan of BASE: its flagged rows instead of a new scan")] = None,
    fail_on: FailOnOpt = FailOn.error,
    options=None,
    common=None,
) -> None:
    """What training changed: which token rows moved, whether the new tokens learnt, what broke."""
    res = run_diff(base, tuned, data=[str(p) for p in data or []], manifest=manifest, languages=languages,
                   tokens=tokens, out=common.out, force=common.force, **options)
    finish(res, res.summary.sections.diff, fail_on, common.as_json, lambda: _print(res.summary.sections.diff, res))


#: what a new row is compared with, by ``DiffRecord.new_reference`` (none without new rows)
NEW_REFERENCE = {"manifest": "the rows the extension manifest wrote",
                 "base": "BASE's rows (BASE is the extended model)",
                 "mean": "BASE's mean row: no extension manifest given"}


def new_rows_text(record) -> str:
    """``12 new rows (against BASE's mean row: …)``, or ``0 new rows`` when there is nothing to compare."""
    against = NEW_REFERENCE.get(record.new_reference or "", record.new_reference)
    return f"{record.new_rows} new rows" + (f" (against {against})" if against else "")


def _print(record, res) -> None:
    from embscope.commands.console import console
    from rich.text import Text

    from embscope.report.escape import display_token

    con = console()
    b, t = record.base, record.tuned
    con.print(Text(f"What training changed: {t.name} ({t.kind}, {t.rows} rows) against {b.name} "
                   f"({b.rows} rows); {new_rows_text(record)}"))
    for name, m in record.matrices.items():
        fl = m.floor
        line = (f"  {name:<6} {m.moved} of {m.rows} rows moved ({m.moved_share:.2%}), {m.new_moved} of "
                f"{record.new_rows} new; floor {fl.floor:.3g} ({fl.base_format} → {fl.tuned_format}, {fl.lineage}"
                f"{', proxy' if fl.method == 'proxy' else ''})")
        con.print(Text(line))
    if record.data is not None:
        d = record.data
        con.print(Text(f"  data   {d.examples} examples, {d.tokens} tokens: {d.used_moved} of the "
                       f"{d.used_rows} rows it uses moved; {d.moved_used_share:.0%} of the moved rows are used"))
    if record.top_movers:
        shown = ", ".join(f"{r.id} {display_token(r.token)} ({r.change:.3g})" for r in record.top_movers[:6])
        con.print(Text(f"  most moved: {shown}"))
    if record.languages and record.languages[0].moved_share > 0:
        top = ", ".join(f"{r.language} {r.moved_share:.0%}" for r in record.languages[:5])
        con.print(Text(f"  languages whose rows moved most (share of their tokens): {top}"))
    if not record.findings:
        con.print(Text("no findings: the rows the run should have trained moved, and nothing blew up", style="green"))
    print_findings(con, record.findings)
    if res.folder is not None:
        typer.echo(f"wrote {res.folder}/diff.parquet, summary.json, index.html")
    print_bottom_line(res.summary)


def register(app: typer.Typer) -> None:
    app.command("diff")(diff)
