"""``models``: the registry of aliases, and ``audit``: the whole review."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from embscope.commands.options import Device, Force, Out, TrustPickle, parse_ids


def models() -> None:
    """List the model aliases (packaged demo models load offline; the others come from the HF cache)."""
    from rich.console import Console
    from rich.table import Table

    from embscope.registry import ALIASES

    table = Table("alias", "source", "rows × hidden", "tied", "RoPE θ", "description")
    for a in ALIASES.values():
        f = a.facts
        table.add_row(a.name, "package" if a.package else a.repo_id, f"{f.get('rows')} × {f.get('hidden')}",
                      str(f.get("tied")), f"{f['rope_theta']:g}" if "rope_theta" in f else "—", a.description)
    Console().print(table)


def audit(
    model: Annotated[str, typer.Option("--model", "-m", help="alias, HF hub id, model folder or .gguf file")] = "smollm2-135m",
    corpus: Annotated[Optional[list[Path]], typer.Option("--corpus", "-c", help="corpus folder/file; repeat for several")] = None,
    out: Out = None,
    device: Device = "auto",
    k: Annotated[int, typer.Option(help="nearest neighbours per token")] = 10,
    no_scan: Annotated[bool, typer.Option("--no-scan", help="skip indicators and the kNN graph")] = False,
    no_map: Annotated[bool, typer.Option("--no-map", help="skip the 2-D UMAP map")] = False,
    unused_ids: Annotated[Optional[str], typer.Option(help="comma-separated ids of known-unused tokens")] = None,
    threshold: Annotated[float, typer.Option(help="flag rows whose undertrained_score is at least this")] = 2.5,
    reference: Annotated[str, typer.Option(help="reference language for parity")] = "eng",
    sample_bytes: Annotated[Optional[int], typer.Option(help="cap corpus bytes per language")] = None,
    top: Annotated[int, typer.Option(help="vocabulary-extension candidates to keep")] = 200,
    trust_pickle: TrustPickle = False,
    force: Force = False,
) -> None:
    """Run the whole review and write an HTML report plus Parquet tables."""
    from embscope.audit import AuditOptions, audit as run_audit

    opts = AuditOptions(k=k, scan=not no_scan, layout=not no_map, unused_ids=parse_ids(unused_ids), threshold=threshold,
                        reference=reference, sample_bytes=sample_bytes, top=top, trust_pickle=trust_pickle,
                        device=device)
    folder = run_audit(model, corpora=corpus or [], out=out, options=opts, force=force, verbose=True)
    typer.echo(f"report: {folder / 'index.html'}")


def register(app: typer.Typer) -> None:
    app.command()(audit)
    app.command()(models)
