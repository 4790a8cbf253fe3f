"""``embscope rope --model M``: RoPE reach, KV-cache budget and embedding share from the config."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from embscope.commands.options import Json, ModelOpt, print_json

if TYPE_CHECKING:  # pragma: no cover
    from embscope.context import ContextSummary


def rope(model: ModelOpt, as_json: Json = False) -> None:
    """RoPE scaling and extension risk, KV-cache bytes per token and per context, embedding share."""
    from embscope.api import rope as context_of

    summary = context_of(model)
    if as_json:
        print_json({"model": model, **summary.to_dict()})
        return
    from rich.console import Console

    Console().print(format_summary(summary))


def register(app: typer.Typer) -> None:
    app.command("rope")(rope)


def _gib(n: int) -> str:
    return f"{n / 2**30:,.2f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"


def format_summary(summary: "ContextSummary"):
    """A rich renderable (tables) for the terminal."""
    from rich.console import Group
    from rich.table import Table

    s = summary
    facts = Table(title="RoPE and context", show_header=False, box=None)
    facts.add_column(style="bold")
    facts.add_column()
    if s.position_encoding == "rope":
        facts.add_row("RoPE", f"{s.rope_type}, theta {s.rope_theta:g}, factor {s.rope_factor:g}, rotary dim {s.rotary_dim}")
        facts.add_row("full turns in trained context",
                      f"{s.pairs_full_turn_original}/{len(s.wavelengths)} pairs raw, "
                      f"{s.pairs_full_turn_scaled}/{len(s.wavelengths)} after scaling")
    else:
        facts.add_row("positions", "learned absolute table (no RoPE)")
    facts.add_row("context", f"trained {s.original_max_positions or '?'} -> claimed {s.claimed_max_positions or '?'} "
                  f"({s.extension_ratio:g}x)")
    facts.add_row("extension risk", f"{s.risk}: {s.risk_advice}")
    facts.add_row("attention", f"{s.layers} layers, {s.heads} heads, {s.kv_heads} KV heads, head_dim {s.head_dim}"
                  + (f", {s.sliding_layers} sliding layers (window {s.sliding_window})" if s.sliding_layers else "")
                  + (" (MLA latent cache)" if s.kv_scheme == "mla" else ""))
    facts.add_row("KV per token", f"{s.kv_bytes_per_token:,} B bf16, {s.kv_bytes_per_token_fp8:,} B fp8")
    emb = f"{_gib(s.embedding_bytes)} input" + (" (tied)" if s.tied else f" + {_gib(s.output_head_bytes)} output head")
    if s.embedding_share is not None:
        total = s.params_estimate
        size = f"{total / 1e9:.2f} B" if total >= 1e9 else f"{total / 1e6:.0f} M"
        emb += f" = {s.embedding_share:.1%} of ~{size} params (estimate)"
    facts.add_row("embeddings", emb)
    kv = Table(title="KV cache for one sequence")
    kv.add_column("context", justify="right")
    for dt in s.kv_bytes:
        kv.add_column(dt, justify="right")
    for n in next(iter(s.kv_bytes.values())):
        kv.add_row(f"{n:,}" + (" (max)" if n == s.claimed_max_positions else ""),
                   *(_gib(s.kv_bytes[dt][n]) for dt in s.kv_bytes))
    return Group(facts, kv, *(f"[dim]note: {n}[/]" for n in s.notes))
