"""``embscope scan --model M``: under-trained and isolated token rows, written as tokens.parquet."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from embscope.commands.options import Device, Force, Out, parse_ids
from embscope.geometry.indicators import DEFAULT_THRESHOLD


def write_scan(folder: Path, model, result, *, parameters: dict) -> None:
    """Write ``tokens.parquet`` (base columns + the scan's) and ``summary.json`` into ``folder``."""
    from embscope.audit import model_record
    from embscope.output import provenance, write_json
    from embscope.tables import base_columns, tokens_frame

    columns = base_columns(model)
    columns.update(result.columns)
    tokens_frame(columns).write_parquet(folder / "tokens.parquet")
    write_json(folder / "summary.json", {"embscope": provenance(parameters), "model": model_record(model),
                                         "geometry": result.summary, "knn": result.summary.get("knn")})


def scan(
    model: Annotated[str, typer.Option("--model", "-m", help="alias, HF hub id, model folder or .gguf file")],
    out: Out = None,
    k: Annotated[int, typer.Option("--k", help="neighbours per row in the kNN graph")] = 10,
    unused_ids: Annotated[Optional[str], typer.Option("--unused-ids", help="comma-separated rows known to be unused (default: found automatically)")] = None,
    threshold: Annotated[float, typer.Option("--threshold", help="flag rows whose undertrained_score is at least this")] = DEFAULT_THRESHOLD,
    device: Device = "auto",
    no_layout: Annotated[bool, typer.Option("--no-layout", help="skip the 2-D UMAP map")] = False,
    force: Force = False,
) -> None:
    """Find under-trained and isolated token rows; write tokens.parquet and summary.json."""
    from embscope.geometry.scan import format_scan_summary, scan as run_scan
    from embscope.load import load_model, pick_device
    from embscope.output import atomic_folder, default_out
    from embscope.resolve import resolve

    ids = parse_ids(unused_ids)
    pick_device(device)
    resolved = resolve(model)
    target = out or default_out(resolved.name, "scan")
    with atomic_folder(target, force=force) as tmp:  # claimed first: a bad --out fails at once
        m = load_model(resolved, device=device)
        result = run_scan(m, k=k, unused_ids=ids, threshold=threshold, layout=not no_layout)
        write_scan(tmp, m, result, parameters={"k": k, "unused_ids": ids, "threshold": threshold,
                                               "layout": not no_layout, "device": device})
    from rich.console import Console

    Console().print(format_scan_summary(result.summary))
    typer.echo(f"wrote {target}/tokens.parquet and summary.json")


def register(app: typer.Typer) -> None:
    app.command("scan")(scan)
