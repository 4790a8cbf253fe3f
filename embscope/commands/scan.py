"""``embscope scan --model M``: under-trained and isolated token rows (tokens.parquet + summary)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from embscope.commands.options import (LOAD, SCAN, Force, Json, ModelOpt, Out, Quiet, Verbose, print_json,
                                       print_warnings, run_options, setup)


@run_options(*LOAD, *SCAN)
def scan(
    model: ModelOpt,
    corpus: Annotated[Optional[list[Path]], typer.Option("--corpus", "-c", help="your data (folder/file or shipped name); repeat for several: lists the flagged rows it produces")] = None,
    out: Out = None,
    force: Force = False,
    as_json: Json = False,
    quiet: Quiet = False,
    verbose: Verbose = False,
    options=None,
) -> None:
    """Find under-trained and isolated token rows; write tokens.parquet, summary.json, index.html."""
    from embscope.api import scan as run_scan

    setup(quiet, verbose)
    res = run_scan(model, corpora=corpus or [], out=out, force=force, options=options)
    print_warnings(res.warnings)
    if as_json:
        print_json({"folder": str(res.folder), "summary": res.summary})
        return
    from rich.console import Console

    from embscope.geometry.scan import format_scan_summary

    Console().print(format_scan_summary(res.summary.sections.tokens.geometry.to_dict()))
    typer.echo(f"wrote {res.folder}/tokens.parquet, summary.json, index.html")
    if res.repair is not None:
        typer.echo(f"repaired model ({res.repair['format']}, {res.repair['n_repaired']} rows): {options.repair_to}")


def register(app: typer.Typer) -> None:
    app.command("scan")(scan)
