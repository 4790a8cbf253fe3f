"""Terminal tables for command results (printing only; the numbers come from the output folder)."""

from __future__ import annotations

from typing import Any


def languages_table(t, names: list[str], reference: str, summary: Any) -> None:
    """Languages sorted by the first tokenizer's parity, one parity/fertility column pair per tokenizer."""
    import polars as pl
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from embscope.report.escape import display_token

    order = (t.filter(pl.col("tokenizer") == names[0])
             .sort(["parity", "fertility"], nulls_last=True)["language"].to_list())
    by = {(r["tokenizer"], r["language"]): r for r in t.iter_rows(named=True)}
    table = Table(title=Text(f"Tokens per language (parity: tokens / tokens of {reference!r} on the same "
                             "text; fertility: tokens per word unit)"), title_justify="left")
    table.add_column("language", no_wrap=True)
    table.add_column("script", no_wrap=True, max_width=10)
    for name in names:
        table.add_column(Text(f"{name}\nparity"), justify="right", no_wrap=True, min_width=len(name))
        table.add_column("\nfert.", justify="right", no_wrap=True, min_width=6)

    def fmt(x, spec):
        return "–" if x is None else format(x, spec)

    for lang in order:
        first = by[(names[0], lang)]
        seg = "*" if first.get("segmentation") == "characters" else ""
        # untrusted text: no markup, and control characters (ESC, OSC) shown escaped, never sent
        cells = [Text(display_token(lang) + seg), Text(display_token(str(first["script"])))]
        for name in names:
            r = by.get((name, lang), {})
            cells += [fmt(r.get("parity"), ".2f"), fmt(r.get("fertility"), ".2f")]
        table.add_row(*cells)
    console = Console()
    # never squeeze numbers into ellipses: widen past the terminal when needed (pipes get 80)
    console = Console(width=max(console.width, 30 + sum(max(len(n), 6) + 12 for n in names)))
    console.print(table)
    console.print("* word units are characters for scripts written without spaces (see summary.json "
                  "→ sections.languages → segmentation)")
    lang_rec = summary.sections.languages
    for path, s in lang_rec.corpora.items():
        skipped = s.corpus.skipped
        if skipped:
            console.print(Text(f"skipped in {path}: {skipped}", style="yellow"))


def extension_table(res: Any, apply_to, manifest: dict | None) -> None:
    """Savings headline and one row per initialisation strategy."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    con = Console()
    s = res.summary.sections.extension
    if s is None:
        con.print(Text(f"no candidates: {res.summary.skipped.get('extension')}", style="yellow"))
        return
    con.print(f"{s.top_n} terms (+{s.space_twins_added} spaced twins) save [bold]{s.tokens_saved:,}[/] of "
              f"{s.corpus_tokens:,} corpus tokens ({100 * s.saved_fraction:.1f} %, measured; estimate "
              f"{s.estimated_savings:,})")
    if s.strategies:
        t = Table("init", "fidelity KL (mean / p90)", "top-1", "bits/byte (Δ)", "KL old text (mean / max)",
                  "new-token mass (max)", "norm pct", title=Text(s.kl_note or ""))

        def num(v, f):
            return "—" if v is None else format(v, f)

        for name, d in s.strategies.items():
            mark = " *" if name == getattr(s, "recommended", None) else ""
            fid = ("—" if d.get("fidelity_kl") is None
                   else f"{d['fidelity_kl']:.3f} / {num(d.get('fidelity_kl_p90'), '.3f')}")
            bpb = ("—" if d.get("bits_per_byte") is None
                   else f"{d['bits_per_byte']:.4f} ({d['bits_per_byte_change']:+.4f})")
            kl = "—" if d.get("kl") is None else f"{d['kl']:.2e} / {d['kl_max']:.2e}"
            t.add_row(Text(name + mark), fid, num(d.get("fidelity_top1"), ".0%"), bpb, kl,
                      num(d.get("new_token_mass_max"), ".2e"), f"{d['norm_percentile_median']:.1f}")
        con.print(t)
        if getattr(s, "recommended", None):
            con.print(Text(f"* recommended: {s.recommended_why}"))
    con.print(Text(f"candidates: {res.folder / 'candidates.parquet'}"))
    if manifest is not None:
        con.print(Text(f"extended model ({manifest['format']}, {manifest['init']}): {apply_to}"))
