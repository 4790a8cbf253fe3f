"""The token-row scan: kNN graph + indicators (+ verification, corpus usage) + 2-D map, as table columns.

:func:`scan` does no I/O except the kNN cache (and, with ``verify``, loading the whole model); the
``scan`` command and ``audit`` write the columns into ``tokens.parquet`` and the summary into
``summary.json`` (``geometry``).

Columns (one value per matrix row; formulas in :mod:`embscope.geometry.indicators`):

- raw indicators: ``in_norm``, ``out_norm`` (null when tied), ``zero_row``, ``magikarp_sim`` (null
  without reference), ``knot`` (mean cosine to the k nearest rows), ``isolation`` (1 − cosine to the
  nearest row), ``knn_sim_k``, ``neighbor_spread`` (mean relative distance to the ⌈k/2⌉ nearest rows, the
  collapse gate);
- evidence, robust z against the trained rows, positive toward "untrained": ``z_in_norm``,
  ``z_out_norm``, ``z_magikarp``, ``z_knot``, ``z_isolation`` (null where the indicator does not exist);
- ``undertrained_score`` (max of the scored evidence), ``flagged``, ``isolated`` (own flag),
  ``flag_reason`` (``"in_norm+knot"``, ``"zero"``, ``"isolated"``; null where nothing fired);
- ``verify_max_prob`` (null where not checked, see :mod:`embscope.geometry.verify`),
  ``undertrained_status`` (``verified``, ``candidate``, ``cleared``, ``control``, null; :func:`status_column`);
- ``corpus_count``, ``template_count`` (occurrences of flagged rows in the corpus and in the
  rendered chat template; null for unflagged rows or without ``corpus_texts``, see
  :mod:`embscope.geometry.usage`);
- ``script``, ``neighbors``, ``neighbor_sims``, ``x``, ``y`` (null when ``layout=False``).

Summary keys (``summary.json`` → ``geometry``):

``rows``, ``categories``
    matrix rows and rows per category.
``flagged``
    ``normal`` (flagged normal rows), ``normal_share``, ``by_category``, ``by_reason`` (each
    indicator and ``zero``: flagged rows it fired on, all categories), ``zero_rows``, ``isolated``
    (normal rows with the isolation flag), ``family`` (normal rows whose knot is a trained family,
    not a collapse) and ``drift`` (normal rows whose Magikarp similarity stops short of the unused
    rows): not flagged, see the gates in :mod:`embscope.geometry.indicators`.
``threshold``, ``threshold_note``
    the cut and what it means on this run (scale, share of trained rows flagged, per indicator).
``indicators``
    per evidence name: ``side``, ``median`` (norms: of the norm), ``scale`` (robust, of −log norm
    for norms), ``scale_of``; ``run``: ``trained_rows``, ``trained_flagged_share``,
    ``per_indicator_share``, ``gaussian_tail``.
``reference``
    ``size``, ``source``, ``by_source`` (rule → rows), ``note`` (what still works without one).
``top_undertrained``
    the :data:`TOP_N` highest-scoring normal rows: ``id``, ``token``, ``score``, ``reason``.
``top_isolated``
    the :data:`TOP_N` most isolated normal rows: ``id``, ``token``, ``z``.
``per_script``
    per script of normal rows: ``rows``, ``flagged``, ``flagged_share``, ``mean_norm``.
``knn``
    the kNN graph record (method, k, recall, seconds, cached).
``verification``
    ``None`` without ``verify``; else :meth:`~embscope.geometry.verify.Verification.to_dict`:
    ``n_checked``, ``n_verified_undertrained``, ``precision``, ``controls_checked``,
    ``controls_failed``, ``prompts``, ``max_prob_cut``, ``device``, ``seconds``, ``note``.
``verified_undertrained``, ``candidates``, ``cleared``
    the lists kept apart (:func:`verdict_lists`): ``{count, rows}``; the verified and cleared are
    null without verification.
``usage``
    ``None`` without ``corpus_texts``; else :meth:`~embscope.geometry.usage.Usage.to_dict`:
    ``texts``, ``corpus_tokens``, ``template``, ``flagged_used``, ``flagged_in_template``,
    ``occurrences``, ``top`` (``id``, ``token``, ``reason``, ``corpus``, ``template``).
``layout``
    ``None`` without the map; else ``seconds``, ``n_epochs``, ``init``, ``neighbor_preservation`` (share of
    each sampled row's k graph neighbours among its k nearest points in 2-D), ``preservation_rows``.
``tied``, ``timings``
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from embscope.allocator import release_free_blocks
from embscope.geometry.indicators import DEFAULT_THRESHOLD, SCORED, compute_indicators
from embscope.geometry.reference import no_reference_note

if TYPE_CHECKING:  # pragma: no cover
    from embscope.geometry.usage import Usage
    from embscope.geometry.verify import Verification
    from embscope.models.model import LoadedModel

#: how many of the most under-trained normal tokens the summary lists
TOP_N = 30
#: verified rows listed in the summary at most (all of them on the models we measured)
LIST_MAX = 500


@dataclass
class ScanResult:
    """Per-row columns and a JSON-able summary."""

    #: column name -> list/array of length n_rows
    columns: dict[str, Any]
    #: see the module docstring for the keys
    summary: dict[str, Any]
    #: step name -> seconds
    timings: dict[str, float] = field(default_factory=dict)
    #: the prompting record (None without ``verify``)
    verification: "Verification | None" = None
    #: corpus/template counts (None without ``corpus_texts``); ``usage.used_ids()`` feeds repair
    usage: "Usage | None" = None
    #: the map still being laid out (``scan(defer_layout=True)``); :meth:`finish_layout` collects it
    layout_job: Any = None

    def finish_layout(self) -> None:
        """Wait for the map a deferred scan started, then fill ``x``, ``y``, ``summary["layout"]``
        and the timings (``layout``: the layout's own seconds; ``layout_wait``: how long this
        process waited for it). Nothing to do when there is none."""
        if self.layout_job is None:
            return
        t = time.perf_counter()
        lay, self.layout_job = self.layout_job.result(), None
        self.columns["x"], self.columns["y"] = lay.x, lay.y
        self.timings.update(layout=lay.seconds, layout_wait=time.perf_counter() - t)
        self.summary["layout"] = lay.record()
        self.summary["timings"] = {k: round(v, 3) for k, v in self.timings.items()}

    def repair_rows(self, categories: Sequence[str], *, include_special: bool = False) -> list[int]:
        """Flagged rows the corpus or template uses, most used first — what ``--repair`` rewrites.
        Special tokens are left out unless ``include_special`` (a chat model's own
        ``<|im_end|>`` can sit among never-used specials and still be predicted)."""
        if self.usage is None:
            return []
        return [i for i in self.usage.used_ids() if include_special or categories[i] != "special"]



def _clean(v):
    """float NaN -> None for JSON."""
    return None if isinstance(v, float) and not math.isfinite(v) else v


def _nullable(v: np.ndarray) -> Any:
    """float32 array, or a list of None when the whole column is NaN."""
    return [None] * len(v) if np.isnan(v).all() else np.asarray(v, dtype=np.float32)


def scan(model: "LoadedModel", *, k: int = 10, unused_ids: list[int] | None = None,
         threshold: float = DEFAULT_THRESHOLD, cache_dir=None, layout: bool = True,
         seed: int = 0, knn_method: str = "auto", verify: int = 0, verify_sample: str = "top",
         verify_time_cap: float | None = None,
         corpus_texts: Sequence[str] | None = None, chat_template: bool = True,
         defer_layout: bool = False) -> ScanResult:
    """Scan every row of ``model`` for signs of under-training.

    Args:
        model: a :class:`~embscope.models.model.LoadedModel`.
        k: neighbours per row in the kNN graph (of the input embedding).
        unused_ids: rows known to be unused (the Magikarp reference); default: discovered.
        threshold: ``undertrained_score`` (robust sigmas) at or above which a row is flagged.
        cache_dir: kNN cache folder (default ``~/.cache/embscope/knn``).
        layout: compute the UMAP map (``x``, ``y``).
        seed: seeds the kNN sample, k-means, UMAP and the verification controls.
        verify: check ``verify`` flagged rows (and as many trained controls, up to
            :data:`~embscope.geometry.verify.MAX_CONTROLS`) by prompting the whole model; 0 skips
            it. A model that cannot load gets a note, not an error.
        verify_sample: ``top`` (the highest scores) or ``random`` (a seeded sample of all flags,
            whose verified share estimates the precision of every flag).
        verify_time_cap: seconds after which the prompting stops (whole batches; the record says so).
        corpus_texts: texts of the user's corpus: count which flagged rows they (and the model's
            chat template, when ``chat_template``) produce.
        defer_layout: return while the map (laid out in its own process from the moment the graph
            exists, :class:`~embscope.geometry.layout.LayoutJob`) is still running; the caller
            collects it with :meth:`ScanResult.finish_layout`.
    Returns:
        :class:`ScanResult`.
    """
    from embscope.geometry.knn import knn_graph, resolve_method

    timings: dict[str, float] = {}
    n = model.n_rows
    strings = model.token_strings()
    cats = list(model.categories)
    method, weighed = resolve_method(model.embed, k, knn_method)
    if method == "certified":  # the certificate needs the graph-free indicators first
        from embscope.geometry.certify import certified_knn, context_for
        from embscope.geometry.indicators import prepare

        t = time.perf_counter()
        prep = prepare(model.embed, model.output, cats, strings, vocab=model.vocab, unused_ids=unused_ids)
        timings["indicators"] = time.perf_counter() - t
        t = time.perf_counter()
        graph = certified_knn(model.embed, k, context=context_for(prep, cats, threshold), seed=seed,
                              cache_dir=cache_dir, weighed=weighed)
        timings["knn"] = time.perf_counter() - t
        knn_fit = {name: tuple(v) for name, v in graph.params["knn_fit"].items()}
    else:
        t = time.perf_counter()
        graph = knn_graph(model.embed, k, method=knn_method, cache_dir=cache_dir, seed=seed)
        timings["knn"] = time.perf_counter() - t
        prep = knn_fit = None
    release_free_blocks()  # the graph's build buffers are not reused by the indicators
    job = None
    if layout:
        from embscope.geometry.layout import LayoutJob

        job = LayoutJob(graph.neighbors, graph.sims, seed=seed)  # the graph above: no second search

    t = time.perf_counter()
    ind = compute_indicators(model.embed, model.output, cats, strings, graph.sims, vocab=model.vocab,
                             unused_ids=unused_ids, threshold=threshold, neighbors=graph.neighbors,
                             prepared=prep, knn_fit=knn_fit)
    from embscope.text.script import script_of

    scripts = [script_of(s) if c not in ("padding", "special") and s else "none"
               for s, c in zip(strings, cats)]
    timings["indicators"] = timings.get("indicators", 0.0) + time.perf_counter() - t
    release_free_blocks()

    verification = None
    verify_col: Any = [None] * n
    if verify:
        from embscope.geometry.verify import verify_rows

        t = time.perf_counter()
        verification = verify_rows(model, ind, verify, sample=verify_sample, seed=seed, texts=corpus_texts,
                                   time_cap_s=verify_time_cap, device=model.device)
        verify_col = verification.column(n)
        confirm_flags(ind, verification)
        timings["verify"] = time.perf_counter() - t

    usage = None
    if corpus_texts is not None:
        from embscope.geometry.usage import flagged_usage

        t = time.perf_counter()
        # rows prompting cleared are trained: never listed as "used flagged rows", never repaired
        cleared = [i for i, s in enumerate(status_column(ind.flagged, verification)) if s == "cleared"]
        kept = ind.flagged.copy()
        kept[cleared] = False
        usage = flagged_usage(model, np.flatnonzero(kept), corpus_texts, reasons=ind.flag_reason,
                              chat_template=chat_template)
        timings["usage"] = time.perf_counter() - t

    xs = ys = np.full(n, np.nan, np.float32)  # filled by finish_layout

    tied = model.output is None
    columns: dict[str, Any] = {
        "in_norm": ind.in_norm.astype(np.float32),
        "out_norm": _nullable(ind.out_norm),
        "zero_row": ind.zero_row,
        "magikarp_sim": _nullable(ind.magikarp_sim),
        "knot": ind.knot.astype(np.float32),
        "isolation": ind.isolation.astype(np.float32),
        "knn_sim_k": ind.knn_sim_k.astype(np.float32),
        "neighbor_spread": _nullable(ind.spread) if ind.spread is not None else [None] * n,
        **{f"z_{name}": _nullable(ind.z[name]) if name in ind.z else [None] * n
           for name in (*SCORED, "isolation")},
        "script": scripts,
        "undertrained_score": ind.undertrained_score.astype(np.float32),
        "flagged": ind.flagged,
        "isolated": ind.isolated,
        "flag_reason": ind.flag_reason,
        "verify_max_prob": verify_col,
        "undertrained_status": status_column(ind.flagged, verification),
        **(usage.columns(n) if usage is not None else {"corpus_count": [None] * n, "template_count": [None] * n}),
        "knn_exact": knn_exact_column(graph),
        "neighbors": np.asarray(graph.neighbors),               # (n, k): the table stores them as lists
        "neighbor_sims": np.asarray(graph.sims, dtype=np.float32),
        "x": xs,
        "y": ys,
    }
    summary = _summary(cats, strings, scripts, ind, graph, threshold, tied)
    summary["verification"] = verification.to_dict() if verification is not None else None
    summary.update(verdict_lists(columns["undertrained_status"], strings, ind, verification))
    summary["usage"] = usage.to_dict() if usage is not None else None
    summary["layout"] = None
    summary["timings"] = {k: round(v, 3) for k, v in timings.items()}
    res = ScanResult(columns=columns, summary=summary, timings=timings, verification=verification, usage=usage,
                     layout_job=job)
    if not defer_layout:
        res.finish_layout()
    return res


def knn_exact_column(graph) -> np.ndarray:
    """Per row: whether its neighbours are exact search's (exact: every row; certified: the rows it
    searched exactly; the approximate methods: none)."""
    n = len(graph.neighbors)
    if graph.exact is not None:
        return np.asarray(graph.exact, dtype=bool)
    return np.full(n, graph.method == "exact", dtype=bool)


def confirm_flags(ind, verification: "Verification") -> None:
    """Flag the rows prompting confirmed although the indicators did not flag them: family rows
    (knot without collapse) and special tokens checked in context. Controls stay as they are
    (a failed control measures the check's false alarms)."""
    ctrl = set(verification.control_ids)
    for i in verification.verified_ids():
        if i not in ctrl and not ind.flagged[i]:
            ind.flagged[i] = True
            ind.flag_reason[i] = ind.flag_reason[i] or "verified"


#: values of the ``undertrained_status`` column
STATUSES = ("verified", "candidate", "cleared", "control")


def status_column(flagged: np.ndarray, verification: "Verification | None") -> list[str | None]:
    """Per row: ``verified`` (prompting confirmed: max_prob < cut; flagged normal rows and the
    special tokens checked in context), ``cleared`` (flagged, but the model predicts it: trained),
    ``candidate`` (flagged, not checked: indicators only), ``control`` (a trained control), else
    None."""
    out: list[str | None] = ["candidate" if f else None for f in flagged]
    if verification is None:
        return out
    ctrl = set(verification.control_ids)
    for i, p in verification.max_prob.items():
        if i in ctrl:
            out[i] = "control"
        elif p < verification.max_prob_cut:
            out[i] = "verified"
        elif flagged[i]:
            out[i] = "cleared"
    return out


def verdict_lists(status: list[str | None], strings, ind, verification) -> dict[str, Any]:
    """``verified_undertrained`` and ``candidates`` for the summary, kept apart: ``{count, rows}``
    each (rows: ``id``, ``token``, ``score``, ``reason``, and ``max_prob`` for the verified), the
    verified in full up to :data:`LIST_MAX`, the candidates by score up to :data:`TOP_N`; plus
    ``cleared`` (flagged rows the prompting found trained)."""
    score = ind.undertrained_score
    probs = verification.max_prob if verification is not None else {}

    def row(i):
        r = {"id": int(i), "token": strings[i], "score": round(float(score[i]), 3), "reason": ind.flag_reason[i]}
        if i in probs:
            r["max_prob"] = probs[i]
        return r

    by = defaultdict(list)
    for i, s in enumerate(status):
        if s is not None:
            by[s].append(i)
    order = lambda ids: sorted(ids, key=lambda i: -float(np.nan_to_num(score[i], nan=-np.inf)))  # noqa: E731
    return {
        "verified_undertrained": None if verification is None or verification.n_checked is None else
        {"count": len(by["verified"]), "rows": [row(i) for i in order(by["verified"])[:LIST_MAX]]},
        "candidates": {"count": len(by["candidate"]), "rows": [row(i) for i in order(by["candidate"])[:TOP_N]]},
        "cleared": None if verification is None or verification.n_checked is None else
        {"count": len(by["cleared"]), "rows": [row(i) for i in order(by["cleared"])[:TOP_N]]},
    }


def _by_reason(ind) -> dict[str, int]:
    out: Counter = Counter()
    for r, f in zip(ind.flag_reason, ind.flagged):
        if r and f:
            out.update(p for p in r.split("+") if p != "isolated")
    return dict(out)


def _listable(graph, name: str, rows: np.ndarray) -> np.ndarray:
    """The rows a summary list may show: ``rows``, or, when a certified graph could not prove list
    ``name`` within its search cap (``knn.certificate.lists[name]`` false), only those of them
    searched exactly (the rows with the highest bounds), so every figure listed is exact search's."""
    lists = (graph.params.get("certificate") or {}).get("lists") or {}
    if graph.exact is not None and lists.get(name) is False:
        return rows & np.asarray(graph.exact, dtype=bool)
    return rows


def _summary(cats, strings, scripts, ind, graph, threshold, tied) -> dict[str, Any]:
    cats_a = np.asarray(cats)
    normal = cats_a == "normal"
    score = ind.undertrained_score
    counts = Counter(cats)
    flagged_by_cat = {c: int(ind.flagged[cats_a == c].sum()) for c in counts}
    order = np.argsort(-np.nan_to_num(score, nan=-np.inf))
    listable = _listable(graph, "top_score:normal", normal)
    top = [{"id": int(i), "token": strings[i], "score": round(float(score[i]), 3), "reason": ind.flag_reason[i]}
           for i in order if listable[i]][:TOP_N]
    iso = ind.z["isolation"]
    listable = _listable(graph, "top_isolated", normal)
    top_iso = [{"id": int(i), "token": strings[i], "z": round(float(iso[i]), 3)}
               for i in np.argsort(-np.nan_to_num(iso, nan=-np.inf)) if listable[i]][:TOP_N]
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
    fit = {k: ({kk: _clean(vv) for kk, vv in v.items()} if k != "run" else v) for k, v in ind.fit.items()}
    return {
        "rows": len(cats),
        "categories": dict(counts),
        "flagged": {"normal": int(ind.flagged[normal].sum()),
                    "normal_share": round(float(ind.flagged[normal].mean()) if n_normal else 0.0, 5),
                    "by_category": flagged_by_cat,
                    "by_reason": _by_reason(ind),
                    "zero_rows": int(ind.zero_row.sum()),
                    "isolated": int(ind.isolated[normal].sum()),
                    **{tag: sum(1 for i in np.flatnonzero(normal & ~ind.flagged)
                                if ind.flag_reason[i] is not None and tag in ind.flag_reason[i])
                       for tag in ("family", "drift")}},
        "threshold": threshold,
        "threshold_note": ind.note,
        "indicators": fit,
        "top_undertrained": top,
        "top_isolated": top_iso,
        "per_script": per_script,
        "knn": graph.record(),
        "reference": {**ref.record(), "note": None if ref.ids else no_reference_note(tied)},
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
    for r, v in f.get("by_reason", {}).items():
        head.add_row(f"  {r} fired", str(v))
    head.add_row("isolated normal", str(f.get("isolated", 0)))
    head.add_row("zero rows", str(f["zero_rows"]))
    head.add_row("threshold", str(summary["threshold"]))
    ref = summary["reference"]
    head.add_row("reference", f"{ref['size']} rows ({ref['source']})")
    kn = summary["knn"]
    head.add_row("kNN", f"{kn['method']} k={kn['k']} recall@k={kn['recall_at_k']:.3f} "
                 f"{kn['seconds']:.1f} s{' (cached)' if kn['cached'] else ''}")
    ver = summary.get("verification")
    if ver:
        head.add_row("verified", ver["note"] if ver.get("n_checked") is None else
                     f"{ver['n_verified_undertrained']}/{ver['n_checked']} (precision {ver['precision']}); "
                     f"controls failed {ver['controls_failed']}/{ver['controls_checked']}")
    use = summary.get("usage")
    if use:
        head.add_row("flagged rows your data uses", f"{use['flagged_used']} ({use['occurrences']} occurrences)")
    top = Table(title=f"Most under-trained normal tokens (top {len(summary['top_undertrained'])})")
    for col in ("id", "token", "score", "why"):
        top.add_column(col, justify="right" if col in ("id", "score") else "left")
    for r in summary["top_undertrained"]:
        top.add_row(str(r["id"]), escape(repr(r["token"])), f"{r['score']:.2f}", r.get("reason") or "")
    scr = Table(title="Per script (normal tokens)")
    for col in ("script", "rows", "flagged", "share", "mean norm"):
        scr.add_column(col, justify="left" if col == "script" else "right")
    for name, v in list(summary["per_script"].items())[:15]:
        scr.add_row(name, str(v["rows"]), str(v["flagged"]), f"{100 * v['flagged_share']:.2f} %",
                    f"{v['mean_norm']:.3f}")
    return Group(head, top, scr)
