"""``embscope scan --model M``: under-trained and isolated token rows, written as tokens.parquet."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Optional

import typer

from embscope.commands.options import Device, Out, parse_ids
from embscope.errors import OutputError
from embscope.geometry.indicators import DEFAULT_THRESHOLD


def write_scan(out: Path, model, result) -> None:
    """Write ``tokens.parquet`` and ``summary.json`` into ``out`` atomically (temp dir + rename)."""
    import polars as pl

    n = model.n_rows
    strings = model.token_strings()
    vocab, n_tok = model.vocab, model.n_tokens
    token_bytes = [vocab.token_bytes(i) if vocab is not None and i < n_tok else None for i in range(n)]
    data = {"token_id": list(range(n)), "token": strings, "token_bytes": token_bytes,
            "category": list(model.categories)}
    for name, col in result.columns.items():
        data[name] = list(col) if not hasattr(col, "tolist") else col.tolist()
    frame = pl.DataFrame(data, strict=False)
    out = Path(out)
    if out.exists():
        raise OutputError(f"{out} already exists: choose another --out or remove it")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    except OSError as err:
        raise OutputError(f"cannot write into {out.parent}: {err.strerror}; pick a writable --out") from None
    try:
        frame.write_parquet(tmp / "tokens.parquet")
        summary = {"model": model.name, "spec": model.spec, **result.summary}
        (tmp / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def scan(
    model: Annotated[str, typer.Option("--model", "-m", help="alias, HF hub id, model folder or .gguf file")],
    out: Out = None,
    k: Annotated[int, typer.Option("--k", help="neighbours per row in the kNN graph")] = 10,
    unused_ids: Annotated[Optional[str], typer.Option("--unused-ids", help="comma-separated rows known to be unused (default: found automatically)")] = None,
    threshold: Annotated[float, typer.Option("--threshold", help="flag rows whose undertrained_score is at least this")] = DEFAULT_THRESHOLD,
    device: Device = "auto",
    no_layout: Annotated[bool, typer.Option("--no-layout", help="skip the 2-D UMAP map")] = False,
) -> None:
    """Find under-trained and isolated token rows; write tokens.parquet and summary.json."""
    import embscope
    from embscope.geometry.scan import format_scan_summary, scan as run_scan

    ids = parse_ids(unused_ids)
    m = embscope.load_model(model, device=device)
    result = run_scan(m, k=k, unused_ids=ids, threshold=threshold, layout=not no_layout)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    target = out or Path("reports") / f"{m.name}-scan-{stamp}"
    write_scan(target, m, result)
    from rich.console import Console

    Console().print(format_scan_summary(result.summary))
    typer.echo(f"wrote {target}/tokens.parquet and summary.json")


def register(app: typer.Typer) -> None:
    app.command("scan")(scan)
