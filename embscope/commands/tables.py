"""Terminal tables for command results (printing only; the numbers come from the output folder)."""

from __future__ import annotations

from typing import Any

from embscope.text.numbers import plain


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
                             "text, with its bootstrap interval; fertility: tokens per word unit)"), title_justify="left")
    table.add_column("language", no_wrap=True, max_width=26, overflow="ellipsis")
    table.add_column("script", no_wrap=True, max_width=10)
    for name in names:
        table.add_column(Text(f"{name}\nparity"), justify="right", no_wrap=True, min_width=len(name))
        table.add_column("\nfert.", justify="right", no_wrap=True, min_width=6)

    def fmt(x, spec):
        return "–" if x is None else format(x, spec)

    for lang in order:
        first = by[(names[0], lang)]
        seg = "*" if first.get("unit") not in (None, "word") else ""
        name = f" {first['language_name']}" if first.get("language_name") else ""
        # untrusted text: no markup, and control characters (ESC, OSC) shown escaped, never sent
        cells = [Text(display_token(lang) + seg + display_token(name)), Text(display_token(str(first["script"])))]
        for name in names:
            r = by.get((name, lang), {})
            ci = "" if r.get("parity_lo") is None or r.get("parity_hi") is None else \
                f" {r['parity_lo']:.2f}–{r['parity_hi']:.2f}"
            cells += [fmt(r.get("parity"), ".2f") + ci, fmt(r.get("fertility"), ".2f")]
        table.add_row(*cells)
    console = Console()
    # never squeeze numbers into ellipses: widen past the terminal when needed (pipes get 80)
    console = Console(width=max(console.width, 44 + sum(max(len(n), 16) + 12 for n in names)))
    console.print(table)
    console.print("* fertility counts characters, clusters or syllables there, not words (scripts written "
                  "without spaces, Tibetan): not comparable with the others' (summary.json → sections.languages "
                  "→ segmentation)")
    lang_rec = summary.sections.languages
    for path, s in lang_rec.corpora.items():
        skipped = s.corpus.skipped
        if skipped:
            console.print(Text(f"skipped in {path}: {skipped}", style="yellow"))


def comparisons_table(t, names: list[str]) -> None:
    """Per language, for the first tokenizer against each other one: the ratio of their tokens on the
    same units, its paired interval, and which one is surely cheaper (``comparisons.parquet``)."""
    import polars as pl
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from embscope.report.escape import display_token

    if t is None or t.height == 0 or len(names) < 2:
        return
    pairs = [(names[0], b) for b in names[1:]]
    by = {(r["language"], r["tokenizer_a"], r["tokenizer_b"]): r for r in t.iter_rows(named=True)}
    table = Table(title=Text(f"Which is cheaper (ratio: tokens of B / tokens of {names[0]} on the same units, "
                             "with its paired bootstrap interval)"), title_justify="left")
    table.add_column("language", no_wrap=True)
    for a, b in pairs:
        table.add_column(Text(f"B = {b}"), no_wrap=True)
    for lang in sorted(t.filter(pl.col("tokenizer_a") == names[0])["language"].unique().to_list()):
        cells = [Text(display_token(lang))]
        for a, b in pairs:
            r = by.get((lang, a, b))
            if r is None or r["ratio"] is None:
                cells.append(Text("–"))
                continue
            ci = "" if r["ratio_lo"] is None else f" ({r['ratio_lo']:.2f}–{r['ratio_hi']:.2f})"
            verdict = r["verdict"] or ""
            style = "green" if verdict == f"{b} cheaper" else "red" if verdict == f"{a} cheaper" else "dim"
            cells.append(Text(f"{r['ratio']:.2f}{ci} ", style="") + Text(display_token(verdict), style=style))
        table.add_row(*cells)
    console = Console()
    console = Console(width=max(console.width, 12 + sum(len(b) + 40 for _, b in pairs)))
    console.print(table)


def extension_table(res: Any) -> None:
    """Savings headline and one row per initialisation strategy, best score first."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    con = Console()
    s = res.summary.sections.extension
    if s is None:
        con.print(Text(f"no candidates: {res.summary.skipped.get('extension')}", style="yellow"))
        return
    extra = "".join([f" +{s.intermediates} intermediate tokens" if s.intermediates else "",
                     f" +{s.space_twins_added} spaced twins" if s.space_twins_added else ""])
    what = f"{s.top_n} terms{extra}" if getattr(s, "method", "terms") != "merges" else f"{s.tokens_added} learned merges"
    con.print(f"{what}, written as {s.form}, save [bold]{s.tokens_saved:,}[/] of "
              f"{s.corpus_tokens:,} corpus tokens ({100 * s.saved_fraction:.1f} %, measured with the written "
              f"tokenizer; estimate {s.estimated_savings:,})")
    check = s.tokenization_check.corpus
    con.print(Text(f"{check.cut:,} of {check.new_tokens:,} new-token occurrences start or end "
                   f"inside an old token", style="yellow" if check.cut else ""))
    if s.words_split:
        con.print(Text(f"the pre-tokenizer cuts {s.words_split:,} of {s.corpus_words:,} corpus words "
                       f"({100 * s.words_split_share:.1f} %) into several pre-tokens: no merge crosses that cut, so "
                       "such words are added only with --as added", style="yellow"))
    if s.terms_skipped:
        con.print(Text(f"{len(s.terms_skipped)} terms not added (summary.json → terms_skipped)", style="yellow"))
    if s.strategies:
        t = Table("init", "score b/B", "Δ corpus ± SE", "Δ general", "reading", "fidelity KL (term / after)",
                  "top-1", "KL old text (mean / max)", "mass max", title=Text(s.kl_note or ""))

        def num(v, f):
            return "—" if v is None else format(v, f)

        for name, d in s.strategies.items():
            mark = " *" if name == s.recommended else ""
            corpus = ("—" if d.bits_per_byte_change is None else
                      f"{d.bits_per_byte_change:+.4f} ± {num(d.bits_per_byte_change_se, '.4f')}"
                      f" ({num(d.score_bytes, ',')} B)")
            fid = "—" if d.fidelity_kl is None else f"{d.fidelity_kl:.3f} / {num(d.fidelity_kl_after, '.3f')}"
            kl = "—" if d.kl is None else f"{plain(d.kl)} / {'—' if d.kl_max is None else plain(d.kl_max)}"
            t.add_row(Text(name + mark), num(d.score, "+.4f"), corpus, num(d.general_bits_per_byte_change, "+.5f"),
                      num(d.score_reading, ".4f"), fid, num(d.fidelity_top1, ".0%"), kl,
                      "—" if d.new_token_mass_max is None else plain(d.new_token_mass_max))
        con.print(t)
        base = s.bits_per_byte_original
        if base is not None:
            con.print(Text(f"original model: {base.bits_per_byte} ± {base.bits_per_byte_se} bits/byte on "
                           f"{base.bytes:,} bytes of {base.source or 'held-out corpus text'}"))
        gen = s.general_bits_per_byte_original
        if gen is not None:
            con.print(Text(f"original model: {gen.bits_per_byte} ± {gen.bits_per_byte_se} bits/byte on "
                           f"{gen.bytes:,} bytes of general text, {gen.source or ''}"))
        if getattr(s, "recommended", None):
            con.print(Text(f"* recommended: {s.recommended_why}"))
        if s.general_note:
            con.print(Text(s.general_note, style="yellow"))
    con.print(Text(f"candidates: {res.folder / 'candidates.parquet'}"))
    applied = res.summary.sections.apply
    if applied is not None:
        con.print(Text(f"extended model ({applied.format}, {applied.init}): {applied.folder}"))