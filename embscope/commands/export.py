"""``embscope export atlas|projector DIR``: an output folder's token map in other tools' formats."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from embscope.commands.options import Download, DownloadOpt, Force, Json, print_json

Report = Annotated[Path, typer.Argument(help="an output folder of `embscope audit` or `scan` (holding tokens.parquet)")]
ExportOut = Annotated[Optional[Path], typer.Option("--out", "-o", help="folder to write (default DIR/atlas or DIR/projector)")]

app = typer.Typer(help="Write an output folder's token map in other tools' formats (Embedding Atlas, "
                       "TensorBoard projector).", no_args_is_help=True, rich_markup_mode=None)


@app.command("atlas")
def atlas(folder: Report, out: ExportOut = None, force: Force = False, as_json: Json = False) -> None:
    """Write tokens.parquet for Embedding Atlas (x/y, text, neighbours as {ids, distances}) and print
    the command that opens it."""
    from embscope.api import export_atlas
    from embscope.report.atlas import atlas_command

    path = export_atlas(folder, out=out, force=force)
    if as_json:
        print_json({"table": str(path), "command": atlas_command(path)})
    else:
        typer.echo(f"wrote {path}\nopen it with: {atlas_command(path)}")


@app.command("projector")
def projector(
    folder: Report,
    out: ExportOut = None,
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="the model the folder was made from (default: the one its summary.json names)")] = None,
    sample: Annotated[int, typer.Option("--sample", min=0, help="rows to write: every flagged row, then a seeded uniform draw of the rest; 0 for all")] = 10_000,
    download: DownloadOpt = Download.ranges,
    force: Force = False,
    as_json: Json = False,
) -> None:
    """Write tensors.tsv, metadata.tsv and projector_config.json/.pbtxt for the TensorBoard projector."""
    from embscope.api import export_projector

    info = export_projector(folder, out=out, model=model, sample=sample, force=force, download=download.value)
    if as_json:
        print_json({k: str(v) if isinstance(v, Path) else v for k, v in info.items()})
    else:
        typer.echo(f"wrote {info['rows']:,} × {info['dim']} rows to {info['folder']} "
                   f"({', '.join(info['files'])}); open it with `tensorboard --logdir {info['folder']}` or "
                   "load projector_config.json in the standalone projector")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="export")
