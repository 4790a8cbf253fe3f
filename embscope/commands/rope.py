"""``embscope rope --model M``: RoPE reach, KV-cache budget and embedding share from the config."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from embscope.context.display import format_summary


def rope(
    model: Annotated[str, typer.Option("--model", "-m", help="alias, HF hub id, model folder or .gguf file")],
    as_json: Annotated[bool, typer.Option("--json", help="print machine-readable JSON instead of tables")] = False,
) -> None:
    """RoPE scaling and extension band, KV-cache bytes per token and per context, embedding share."""
    from embscope.context import context_summary
    from embscope.resolve import resolve_config

    summary = context_summary(resolve_config(model))
    if as_json:
        typer.echo(json.dumps({"model": model, **summary.to_dict()}, indent=2))
        return
    from rich.console import Console

    Console().print(format_summary(summary))


def register(app: typer.Typer) -> None:
    app.command("rope")(rope)

