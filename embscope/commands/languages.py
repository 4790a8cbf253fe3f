"""``embscope fertility`` and ``embscope compare``: what each language costs in tokens.

Both make one library call (:func:`embscope.api.compare`) and print a table of languages sorted by
the first tokenizer's parity (the reference, the cheapest, first).
"""

from __future__ import annotations

from typing import Annotated

import typer

from embscope.commands.options import (EngineKind, LimitOpt, EngineOpt, LangField, RayAddress, TextField, Workers, Corpus, Force, Json, Out, Quiet, Reference, SampleBytes, Verbose,
                                       print_json, print_warnings, setup)


def _run(specs: list[str], corpus, out, sample_bytes, reference, force, as_json, quiet, verbose, **engine) -> None:
    from embscope.api import compare as run_compare

    setup(quiet, verbose)
    res = run_compare(specs, corpus, out=out, force=force, sample_bytes=sample_bytes, reference=reference, **engine)
    print_warnings(res.warnings)
    if as_json:
        print_json({"folder": str(res.folder), "summary": res.summary})
        return
    import polars as pl

    from embscope.commands.tables import languages_table

    table = pl.read_parquet(res.folder / "languages.parquet")
    languages_table(table, res.summary.sections.languages.tokenizers, reference, res.summary)
    typer.echo(f"wrote {res.folder}/languages.parquet, summary.json, index.html")


def fertility(
    tokenizer: Annotated[str, typer.Option("--tokenizer", "-t", help="tokenizer spec: gpt2, cl100k_base, o200k_base, qwen2, llama3, a tokenizer file or a model spec")],
    corpus: Corpus = "udhr",
    out: Out = None,
    force: Force = False,
    sample_bytes: SampleBytes = None,
    reference: Reference = "eng",
    engine: EngineOpt = EngineKind.local,
    workers: Workers = None,
    ray_address: RayAddress = None,
    text_field: TextField = "text",
    lang_field: LangField = "lang",
    limit: LimitOpt = None,
    as_json: Json = False,
    quiet: Quiet = False,
    verbose: Verbose = False,
) -> None:
    """Fertility, parity, continued-word rate and more per language, for one tokenizer."""
    _run([tokenizer], corpus, out, sample_bytes, reference, force, as_json, quiet, verbose, engine=engine.value,
         workers=workers, ray_address=ray_address, text_field=text_field, lang_field=lang_field,
         limits=list(limit or []))


def compare(
    tokenizer: Annotated[list[str], typer.Option("--tokenizer", "-t", help="tokenizer spec; repeat for each tokenizer to compare")],
    corpus: Corpus = "udhr",
    out: Out = None,
    force: Force = False,
    sample_bytes: SampleBytes = None,
    reference: Reference = "eng",
    engine: EngineOpt = EngineKind.local,
    workers: Workers = None,
    ray_address: RayAddress = None,
    text_field: TextField = "text",
    lang_field: LangField = "lang",
    limit: LimitOpt = None,
    as_json: Json = False,
    quiet: Quiet = False,
    verbose: Verbose = False,
) -> None:
    """Side-by-side parity and fertility of several tokenizers on the same (parallel) corpus."""
    _run(list(tokenizer), corpus, out, sample_bytes, reference, force, as_json, quiet, verbose, engine=engine.value,
         workers=workers, ray_address=ray_address, text_field=text_field, lang_field=lang_field,
         limits=list(limit or []))


def register(app: typer.Typer) -> None:
    app.command("fertility")(fertility)
    app.command("compare")(compare)
