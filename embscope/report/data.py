"""Read an output folder (``summary.json`` + Parquet tables) into the payload the page draws.

The report reads only files, never live objects, so ``embscope report DIR`` can re-render any
folder. Every section is read defensively: a missing file, a missing column or a section the run
skipped becomes ``{"reason": "..."}``, which the page shows as "no data: <reason>".

Sizes are kept small enough for a browser to open instantly: the token map draws at most
:data:`MAP_MAX_POINTS` points (every flagged token plus a seeded uniform sample of the rest), the
under-trained table keeps the :data:`TOP_N` highest scores, histograms are binned here.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from embscope.errors import OutputError
from embscope.report.lang_tables import DOUBLE_COST, cost_table, measure_groups
from embscope.report.views import summary_view
from embscope.sections.languages import DOUBLE_COST
from embscope.summary import Summary, read_summary

# A 2-D canvas scatter of ~30k points draws in well under 100 ms and keeps the page at a few MB;
# 260k points (a Llama-3 vocabulary) would make the file ~10x larger for no visible gain.
MAP_MAX_POINTS = 30_000
# "Top few hundred": enough to scroll through every suspicious token of a real model (Magikarp
# lists tens to a few hundred per model), small enough to sort instantly.
TOP_N = 300
# Neighbours shown per token in the table.
TOP_NEIGHBOURS = 5
# Histogram resolution for the norm charts.
HIST_BINS = 60
# Rows of the extension-candidate table.
CANDIDATES_N = 200

#: no run writes a summary this large; a larger file is not ours
MAX_SUMMARY_BYTES = 64 * 2**20


def load_summary(out_dir: Path) -> Summary:
    """The folder's ``summary.json``, checked (:func:`embscope.summary.read_summary`).

    Raises :class:`OutputError` when the folder or file is missing, unreadable or tampered with.
    """
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        raise OutputError(f"{out_dir} is not a folder: give the output folder of an embscope run")
    path = out_dir / "summary.json"
    if not path.is_file() or path.is_symlink():
        raise OutputError(f"{out_dir} has no summary.json: run `embscope audit` into it first")
    try:
        if path.stat().st_size > MAX_SUMMARY_BYTES:
            raise OutputError(f"{path} is larger than {MAX_SUMMARY_BYTES // 2**20} MiB, which no embscope "
                              "run writes: re-run the audit")
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        reason = "nested too deeply" if isinstance(err, RecursionError) else str(err)
        raise OutputError(f"{path} is not readable JSON ({reason}): re-run the audit") from None
    return read_summary(data, where=str(path))


def skip_reason(summary: Summary, *names: str) -> str | None:
    """The reason the run recorded under ``skipped`` for any of ``names``."""
    for name in names:
        if summary.skipped.get(name):
            return summary.skipped[name]
    return None


#: what the page needs each column to be; anything else in a table is a tampered or foreign file
_KINDS = {
    "token_id": "int", "in_norm": "num", "out_norm": "num", "isolation": "num",
    "knn_sim_k": "num", "undertrained_score": "num", "x": "num", "y": "num", "flagged": "bool",
    "magikarp_sim": "num", "knot": "num", "verify_max_prob": "num", "undertrained_status": "text", "corpus_count": "int", "flag_reason": "text",
    "zero_row": "bool", "token": "text", "category": "text", "script": "text", "neighbors": "list",
    "neighbor_sims": "list", "pieces": "list", "term": "text", "frequency": "int", "savings_tokens": "int",
    "parity": "num", "fertility": "num", "language": "text", "tokenizer": "text",
    "new": "bool", "in_change": "num", "in_moved": "bool", "out_change": "num", "out_moved": "bool",
    "data_count": "int",
}


def _kind_ok(dtype, kind: str) -> bool:
    import polars as pl

    if dtype == pl.Null:
        return True
    if kind == "int":
        return dtype.is_integer()
    if kind == "num":
        return dtype.is_numeric()
    if kind == "bool":
        return dtype == pl.Boolean
    if kind == "text":
        return dtype in (pl.String, pl.Categorical) or isinstance(dtype, pl.Enum)
    return isinstance(dtype, pl.List)


def _read_parquet(path: Path, wanted: list[str] | None = None):
    """Polars frame with the ``wanted`` columns that exist (all when ``None``); ``None`` if absent.

    Columns the page reads must have their kind (:data:`_KINDS`); a table that does not is refused
    with a one-line :class:`OutputError`.
    """
    import polars as pl

    if not path.is_file() or path.is_symlink():
        return None
    try:
        schema = pl.read_parquet_schema(path)
        cols = list(schema) if wanted is None else [c for c in wanted if c in schema]
        for c in cols:
            kind = _KINDS.get(c)
            if kind and not _kind_ok(schema[c], kind):
                raise OutputError(f"{path} column {c!r} has type {schema[c]}, not {kind}: re-run the "
                                  "command that wrote it")
        return pl.read_parquet(path, columns=cols)
    except OutputError:
        raise
    except Exception as err:  # a corrupt table should not kill the whole page
        raise OutputError(f"{path} is not a readable Parquet table ({_first_line(err)}): re-run the audit") from None


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _num(v: Any, digits: int = 4) -> Any:
    """Round floats for the page to ``digits`` significant digits; NaN/inf -> None; never -0.0.

    Significant (not decimal) digits, so a KL of 2.4e-6 survives as 2.4e-6 instead of 0.0.

    >>> _num(3.14159), _num(-1.2e-7), _num(2.4257e-6), _num(-0.0), _num(7)
    (3.142, -1.2e-07, 2.426e-06, 0.0, 7)
    """
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return None
        r = float(f"{v:.{digits}g}")
        return 0.0 if r == 0 else r
    return v


#: norms whose whole range (max − min) is within this share of their median are "all equal": the
#: histogram says so in words (a normalised embedding, where the norm tells nothing about training)
EQUAL_SPREAD = 0.02


def _histogram(values, flagged, bins: int = HIST_BINS) -> dict[str, Any] | None:
    """Equal-width bins over the finite values: edges (bins+1), counts, counts of flagged rows;
    ``spread`` = (max − min) / median, and ``equal`` when that is under :data:`EQUAL_SPREAD`.

    >>> h = _histogram([1.028, 1.031, 1.035], None)
    >>> h["equal"], round(h["spread"], 4)
    (True, 0.0068)
    """
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    ok = np.isfinite(v)
    if not ok.any():
        return None
    lo, hi = float(v[ok].min()), float(v[ok].max())
    med = float(np.median(v[ok]))
    spread = (hi - lo) / abs(med) if med else None
    if hi <= lo:
        hi = lo + 1e-6
    edges = np.linspace(lo, hi, bins + 1)
    counts, _ = np.histogram(v[ok], bins=edges)
    out = {"edges": [_num(float(e), 5) for e in edges], "counts": counts.tolist(), "min": _num(lo), "max": _num(float(v[ok].max())),
           "spread": _num(spread), "equal": spread is not None and spread < EQUAL_SPREAD}
    if flagged is not None:
        f = np.asarray(flagged, dtype=bool) & ok
        out["flagged"] = np.histogram(v[f], bins=edges)[0].tolist()
    return out


def tokens_payload(out_dir: Path, summary: Summary, lookup: list[int] | None = None) -> dict[str, Any]:
    """Top table, map sample and norm histograms from ``tokens.parquet``.

    ``lookup``: token ids whose raw text is returned under ``"lookup"`` ({str(id): token}).
    """
    import polars as pl

    path = Path(out_dir) / "tokens.parquet"
    df = _read_parquet(path, ["token_id", "token", "category", "in_norm", "out_norm", "zero_row",
                              "magikarp_sim", "knot", "isolation", "knn_sim_k", "script", "undertrained_score",
                              "flagged", "flag_reason", "verify_max_prob", "undertrained_status", "corpus_count", "neighbors",
                              "neighbor_sims", "x", "y"])
    if df is None:
        return {"reason": skip_reason(summary, "tokens") or "tokens.parquet not found"}
    if "token_id" not in df.columns:
        df = df.with_row_index("token_id")
    if "token" not in df.columns:
        df = df.with_columns(pl.lit("").alias("token"))
    for col in ("token", "category", "script"):  # Categorical/Enum columns read back as text
        if col in df.columns and df[col].dtype != pl.String:
            df = df.with_columns(pl.col(col).cast(pl.String))
    n = df.height
    cols = set(df.columns)
    out: dict[str, Any] = {"n": n, "columns": sorted(cols)}
    if "category" in cols:
        out["counts"] = {r["category"]: r["count"] for r in
                         df.group_by("category").len("count").sort("count", descending=True).to_dicts()}
    flagged = df["flagged"].fill_null(False).to_numpy() if "flagged" in cols else None
    out["n_flagged"] = int(flagged.sum()) if flagged is not None else None
    if flagged is not None and "category" in cols:
        normal = (df["category"] == "normal").fill_null(False).to_numpy()
        out["n_flagged_normal"] = int((flagged & normal).sum())
        out["n_normal"] = int(normal.sum())
    if lookup:  # raw token text for ids the summary names (summary files written before the scan stored raw text held an escaped copy)
        strings = df["token"].fill_null("").to_list()
        ids = df["token_id"].to_list()
        pos = {int(t): k for k, t in enumerate(ids)}
        out["lookup"] = {str(i): strings[pos[i]] for i in lookup if i in pos}

    # Norm histograms over every row (not the sample).
    hists = {}
    for col in ("in_norm", "out_norm"):
        if col in cols and df[col].null_count() < n:
            h = _histogram(df[col].cast(pl.Float64).fill_null(float("nan")).to_numpy(), flagged)
            if h:
                hists[col] = h
    out["hist"] = hists

    scan_reason = skip_reason(summary, "tokens") or "the geometry scan did not run"
    tokens = df["token"].fill_null("").to_list()

    out["top"] = _top_table(df, cols, tokens, n) if "undertrained_score" in cols else {"reason": scan_reason}
    out["map"] = _map_sample(df, cols, flagged, scan_reason, no_map(summary))
    return out


def _top_table(df, cols: set[str], tokens: list[str], n: int) -> dict[str, Any]:
    """The page's top table, each row with its nearest neighbours."""
    import polars as pl

    # Top list: the TOP_N highest scores among normal tokens, and apart from them the TOP_N
    # highest among the other categories (special, padding, ...: not trained like text, so the
    # page shows them only on request), merged, highest score first.
    scored = (df.with_columns(pl.col("undertrained_score").cast(pl.Float64).fill_nan(None))
              .filter(pl.col("undertrained_score").is_not_null()))
    if "category" in cols:
        is_normal = pl.col("category") == "normal"
        top = pl.concat([
            scored.filter(is_normal).sort("undertrained_score", descending=True).head(TOP_N),
            scored.filter(~is_normal | pl.col("category").is_null())
            .sort("undertrained_score", descending=True).head(TOP_N),
        ]).sort("undertrained_score", descending=True)
    else:
        top = scored.sort("undertrained_score", descending=True).head(TOP_N)
    show = [c for c in ("token_id", "token", "category", "script", "undertrained_score", "flag_reason",
                        "in_norm", "out_norm", "magikarp_sim", "knot", "isolation", "verify_max_prob",
                        "undertrained_status", "corpus_count", "flagged")
            if c in top.columns and not (c in ("out_norm", "magikarp_sim", "verify_max_prob", "undertrained_status", "corpus_count")
                                         and top[c].null_count() == top.height)]
    rows = []
    for rec in top.iter_rows(named=True):
        row = {c: _num(rec[c]) for c in show}
        if "neighbors" in rec and rec["neighbors"] is not None:
            ids = list(rec["neighbors"])[:TOP_NEIGHBOURS]
            sims = list(rec.get("neighbor_sims") or [])[:TOP_NEIGHBOURS]
            row["neighbors"] = [[int(j), tokens[j] if 0 <= j < n else "", _num(sims[k]) if k < len(sims) else None]
                                for k, j in enumerate(ids)]
        rows.append(row)
    cats_in_top = sorted({r.get("category") or "unknown" for r in rows},
                         key=lambda c: (c != "normal", c))
    return {"columns": show + (["neighbors"] if "neighbors" in cols else []), "rows": rows,
            "categories": cats_in_top,
            "default": "normal" if "normal" in cats_in_top else "all", "per_group": TOP_N}


def no_map(summary: Summary) -> str:
    """Why a folder with a scan has no map, from what its run asked for."""
    command, laid = summary.embscope.command, summary.parameters.scan.map
    if laid:
        return "the layout placed no row (summary.json → geometry.layout says why)"
    how = "--no-map skipped the map" if command in ("audit", "scan", "run") else f"`{command}` does not lay out the map"
    return f"{how}; `embscope scan --model M` draws it"


def _map_sample(df, cols: set[str], flagged, scan_reason: str, no_map_reason: str = "") -> dict[str, Any]:
    """The map's points, or why there is no map."""
    import numpy as np
    import polars as pl

    # Map: every flagged row plus a seeded uniform sample of the others, at most MAP_MAX_POINTS.
    xy_ok = None
    if {"x", "y"} <= cols:  # the scan writes NaN (not null) when the layout was off
        xy = df.select(pl.col("x").cast(pl.Float64).fill_nan(None), pl.col("y").cast(pl.Float64).fill_nan(None))
        xy_ok = (xy["x"].is_not_null() & xy["y"].is_not_null()).to_numpy()
    if xy_ok is not None and xy_ok.any():
        idx_all = np.flatnonzero(xy_ok)
        if flagged is not None:
            must = idx_all[flagged[idx_all]]
            rest = idx_all[~flagged[idx_all]]
        else:
            must, rest = idx_all[:0], idx_all
        room = max(MAP_MAX_POINTS - len(must), 0)
        if len(rest) > room:
            rng = np.random.default_rng(0)  # seeded: the same folder renders the same page
            rest = rng.choice(rest, size=room, replace=False)
        idx = np.sort(np.concatenate([must, rest]))
        sub = df[idx.tolist()]
        m: dict[str, Any] = {
            "n_total": int(len(idx_all)), "n_shown": int(len(idx)), "n_flagged": int(len(must)),
            "id": sub["token_id"].to_list(),
            "x": [round(float(v), 4) for v in sub["x"].to_list()],
            "y": [round(float(v), 4) for v in sub["y"].to_list()],
            "tok": sub["token"].fill_null("").to_list(),
        }
        if "undertrained_score" in cols:
            m["score"] = [_num(v) for v in sub["undertrained_score"].cast(pl.Float64).to_list()]
        for col, key in (("category", "cat"), ("script", "script")):
            if col in cols:
                vals = sub[col].fill_null("unknown").to_list()
                levels = [lv for lv, _ in _by_count(vals)]
                pos = {lv: i for i, lv in enumerate(levels)}
                m[key + "_levels"] = levels
                m[key] = [pos[v] for v in vals]
        if flagged is not None:
            m["flag"] = [int(b) for b in flagged[idx]]
        return m
    has_scan = "undertrained_score" in cols
    return {"reason": no_map_reason if has_scan else scan_reason}


def _by_count(values: list[str]) -> list[tuple[str, int]]:
    from collections import Counter

    return Counter(values).most_common()


def languages_payload(out_dir: Path, summary: Summary) -> dict[str, Any]:
    """Every row of ``languages.parquet`` (small: tokenizers x languages) plus the double-cost rows."""
    df = _read_parquet(Path(out_dir) / "languages.parquet")
    if df is None or df.height == 0:
        return {"reason": skip_reason(summary, "languages") or "languages.parquet not found"}
    rows = [{k: _num(v) for k, v in r.items() if not isinstance(v, (list, dict, bytes))}
            for r in df.iter_rows(named=True)]
    columns = [c for c in df.columns if rows and c in rows[0]]
    corpora = sorted({str(r.get("corpus")) for r in rows if r.get("corpus") is not None})
    names = {r["language"]: r["language_name"] for r in rows if r.get("language_name")}  # one corpus names all
    for r in rows:  # row label: the language's name and code, and the corpus when there are several
        corpus = Path(str(r.get("corpus"))).name if r.get("corpus") is not None else ""
        lang = str(r.get("language"))
        r["label"] = f"{lang} · {corpus}" if len(corpora) > 1 else lang  # the key rows are grouped by
        r["language_display"] = f"{names[lang]} ({lang})" if lang in names else lang
        r["display"] = r["language_display"] + (f" · {corpus}" if len(corpora) > 1 else "")
        r["per_word"] = r.get("unit") in (None, "word")
        r["corpus_name"] = corpus
    double = sorted((r for r in rows if isinstance(r.get("parity"), (int, float)) and r["parity"] >= DOUBLE_COST),
                    key=lambda r: -r["parity"])
    extra = {}
    for stem in ("tokenizers", "comparisons"):
        t = _read_parquet(Path(out_dir) / f"{stem}.parquet")
        extra[stem] = [] if t is None else [{k: _num(v) for k, v in r.items() if not isinstance(v, (list, dict, bytes))}
                                            for r in t.iter_rows(named=True)]
    for r in extra["comparisons"]:  # who wins, in words, and the language's name
        v = r.get("verdict") or ""
        r["winner"] = v[:-len(" cheaper")] if v.endswith(" cheaper") else None
        r["language_display"] = f"{names[r['language']]} ({r['language']})" if r.get("language") in names else r.get("language")
    levels = [getattr(m, "bootstrap_level", None) for m in (summary.sections.languages.corpora or {}).values()] \
        if summary.sections.languages is not None else []
    level = next((x for x in levels if x), None)
    return {"columns": columns, "rows": rows, "double": double, "double_threshold": DOUBLE_COST,
            "cost": cost_table(rows, corpora), "groups": measure_groups(columns, rows),
            "tokenizers": extra["tokenizers"], "comparisons": extra["comparisons"],
            "level": f"{100 * level:g} %" if level else None}


def candidates_payload(out_dir: Path, summary: Summary) -> dict[str, Any]:
    """Top rows of ``candidates.parquet`` by savings (then frequency)."""
    df = _read_parquet(Path(out_dir) / "candidates.parquet")
    if df is None or df.height == 0:
        return {"reason": skip_reason(summary, "extension") or "candidates.parquet not found"}
    n = df.height
    key = next((c for c in ("savings_tokens", "frequency") if c in df.columns), None)
    if key:
        df = df.sort(key, descending=True, nulls_last=True)
    df = df.head(CANDIDATES_N)
    columns = [c for c in df.columns if c != "pieces"]
    rows = []
    for r in df.iter_rows(named=True):
        row = {c: _num(r[c]) for c in columns if not isinstance(r[c], (dict, bytes))}
        pieces = r.get("pieces")
        row["pieces"] = [str(p) for p in pieces] if pieces is not None else []
        row.update(_saving(r))
        rows.append(row)
    return {"n": n, "columns": columns, "rows": rows,
            "multiword": any((r.get("n_words") or 1) > 1 for r in rows)}


def _saving(r: dict[str, Any]) -> dict[str, Any]:
    """One saving per candidate: measured (``count_as_token × (n_pieces − 1)``) for a term that was
    added, else the estimate ``savings_tokens``; ``measured`` says which.

    >>> _saving({"savings_tokens": 10, "count_as_token": 4, "n_pieces": 3, "added": True})
    {'saved': 8, 'measured': True}
    >>> _saving({"savings_tokens": 10, "count_as_token": None, "n_pieces": 3, "added": False})
    {'saved': 10, 'measured': False}
    """
    count, n = r.get("count_as_token"), r.get("n_pieces")
    if r.get("added") and isinstance(count, int) and isinstance(n, int):
        return {"saved": count * (n - 1), "measured": True}
    return {"saved": r.get("savings_tokens"), "measured": False}


def diff_payload(out_dir: Path, summary: Summary) -> dict[str, Any]:
    """The diff's token map from ``diff.parquet``: every row added past BASE and every moved row (a
    seeded sample of them past :data:`MAP_MAX_POINTS`), plus a seeded sample of the unmoved ones.

    ``state`` per point: 0 unmoved, 1 moved, 2 new and moved, 3 new and unmoved.
    """
    import numpy as np
    import polars as pl

    if summary.sections.diff is None:
        return {"reason": skip_reason(summary, "diff") or "the diff did not run"}
    df = _read_parquet(Path(out_dir) / "diff.parquet", ["token_id", "token", "new", "in_change", "in_moved",
                                                        "out_moved", "data_count", "x", "y"])
    if df is None or not {"x", "y", "in_moved"} <= set(df.columns):
        return {"reason": skip_reason(summary, "diff") or "diff.parquet not found"}
    xy = df.select(pl.col("x").cast(pl.Float64).fill_nan(None), pl.col("y").cast(pl.Float64).fill_nan(None))
    ok = (xy["x"].is_not_null() & xy["y"].is_not_null()).to_numpy()
    moved = df["in_moved"].fill_null(False).to_numpy()
    if "out_moved" in df.columns:
        moved = moved | df["out_moved"].fill_null(False).to_numpy()
    new = df["new"].fill_null(False).to_numpy() if "new" in df.columns else np.zeros(df.height, dtype=bool)
    rng = np.random.default_rng(0)  # seeded: the same folder renders the same page
    idx_new = np.flatnonzero(ok & new)
    idx_moved = np.flatnonzero(ok & moved & ~new)
    idx_rest = np.flatnonzero(ok & ~moved & ~new)
    room = max(MAP_MAX_POINTS - len(idx_new), 0)
    if len(idx_moved) > room * 2 // 3:
        idx_moved = rng.choice(idx_moved, size=room * 2 // 3, replace=False)
    room -= len(idx_moved)
    if len(idx_rest) > room:
        idx_rest = rng.choice(idx_rest, size=room, replace=False)
    idx = np.sort(np.concatenate([idx_new, idx_moved, idx_rest]))
    sub = df[idx.tolist()]
    state = np.where(new[idx], np.where(moved[idx], 2, 3), np.where(moved[idx], 1, 0))
    used = (sub["data_count"].fill_null(0).to_numpy() > 0) if "data_count" in sub.columns else None
    return {"map": {
        "n_total": int(ok.sum()), "n_shown": int(len(idx)), "n_moved": int((ok & moved).sum()), "n_new": int(len(idx_new)),
        "id": sub["token_id"].to_list(), "tok": sub["token"].fill_null("").to_list(),
        "x": [round(float(v), 4) for v in sub["x"].to_list()], "y": [round(float(v), 4) for v in sub["y"].to_list()],
        "state": state.astype(int).tolist(),
        "change": [_num(v) for v in sub["in_change"].cast(pl.Float64).to_list()] if "in_change" in sub.columns else None,
        "used": [int(u) for u in used] if used is not None and summary.sections.diff.data is not None else None}}


def build_payload(out_dir: Path) -> dict[str, Any]:
    """Everything the page needs, as plain JSON-able data."""
    out_dir = Path(out_dir)
    summary = load_summary(out_dir)
    view = summary_view(summary)
    top = view["geo"].get("top_undertrained") or []
    ids = [r["id"] for r in top if isinstance(r.get("id"), int)]
    tokens = tokens_payload(out_dir, summary, lookup=ids)
    names = tokens.pop("lookup", {}) if isinstance(tokens, dict) else {}
    for r in top:  # the raw token from the table (the summary's copy may be cut short)
        raw = names.get(str(r.get("id")))
        r["token"] = raw if raw is not None else str(r.get("token") or "")
    from embscope.report.labels import column_help

    return {
        "view": view,
        "help": column_help(),
        "tokens": tokens,
        "languages": languages_payload(out_dir, summary),
        "candidates": candidates_payload(out_dir, summary),
        "diff": diff_payload(out_dir, summary),
    }

