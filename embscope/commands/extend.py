"""``embscope extend``: which domain terms to add to the vocabulary, what that saves, and — with
``--apply`` — the extended model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from embscope.api import extend as run_extend
from embscope.commands.options import CORPUS, EXTEND_ONLY, EXTENSION, LOAD, Corpus, ModelOpt, print_json, print_warnings, run_command


@run_command(run_extend, *EXTENSION, *EXTEND_ONLY, *CORPUS, *LOAD)
def extend(
    model: ModelOpt,
    corpus: Corpus,
    apply_to: Annotated[Optional[Path], typer.Option(
        "--apply", help="also write the extended model here (full transformers folder when the whole "
                        "model loads, else the new rows + tokenizer + README)")] = None,
    apply_init: Annotated[str, typer.Option(
        "--apply-init", help="strategy for --apply: auto (the recommended one), NAME or INPUT/OUTPUT")] = "auto",
    rows_only: Annotated[bool, typer.Option("--rows-only", help="with --apply: write only the new rows")] = False,
    tokens: Annotated[Optional[Path], typer.Option(
        "--tokens", help="tokens.parquet with a 'flagged' column: under-trained rows left out of every mean")] = None,
    options=None,
    common=None,
) -> None:
    """Suggest vocabulary extensions from a domain corpus; write candidates.parquet + summary.json."""
    res, manifest = run_extend(model, corpus, out=common.out, force=common.force, apply_to=apply_to,
                               apply_init=apply_init, rows_only=rows_only, tokens=tokens, **options)
    print_warnings(res.warnings)
    if common.as_json:
        print_json({"folder": str(res.folder), "summary": res.summary, "applied": manifest})
        return
    from embscope.commands.bottom import print_bottom_line
    from embscope.commands.tables import extension_table

    extension_table(res)
    print_bottom_line(res.summary)


def register(app: typer.Typer) -> None:
    app.command("extend")(extend)
