"""``embscope fertility`` and ``embscope compare``: what each language costs in tokens.

Both make one call to :func:`embscope.languages.fertility.measure`, print a table (languages sorted by the
first tokenizer's parity, so the cheapest — the reference — comes first) and write
``languages.parquet`` + ``summary.json`` into ``--out`` (atomically).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from embscope.commands.options import Force, Out

Corpus = Annotated[Path, typer.Option("--corpus", "-c", help="folder or .txt/.md/.jsonl/.parquet file (e.g. corpora/udhr)")]
SampleBytes = Annotated[Optional[int], typer.Option("--sample-bytes", help="read at most N bytes of text per language")]
Reference = Annotated[str, typer.Option("--reference", help="language that parity divides by")]


def _run(specs: list[str], corpus: Path, out: Path | None, sample_bytes: int | None,
         reference: str, force: bool) -> None:
    from embscope.languages.fertility import measure
    from embscope.output import atomic_folder, default_out, provenance, write_json
    from embscope.tokenizer.load import load_vocabulary

    vocabs = [load_vocabulary(s) for s in specs]
    result = measure(vocabs, corpus, reference=reference, sample_bytes=sample_bytes)
    out = out or default_out("-".join(v.name for v in vocabs), "languages")
    with atomic_folder(out, force=force) as tmp:
        result.table.write_parquet(tmp / "languages.parquet")
        write_json(tmp / "summary.json", {
            "embscope": provenance({"tokenizers": specs, "corpus": str(corpus),
                                    "sample_bytes": sample_bytes, "reference": reference}),
            **result.summary})
    _print(result, [v.name for v in vocabs], reference, out)


def _print(result, names: list[str], reference: str, out: Path) -> None:
    import polars as pl
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    t = result.table
    order = (t.filter(pl.col("tokenizer") == names[0])
             .sort(["parity", "fertility"], nulls_last=True)["language"].to_list())
    by = {(r["tokenizer"], r["language"]): r for r in t.iter_rows(named=True)}
    table = Table(title=Text(f"Tokens per language (parity: tokens / tokens of {reference!r} on the same "
                             "text; fertility: tokens per word)"), title_justify="left")
    table.add_column("language", no_wrap=True)
    table.add_column("script", no_wrap=True, max_width=10)
    for name in names:
        table.add_column(Text(f"{name}\nparity"), justify="right", no_wrap=True, min_width=len(name))
        table.add_column("\nfert.", justify="right", no_wrap=True, min_width=6)

    def fmt(x, spec):
        return "–" if x is None else format(x, spec)

    for lang in order:
        first = by[(names[0], lang)]
        seg = "*" if first["segmentation"] == "characters" else ""
        cells = [Text(lang + seg), first["script"]]  # lang comes from user files: no markup
        for name in names:
            r = by.get((name, lang), {})
            cells += [fmt(r.get("parity"), ".2f"), fmt(r.get("fertility"), ".2f")]
        table.add_row(*cells)
    console = Console()
    # never squeeze numbers into ellipses: widen past the terminal when needed (pipes get 80)
    console = Console(width=max(console.width, 30 + sum(max(len(n), 6) + 12 for n in names)))
    console.print(table)
    corpus = result.summary["corpus"]
    console.print("* one word per character (Han, Kana, Thai, Lao, Khmer, Myanmar), as tokka-bench "
                  "does: fertility there is tokens per character (rules: summary.json 'segmentation')")
    if not result.summary["reference_present"]:
        console.print(Text(f"reference language {reference!r} is not in the corpus: parity is empty; "
                           "pass --reference", style="yellow"))
    if corpus["skipped"]:
        console.print(Text(f"skipped: {corpus['skipped']}", style="yellow"))
    console.print(f"wrote {out}/languages.parquet, summary.json")


def fertility(
    tokenizer: str = typer.Option(..., "--tokenizer", "-t", help="tokenizer spec: gpt2, cl100k_base, o200k_base, qwen2, llama3, a tokenizer file or model"),
    corpus: Corpus = Path("corpora/udhr"),
    out: Out = None,
    sample_bytes: SampleBytes = None,
    reference: Reference = "eng",
    force: Force = False,
) -> None:
    """Fertility, parity, continued-word rate and more per language, for one tokenizer."""
    _run([tokenizer], corpus, out, sample_bytes, reference, force)


def compare(
    tokenizer: list[str] = typer.Option(..., "--tokenizer", "-t", help="tokenizer spec; repeat for each tokenizer to compare"),
    corpus: Corpus = Path("corpora/udhr"),
    out: Out = None,
    sample_bytes: SampleBytes = None,
    reference: Reference = "eng",
    force: Force = False,
) -> None:
    """Side-by-side parity and fertility of several tokenizers on the same (parallel) corpus."""
    _run(list(tokenizer), corpus, out, sample_bytes, reference, force)


def register(app: typer.Typer) -> None:
    app.command("fertility")(fertility)
    app.command("compare")(compare)
