"""``embscope fertility`` and ``embscope compare``: what each language costs in tokens.

Both make one library call (:func:`embscope.api.compare`) and print a table of languages sorted by
the first tokenizer's parity (the reference, the cheapest, first).
"""

from __future__ import annotations

from typing import Annotated

import typer

from embscope.commands.options import (CORPUS, Corpus, Force, Json, Out, Quiet, Verbose, print_json,
                                       print_warnings, run_options, setup)


def _run(specs: list[str], corpus, out, force, as_json, quiet, verbose, options) -> None:
    from embscope.api import compare as run_compare

    setup(quiet, verbose)
    res = run_compare(specs, corpus, out=out, force=force, options=options)
    print_warnings(res.warnings)
    if as_json:
        print_json({"folder": str(res.folder), "summary": res.summary})
        return
    import polars as pl

    from embscope.commands.tables import languages_table

    table = pl.read_parquet(res.folder / "languages.parquet")
    languages_table(table, res.summary.sections.languages.tokenizers, options.reference, res.summary)
    typer.echo(f"wrote {res.folder}/languages.parquet, summary.json, index.html")


@run_options("reference", *CORPUS)
def fertility(
    tokenizer: Annotated[str, typer.Option("--tokenizer", "-t", help="tokenizer spec: gpt2, cl100k_base, o200k_base, qwen2, llama3, a tokenizer file or a model spec")],
    corpus: Corpus = "udhr",
    out: Out = None,
    force: Force = False,
    as_json: Json = False,
    quiet: Quiet = False,
    verbose: Verbose = False,
    options=None,
) -> None:
    """Fertility, parity, continued-word rate and more per language, for one tokenizer."""
    _run([tokenizer], corpus, out, force, as_json, quiet, verbose, options)


@run_options("reference", *CORPUS)
def compare(
    tokenizer: Annotated[list[str], typer.Option("--tokenizer", "-t", help="tokenizer spec; repeat for each tokenizer to compare")],
    corpus: Corpus = "udhr",
    out: Out = None,
    force: Force = False,
    as_json: Json = False,
    quiet: Quiet = False,
    verbose: Verbose = False,
    options=None,
) -> None:
    """Side-by-side parity and fertility of several tokenizers on the same (parallel) corpus."""
    _run(list(tokenizer), corpus, out, force, as_json, quiet, verbose, options)


def register(app: typer.Typer) -> None:
    app.command("fertility")(fertility)
    app.command("compare")(compare)
