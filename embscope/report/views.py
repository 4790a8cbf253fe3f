"""The typed ``summary.json`` records → the blocks the page template reads.

Input is a :class:`embscope.summary.Summary` (checked by ``Summary.from_dict``); every field read here
exists in its record with one spelling. A section without a record becomes an empty block, which the
page shows as "no data" with the reason from ``skipped``.
"""

from __future__ import annotations

from typing import Any

from embscope.summary import Summary


def context_view(ctx) -> dict[str, Any]:
    """The context block (:class:`embscope.context.ContextSummary`) under the page's names."""
    if ctx is None:
        return {}
    at: dict[str, dict[str, int]] = {}
    for dtype, row in ctx.kv_bytes.items():
        for n, b in row.items():
            at.setdefault(str(n), {})[dtype] = b
    rope = ctx.rope
    return {
        "position_encoding": ctx.position_encoding,
        "rope_type": rope.rope_type if rope else None,
        "theta": rope.theta if rope else None,
        "factor": rope.factor if rope else None,
        "rotary_dim": rope.rotary_dim if rope else None,
        "rope_absent_reason": ctx.rope_absent_reason,
        "original_max_positions": ctx.trained_context,
        "trained_context_source": ctx.trained_context_source,
        "max_positions": ctx.max_context,
        "extension_ratio": ctx.extension_ratio,
        "risk_band": ctx.extension_band,
        "band_class": _band_class(ctx.extension_band, ctx.extension_declared),
        "risk_advice": ctx.extension_note,
        "wavelengths": rope.wavelengths if rope else [],
        "wavelengths_scaled": rope.wavelengths_scaled if rope else [],
        "pairs_full_turn": rope.pairs_full_turn_trained if rope else None,
        "pairs_in_trained_range": rope.pairs_in_trained_range if rope else None,
        "attention": {k: getattr(ctx, k) for k in ("layers", "heads", "kv_heads", "head_dim", "kv_scheme",
                                                   "sliding_layers", "sliding_window")
                      if getattr(ctx, k) is not None},
        "kv_bytes_per_token": {"bf16": ctx.kv_bytes_per_token, "fp8": ctx.kv_bytes_per_token_fp8},
        "kv_bytes_at": at,
        "embedding_bytes": ctx.embedding_bytes,
        "weight_dtype": ctx.weight_dtype,
        "output_bytes": ctx.output_head_bytes,
        "embedding_share": ctx.embedding_share,
        "params_estimate": ctx.params.total if ctx.params else None,
        "params_active": ctx.params.active if ctx.params else None,
        "notes": list(ctx.notes),
    }


def _band_class(band: str, declared: bool | None) -> str:
    """Colour of the extension-band card: stretched positions the model was not trained at are red."""
    if band in ("none", "up to 2x") or declared:
        return "low"
    return "moderate" if band == "up to 4x" else "high"


#: strategy-table columns first: the score ``--init auto`` ranks by and its three parts, what the
#: row means (fidelity), what it costs (bits per byte, held-out corpus and general text), what it
#: disturbs (KL on old text, new-token mass); the rest (norms, neighbours) after
STRATEGY_COLUMNS = ("score", "score_corpus", "score_general", "score_reading", "score_bytes",
                    "fidelity_kl", "fidelity_kl_p90", "fidelity_top1", "fidelity_kl_after", "fidelity_top1_after",
                    "bits_per_byte_change", "bits_per_byte_change_se", "tokens_per_byte_change", "bits_per_byte",
                    "bits_per_byte_se", "general_bits_per_byte_change", "general_bits_per_byte_change_se",
                    "kl", "kl_max", "new_token_mass", "new_token_mass_max")


#: the strategy figures in tables narrow enough to show every column at once: what ``--init auto``
#: ranks by, what a new row means to the model, what it costs in bits, what it disturbs, what the
#: rows look like; a figure no group names goes into a last table
STRATEGY_GROUPS = (
    ("Score (bits per byte, lower is better)", ("score", "score_corpus", "score_general", "score_reading", "score_bytes")),
    ("Fidelity: the model after the new token against after its old pieces",
     ("fidelity_kl", "fidelity_kl_p90", "fidelity_top1", "fidelity_kl_after", "fidelity_top1_after",
      "fidelity_contexts", "fidelity_after_positions")),
    ("Bits per byte on held-out corpus text and on general text",
     ("bits_per_byte", "bits_per_byte_se", "bits_per_byte_change", "bits_per_byte_change_se", "tokens_per_byte",
      "tokens_per_byte_change", "general_bits_per_byte", "general_bits_per_byte_change",
      "general_bits_per_byte_change_se")),
    ("Disturbance of old text", ("kl", "kl_max", "new_token_mass", "new_token_mass_max", "disturbance_positions")),
    ("The new rows themselves", ("norm_percentile_median", "norm_percentile_min", "norm_percentile_max",
                                 "nearest_cosine_median", "output_norm_percentile_median",
                                 "output_nearest_cosine_median")),
)


def strategy_groups(columns: list[str]) -> list[dict[str, Any]]:
    """:data:`STRATEGY_GROUPS` with the figures some strategy measured; the rest in a last group.

    >>> [(g["title"][:5], g["columns"]) for g in strategy_groups(["kl", "score", "new_thing"])]
    [('Score', ['score']), ('Distu', ['kl']), ('Other', ['new_thing'])]
    """
    named = {c for _, cols in STRATEGY_GROUPS for c in cols}
    groups = [(t, [c for c in cols if c in columns]) for t, cols in STRATEGY_GROUPS]
    groups.append(("Other figures", [c for c in columns if c not in named]))
    return [{"title": t, "columns": cols} for t, cols in groups if cols]


def extension_view(ext) -> dict[str, Any]:
    """Extension record with strategies split into scalar columns (those some strategy measured,
    :data:`STRATEGY_COLUMNS` first) and nearest-token examples."""
    import dataclasses

    if ext is None:
        return {}
    view = ext.to_dict()
    recs = ext.strategies.values()
    names = [f.name for r in recs for f in dataclasses.fields(r) if f.name not in ("name", "examples")]
    names = [k for k in STRATEGY_COLUMNS if k in names] + [k for k in dict.fromkeys(names) if k not in STRATEGY_COLUMNS]
    cols = [k for k in names if any(getattr(r, k, None) is not None for r in recs)]
    strategies = {name: {k: getattr(r, k, None) for k in cols} for name, r in ext.strategies.items()}
    examples = {name: {t: [[p[0], p[1] if len(p) > 1 else None] for p in near if p][:4]
                       for t, near in list(r.examples.items())[:4]}
                for name, r in ext.strategies.items() if r.examples}
    view["strategies"] = strategies
    view["strategy_groups"] = strategy_groups(cols)
    tl = getattr(ext, "target_language", None)
    view["target_first"] = tl is not None and tl.lang_source == "--lang"  # the language asked for leads
    view["examples"] = examples
    return view


def geometry_view(geo, categories: dict[str, int]) -> dict[str, Any]:
    """The scan record (:class:`embscope.sections.tokens.GeometryRecord`) under the page's names.

    ``flagged`` becomes ``{normal, normal_share, normal_rows, others: [(category, flagged, rows)],
    zero_rows}``: the headline counts normal tokens only; special, padding and other rows are listed
    apart (they are not trained like text, so a flag on them means something else). ``per_script``
    becomes a list sorted by rows.
    """
    if geo is None:
        return {}
    view = geo.to_dict()
    f = view["flagged"]
    by_cat = f.get("by_category") or {}
    view["flagged"] = {
        "normal": f.get("normal"), "normal_share": f.get("normal_share"), "normal_rows": categories.get("normal"),
        "others": [{"category": c, "flagged": n, "rows": categories.get(c)} for c, n in by_cat.items()
                   if c != "normal"],
        "zero_rows": f.get("zero_rows"), "by_reason": f.get("by_reason") or {}, "isolated": f.get("isolated"),
        "family": f.get("family") or 0, "drift": f.get("drift") or 0,
        **{k: f.get(k) for k in ("total", "verified", "cleared", "candidates", "by_indicators")},
        "isolated_by_category": f.get("isolated_by_category") or {}}
    vf = view.get("verification")
    if vf is not None:  # every row prompting checked, by kind: the sampled flags, the gated rows, the specials
        sp = vf.get("specials") or {}
        vf["kinds"] = [(what, got, of) for what, got, of in (
            ("sampled flags", vf.get("n_verified_undertrained"), vf.get("n_checked")),
            ("gated family rows", vf.get("family_verified"), vf.get("family_checked")),
            ("special tokens in context", sp.get("verified"), sp.get("checked"))) if of]
        vf["all_checked"] = sum(of for _, _, of in vf["kinds"])
        vf["all_verified"] = sum(got or 0 for _, got, _ in vf["kinds"])
    rows = [{"script": k, **{kk: v.get(kk) for kk in ("rows", "flagged", "flagged_share", "mean_norm")}}
            for k, v in view["per_script"].items()]
    rows.sort(key=lambda r: -(r["rows"] if isinstance(r["rows"], (int, float)) else 0))
    view["per_script"] = rows
    view["top_undertrained"] = [r for r in view["top_undertrained"] if isinstance(r, dict)]
    return view


def languages_view(langs) -> dict[str, Any]:
    """``{reference, corpora, segmentation, tokenizers, reads}`` from the languages record."""
    if langs is None:
        return {}
    reads = []
    seg = None
    for path, b in langs.corpora.items():
        c = b.corpus
        seg = seg or b.segmentation
        reads.append({"corpus": path, "languages": b.languages, "texts": c.texts, "bytes": c.bytes,
                      "files_read": c.files_read, "reference_present": b.reference_present,
                      "skipped": c.skipped, "capped": c.capped_languages, "nfc": c.nfc_normalized})
    return {"reference": langs.reference, "corpora": list(langs.corpora), "segmentation": seg,
            "tokenizers": list(langs.tokenizers), "reads": reads}


def diff_view(d) -> dict[str, Any]:
    """The diff record (:class:`embscope.changes.record.DiffRecord`) as the page reads it; ``{}``
    when the diff did not run."""
    if d is None:
        return {}
    view = d.to_dict()
    view["matrix_rows"] = [{"name": k, **m} for k, m in view["matrices"].items()]
    return view


#: the page's sections, in the order an audit shows them, with their titles
PAGE = {"overview": "Overview", "readiness": "Ready to fine-tune?", "diff": "What training changed",
        "tokens": "Under-trained tokens", "languages": "Languages", "extension": "Extension", "context": "Context"}
#: the section a single-purpose command's report leads with
LEADS = {"check": "readiness", "diff": "diff", "extend": "extension", "scan": "tokens", "fertility": "languages",
         "compare": "languages"}
#: the mark of each verdict level on the page (as in the terminal)
MARKS = {"ok": "✓", "note": "•", "act": "✗"}


def page_order(s: Summary) -> list[str]:
    """The sections the page shows, in order: the command's own first (``check`` leads with
    "Ready to fine-tune?"), then the overview and the rest in audit order. A section the run did not
    attempt is absent; one it attempted and skipped stays, with its reason.

    >>> from embscope.summary import Sections
    >>> from types import SimpleNamespace as N
    >>> page_order(N(embscope=N(command="fertility"), sections=Sections(), skipped={"languages": "no corpus"}))
    ['languages', 'overview']
    """
    sec, skipped = s.sections, s.skipped
    ran = {name for name in PAGE if name == "overview" or getattr(sec, name, None) is not None or name in skipped}
    lead = LEADS.get(s.embscope.command)
    first = [lead] if lead in ran else []
    return first + [name for name in PAGE if name in ran and name not in first]


def parameters_view(s: Summary) -> dict[str, Any]:
    """The run's options as the page lists them, ``verify`` in words where its value means more than
    a number: ``null`` is the automatic sample, and 0 with a record is the special rows alone."""
    from embscope.geometry.verify import AUTO_VERIFY, AUTO_WORK

    params = s.parameters.to_dict()
    tokens = s.sections.tokens
    vf = tokens.geometry.verification if tokens is not None and tokens.geometry is not None else None
    if params.get("verify") is None:
        budget = params.get("verify_work") or AUTO_WORK
        params["verify"] = (f"auto: {AUTO_VERIFY} random flagged rows within {budget:g} × 10¹² multiply-adds of "
                            "work, when the whole model loads" + ("" if vf is not None else " (it did not: no prompting)"))
    elif params.get("verify") == 0 and vf is not None and vf.specials is not None:
        params["verify"] = "0: only the special tokens the chat template uses, checked in context"
    return params


def summary_view(s: Summary) -> dict[str, Any]:
    """Blocks the template reads (see the ``*_view`` helpers)."""
    tokens = s.sections.tokens
    categories = tokens.categories if tokens is not None else {}
    prov = s.embscope.to_dict()
    return {
        "order": page_order(s), "titles": PAGE, "marks": MARKS,
        "bottom": s.bottom_line.to_dict() if s.bottom_line is not None and s.bottom_line.verdicts else None,
        "model": s.model.to_dict() if s.model is not None else {"name": "tokenizers only"},
        "prov": prov,
        "parameters": parameters_view(s),
        "timings": s.timings,
        "categories": categories,
        "ctx": context_view(s.sections.context),
        "geo": geometry_view(tokens.geometry if tokens is not None else None, categories),
        "ext": extension_view(s.sections.extension),
        "langs": languages_view(s.sections.languages),
        "ft": getattr(s.sections, "readiness", None).to_dict() if getattr(s.sections, "readiness", None) else {},
        "df": diff_view(getattr(s.sections, "diff", None)),
        "skipped": s.skipped,
        "warnings": s.warnings,
        "versions": s.versions,
    }
