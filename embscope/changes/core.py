"""``diff_models``: BASE against TUNED, row by row, in one pass over each matrix.

Order: read TUNED (:mod:`~embscope.changes.tuned`) → which rows are the same tokens and which were
added (the tokenizers, the extension manifest) → per matrix, the noise floor on sampled rows
(:mod:`~embscope.changes.noise`) and one pass over every row (:mod:`~embscope.changes.rows`), which also
projects each row onto BASE's first two principal components for the map → the data's token counts
(with ``data``) → per-language drift (with a languages corpus) → findings
(:mod:`~embscope.changes.findings`). Only the two embeddings and the two heads are read, each once.
"""

# long: the diff's one pipeline (which rows, their comparison, the floor, the judgement) over the private row record _Rows; a piece moves out when a second caller needs it
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from embscope.changes.findings import EXPLODE, DiffFacts, MatrixFacts, find
from embscope.changes.record import BaseSide, DataUse, DiffRecord, Formats, MapInfo, MatrixDiff, Mover, TunedSide
from embscope.readiness.record import worst

if TYPE_CHECKING:  # pragma: no cover
    import polars as pl

    from embscope.changes.options import DiffOptions
    from embscope.changes.rows import Rows
    from embscope.models.model import LoadedModel

#: rows of the top-movers list
TOP_MOVERS = 50
#: token-string mismatches kept for the finding's message and ids
MISMATCHES_KEPT = 50


@dataclass
class DiffResult:
    """What :func:`diff_models` returns: the record and ``diff.parquet``."""

    record: DiffRecord
    frame: "pl.DataFrame"


def _same_pieces(a, b, n: int) -> bool:
    """Whether two tokenizer.json vocabularies give every id below ``n`` the same bytes and display
    string without asking each id: the same stored pieces, specials, added tokens and piece
    convention (what ``HFVocabulary.token_bytes``/``display`` read). One list comparison instead of
    ~3 ``token_bytes`` calls per id (~0.4 s a diff on a 49k vocabulary)."""
    from embscope.tokenizer.backends import HFVocabulary

    if not (type(a) is HFVocabulary and type(b) is HFVocabulary and len(a._pieces) >= n and len(b._pieces) >= n):
        return False
    if (a.byte_level, a.metaspace, a.wordpiece_prefix) != (b.byte_level, b.metaspace, b.wordpiece_prefix):
        return False
    below = lambda ids: {i for i in ids if i < n}  # noqa: E731
    return (below(a.special_ids) == below(b.special_ids) and below(a._added) == below(b._added)
            and a._pieces[:n] == b._pieces[:n])


def _mismatches(base_vocab, tuned_vocab, n: int) -> tuple[list[tuple[int, str, str]], int]:
    """Shared ids whose tokens differ: ``([(id, base, tuned)], count)``."""
    if base_vocab is None or tuned_vocab is None or base_vocab is tuned_vocab or _same_pieces(base_vocab, tuned_vocab, n):
        return [], 0
    kept, count = [], 0
    for i in range(n):
        a, b = base_vocab.token_bytes(i), tuned_vocab.token_bytes(i)
        if a is None and b is None:
            a, b = base_vocab.display(i), tuned_vocab.display(i)
        if a != b:
            count += 1
            if len(kept) < MISMATCHES_KEPT:
                kept.append((i, base_vocab.display(i), tuned_vocab.display(i)))
    return kept, count


def _pca_basis(sample: "np.ndarray") -> tuple[np.ndarray, np.ndarray, float]:
    """(mean (d,), axes (d, 2), variance share of the two axes) of ``sample`` (k, d): the first two
    principal components by randomised SVD (Halko et al. 2011; ``torch.pca_lowrank``, 4 power
    iterations: exact to plotting precision, and milliseconds where a full SVD of 2048 × 3584 takes
    seconds)."""
    import torch

    x = torch.from_numpy(sample).double()
    mu = x.mean(dim=0)
    xc = x - mu
    torch.manual_seed(0)  # the same map on every run
    _, s, v = torch.pca_lowrank(xc, q=min(6, *xc.shape), center=False, niter=4)
    total = float((xc * xc).sum())
    return (mu.float().numpy(), v[:, :2].float().numpy(),
            float((s[:2] ** 2).sum() / total) if total > 0 else 0.0)


class _Reference:
    """Reference rows for tuned rows a..b-1: BASE's rows, with the initial rows of new tokens (the
    manifest's, or BASE's mean row) in their place."""

    def __init__(self, base: "Rows", n: int, init_ids: np.ndarray, init_rows, mean_ids: np.ndarray, mean):
        self.base, self.n = base, n
        self.init_ids, self.init_rows = init_ids, init_rows
        self.mean_ids, self.mean = mean_ids, mean

    def __call__(self, a: int, b: int, out=None):
        import torch

        nb = self.base.n
        parts = [self.base.block(a, min(b, nb), out if b <= nb else None)] if a < nb else []
        dev = parts[0].device if parts else "cpu"
        if b > nb:
            parts.append(torch.zeros(b - max(a, nb), self.base.d, device=dev))
        r = torch.cat(parts) if len(parts) > 1 else parts[0]
        for ids, rows in ((self.init_ids, self.init_rows), (self.mean_ids, None)):
            hit = np.flatnonzero((ids >= a) & (ids < b))
            if len(hit):
                where = torch.from_numpy(ids[hit] - a).to(dev)
                r[where] = (rows[torch.from_numpy(hit)].float() if rows is not None
                            else torch.from_numpy(self.mean)).to(dev)
        return r


def _mean_and_trace(rows: "Rows") -> tuple[np.ndarray, float]:
    """BASE's mean row and the trace of its covariance (one pass), as transformers' mean resizing uses."""
    import torch

    from embscope.changes.rows import BLOCK

    total = None
    sq = 0.0
    for a in range(0, rows.n, BLOCK):
        x = rows.block(a, min(a + BLOCK, rows.n)).double()
        total = x.sum(dim=0) if total is None else total + x.sum(dim=0)
        sq += float((x * x).sum())
    mean = (total / rows.n).cpu()
    trace = sq / rows.n - float((mean * mean).sum())
    return mean.float().numpy(), trace


@dataclass
class DiffInputs:
    """What the diff reads besides the two models (:func:`diff_models`); every field optional."""

    #: training data (any format ``check`` reads): which rows it uses
    data: Sequence[str | Path] = ()
    #: the data's format (None: guessed from the files) and the text field of its records
    data_format: str | None = None
    text_field: str = "text"
    #: per BASE row, flagged as under-trained by BASE's scan (``untrained-still``)
    flagged: np.ndarray | None = None
    #: per BASE row, the scan's ``undertrained_status``: a row prompting ``cleared`` is trained
    #: (never ``untrained-still``), a ``verified`` one is under-trained, as in ``check``
    status: Sequence[str | None] | None = None
    #: a multilingual corpus for per-language drift (None: none), how its records are read, and the
    #: languages counted (None: all)
    languages: str | Path | None = None
    read_options: Any = None
    keep_languages: frozenset | None = None


def diff_models(base: "LoadedModel", tuned_spec: str | Path, options: DiffOptions | None = None,
                inputs: DiffInputs | None = None, *, trust_pickle: bool = False,
                download: str = "ranges") -> DiffResult:
    """Compare ``base`` with TUNED (a model spec or a PEFT adapter folder on ``base``).

    Args:
        base: the loaded BASE model.
        tuned_spec: TUNED: alias, hub id, folder, ``.gguf``, or a PEFT adapter folder.
        options: the diff's group (:class:`~embscope.changes.options.DiffOptions`); it reads
            ``manifest``: ``extend --apply``'s manifest (file or folder), the initial rows of the new
            tokens (None: the one :func:`embscope.changes.manifest.find` finds in BASE's folder,
            TUNED's or next to them, whose terms are TUNED's tokens and whose rows are intact; else
            BASE's mean row).
        inputs: the training data, BASE's scan flags, the drift corpus (:class:`DiffInputs`; None: none).
        trust_pickle, download: how TUNED is loaded (:func:`embscope.changes.tuned.load_tuned`).
    Returns:
        :class:`DiffResult`.
    """
    from embscope.changes.tuned import base_rows, load_tuned
    from embscope.errors import ModelFileError

    manifest = options.manifest if options is not None else None
    inputs = inputs if inputs is not None else DiffInputs()
    data, flagged, status, languages = inputs.data, inputs.flagged, inputs.status, inputs.languages

    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    tuned = load_tuned(tuned_spec, base, device="cpu" if base.device == "cpu" else base.device,
                       trust_pickle=trust_pickle, download=download)
    tm = tuned.model
    if tuned.embed.d != base.dim:
        raise ModelFileError(f"TUNED's rows are {tuned.embed.d} wide, BASE's {base.dim}: not the same model; pass "
                             "the BASE TUNED was trained from")
    b_embed, b_out = base_rows(base)
    rows = _which_rows(base, tuned, manifest)
    n = rows.n
    mismatches, n_mis = _mismatches(base.vocab, tm.vocab, min(rows.base_tokens, rows.tuned_tokens, n))
    seconds["load"] = round(time.perf_counter() - t0, 3)

    strings = tm.token_strings() if tm.vocab is not None else [f"<row {i}>" for i in range(n)]
    matrices, facts, cols, xy, map_info, random = _compare_matrices(base, tuned, b_embed, b_out, rows, seconds)
    counts, where, use = None, {}, None
    if data:
        t3 = time.perf_counter()
        counts, where, use = _data_use(tm, data, inputs.data_format, inputs.text_field, rows.new, flagged, facts)
        seconds["data"] = round(time.perf_counter() - t3, 3)
    drift = []
    if languages is not None and tm.vocab is not None:
        from embscope.changes.languages import count_languages, language_drift

        t4 = time.perf_counter()
        per = count_languages(tm.vocab, languages, n_rows=n, options=inputs.read_options, keep=inputs.keep_languages)
        drift = language_drift(per, facts[0].moved, facts[0].change, strings)
        seconds["languages"] = round(time.perf_counter() - t4, 3)

    cfg_tie = tm.config.get("tie_word_embeddings") if isinstance(tm.config, dict) else None
    if tuned.kind == "peft" or not isinstance(cfg_tie, bool):
        cfg_tie = None  # an adapter's merge decides (embscope.changes.peft); the base config's flag is BASE's
    fl_base, verified = _base_flags(flagged, status, n)
    special = np.zeros(n, dtype=bool)
    cats = base.categories
    special[:min(n, len(cats))] = [c == "special" for c in cats[:n]]
    findings = find(DiffFacts(
        strings=strings, matrices=facts, new=rows.new & (np.arange(n) < rows.tuned_tokens), counts=counts,
        where=where, flagged=fl_base, shared=rows.shared, mismatches=mismatches, n_mismatches=n_mis,
        lost_rows=max(0, rows.base_tokens - rows.tuned_tokens), manifest_mismatches=rows.manifest_mismatches,
        tokens_past_rows=max(0, rows.tuned_tokens - rows.n), rows=rows.n,
        random_like=random[0], copies=random[1], verified=verified, special=special, same=_same(base, tuned),
        base_tied=base.output is None, tuned_tied=tuned.tied, config_tie=cfg_tie, adapter=tuned.adapter))
    record = DiffRecord(
        base=BaseSide(spec=base.spec, name=base.name, rows=base.n_rows, tokens=rows.base_tokens,
                      tied=base.output is None,
                      formats=Formats(embed=b_embed.format, output=b_out.format if b_out is not None else None)),
        tuned=_tuned_side(tuned, rows, cfg_tie), shared_rows=int(rows.shared - rows.new[:rows.shared].sum()),
        new_rows=int(rows.new.sum()), new_reference=rows.reference,
        manifest=str(rows.manifest) if rows.manifest is not None else None, matrices=matrices,
        top_movers=_top_movers(facts, strings, rows.new, counts), findings=findings, worst=worst(findings),
        data=use, languages=drift, languages_corpus=str(languages) if languages is not None else None,
        map=map_info, seconds=seconds)
    return DiffResult(record=record, frame=_frame(tm, strings, rows, cols, counts, fl_base, xy))


@dataclass
class _Rows:
    """Which of TUNED's rows are which: the same tokens as BASE's, or added (by the tokenizers, or
    listed by the extension manifest), and what the added ones are compared with."""

    #: TUNED's rows
    n: int
    #: tokens each tokenizer defines (rows when a model has none)
    base_tokens: int
    tuned_tokens: int
    #: rows both matrices have
    shared: int
    #: per row: added past BASE (or listed by the manifest)
    new: np.ndarray
    #: per row: past BASE's rows (new tokens or padding)
    past: np.ndarray
    #: rows compared with the manifest's initial rows, and with BASE's mean row
    init_ids: np.ndarray
    mean_ids: np.ndarray
    #: ``manifest``, ``base`` (BASE is the extended model), ``mean`` or None (nothing added)
    reference: str | None
    #: the manifest's path and rows, or None
    manifest: Path | None
    initial: Any
    #: manifest terms whose id TUNED's tokenizer decodes otherwise: (id, term, decoded)
    manifest_mismatches: list[tuple[int, str, str]]


def _which_rows(base: "LoadedModel", tuned, manifest) -> _Rows:
    from embscope.changes import manifest as manifests
    from embscope.errors import ModelFileError

    tm = tuned.model
    n = tuned.embed.n
    base_tokens = base.n_tokens if base.vocab is not None else base.n_rows
    tuned_tokens = tm.n_tokens if tm.vocab is not None else n
    tuned_dir = Path(str(tuned.spec)).expanduser()

    def fits(ids: list[int], terms: list[str]) -> bool:
        """A manifest found by looking (not named): TUNED's tokenizer has its terms at its ids."""
        return tm.vocab is not None and all(i < min(n, tuned_tokens) and tm.vocab.decode([i]) == t
                                            for i, t in zip(ids, terms))

    mpath = manifests.find(manifest, base.path if Path(base.path).is_dir() else None,
                           tuned_dir if tuned_dir.is_dir() else None, fits=fits)
    is_base = mpath is not None and mpath.parent.resolve() == Path(base.path).resolve()
    initial = manifests.read(mpath, dim=base.dim, verify=not is_base) if mpath is not None else None
    base_is_ext = initial is not None and initial.folder is not None and \
        Path(initial.folder).resolve() == Path(base.path).resolve()
    beyond = np.zeros(n, dtype=bool)  # tokens past BASE's tokenizer
    beyond[min(base_tokens, n):min(tuned_tokens, n)] = True
    new = beyond.copy()
    mismatches: list[tuple[int, str, str]] = []
    if initial is not None:
        if len(initial.ids) and int(initial.ids.max()) >= n:
            raise ModelFileError(f"{initial.path} lists token {int(initial.ids.max())} but TUNED has {n} rows; pass "
                                 "the manifest of the extension TUNED was trained from")
        new[initial.ids] = True
        if tm.vocab is not None:
            for i, term in zip(initial.ids.tolist(), initial.terms):
                got = tm.vocab.decode([i]) if i < tuned_tokens else ""
                if got != term and len(mismatches) < MISMATCHES_KEPT:
                    mismatches.append((i, term, got))
    past = np.arange(n) >= base.n_rows  # rows BASE does not have (new tokens or padding)
    # BASE is the extended model: its rows at the manifest's ids are the initial rows
    init_ids = initial.ids if initial is not None and not base_is_ext else np.zeros(0, np.int64)
    mean_ids = np.flatnonzero((beyond | past) & ~np.isin(np.arange(n), init_ids))
    reference = "base" if base_is_ext else "manifest" if initial is not None else "mean" if new.any() else None
    return _Rows(n=n, base_tokens=base_tokens, tuned_tokens=tuned_tokens, shared=min(base.n_rows, n), new=new,
                 past=past, init_ids=init_ids, mean_ids=mean_ids, reference=reference, manifest=mpath,
                 initial=initial, manifest_mismatches=mismatches)


def _compare_matrices(base: "LoadedModel", tuned, b_embed, b_out, rows: _Rows, seconds: dict[str, float]):
    """Per matrix (the input, and the output when either model is untied): its noise floor, one pass
    over every row, its verdicts; the map's positions from the input matrix's pass. Returns
    ``(matrices, facts, table columns, xy, map info, the new rows that look freshly drawn)``."""
    from embscope.changes.rows import compare
    from embscope.errors import ModelFileError

    initial, n = rows.initial, rows.n
    pairs = [("input", b_embed, tuned.embed, initial.embed if initial is not None else None)]
    if b_out is not None or tuned.output is not None:
        init_out = None
        if initial is not None:
            init_out = initial.output if initial.output is not None else initial.embed
        pairs.append(("output", b_out if b_out is not None else b_embed,
                      tuned.output if tuned.output is not None else tuned.embed, init_out))
    matrices: dict[str, MatrixDiff] = {}
    facts: list[MatrixFacts] = []
    cols: dict[str, Any] = {}
    xy = np.full((n, 2), np.nan, dtype=np.float32)
    map_info, random = None, ([], {})
    for name, b_rows, t_rows, init_rows in pairs:
        t1 = time.perf_counter()
        if t_rows.n != n:
            raise ModelFileError(f"TUNED's head has {t_rows.n} rows but its embedding {n}; re-save the checkpoint")
        fl, sample, mean = _floor(b_rows, t_rows, init_rows, rows)
        untrained = None
        if name == "input":
            random = _untrained_like(t_rows, b_rows, rows, mean, fl.floor)
            untrained = np.zeros(n, dtype=bool)
            untrained[[*random[0], *random[1]]] = True
        visit = None
        if name == "input":
            visit, explained = _map_visitor(sample, rows.new, xy)
            map_info = MapInfo(method="BASE's first two principal components (input rows; new rows at their tuned row)",
                               explained=round(explained, 4))
        seconds[f"floor_{name}"] = round(time.perf_counter() - t1, 3)
        t2 = time.perf_counter()
        ref = _Reference(b_rows, n, rows.init_ids, init_rows, rows.mean_ids, mean)
        stats = compare(t_rows, ref, device=base.device if base.device != "cpu" else "cpu", visit=visit)
        seconds[f"pass_{name}"] = round(time.perf_counter() - t2, 3)
        matrices[name], fact = _judge(name, stats, fl, rows.new, rows.new | rows.past, rows.shared, untrained)
        facts.append(fact)
        p = "in" if name == "input" else "out"
        cols.update({f"{p}_delta": stats.delta, f"{p}_change": stats.rel_delta, f"{p}_cos": stats.cos,
                     f"{p}_norm_change": stats.norm_change, f"{p}_moved": fact.moved})
        cols["nonfinite"] = cols.get("nonfinite", False) | ~fact.finite
        cols["exploded"] = cols.get("exploded", False) | fact.exploded
    return matrices, facts, cols, xy, map_info, random


def _floor(b_rows, t_rows, init_rows, rows: _Rows):
    """``(NoiseFloor, BASE's sampled rows, BASE's mean row or None)`` of one matrix: the floor from
    sampled shared rows, and the added rows' own floor against their reference."""
    from embscope.changes.noise import mean_floor, measure, sample_ids

    ok_ids = np.flatnonzero(~rows.new[:rows.shared])
    pick = ok_ids[sample_ids(len(ok_ids))]
    sb, st = b_rows.take(pick).cpu().numpy(), t_rows.take(pick).cpu().numpy()
    fl = measure(sb, st, b_rows.format, t_rows.format)
    mean = None
    if len(rows.mean_ids):
        mean, trace = _mean_and_trace(b_rows)
    if rows.reference == "manifest" and len(rows.init_ids):
        nf = measure(init_rows.cpu().numpy(), t_rows.take(rows.init_ids).cpu().numpy(), rows.initial.format,
                     t_rows.format)
        fl.new_floor, fl.new_reference = nf.floor, f"the manifest's rows ({rows.initial.format}, {nf.lineage})"
    elif rows.reference == "base":
        fl.new_floor, fl.new_reference = fl.floor, "BASE's rows (BASE is the extended model)"
    elif rows.reference == "mean":
        fl.new_floor = mean_floor(mean, trace, t_rows.format, fl.floor)
        fl.new_reference = "BASE's mean row (no manifest): transformers' mean_resizing spread, 4σ"
    return fl, sb, mean


def _tuned_side(tuned, rows: _Rows, cfg_tie: bool | None) -> TunedSide:
    from embscope.changes.tuned import fingerprint

    return TunedSide(spec=tuned.spec, name=tuned.model.name, kind=tuned.kind, rows=rows.n, tokens=rows.tuned_tokens,
                     tied=tuned.tied, formats=Formats(embed=tuned.embed.format,
                                                      output=tuned.output.format if tuned.output is not None else None),
                     tie_word_embeddings=cfg_tie, adapter=tuned.adapter, fingerprint=fingerprint(tuned),
                     files=list(tuned.files))


def _frame(tm, strings, rows: _Rows, cols, counts, fl_base, xy):
    """``diff.parquet``: one row per TUNED row."""
    import polars as pl

    n = rows.n
    return pl.DataFrame({
        "token_id": np.arange(n, dtype=np.int32), "token": strings[:n],
        "special": [i in (tm.vocab.special_ids if tm.vocab is not None else ()) for i in range(n)],
        "new": rows.new, **cols,
        "data_count": counts[:n] if counts is not None else pl.Series([None] * n, dtype=pl.Int64),
        "base_flagged": fl_base if fl_base is not None else pl.Series([None] * n, dtype=pl.Boolean),
        "x": xy[:, 0], "y": xy[:, 1]})


def _map_visitor(sample: np.ndarray, new: np.ndarray, xy: np.ndarray):
    """A ``visit`` for :func:`~embscope.changes.rows.compare` that writes each block's map positions into
    ``xy`` (BASE's rows on the sample's first two principal components; new rows at their tuned row),
    and the variance share of the two axes."""
    import torch

    mu, axes, explained = _pca_basis(sample)
    axes_t = torch.from_numpy(axes)
    shift = torch.from_numpy(mu) @ axes_t  # (2,): x @ axes − μ @ axes, no centred copy of the block

    def visit(a, t, r):
        b = a + t.shape[0]
        xy[a:b] = (r @ axes_t.to(r.device) - shift.to(r.device)).cpu().numpy()
        hit = np.flatnonzero(new[a:b])
        if len(hit):
            at = torch.from_numpy(hit).to(t.device)
            xy[a + hit] = (t[at] @ axes_t.to(t.device) - shift.to(t.device)).cpu().numpy()

    return visit, explained


def _judge(name: str, st, fl, new: np.ndarray, own_floor: np.ndarray, shared: int,
           untrained: np.ndarray | None = None) -> tuple[MatrixDiff, MatrixFacts]:
    """One matrix's verdicts from the pass: ``moved`` (change past the floor; the new rows' floor where
    ``own_floor``; a NaN/Inf row; any change of a zero row), ``exploded``, and the record's counts.
    ``untrained``: new rows that look never trained (:func:`_untrained_like`): not moved, whatever
    their distance from BASE's mean row (a fresh draw or a copied row is far from it untrained)."""
    n = len(new)
    floor = np.full(n, fl.floor, dtype=np.float32)
    if fl.new_floor is not None:
        floor[own_floor] = fl.new_floor
    finite, has_ref, change = st.finite, st.ref_norm > 0, st.rel_delta
    moved = ~finite | (has_ref & (np.nan_to_num(change, nan=0.0) > floor)) | (~has_ref & (st.delta > 0))
    moved &= ~(new & (st.tuned_norm == 0))  # an all-zero new row is an initialisation no training leaves
    if untrained is not None:
        moved &= ~(new & untrained & finite)
    median = float(np.median(st.ref_norm[:shared][~new[:shared]])) if shared else 0.0
    exploded = finite & (st.tuned_norm > EXPLODE * np.maximum(st.ref_norm, median))
    mv = np.flatnonzero(moved & finite)
    record = MatrixDiff(
        floor=fl, rows=n, moved=int(moved.sum()), moved_share=round(float(moved.mean()), 6) if n else 0.0,
        new_moved=int((moved & new).sum()), nonfinite=int((~finite).sum()), exploded=int(exploded.sum()),
        median_moved_change=float(np.nanmedian(change[mv])) if len(mv) and np.isfinite(change[mv]).any() else None,
        max_change=float(np.nanmax(change)) if np.isfinite(change).any() else None, base_median_norm=median)
    return record, MatrixFacts(name=name, moved=moved, change=change, finite=finite, exploded=exploded,
                               tuned_norm=st.tuned_norm, floor=fl.floor,
                               formats=(fl.base_format, fl.tuned_format, fl.lineage))


def _base_flags(flagged, status, n: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``(flagged, verified)`` per TUNED row from BASE's scan: a row prompting cleared is not
    flagged, a verified one is (the rule of :func:`embscope.readiness.findings._flagged`'s callers:
    one state per row in every command). ``(None, None)`` without a scan.

    >>> fl, ver = _base_flags(np.array([True, True, False]), ["cleared", None, "verified"], 4)
    >>> fl.tolist(), ver.tolist()
    ([False, True, True, False], [False, False, True, False])
    """
    if flagged is None:
        return None, None
    fl, ver = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    k = min(len(flagged), n)
    fl[:k] = np.asarray(flagged, dtype=bool)[:k]
    for i, s in enumerate(list(status or [])[:n]):
        if s == "cleared":
            fl[i] = False
        elif s == "verified":
            fl[i] = ver[i] = True
    return fl, ver


def _same(base: "LoadedModel", tuned) -> bool:
    """TUNED is BASE itself: the same file or folder (an adapter on BASE never is)."""
    if tuned.kind == "peft":
        return False
    try:
        return Path(str(tuned.model.path)).resolve() == Path(str(base.path)).resolve()
    except (OSError, TypeError, ValueError):
        return False


def _untrained_like(t_rows: "Rows", b_rows: "Rows", rows: _Rows, mean, floor: float) -> tuple[list[int], dict[int, int]]:
    """``(random-like ids, {id: BASE row it copies})``: the new rows, when BASE's mean row ``mean``
    is all that stands for their initial rows, that look never trained: copies of a BASE row (within
    the noise floor ``floor`` of it, :func:`embscope.changes.findings.copies_of`), and the others if
    together they look like a fresh N(0, σ²) draw (:func:`embscope.changes.findings.random_like`)."""
    from embscope.changes.findings import copies_of, random_like

    ids = rows.mean_ids[rows.new[rows.mean_ids]] if len(rows.mean_ids) else rows.mean_ids
    ids = ids[ids < t_rows.n]
    if rows.reference != "mean" or not len(ids):
        return [], {}
    new = t_rows.take(ids).float().cpu().numpy()
    copies = copies_of(new, b_rows, rows.shared, floor)
    copied = {int(ids[j]): src for j, src in copies.items()}
    rest = np.asarray([j for j in range(len(ids)) if j not in copies], dtype=np.int64)
    if mean is None or len(rest) < 2 or not random_like(new[rest], mean):
        return [], copied
    return [int(i) for i in ids[rest]], copied


def _top_movers(facts: list[MatrixFacts], strings, new, counts) -> list[Mover]:
    out = []
    share = [TOP_MOVERS] if len(facts) == 1 else [30, TOP_MOVERS - 30]
    for f, k in zip(facts, share):
        c = np.where(np.isfinite(f.change) & f.moved, f.change, -np.inf)
        for i in np.argsort(-c, kind="stable")[:k]:
            if not np.isfinite(c[i]):
                break
            out.append(Mover(id=int(i), token=strings[i], matrix=f.name, change=float(f.change[i]), new=bool(new[i]),
                             used=int(counts[i]) if counts is not None and i < len(counts) else None))
    return out


def _data_use(model: "LoadedModel", data, fmt, text_field, new: np.ndarray, flagged, facts: list[MatrixFacts]):
    """``(counts, where, DataUse)``: the training data's token counts as the trainer makes them
    (TUNED's tokenizer and template), the example indices of the new and flagged rows, and the rows it
    uses against the rows that moved."""
    from embscope.corpus.conversations import DataRead, iter_examples
    from embscope.errors import CorpusError, VocabError
    from embscope.readiness import make_context
    from embscope.readiness.encode import encode_examples

    if model.vocab is None:
        raise VocabError(f"{model.name} ships no tokenizer, so --data cannot be tokenized; pass a TUNED with one")
    n = len(new)
    watch = new.copy()
    if flagged is not None:
        k = min(len(flagged), n)
        watch[:k] |= np.asarray(flagged, dtype=bool)[:k]
    ctx = make_context(model)[0]  # the default trainer's sequences, TUNED's own template
    wanted = np.zeros(model.n_rows, dtype=bool)
    wanted[:min(n, model.n_rows)] = watch[:model.n_rows]
    examples = iter_examples(list(data), fmt=fmt, text_field=text_field, report=DataRead())
    enc = encode_examples(examples, ctx, wanted, by_split=False).get(None)
    if enc is None or enc.examples == 0:
        raise CorpusError(f"{', '.join(map(str, data))} holds no training example; pass jsonl/json/Parquet/Arrow "
                          "records in the messages, conversations, alpaca, prompt/completion or text format")
    counts = enc.counts
    if len(counts) < n:
        counts = np.concatenate([counts, np.zeros(n - len(counts), np.int64)])
    moved = np.zeros(n, dtype=bool)
    for f in facts:
        moved |= f.moved
    used = counts[:n] > 0
    use = DataUse(paths=[str(p) for p in data], examples=enc.examples, tokens=enc.tokens, template=enc.template,
                  used_rows=int(used.sum()), used_moved=int((used & moved).sum()),
                  used_unmoved=int((used & ~moved).sum()), moved_rows=int(moved.sum()),
                  moved_used_share=round(float((used & moved).sum() / max(int(moved.sum()), 1)), 6),
                  new_used=int((used & new).sum()))
    return counts, enc.where, use
