"""``embscope audit``: the whole review, as an HTML report plus Parquet tables."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from embscope.commands.options import (AUDIT_SCAN, CORPUS, EXTENSION, LOAD, Force, Json, Out, Quiet, Verbose,
                                       print_json, print_repair, print_warnings, run_options, setup)
from embscope.models.registry import DEFAULT_MODEL


@run_options(*LOAD, "no_scan", *AUDIT_SCAN, "reference", *EXTENSION, *CORPUS)
def audit(
    model: Annotated[str, typer.Option("--model", "-m", help="alias (`embscope models`), HF hub id, model folder or .gguf file")] = DEFAULT_MODEL,
    corpus: Annotated[Optional[list[Path]], typer.Option("--corpus", "-c", help="domain corpus (folder/file or shipped name: medical); repeat for several")] = None,
    data: Annotated[Optional[list[Path]], typer.Option("--data", "-d", help="training data (as for `check`): adds the \"Ready to fine-tune?\" section; repeat for several")] = None,
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
    res = run_audit(model, corpora=corpus or [], data=[str(p) for p in data or []], languages=languages, out=out, force=force, options=options)
    print_warnings(res.warnings)
    if as_json:
        print_json({"folder": str(res.folder), "summary": res.summary})
    else:
        typer.echo(f"report: {res.folder / 'index.html'}")
        print_repair(res)


def register(app: typer.Typer) -> None:
    app.command("audit")(audit)
