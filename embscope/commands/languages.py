"""``embscope fertility`` and ``embscope compare``: what each language costs in tokens.

Each makes one library call (:func:`embscope.api.fertility`, :func:`embscope.api.compare`) and prints a table of languages sorted by
the first tokenizer's parity (the reference, the cheapest, first).
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from embscope.api import compare as run_compare
from embscope.api import fertility as run_fertility
from embscope.commands.options import CORPUS, LANGUAGE_STATS, Corpus, print_json, print_warnings, run_command


def _show(res, common) -> None:
    print_warnings(res.warnings)
    if common.as_json:
        print_json({"folder": str(res.folder), "summary": res.summary})
        return
    from embscope.commands.bottom import print_bottom_line
    from embscope.commands.tables import comparisons_table, languages_table

    record = res.summary.sections.languages
    languages_table(res.tables["languages"], record.tokenizers, record.reference, res.summary)
    _model_cost_lines(res.tables["languages"], record.reference)
    comparisons_table(res.tables.get("comparisons"), record.tokenizers)
    written = [s for s in ("languages", "tokenizers", "language_groups", "comparisons") if s in res.tables]
    typer.echo(f"wrote {res.folder}/{', '.join(s + '.parquet' for s in written)}, summary.json, index.html")
    print_bottom_line(res.summary)


def _model_cost_lines(table, reference: str) -> None:
    """One line per language the model scored: bits per byte ± its standard error, information parity."""
    if "bits_per_byte" not in table.columns:
        return
    rows = table.filter(table["bits_per_byte"].is_not_null()).sort("bits_per_byte")
    if rows.height == 0:
        return
    from embscope.report.escape import display_token

    typer.echo(f"The model's cost (bits per UTF-8 byte ± standard error over units; information parity: "
               f"bits of {reference!r} / bits of the language on the same units):")
    for r in rows.iter_rows(named=True):
        ip = "–" if r["information_parity"] is None else f"{r['information_parity']:.3f}"
        typer.echo(f"  {display_token(str(r['language'])):<12} {r['bits_per_byte']:.4f} ± {r['bits_per_byte_se']:.4f}"
                   f"   parity {ip}   ({r['model_units']} units)")


@run_command(run_fertility, "reference", *CORPUS, *LANGUAGE_STATS, "model_work", "device", "unit_field", "lang")
def fertility(
    tokenizer: Annotated[Optional[str], typer.Option("--tokenizer", "-t", help="tokenizer spec: gpt2, cl100k_base, o200k_base, qwen2, llama3, a tokenizer file or a model spec (default with --model: the model's own)")] = None,
    corpus: Corpus = "udhr",
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="also score a few languages' aligned text with this whole model: bits_per_byte, information_parity (its own tokenizer is measured first); alias, HF hub id, model folder or .gguf file")] = None,
    options=None,
    common=None,
) -> None:
    """Fertility, parity, continued-word rate and more per language, for one tokenizer; with --model,
    the model's bits per byte and information parity too."""
    _show(run_fertility(tokenizer, corpus, out=common.out, force=common.force, model=model, **options), common)


@run_command(run_compare, "reference", *CORPUS, *LANGUAGE_STATS, "unit_field", "lang")
def compare(
    tokenizer: Annotated[list[str], typer.Option("--tokenizer", "-t", help="tokenizer spec; repeat for each tokenizer to compare")],
    corpus: Corpus = "udhr",
    options=None,
    common=None,
) -> None:
    """Side-by-side parity and fertility of several tokenizers on the same (parallel) corpus."""
    _show(run_compare(list(tokenizer), corpus, out=common.out, force=common.force, **options), common)


def register(app: typer.Typer) -> None:
    app.command("fertility")(fertility)
    app.command("compare")(compare)
