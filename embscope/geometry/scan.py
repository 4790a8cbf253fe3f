"""The token-row scan: kNN graph + indicators + 2-D map for one loaded model, as table columns.

:func:`scan` does no I/O except the kNN cache; the ``scan`` command and ``audit`` write the columns
into ``tokens.parquet`` and the summary into ``summary.json``.

Columns (one value per matrix row): ``in_norm``, ``out_norm`` (null when tied), ``zero_row``,
``ref_sim`` (Magikarp reference similarity, null without reference), ``isolation``, ``knn_sim_k``,
``script``, ``undertrained_score`` (higher = more under-trained), ``flagged``, ``neighbors``,
``neighbor_sims``, ``x``, ``y`` (null when ``layout=False``). See
:mod:`embscope.geometry.indicators` for the formulas.
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from embscope.geometry.indicators import DEFAULT_THRESHOLD, THRESHOLD_NOTE, compute_indicators

if TYPE_CHECKING:  # pragma: no cover
    from embscope.model import LoadedModel

#: how many of the most under-trained normal tokens the summary lists
TOP_N = 30


@dataclass
class ScanResult:
    """Per-row columns and a JSON-able summary."""

    #: column name -> list/array of length n_rows
    columns: dict[str, Any]
    #: counts, flagged share, top tokens, per-script figures, kNN and reference records
    summary: dict[str, Any]
    #: step name -> seconds
    timings: dict[str, float] = field(default_factory=dict)


def _script_fn():
    try:
        from embscope.languages.script import script_of
    except ImportError:  # pragma: no cover - the shared helper is part of the package
        return lambda s: "none"
    return script_of


def _clean(v):
    """float NaN -> None for JSON."""
    return None if isinstance(v, float) and not math.isfinite(v) else v


def scan(model: "LoadedModel", *, k: int = 10, unused_ids: list[int] | None = None,
         threshold: float = DEFAULT_THRESHOLD, cache_dir=None, layout: bool = True,
         seed: int = 0, knn_method: str = "auto") -> ScanResult:
    """Scan every row of ``model`` for signs of under-training.

    Args:
        model: a :class:`~embscope.model.LoadedModel`.
        k: neighbours per row in the kNN graph (of the input embedding).
        unused_ids: rows known to be unused (the Magikarp reference); default: found automatically.
        threshold: ``undertrained_score`` at or above which a row is flagged.
        cache_dir: kNN cache folder (default ``~/.cache/embscope/knn``).
        layout: compute the UMAP map (``x``, ``y``).
        seed: seeds the kNN sample, k-means and UMAP.
    Returns:
        :class:`ScanResult`.
    """
    from embscope.geometry.knn import knn_graph

    timings: dict[str, float] = {}
    t = time.perf_counter()
    graph = knn_graph(model.embed, k, method=knn_method, cache_dir=cache_dir, seed=seed)
    timings["knn"] = time.perf_counter() - t

    n = model.n_rows
    strings = model.token_strings()
    cats = list(model.categories)
    t = time.perf_counter()
    ind = compute_indicators(model.embed, model.output, cats, strings, graph.sims,
                             unused_ids=unused_ids, threshold=threshold)
    script_of = _script_fn()
    scripts = [script_of(s) if c not in ("padding", "special") and s else "none"
               for s, c in zip(strings, cats)]
    timings["indicators"] = time.perf_counter() - t

    if layout:
        from embscope.geometry.layout import umap_layout

        lay = umap_layout(graph.neighbors, graph.sims, seed=seed)
        xs, ys = lay.x, lay.y
        timings["layout"] = lay.seconds
    else:
        xs = ys = np.full(n, np.nan, np.float32)

    tied = model.output is None
    columns: dict[str, Any] = {
        "in_norm": ind.in_norm.astype(np.float32),
        "out_norm": [None] * n if tied else ind.out_norm.astype(np.float32),
        "zero_row": ind.zero_row,
        "ref_sim": [None] * n if np.isnan(ind.ref_sim).all() else ind.ref_sim.astype(np.float32),
        "isolation": ind.isolation.astype(np.float32),
        "knn_sim_k": ind.knn_sim_k.astype(np.float32),
        "script": scripts,
        "undertrained_score": ind.undertrained_score.astype(np.float32),
        "flagged": ind.flagged,
        "neighbors": graph.neighbors.tolist(),
        "neighbor_sims": [list(map(float, r)) for r in graph.sims],
        "x": xs,
        "y": ys,
    }
    summary = _summary(cats, strings, scripts, ind, graph, threshold, tied)
    summary["timings"] = {k: round(v, 3) for k, v in timings.items()}
    return ScanResult(columns=columns, summary=summary, timings=timings)


def _summary(cats, strings, scripts, ind, graph, threshold, tied) -> dict[str, Any]:
    cats_a = np.asarray(cats)
    normal = cats_a == "normal"
    score = ind.undertrained_score
    counts = Counter(cats)
    flagged_by_cat = {c: int(ind.flagged[cats_a == c].sum()) for c in counts}
    order = np.argsort(-np.nan_to_num(score, nan=-np.inf))
    top = [{"id": int(i), "token": strings[i], "score": round(float(score[i]), 3)}
           for i in order if normal[i]][:TOP_N]
    per_script: dict[str, dict[str, Any]] = {}
    groups: dict[str, list[int]] = defaultdict(list)
    for i in np.flatnonzero(normal):
        groups[scripts[i]].append(i)
    norm_col = ind.in_norm if tied else ind.out_norm
    for sc, ids in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        ids_a = np.asarray(ids)
        per_script[sc] = {"rows": len(ids), "flagged": int(ind.flagged[ids_a].sum()),
                          "flagged_share": round(float(ind.flagged[ids_a].mean()), 4),
                          "mean_norm": round(float(norm_col[ids_a].mean()), 4)}
    n_normal = int(normal.sum())
    ref = ind.reference
    return {
        "rows": len(cats),
        "categories": dict(counts),
        "flagged": {"normal": int(ind.flagged[normal].sum()),
                    "normal_share": round(float(ind.flagged[normal].mean()) if n_normal else 0.0, 5),
                    "by_category": flagged_by_cat,
                    "zero_rows": int(ind.zero_row.sum())},
        "threshold": threshold,
        "threshold_note": THRESHOLD_NOTE,
        "top_undertrained": top,
        "per_script": per_script,
        "knn": graph.record(),
        "reference": {"size": len(ref.ids), "source": ref.source,
                      "note": None if ref.ids else "no known-unused rows: ref_sim is empty and the "
                      "score uses the distance from the trained centre and the knot term only"},
        "fit": {k: {kk: _clean(vv) for kk, vv in v.items()} for k, v in ind.fit.items()},
        "tied": tied,
    }


def format_scan_summary(summary: dict[str, Any]):
    """A rich renderable (tables) for the terminal."""
    from rich.console import Group
    from rich.markup import escape
    from rich.table import Table

    head = Table(title="Token rows", show_header=False)
    head.add_row("rows", str(summary["rows"]))
    for c, v in summary["categories"].items():
        head.add_row(f"  {c}", str(v))
    f = summary["flagged"]
    head.add_row("flagged normal", f"{f['normal']} ({100 * f['normal_share']:.2f} %)")
    head.add_row("zero rows", str(f["zero_rows"]))
    head.add_row("threshold", str(summary["threshold"]))
    ref = summary["reference"]
    head.add_row("reference", f"{ref['size']} rows ({ref['source']})")
    kn = summary["knn"]
    head.add_row("kNN", f"{kn['method']} k={kn['k']} recall@k={kn['recall_at_k']:.3f} "
                 f"{kn['seconds']:.1f} s{' (cached)' if kn['cached'] else ''}")
    top = Table(title=f"Most under-trained normal tokens (top {len(summary['top_undertrained'])})")
    top.add_column("id", justify="right")
    top.add_column("token")
    top.add_column("score", justify="right")
    for r in summary["top_undertrained"]:
        top.add_row(str(r["id"]), escape(repr(r["token"])), f"{r['score']:.2f}")
    scr = Table(title="Per script (normal tokens)")
    for col in ("script", "rows", "flagged", "share", "mean norm"):
        scr.add_column(col, justify="left" if col == "script" else "right")
    for name, v in list(summary["per_script"].items())[:15]:
        scr.add_row(name, str(v["rows"]), str(v["flagged"]), f"{100 * v['flagged_share']:.2f} %",
                    f"{v['mean_norm']:.3f}")
    return Group(head, top, scr)
