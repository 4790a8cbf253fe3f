"""``embscope audit``: the whole review, as an HTML report plus Parquet tables."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from embscope.commands.options import (CORPUS, EXTENSION, LOAD, SCAN, Force, Json, Out, Quiet, Verbose,
                                       print_json, print_warnings, run_options, setup)
from embscope.models.registry import DEFAULT_MODEL


@run_options(*LOAD, "no_scan", *SCAN, "reference", *EXTENSION, *CORPUS)
def audit(
    model: Annotated[str, typer.Option("--model", "-m", help="alias (`embscope models`), HF hub id, model folder or .gguf file")] = DEFAULT_MODEL,
    corpus: Annotated[Optional[list[Path]], typer.Option("--corpus", "-c", help="domain corpus (folder/file or shipped name: medical); repeat for several")] = None,
    languages: Annotated[str, typer.Option("--languages", help="multilingual corpus for per-language costs: udhr (shipped), none, or a path")] = "udhr",
    out: Out = None,
    force: Force = False,
    as_json: Json = False,
    quiet: Quiet = False,
    verbose: Verbose = False,
    options=None,
) -> None:
    """Run the whole review and write an HTML report plus Parquet tables."""
    from embscope.api import audit as run_audit

    setup(quiet, verbose)
    res = run_audit(model, corpora=corpus or [], languages=languages, out=out, force=force, options=options)
    print_warnings(res.warnings)
    if as_json:
        print_json({"folder": str(res.folder), "summary": res.summary})
    else:
        typer.echo(f"report: {res.folder / 'index.html'}")
        if res.repair is not None:
            typer.echo(f"repaired model ({res.repair['format']}, {res.repair['n_repaired']} rows): {options.repair_to}")


def register(app: typer.Typer) -> None:
    app.command("audit")(audit)
