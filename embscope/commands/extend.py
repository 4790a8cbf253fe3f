"""``embscope extend``: which domain terms to add to the vocabulary, what that saves, and — with
``--apply`` — the extended model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from embscope.commands.options import (Corpus, Device, DeviceOpt, EngineKind, EngineOpt, Force, Json,
                                       LangField, ModelOpt, Out, Quiet, RayAddress, SampleBytes, TextField,
                                       Verbose, Workers, print_json, print_warnings, setup)


def extend(
    model: ModelOpt,
    corpus: Corpus,
    top: Annotated[int, typer.Option("--top", min=1, help="terms to add (best estimated savings first)")] = 200,
    init: Annotated[list[str], typer.Option(
        "--init", help="initialisation to diagnose: auto (every strategy, and recommend one), NAME or "
                       "INPUT/OUTPUT (untied models); repeat or comma-separate; names: mean, hewitt, "
                       "subword-mean, weighted-subword, knn-pull, subword-mean-norm, omp, distil")] = ["auto"],
    max_ngram: Annotated[int, typer.Option("--max-ngram", min=1, help="longest multi-word term, in words")] = 1,
    min_freq: Annotated[int, typer.Option("--min-freq", min=1, help="least occurrences of a term")] = 5,
    out: Out = None,
    force: Force = False,
    apply_to: Annotated[Optional[Path], typer.Option(
        "--apply", help="also write the extended model here (full transformers folder when the whole "
                        "model loads, else the new rows + tokenizer + README)")] = None,
    apply_init: Annotated[str, typer.Option(
        "--apply-init", help="strategy for --apply: auto (the recommended one), NAME or INPUT/OUTPUT")] = "auto",
    rows_only: Annotated[bool, typer.Option("--rows-only", help="with --apply: write only the new rows")] = False,
    tokens: Annotated[Optional[Path], typer.Option(
        "--tokens", help="tokens.parquet with a 'flagged' column: under-trained rows left out of every mean")] = None,
    no_diagnostics: Annotated[bool, typer.Option("--no-diagnostics", help="skip the KL / new-token-mass check")] = False,
    sample_bytes: SampleBytes = None,
    engine: EngineOpt = EngineKind.local,
    workers: Workers = None,
    ray_address: RayAddress = None,
    text_field: TextField = "text",
    lang_field: LangField = "lang",
    device: DeviceOpt = Device.cpu,
    as_json: Json = False,
    quiet: Quiet = False,
    verbose: Verbose = False,
) -> None:
    """Suggest vocabulary extensions from a domain corpus; write candidates.parquet + summary.json."""
    from embscope.api import extend as run_extend

    setup(quiet, verbose)
    specs = [s.strip() for item in init for s in item.split(",") if s.strip()]
    res, manifest = run_extend(model, corpus, out=out, force=force, apply_to=apply_to, apply_init=apply_init,
                               rows_only=rows_only, tokens=tokens, top=top, init=specs, max_ngram=max_ngram,
                               min_freq=min_freq, diagnostics=not no_diagnostics, device=device.value,
                               sample_bytes=sample_bytes, engine=engine.value, workers=workers,
                               ray_address=ray_address, text_field=text_field, lang_field=lang_field)
    print_warnings(res.warnings)
    if as_json:
        print_json({"folder": str(res.folder), "summary": res.summary, "applied": manifest})
        return
    from embscope.commands.tables import extension_table

    extension_table(res, apply_to, manifest)


def register(app: typer.Typer) -> None:
    app.command("extend")(extend)
