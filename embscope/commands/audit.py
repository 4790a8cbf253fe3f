"""``embscope audit``: the whole review, as an HTML report plus Parquet tables."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from embscope.api import audit as run_audit
from embscope.commands.options import (AUDIT_SCAN, CHECK, CORPUS, EXTENSION, LOAD, print_json, print_repair, print_warnings,
                                       run_command)
from embscope.models.registry import DEFAULT_MODEL


@run_command(run_audit, *LOAD, "no_scan", *AUDIT_SCAN, "reference", *EXTENSION, *CORPUS, *CHECK, "model_work", "unit_field", "lang")
def audit(
    model: Annotated[str, typer.Option("--model", "-m", help="alias (`embscope models`), HF hub id, model folder or .gguf file")] = DEFAULT_MODEL,
    corpus: Annotated[Optional[list[Path]], typer.Option("--corpus", "-c", help="domain corpus (folder/file or shipped name: medical); repeat for several")] = None,
    data: Annotated[Optional[list[Path]], typer.Option("--data", "-d", help="training data (as for `check`, with its --trainer and trainer options): adds the \"Ready to fine-tune?\" section; repeat for several")] = None,
    languages: Annotated[str, typer.Option("--languages", help="multilingual corpus for per-language costs: udhr (shipped), none, or a path")] = "udhr",
    options=None,
    common=None,
) -> None:
    """Run the whole review and write an HTML report plus Parquet tables."""
    res = run_audit(model, corpora=corpus or [], data=[str(p) for p in data or []], languages=languages,
                    out=common.out, force=common.force, **options)
    print_warnings(res.warnings)
    if common.as_json:
        print_json({"folder": str(res.folder), "summary": res.summary})
    else:
        from embscope.commands.bottom import print_bottom_line

        typer.echo(f"report: {res.folder / 'index.html'}")
        print_repair(res)
        print_bottom_line(res.summary)


def register(app: typer.Typer) -> None:
    app.command("audit")(audit)
