"""``summary.json`` blocks under the names the page uses, whichever spelling the producer wrote.

Producers own their key names (:class:`embscope.context.ContextSummary`, the extension and language
summaries); the page reads them through these small adapters, so a renamed key costs one line here
and a missing block becomes "no data" rather than an error.
"""

from __future__ import annotations

from typing import Any

def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _first(d: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if d.get(k) is not None:
            return d[k]
    return None


def context_view(ctx: Any) -> dict[str, Any]:
    """The context block under the names the page uses, whichever names the producer wrote.

    Accepts :class:`embscope.context.ContextSummary` dicts (``rope_theta``, ``claimed_max_positions``,
    ``risk``, ``kv_bytes`` {dtype: {n: bytes}}, ``output_head_bytes``) and the short spellings
    (``theta``, ``max_positions``, ``risk_band``, ``kv_bytes_at`` {n: {dtype: bytes}}, ``output_bytes``).
    """
    ctx = _dict(ctx)
    if not ctx:
        return {}
    per_tok = ctx.get("kv_bytes_per_token")
    if not isinstance(per_tok, dict):
        per_tok = {"bf16": per_tok, "fp8": ctx.get("kv_bytes_per_token_fp8")} if per_tok is not None else None
    at = ctx.get("kv_bytes_at")
    if not isinstance(at, dict) and isinstance(ctx.get("kv_bytes"), dict):
        at = {}
        for dtype, row in ctx["kv_bytes"].items():
            for n, b in _dict(row).items():
                at.setdefault(str(n), {})[dtype] = b
    view = {
        "position_encoding": ctx.get("position_encoding"),
        "rope_type": ctx.get("rope_type"),
        "theta": _first(ctx, "rope_theta", "theta"),
        "factor": _first(ctx, "rope_factor", "factor"),
        "rotary_dim": ctx.get("rotary_dim"),
        "original_max_positions": ctx.get("original_max_positions"),
        "max_positions": _first(ctx, "claimed_max_positions", "max_positions"),
        "extension_ratio": ctx.get("extension_ratio"),
        "risk_band": _first(ctx, "risk", "risk_band"),
        "risk_advice": ctx.get("risk_advice"),
        "wavelengths": ctx.get("wavelengths") or [],
        "wavelengths_scaled": ctx.get("wavelengths_scaled") or [],
        "pairs_full_turn": _first(ctx, "pairs_full_turn_original", "pairs_full_turn"),
        "pairs_full_turn_scaled": ctx.get("pairs_full_turn_scaled"),
        "attention": {k: ctx[k] for k in ("layers", "heads", "kv_heads", "head_dim", "kv_scheme",
                                          "sliding_layers", "sliding_window") if ctx.get(k) is not None},
        "kv_bytes_per_token": per_tok,
        "kv_bytes_at": at or {},
        "embedding_bytes": ctx.get("embedding_bytes"),
        "output_bytes": _first(ctx, "output_head_bytes", "output_bytes"),
        "embedding_share": ctx.get("embedding_share"),
        "params_estimate": ctx.get("params_estimate"),
        "notes": ctx.get("notes") if isinstance(ctx.get("notes"), list) else
        ([ctx["notes"]] if ctx.get("notes") else []),
    }
    return view


def extension_view(ext: Any) -> dict[str, Any]:
    """Extension summary with strategies split into scalar columns and nearest-token examples."""
    ext = dict(_dict(ext))
    strategies, examples = {}, {}
    for name, d in _dict(ext.get("strategies")).items():
        d = _dict(d)
        strategies[str(name)] = {k: v for k, v in d.items()
                                 if k != "name" and (v is None or isinstance(v, (int, float, str, bool)))}
        ex = d.get("examples")
        if isinstance(ex, dict) and ex:
            examples[str(name)] = {str(t): [[str(p[0]), p[1] if len(p) > 1 else None] for p in near
                                            if isinstance(p, (list, tuple)) and p][:4]
                                   for t, near in list(ex.items())[:4] if isinstance(near, list)}
    ext["strategies"] = strategies
    ext["examples"] = examples
    return ext


def languages_view(langs: Any) -> dict[str, Any]:
    """``{reference, corpora, segmentation}`` from one language summary or {corpus: summary}."""
    langs = _dict(langs)
    if not langs:
        return {}
    per_corpus = {k: v for k, v in langs.items() if isinstance(v, dict) and ("reference" in v or "tokenizers" in v)}
    blocks = list(per_corpus.values()) or [langs]
    refs = sorted({str(b["reference"]) for b in blocks if b.get("reference")})
    corpora = list(per_corpus) or ([str(c) for c in langs["corpora"]] if isinstance(langs.get("corpora"), list) else [])
    seg = next((b.get("segmentation") for b in blocks if isinstance(b.get("segmentation"), str)), None)
    return {"reference": ", ".join(refs) or None, "corpora": corpora, "segmentation": seg}


def summary_view(s: dict[str, Any]) -> dict[str, Any]:
    """Blocks the template reads, under stable names (see the ``*_view`` helpers)."""
    prov = _dict(s.get("embscope"))
    geo = dict(_dict(s.get("geometry")))
    if not geo.get("knn") and isinstance(s.get("knn"), dict):
        geo["knn"] = s["knn"]
    return {
        "model": _dict(s.get("model")),
        "prov": prov,
        "parameters": _dict(s.get("parameters")) or _dict(prov.get("parameters")),
        "timings": _dict(s.get("timings")),
        "categories": _dict(s.get("categories")),
        "ctx": context_view(s.get("context")),
        "geo": geo,
        "ext": extension_view(s.get("extension")),
        # `embscope fertility` folders keep the language summary at the top level
        "langs": languages_view(s.get("languages") if isinstance(s.get("languages"), dict)
                                else (s if "tokenizers" in s else None)),
        "skipped": _dict(s.get("skipped")),
    }
