"""``embscope scan --model M``: under-trained and isolated token rows (tokens.parquet + summary)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from embscope.api import scan as run_scan
from embscope.commands.options import LOAD, SCAN, ModelOpt, print_json, print_repair, print_warnings, run_command

if TYPE_CHECKING:  # pragma: no cover
    from embscope.geometry.records import GeometryRecord


@run_command(run_scan, *LOAD, *SCAN, "limit")
def scan(
    model: ModelOpt,
    corpus: Annotated[Optional[list[Path]], typer.Option("--corpus", "-c", help="your data (folder/file or shipped name); repeat for several: lists the flagged rows it produces")] = None,
    options=None,
    common=None,
) -> None:
    """Find under-trained and isolated token rows; write tokens.parquet, summary.json, index.html."""
    res = run_scan(model, corpora=corpus or [], out=common.out, force=common.force, **options)
    print_warnings(res.warnings)
    if common.as_json:
        print_json({"folder": str(res.folder), "summary": res.summary})
        return
    from embscope.commands.console import console

    from embscope.commands.bottom import print_bottom_line

    console().print(scan_tables(res.summary.sections.tokens.geometry))
    typer.echo(f"wrote {res.folder}/tokens.parquet, summary.json, index.html")
    print_repair(res)
    print_bottom_line(res.summary)


def scan_tables(g: "GeometryRecord"):
    """The scan's headline figures, its most under-trained normal tokens and its per-script table,
    as one rich renderable."""
    from rich.console import Group
    from rich.markup import escape
    from rich.table import Table

    head = Table(title="Token rows", show_header=False)
    head.add_row("rows", str(g.rows))
    for c, v in g.categories.items():
        head.add_row(f"  {c}", str(v))
    f = g.flagged
    head.add_row("flagged normal", f"{f.normal} ({100 * f.normal_share:.2f} %)")
    for r, v in f.by_reason.items():
        head.add_row(f"  {r} fired", str(v))
    head.add_row("isolated normal", str(f.isolated))
    head.add_row("zero rows", str(f.zero_rows))
    head.add_row("threshold", str(g.threshold))
    head.add_row("reference", f"{g.reference.size} rows ({g.reference.source})")
    kn = g.knn
    # a certified graph's recall@k is its base graph's on the sample rows (what its unsearched rows
    # look like), not the recall of anything a decision reads: shown as such
    recall = f"base recall@k={kn.recall_at_k:.3f}" if kn.method == "certified" else f"recall@k={kn.recall_at_k:.3f}"
    head.add_row("kNN", f"{kn.method} k={kn.k} {recall} {kn.seconds:.1f} s{' (cached)' if kn.cached else ''}")
    cert = kn.certificate
    if kn.method == "certified" and cert is not None:
        unproven = [name for name, ok in cert.lists.items() if not ok]
        head.add_row("  searched exactly", f"{cert.exact_rows:,} rows: every decision as exact "
                     f"search's (confidence {cert.confidence})"
                     + (f"; lists drawn from them: {', '.join(unproven)}" if unproven else ""))
    ver = g.verification
    if ver is not None:
        head.add_row("verified", ver.note if ver.n_checked is None else
                     f"{ver.n_verified_undertrained}/{ver.n_checked} (precision {ver.precision}); "
                     f"controls failed {ver.controls_failed}/{ver.controls_checked}")
    if g.usage is not None:
        head.add_row("flagged rows your data uses", f"{g.usage.flagged_used} ({g.usage.occurrences} occurrences)")
    top = Table(title=f"Most under-trained normal tokens (top {len(g.top_undertrained)})")
    for col in ("id", "token", "score", "why"):
        top.add_column(col, justify="right" if col in ("id", "score") else "left")
    for r in g.top_undertrained:
        top.add_row(str(r.id), escape(repr(r.token)), f"{r.score:.2f}", r.reason or "")
    scr = Table(title="Per script (normal tokens)")
    for col in ("script", "rows", "flagged", "share", "mean norm"):
        scr.add_column(col, justify="left" if col == "script" else "right")
    for name, v in list(g.per_script.items())[:15]:
        scr.add_row(name, str(v.rows), str(v.flagged), f"{100 * v.flagged_share:.2f} %", f"{v.mean_norm:.3f}")
    return Group(head, top, scr)


def register(app: typer.Typer) -> None:
    app.command("scan")(scan)
