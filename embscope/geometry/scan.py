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
- ``script``, ``neighbors``, ``neighbor_sims``, ``x``, ``y`` (null when the options' ``map`` is off).

The summary (``summary.json`` → ``geometry``) is a
:class:`~embscope.geometry.records.GeometryRecord`, built here field by field; its fields are
documented there (and listed in ``docs/schema.md``).
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from embscope.geometry.indicators import SCORED, Neighbors, compute_indicators, fit_record
from embscope.geometry.options import ScanOptions
from embscope.geometry.records import (TOP_N, FlaggedCounts, GeometryRecord, IsolatedRow, ScoredRow, ScriptRow,
                                       VerdictList, VerdictRow)

if TYPE_CHECKING:  # pragma: no cover
    from embscope.geometry.layout import LayoutJob
    from embscope.geometry.usage import Usage
    from embscope.geometry.verify import Verification
    from embscope.models.model import LoadedModel

#: verified rows listed in the summary at most (all of them on the models we measured)
LIST_MAX = 500


@dataclass
class ScanResult:
    """Per-row columns and the summary's record."""

    #: column name -> array (or list, for list and nullable columns) of length n_rows
    columns: "dict[str, np.ndarray | list]"
    #: the summary (``summary.json`` ``geometry``)
    summary: GeometryRecord
    #: step name -> seconds
    timings: dict[str, float] = field(default_factory=dict)
    #: the prompting record (None without ``verify``)
    verification: "Verification | None" = None
    #: corpus/template counts (None without ``corpus_texts``); ``usage.used_ids()`` feeds repair
    usage: "Usage | None" = None
    #: the map still being laid out (``scan(defer_layout=True)``); :meth:`finish_layout` collects it
    layout_job: "LayoutJob | None" = None

    def finish_layout(self) -> None:
        """Wait for the map a deferred scan started, then fill ``x``, ``y``, ``summary.layout``
        and the timings (``layout``: the layout's own seconds; ``layout_wait``: how long this
        process waited for it). Nothing to do when there is none."""
        if self.layout_job is None:
            return
        t = time.perf_counter()
        (xy, record), self.layout_job = self.layout_job.result(), None
        self.columns["x"], self.columns["y"] = xy[:, 0].copy(), xy[:, 1].copy()
        self.timings.update(layout=record.seconds, layout_wait=time.perf_counter() - t)
        self.summary.layout = record
        self.summary.timings = _rounded(self.timings)

    def repair_rows(self, categories: Sequence[str], *, include_special: bool = False) -> list[int]:
        """Flagged rows the corpus or template uses, most used first — what ``--repair`` rewrites.
        Special tokens are left out unless ``include_special`` (a chat model's own
        ``<|im_end|>`` can sit among never-used specials and still be predicted)."""
        if self.usage is None:
            return []
        return [i for i in self.usage.used_ids() if include_special or categories[i] != "special"]



def _nullable(v: np.ndarray) -> Any:
    """float32 array, or a list of None when the whole column is NaN."""
    return [None] * len(v) if np.isnan(v).all() else np.asarray(v, dtype=np.float32)


def scan(model: "LoadedModel", options: ScanOptions | None = None, *, corpus_texts: Sequence[str] | None = None,
         chat_template: bool = True, defer_layout: bool = False, verify_specials: bool = False,
         seed: int = 0) -> ScanResult:
    """Scan every row of ``model`` for signs of under-training.

    Args:
        model: a :class:`~embscope.models.model.LoadedModel`.
        options: the scan's group (:class:`~embscope.geometry.options.ScanOptions`; None: its defaults):

            - ``k``, ``knn_method``: neighbours per row in the kNN graph (of the input embedding) and
              how it is built (:func:`~embscope.geometry.knn.knn_graph`);
            - ``unused_ids``: rows known to be unused (the Magikarp reference); None: discovered;
            - ``threshold``: ``undertrained_score`` (robust sigmas) at or above which a row is flagged;
            - ``cache_dir``: kNN cache folder (None: ``$EMBSCOPE_CACHE/knn`` or ``~/.cache/embscope/knn``);
            - ``map``: compute the UMAP map (``x``, ``y``);
            - ``verify``: check ``verify`` flagged rows (and as many trained controls, up to
              :data:`~embscope.geometry.verify.MAX_CONTROLS`) by prompting the whole model; 0 (or
              None, the automatic choice the caller resolves) skips it. A model that cannot load
              gets a note, not an error;
            - ``verify_sample``: ``top`` (the highest scores) or ``random`` (a seeded sample of all
              flags, whose verified share estimates the precision of every flag);
            - ``verify_work``: the prompting's work budget, 10¹² multiply-adds
              (:func:`~.verify.row_work`; None: none): rows beyond it stay unchecked.
        corpus_texts: texts of the user's corpus: count which flagged rows they (and the model's
            chat template, when ``chat_template``) produce.
        defer_layout: return while the map (laid out in its own process from the moment the
            indicators exist, :class:`~embscope.geometry.layout.LayoutJob`) is still running; the caller
            collects it with :meth:`ScanResult.finish_layout`.
        verify_specials: with ``verify`` 0, still check in context the special tokens the chat
            template (and ``corpus_texts``) use (:func:`~.verify.verify_specials`; check, diff).
        seed: seeds the kNN sample, k-means, UMAP and the verification controls.
    Returns:
        :class:`ScanResult`.
    """
    opts = options if options is not None else ScanOptions()
    timings: dict[str, float] = {}
    strings = model.token_strings()
    cats = list(model.categories)
    graph, prep, knn_fit = _graph(model, opts, seed, cats, strings, timings)
    t = time.perf_counter()
    ind = compute_indicators(model.embed, model.output, cats, strings,
                             Neighbors(sims=graph.sims, ids=graph.neighbors, fit=knn_fit), vocab=model.vocab,
                             unused_ids=opts.unused_ids, threshold=opts.threshold, prepared=prep)
    job = None
    if opts.map:  # the graph above, no second search; the flagged and isolated rows always laid out
        from embscope.geometry.layout import LayoutJob

        job = LayoutJob(graph.neighbors, graph.sims, seed=seed, keep=ind.flagged | ind.isolated)
    from embscope.text.script import script_of

    scripts = [script_of(s) if c not in ("padding", "special") and s else "none"
               for s, c in zip(strings, cats)]
    timings["indicators"] = timings.get("indicators", 0.0) + time.perf_counter() - t

    indicator_flags = ind.flagged.copy()  # before prompting adds the rows it confirms
    verification = None
    if opts.verify or verify_specials:
        t = time.perf_counter()
        verification = _verify(model, ind, opts, seed, corpus_texts)
        timings["verify"] = time.perf_counter() - t
    status = status_column(ind.flagged, verification)
    usage = None
    if corpus_texts is not None:
        t = time.perf_counter()
        usage = _usage(model, ind, status, corpus_texts, chat_template)
        timings["usage"] = time.perf_counter() - t

    columns = _columns(model.n_rows, ind, graph, scripts, status, verification, usage)
    tied = model.output is None
    summary = _summary(cats, strings, scripts, ind, graph, opts.threshold, tied, status, indicator_flags,
                       verification=verification.record if verification is not None else None,
                       usage=usage.record if usage is not None else None, timings=_rounded(timings),
                       **verdict_lists(status, strings, ind, verification))
    res = ScanResult(columns=columns, summary=summary, timings=timings, verification=verification, usage=usage,
                     layout_job=job)
    if not defer_layout:
        res.finish_layout()
    return res


def _rounded(timings: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 3) for k, v in timings.items()}


def _verify(model: "LoadedModel", ind, opts: ScanOptions, seed: int, texts) -> "Verification":
    """Prompt-check ``opts.verify`` flagged rows (:func:`~embscope.geometry.verify.verify_rows`,
    picked as ``opts.verify_sample`` says, within the ``opts.verify_work`` budget; 0 or None: only
    the special tokens in context, :func:`~embscope.geometry.verify.verify_specials`) and flag the
    rows it confirmed that the indicators did not (:func:`confirm_flags`)."""
    from embscope.geometry.verify import verify_rows, verify_specials

    n, sample, work = opts.verify or 0, opts.verify_sample, opts.verify_work

    verification = (verify_rows(model, ind, n, sample=sample, seed=seed, texts=texts, work_budget=work,
                                device=model.device) if n else
                    verify_specials(model, ind, device=model.device, texts=texts))
    confirm_flags(ind, verification)
    return verification


def _usage(model: "LoadedModel", ind, status: list[str | None], texts, chat_template: bool) -> "Usage":
    """The flagged rows ``texts`` and the chat template produce; rows prompting cleared are trained:
    never listed as "used flagged rows", never repaired."""
    from embscope.geometry.usage import flagged_usage

    kept = ind.flagged.copy()
    kept[[i for i, s in enumerate(status) if s == "cleared"]] = False
    return flagged_usage(model, np.flatnonzero(kept), texts, reasons=ind.flag_reason, chat_template=chat_template)


def _graph(model: "LoadedModel", opts: ScanOptions, seed: int, cats: list[str], strings: list[str],
           timings: dict[str, float]):
    """``(graph, prepared, knn_fit)``: the kNN graph ``opts.knn_method`` asks for; the certified one
    needs the graph-free indicators first (``prepared``) and gives the robust fits it decided with."""
    from embscope.geometry.knn import knn_graph, resolve_method

    k, knn_method, cache_dir = opts.k, opts.knn_method, opts.cache_dir

    method, weighed = resolve_method(model.embed, k, knn_method)
    if method != "certified":
        t = time.perf_counter()
        graph = knn_graph(model.embed, k, method=knn_method, cache_dir=cache_dir, seed=seed)
        timings["knn"] = time.perf_counter() - t
        return graph, None, None
    from embscope.geometry.certify import certified_knn, context_for
    from embscope.geometry.indicators import prepare

    t = time.perf_counter()
    prep = prepare(model.embed, model.output, cats, strings, vocab=model.vocab, unused_ids=opts.unused_ids)
    timings["indicators"] = time.perf_counter() - t
    t = time.perf_counter()
    graph = certified_knn(model.embed, k, context=context_for(prep, cats, opts.threshold), seed=seed,
                          cache_dir=cache_dir, weighed=weighed)
    timings["knn"] = time.perf_counter() - t
    return graph, prep, {name: tuple(v) for name, v in (graph.info.knn_fit or {}).items()}


def _columns(n: int, ind, graph, scripts: list[str], status: list[str | None],
             verification: "Verification | None", usage: "Usage | None") -> dict[str, Any]:
    """The tokens table's scan columns (module docstring), one value per row; ``x``, ``y`` stay NaN
    until :meth:`ScanResult.finish_layout`."""
    return {
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
        "verify_max_prob": verification.column(n) if verification is not None else [None] * n,
        "undertrained_status": status,
        **(usage.columns(n) if usage is not None else {"corpus_count": [None] * n, "template_count": [None] * n}),
        "knn_exact": knn_exact_column(graph),
        "neighbors": np.asarray(graph.neighbors),               # (n, k): the table stores them as lists
        "neighbor_sims": np.asarray(graph.sims, dtype=np.float32),
        "x": np.full(n, np.nan, np.float32),
        "y": np.full(n, np.nan, np.float32),
    }


def knn_exact_column(graph) -> np.ndarray:
    """Per row: whether its neighbours are exact search's (exact: every row; certified: the rows it
    searched exactly; the approximate methods: none)."""
    n = len(graph.neighbors)
    if graph.exact is not None:
        return np.asarray(graph.exact, dtype=bool)
    return np.full(n, graph.info.method == "exact", dtype=bool)


def confirm_flags(ind, verification: "Verification") -> None:
    """Flag the rows prompting confirmed although the indicators did not flag them: family rows
    (knot without collapse) and special tokens checked in context. Controls stay as they are
    (a failed control measures the check's false alarms)."""
    ctrl = set(verification.control_ids)
    for i in verification.verified_ids():
        if i not in ctrl and not ind.flagged[i]:
            ind.flagged[i] = True
            ind.flag_reason[i] = ind.flag_reason[i] or "verified"


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


def verdict_lists(status: list[str | None], strings, ind,
                  verification: "Verification | None") -> dict[str, VerdictList | None]:
    """``verified_undertrained``, ``candidates`` and ``cleared`` (flagged rows the prompting found
    trained) for the summary, kept apart: the verified in full up to :data:`LIST_MAX`, the others
    by score up to :data:`TOP_N`; the verified and cleared are None without verification."""
    score = ind.undertrained_score
    probs = verification.max_prob if verification is not None else {}

    def row(i):
        return VerdictRow(id=int(i), token=strings[i], score=round(float(score[i]), 3), reason=ind.flag_reason[i],
                          max_prob=probs.get(i))

    by = defaultdict(list)
    for i, s in enumerate(status):
        if s is not None:
            by[s].append(i)

    def listed(name: str, most: int) -> VerdictList:
        ids = sorted(by[name], key=lambda i: -float(np.nan_to_num(score[i], nan=-np.inf)))
        return VerdictList(count=len(ids), rows=[row(i) for i in ids[:most]])

    checked = verification is not None and verification.checked
    return {"verified_undertrained": listed("verified", LIST_MAX) if checked else None,
            "candidates": listed("candidate", TOP_N),
            "cleared": listed("cleared", TOP_N) if checked else None}


def _by_reason(ind, normal: np.ndarray) -> dict[str, int]:
    """{indicator: flagged normal rows it fired on}: the rows the flagged count counts."""
    out: Counter = Counter()
    for r, f, n in zip(ind.flag_reason, ind.flagged, normal):
        if r and f and n:
            out.update(p for p in r.split("+") if p != "isolated")
    return dict(out)


def _listable(graph, name: str, rows: np.ndarray) -> np.ndarray:
    """The rows a summary list may show: ``rows``, or, when a certified graph could not prove list
    ``name`` within its search cap (``knn.certificate.lists[name]`` false), only those of them
    searched exactly (the rows with the highest bounds), so every figure listed is exact search's."""
    cert = graph.info.certificate
    if graph.exact is not None and cert is not None and cert.lists.get(name) is False:
        return rows & np.asarray(graph.exact, dtype=bool)
    return rows


def _flagged(ind, normal: np.ndarray, cats_a: np.ndarray, status: list[str | None],
             indicator_flags: np.ndarray) -> FlaggedCounts:
    """The counts every card, caption and list shows, one definition each: a flagged row is
    ``flagged`` in tokens.parquet, and is verified, cleared or a candidate (its
    ``undertrained_status``)."""
    unflagged = np.flatnonzero(normal & ~ind.flagged)
    gated = {tag: sum(1 for i in unflagged if ind.flag_reason[i] is not None and tag in ind.flag_reason[i])
             for tag in ("family", "drift")}
    flagged = np.flatnonzero(ind.flagged)
    by_status: dict[str, Counter] = defaultdict(Counter)
    for i in flagged:
        by_status[str(cats_a[i])][status[i] or "candidate"] += 1
    states = Counter(status[i] or "candidate" for i in flagged)
    return FlaggedCounts(normal=int(ind.flagged[normal].sum()),
                         normal_share=round(float(ind.flagged[normal].mean()) if normal.any() else 0.0, 5),
                         by_category={str(c): int(ind.flagged[cats_a == c].sum()) for c in dict.fromkeys(cats_a)},
                         by_reason=_by_reason(ind, normal), zero_rows=int(ind.zero_row.sum()),
                         isolated=int(ind.isolated[normal].sum()), **gated, total=len(flagged),
                         verified=states["verified"], cleared=states["cleared"], candidates=states["candidate"],
                         by_indicators=int(indicator_flags[normal].sum()),
                         status_by_category={c: dict(v) for c, v in by_status.items()},
                         isolated_by_category={str(c): k for c in dict.fromkeys(cats_a)
                                               if (k := int(ind.isolated[cats_a == c].sum()))})


def _per_script(ind, normal: np.ndarray, scripts: list[str], tied: bool) -> dict[str, ScriptRow]:
    groups: dict[str, list[int]] = defaultdict(list)
    for i in np.flatnonzero(normal):
        groups[scripts[i]].append(i)
    norm_col = ind.in_norm if tied else ind.out_norm
    out = {}
    for sc, ids in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        ids_a = np.asarray(ids)
        out[sc] = ScriptRow(rows=len(ids), flagged=int(ind.flagged[ids_a].sum()),
                            flagged_share=round(float(ind.flagged[ids_a].mean()), 4),
                            mean_norm=round(float(norm_col[ids_a].mean()), 4))
    return out


def _summary(cats, strings, scripts, ind, graph, threshold, tied, status, indicator_flags, **parts) -> GeometryRecord:
    """The scan's record; ``parts``: the verification's, the usage's, the verdict lists, the timings."""
    cats_a = np.asarray(cats)
    normal = cats_a == "normal"
    flagged = _flagged(ind, normal, cats_a, status, indicator_flags)
    note = ind.note
    if flagged.normal > flagged.by_indicators:
        more = flagged.normal - flagged.by_indicators
        note += (f"; prompting flagged {more:,} more normal row{'' if more == 1 else 's'} the model cannot produce "
                 f"({flagged.normal:,} flagged normal rows in all)")
    score = ind.undertrained_score
    order = np.argsort(-np.nan_to_num(score, nan=-np.inf))
    listable = _listable(graph, "top_score:normal", normal)
    top = [ScoredRow(id=int(i), token=strings[i], score=round(float(score[i]), 3), reason=ind.flag_reason[i])
           for i in order if listable[i]][:TOP_N]
    iso = ind.z["isolation"]
    listable = _listable(graph, "top_isolated", normal)
    top_iso = [IsolatedRow(id=int(i), token=strings[i], z=round(float(iso[i]), 3))
               for i in np.argsort(-np.nan_to_num(iso, nan=-np.inf)) if listable[i]][:TOP_N]
    return GeometryRecord(
        rows=len(cats), categories=dict(Counter(cats)), flagged=flagged,
        threshold=float(threshold), threshold_note=note, indicators=fit_record(ind.fit), top_undertrained=top,
        top_isolated=top_iso, per_script=_per_script(ind, normal, scripts, tied), knn=graph.info,
        reference=ind.reference.record(tied),
        tied=tied, **parts)
