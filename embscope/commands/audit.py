"""``embscope audit``: the whole review, as an HTML report plus Parquet tables."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from embscope.commands.options import (EngineKind, EngineOpt, LangField, RayAddress, TextField, Workers, THRESHOLD, Repair, RepairInit, Verify, Device, DeviceOpt, Force, Json, K, NoMap, Out, Quiet, Reference, SampleBytes,
                                       Threshold, Download, DownloadOpt, TrustPickle, UnusedIds, Verbose,
                                       parse_ids, print_json, print_warnings, setup)


def audit(
    model: Annotated[str, typer.Option("--model", "-m", help="alias (`embscope models`), HF hub id, model folder or .gguf file")] = "smollm2-135m",
    corpus: Annotated[Optional[list[Path]], typer.Option("--corpus", "-c", help="domain corpus (folder/file or shipped name: medical); repeat for several")] = None,
    languages: Annotated[str, typer.Option("--languages", help="multilingual corpus for per-language costs: udhr (shipped), none, or a path")] = "udhr",
    out: Out = None,
    force: Force = False,
    device: DeviceOpt = Device.auto,
    k: K = 10,
    no_scan: Annotated[bool, typer.Option("--no-scan", help="skip indicators and the kNN graph")] = False,
    no_map: NoMap = False,
    unused_ids: UnusedIds = None,
    threshold: Threshold = THRESHOLD,
    verify: Verify = 0,
    repair: Repair = None,
    repair_init: RepairInit = "subword-mean",
    reference: Reference = "eng",
    sample_bytes: SampleBytes = None,
    engine: EngineOpt = EngineKind.local,
    workers: Workers = None,
    ray_address: RayAddress = None,
    text_field: TextField = "text",
    lang_field: LangField = "lang",
    top: Annotated[int, typer.Option("--top", min=1, help="vocabulary-extension candidates to add")] = 200,
    trust_pickle: TrustPickle = False,
    download: DownloadOpt = Download.ranges,
    as_json: Json = False,
    quiet: Quiet = False,
    verbose: Verbose = False,
) -> None:
    """Run the whole review and write an HTML report plus Parquet tables."""
    from embscope.api import audit as run_audit

    from embscope.models.resolve import TRUST_PICKLE_HINT

    setup(quiet, verbose)
    res = run_audit(model, corpora=corpus or [], languages=languages, out=out, force=force,
                    scan=not no_scan, k=k, layout=not no_map, unused_ids=parse_ids(unused_ids),
                    threshold=threshold, verify=verify, repair_to=repair, repair_init=repair_init,
                    reference=reference, sample_bytes=sample_bytes,
                    engine=engine.value, workers=workers, ray_address=ray_address, text_field=text_field,
                    lang_field=lang_field,
                    top=top, trust_pickle=trust_pickle, pickle_hint=TRUST_PICKLE_HINT, download=download.value,
                    device=device.value)
    print_warnings(res.warnings)
    if as_json:
        print_json({"folder": str(res.folder), "summary": res.summary})
    else:
        typer.echo(f"report: {res.folder / 'index.html'}")
        if res.repair is not None:
            typer.echo(f"repaired model ({res.repair['format']}, {res.repair['n_repaired']} rows): {repair}")


def register(app: typer.Typer) -> None:
    app.command("audit")(audit)
