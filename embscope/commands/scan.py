"""``embscope scan --model M``: under-trained and isolated token rows (tokens.parquet + summary)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from embscope.commands.options import (THRESHOLD, Repair, RepairInit, Verify, Device, DeviceOpt, Force, Json, K, ModelOpt, NoMap, Out, Quiet, Threshold,
                                       Download, DownloadOpt, TrustPickle, UnusedIds, Verbose, parse_ids,
                                       print_json, print_warnings, setup)


def scan(
    model: ModelOpt,
    corpus: Annotated[Optional[list[Path]], typer.Option("--corpus", "-c", help="your data (folder/file or shipped name); repeat for several: lists the flagged rows it produces")] = None,
    out: Out = None,
    force: Force = False,
    device: DeviceOpt = Device.auto,
    k: K = 10,
    unused_ids: UnusedIds = None,
    threshold: Threshold = THRESHOLD,
    verify: Verify = 0,
    repair: Repair = None,
    repair_init: RepairInit = "subword-mean",
    no_map: NoMap = False,
    trust_pickle: TrustPickle = False,
    download: DownloadOpt = Download.ranges,
    as_json: Json = False,
    quiet: Quiet = False,
    verbose: Verbose = False,
) -> None:
    """Find under-trained and isolated token rows; write tokens.parquet, summary.json, index.html."""
    from embscope.api import scan as run_scan

    from embscope.models.resolve import TRUST_PICKLE_HINT

    setup(quiet, verbose)
    res = run_scan(model, corpora=corpus or [], out=out, force=force, k=k, unused_ids=parse_ids(unused_ids),
                   threshold=threshold, verify=verify, repair_to=repair, repair_init=repair_init, layout=not no_map, device=device.value,
                   trust_pickle=trust_pickle, pickle_hint=TRUST_PICKLE_HINT, download=download.value)
    print_warnings(res.warnings)
    if as_json:
        print_json({"folder": str(res.folder), "summary": res.summary})
        return
    from rich.console import Console

    from embscope.geometry.scan import format_scan_summary

    Console().print(format_scan_summary(res.summary.sections.tokens.geometry.to_dict()))
    typer.echo(f"wrote {res.folder}/tokens.parquet, summary.json, index.html")
    if res.repair is not None:
        typer.echo(f"repaired model ({res.repair['format']}, {res.repair['n_repaired']} rows): {repair}")


def register(app: typer.Typer) -> None:
    app.command("scan")(scan)
