"""``embscope fertility`` and ``embscope compare``: what each language costs in tokens.

Each makes one library call (:func:`embscope.api.fertility`, :func:`embscope.api.compare`) and prints a table of languages sorted by
the first tokenizer's parity (the reference, the cheapest, first).
"""

from __future__ import annotations

from typing import Annotated

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
    comparisons_table(res.tables.get("comparisons"), record.tokenizers)
    written = [s for s in ("languages", "tokenizers", "language_groups", "comparisons") if s in res.tables]
    typer.echo(f"wrote {res.folder}/{', '.join(s + '.parquet' for s in written)}, summary.json, index.html")
    print_bottom_line(res.summary)


@run_command(run_fertility, "reference", *CORPUS, *LANGUAGE_STATS, "unit_field", "lang")
def fertility(
    tokenizer: Annotated[str, typer.Option("--tokenizer", "-t", help="tokenizer spec: gpt2, cl100k_base, o200k_base, qwen2, llama3, a tokenizer file or a model spec")],
    corpus: Corpus = "udhr",
    options=None,
    common=None,
) -> None:
    """Fertility, parity, continued-word rate and more per language, for one tokenizer."""
    _show(run_fertility(tokenizer, corpus, out=common.out, force=common.force, **options), common)


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
