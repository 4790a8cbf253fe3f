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


def geometry_view(geo: Any) -> dict[str, Any]:
    """The scan summary (:func:`embscope.geometry.scan.scan`) under the names the page uses.

    ``flagged`` becomes ``{normal, normal_share, others: [(category, flagged, rows)], zero_rows}``:
    the headline counts normal tokens only; special, padding and other rows are listed apart (they
    are not trained like text, so a flag on them means something else). ``per_script``
    ({script: {rows, flagged, flagged_share, mean_norm}}) becomes a list sorted by rows. The older
    spellings (``flagged`` as an int with ``flagged_share``; ``per_script`` as a list of
    ``{script, n, flagged_share, mean_norm}``) are read too.
    """
    geo = dict(_dict(geo))
    if not geo:
        return {}
    cats = _dict(geo.get("categories"))
    f = geo.get("flagged")
    if isinstance(f, dict):
        by_cat = _dict(f.get("by_category"))
        others = [{"category": str(c), "flagged": n, "rows": cats.get(c)}
                  for c, n in by_cat.items() if c != "normal"]
        flagged = {"normal": f.get("normal"), "normal_share": f.get("normal_share"),
                   "normal_rows": cats.get("normal"), "others": others, "zero_rows": f.get("zero_rows")}
    elif isinstance(f, (int, float)) and not isinstance(f, bool):
        flagged = {"normal": f, "normal_share": geo.get("flagged_share"), "normal_rows": cats.get("normal"),
                   "others": [], "zero_rows": None}
    else:
        flagged = None
    geo["flagged"] = flagged
    ps = geo.get("per_script")
    rows = []
    if isinstance(ps, dict):
        rows = [{"script": str(k), **{kk: _dict(v).get(kk) for kk in ("rows", "flagged", "flagged_share", "mean_norm")}}
                for k, v in ps.items()]
    elif isinstance(ps, list):
        rows = [{"script": r.get("script"), "rows": _first(r, "rows", "n"), "flagged": r.get("flagged"),
                 "flagged_share": r.get("flagged_share"), "mean_norm": r.get("mean_norm")}
                for r in ps if isinstance(r, dict)]
    rows.sort(key=lambda r: -(r["rows"] if isinstance(r["rows"], (int, float)) else 0))
    geo["per_script"] = rows
    top = geo.get("top_undertrained")
    geo["top_undertrained"] = [r for r in top if isinstance(r, dict)] if isinstance(top, list) else []
    geo["reference"] = _dict(geo.get("reference"))
    geo["knn"] = _dict(geo.get("knn"))
    return geo


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
    toks: list[str] = []
    for b in blocks:
        for t in b.get("tokenizers") or []:
            name = str(t.get("name")) if isinstance(t, dict) else str(t)
            if name not in toks:
                toks.append(name)
    # one line per corpus: what was read (``corpus`` is embscope.languages.corpus.CorpusReport.as_dict())
    reads = []
    for path, b in per_corpus.items():
        c = _dict(b.get("corpus"))
        reads.append({"corpus": path, "languages": b.get("languages"), "texts": c.get("texts"),
                      "bytes": c.get("bytes"), "files_read": c.get("files_read"),
                      "reference_present": b.get("reference_present"),
                      "skipped": _dict(c.get("skipped")), "capped": c.get("capped_languages") or []})
    return {"reference": ", ".join(refs) or None, "corpora": corpora, "segmentation": seg,
            "tokenizers": toks, "reads": reads}


def summary_view(s: dict[str, Any]) -> dict[str, Any]:
    """Blocks the template reads, under stable names (see the ``*_view`` helpers)."""
    prov = _dict(s.get("embscope"))
    geo = dict(_dict(s.get("geometry")))
    if not geo.get("knn") and isinstance(s.get("knn"), dict):
        geo["knn"] = s["knn"]
    geo = geometry_view(geo)
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
