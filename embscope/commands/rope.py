"""``embscope rope --model M``: RoPE reach, KV-cache budget and embedding share from the config."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from embscope.commands.options import Json, ModelOpt, print_json

if TYPE_CHECKING:  # pragma: no cover
    from embscope.context.summary import ContextSummary


def rope(model: ModelOpt, as_json: Json = False) -> None:
    """RoPE scaling and extension band, KV-cache bytes per token and per context, embedding share."""
    from embscope.api import rope as context_of

    summary = context_of(model)
    if as_json:
        print_json({"model": model, **summary.to_dict()})
        return
    from embscope.commands.console import console

    console().print(format_summary(summary))


def _gib(n: int) -> str:
    return f"{n / 2**30:,.2f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"


def _count(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.0f} M"


def format_summary(summary: "ContextSummary"):
    """A rich renderable: position/context facts, attention shape, embeddings, KV table, notes."""
    from rich.console import Group
    from rich.table import Table

    s = summary
    facts = Table(title="Positions and context", show_header=False, box=None)
    facts.add_column(style="bold")
    facts.add_column()
    r = s.rope
    if r is not None:
        facts.add_row("RoPE", f"{r.rope_type}, theta {r.theta:g}, factor {r.factor:g}, rotary dim {r.rotary_dim}")
        if r.pairs_in_trained_range is not None:
            facts.add_row("rotary pairs", f"{r.pairs_full_turn_trained}/{len(r.wavelengths)} turn fully within the "
                          f"trained context; {r.pairs_in_trained_range}/{len(r.wavelengths)} stay in their trained "
                          "angle range up to the maximum context")
    else:
        facts.add_row("positions", f"{s.rope_absent_reason} (no RoPE)")
    trained = f"{s.trained_context:,}" if s.trained_context else "unknown"
    facts.add_row("context", f"trained {trained} ({s.trained_context_source}); maximum "
                  f"{s.max_context:,}" if s.max_context else f"trained {trained}; maximum unknown")
    ratio = f"{s.extension_ratio:g}x" if s.extension_ratio else "?"
    facts.add_row("extension", f"{ratio}, band {s.extension_band}: {s.extension_note}")
    heads = (f"head_dim {s.head_dim}" if s.v_head_dim == s.head_dim
             else f"q/k head dim {s.head_dim}, v head dim {s.v_head_dim}")
    facts.add_row("attention", f"{s.layers} layers, {s.heads} heads, {s.kv_heads} KV heads, {heads}"
                  + (f", {s.sliding_layers} sliding layers (window {s.sliding_window})" if s.sliding_layers else "")
                  + (" (MLA latent cache)" if s.kv_scheme == "mla" else ""))
    facts.add_row("KV per token", f"{s.kv_bytes_per_token:,} B bf16, {s.kv_bytes_per_token_fp8:,} B fp8")
    emb = f"{_gib(s.embedding_bytes)} input" + (" (tied)" if s.tied else f" + {_gib(s.output_head_bytes)} output head")
    if s.params is not None and s.embedding_share is not None:
        emb += f" = {s.embedding_share:.1%} of ~{_count(s.params.total)} params (estimate)"
    facts.add_row("embeddings", emb)
    if s.params is not None and s.params.experts:
        facts.add_row("parameters", f"~{_count(s.params.total)} total, ~{_count(s.params.active)} active per token "
                      f"({s.params.experts_per_token} of {s.params.experts} experts)")
    kv = Table(title="KV cache for one sequence")
    kv.add_column("context", justify="right")
    for dt in s.kv_bytes:
        kv.add_column(dt, justify="right")
    for n in next(iter(s.kv_bytes.values())):
        mark = " (max)" if n == s.max_context else " (past max)" if s.max_context and n > s.max_context else ""
        kv.add_row(f"{n:,}{mark}", *(_gib(s.kv_bytes[dt][n]) for dt in s.kv_bytes))
    return Group(facts, kv, *(f"[dim]note: {n}[/]" for n in s.notes))


def register(app: typer.Typer) -> None:
    app.command("rope")(rope)
