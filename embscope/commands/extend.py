"""``embscope extend``: which domain terms to add to the vocabulary, what that saves, and — with
``--apply`` — the extended model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from embscope.commands.options import Force, Out


def extend(
    model: Annotated[str, typer.Option("--model", "-m", help="alias, HF hub id, model folder or .gguf file")],
    corpus: Annotated[Path, typer.Option("--corpus", "-c", help="domain corpus: folder or .txt/.jsonl/.parquet file")],
    top: Annotated[int, typer.Option(help="terms to add (best estimated savings first)")] = 200,
    init: Annotated[list[str], typer.Option(
        "--init", help="initialisation to diagnose: NAME or INPUT/OUTPUT (untied models); repeat or "
                       "comma-separate; names: mean, hewitt, subword-mean, weighted-subword, knn-pull")] = ["subword-mean"],
    max_ngram: Annotated[int, typer.Option("--max-ngram", help="longest multi-word term, in words")] = 1,
    min_freq: Annotated[int, typer.Option("--min-freq", help="least occurrences of a term")] = 5,
    out: Out = None,
    apply_to: Annotated[Optional[Path], typer.Option(
        "--apply", help="also write the extended model here (full transformers folder when the whole "
                        "model loads, else the new rows + tokenizer + README)")] = None,
    apply_init: Annotated[str, typer.Option(
        "--apply-init", help="strategy for --apply: NAME or INPUT/OUTPUT")] = "subword-mean",
    rows_only: Annotated[bool, typer.Option("--rows-only", help="with --apply: write only the new rows")] = False,
    tokens: Annotated[Optional[Path], typer.Option(
        help="tokens.parquet with a 'flagged' column: under-trained rows left out of every mean")] = None,
    no_diagnostics: Annotated[bool, typer.Option("--no-diagnostics", help="skip KL / new-token mass")] = False,
    force: Force = False,
) -> None:
    """Suggest vocabulary extensions from a domain corpus; write candidates.parquet + summary.json."""
    import polars as pl

    from embscope import load_model
    from embscope.output import atomic_folder, default_out, provenance, write_json
    from embscope.progress import Steps
    from embscope.extend import apply, suggest

    specs = [s.strip() for item in init for s in item.split(",") if s.strip()]
    steps = Steps()
    with steps.step("load", f"loading {model}"):
        m = load_model(model, device="cpu")
    table = pl.read_parquet(tokens) if tokens else None
    result = suggest(m, corpus, top=top, max_ngram=max_ngram, min_freq=min_freq, init=specs,
                     tokens=table, diagnostics=not no_diagnostics, steps=steps)
    folder = Path(out) if out else default_out(m.name, "extend")
    params = {"model": model, "corpus": str(corpus), "top": top, "init": specs, "max_ngram": max_ngram,
              "min_freq": min_freq, "tokens": str(tokens) if tokens else None}
    manifest = None
    if apply_to is not None:
        with steps.step("apply", f"writing the extended model to {apply_to}"):
            manifest = apply(m, result, apply_to, init=apply_init,
                             mode="rows" if rows_only else "auto", tokens=table, force=force)
    with atomic_folder(folder, force=force) as tmp:
        result.table.write_parquet(tmp / "candidates.parquet")
        write_json(tmp / "summary.json", {**result.summary, "timings": steps.timings,
                                          "applied": None if manifest is None else
                                          {"out": str(apply_to), "format": manifest["format"],
                                           "init": manifest["init"], "vocab_size": manifest["vocab_size"]},
                                          "embscope": provenance(params)})
    _print(result.summary, folder, apply_to, manifest)


def _print(summary: dict, folder: Path, apply_to: Path | None, manifest: dict | None) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console()
    s = summary
    con.print(f"{s['top_n']} terms (+{s['space_twins_added']} spaced twins) save "
              f"[bold]{s['tokens_saved']:,}[/] of {s['corpus_tokens']:,} corpus tokens "
              f"({100 * s['saved_fraction']:.1f} %, measured; estimate {s['estimated_savings']:,})")
    if s["strategies"]:
        t = Table("init", "KL nats (mean / max)", "new-token mass (mean / max)", "norm pct (median)",
                  "nearest cos (median)", title=s.get("kl_note") or "")
        for name, d in s["strategies"].items():
            kl = "—" if d["kl"] is None else f"{d['kl']:.2e} / {d['kl_max']:.2e}"
            mass = "—" if d["new_token_mass"] is None else f"{d['new_token_mass']:.2e} / {d['new_token_mass_max']:.2e}"
            t.add_row(name, kl, mass, f"{d['norm_percentile_median']:.1f}", f"{d['nearest_cosine_median']:.3f}")
        con.print(t)
    con.print(f"candidates: {folder / 'candidates.parquet'}")
    if manifest is not None:
        con.print(f"extended model ({manifest['format']}, {manifest['init']}): {apply_to}")


def register(app: typer.Typer) -> None:
    app.command("extend")(extend)
