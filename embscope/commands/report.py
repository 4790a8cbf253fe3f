"""``embscope report DIR``: re-render ``DIR/index.html`` from the tables already in the folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from embscope.commands.options import Json, print_json


def report(
    folder: Annotated[Path, typer.Argument(help="an output folder holding summary.json and the Parquet tables")],
    as_json: Json = False,
) -> None:
    """Re-render the offline HTML report of an output folder; prints the path of index.html."""
    from embscope.report import render

    path = render(folder)
    if as_json:
        print_json({"index": str(path)})
    else:
        typer.echo(str(path))


def register(app: typer.Typer) -> None:
    app.command("report")(report)
