"""``embscope models``: the registry of model aliases."""

from __future__ import annotations

import typer

from embscope.commands.options import Json, print_json


def models(as_json: Json = False) -> None:
    """List the model aliases (packaged demo models load offline; the others come from the HF cache)."""
    from embscope.models.registry import ALIASES

    if as_json:
        print_json([{"alias": a.name, "repo_id": a.repo_id, "package": a.package is not None,
                     "description": a.description, **a.facts} for a in ALIASES.values()])
        return
    from embscope.commands.console import console
    from rich.table import Table

    table = Table("alias", "source", "rows × hidden", "tied", "RoPE θ", "description")
    for a in ALIASES.values():
        f = a.facts
        table.add_row(a.name, "package" if a.package else a.repo_id, f"{f.get('rows')} × {f.get('hidden')}",
                      str(f.get("tied")), f"{f['rope_theta']:g}" if "rope_theta" in f else "—", a.description)
    console().print(table)


def register(app: typer.Typer) -> None:
    app.command("models")(models)
