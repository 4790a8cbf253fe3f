"""``embscope rope --model M``: RoPE reach, KV-cache budget and embedding share from the config."""

from __future__ import annotations

import typer

from embscope.commands.options import Json, ModelOpt, print_json


def rope(model: ModelOpt, as_json: Json = False) -> None:
    """RoPE scaling and extension band, KV-cache bytes per token and per context, embedding share."""
    from embscope.api import rope as context_of

    summary = context_of(model)
    if as_json:
        print_json({"model": model, **summary.to_dict()})
        return
    from rich.console import Console

    from embscope.context.display import format_summary

    Console().print(format_summary(summary))


def register(app: typer.Typer) -> None:
    app.command("rope")(rope)
