"""The rows a training run is watched on, each check's figures, and what they call for.

At step 0 :func:`start` keeps, on the device where the matrices are, a float32 copy of the rows that
matter — the new rows (an ``extend --apply`` manifest, or ids given), the rows the first batches
use, and a seeded sample of the rest (at most ``new + USED + SAMPLE`` rows, never the matrix) — and
the ``(V,)`` row norms of every matrix. Each :func:`check` then reads the same rows again and the
norms of all rows (one pass, a ``(V,)`` result), and measures per matrix:

- relative change of a watched row, ``‖x_t − x_0‖ / ‖x_0‖`` (``‖x_t − x_0‖`` for a zero row);
  a row *moved* when it changed at all (any change is training's: nothing else writes weights);
- ``new_moved`` / ``new_median_change``: the new rows that moved, and their median change;
- ``used_frozen``: watched rows the batches fed since step 0 (the embedding's forward hook) that a
  trainable parameter could change but that did not move;
- ``max_norm_ratio``: the largest row norm over the median row norm at step 0;
- ``nonfinite``: rows holding NaN/Inf; ``exploded``: rows whose norm passed ``EXPLODE`` × the larger
  of their step-0 norm and the median (the rule ``embscope diff`` applies, :data:`EXPLODE` = 10).

:func:`alerts` turns the figures into what a colleague would say: stop on non-finite or exploded
rows (naming the ids, the step and the likely cause), warn once when new rows cannot move because
nothing that trains reaches them (LoRA without ``modules_to_save`` / ``trainable_token_indices``),
warn once when trainable new rows have not moved after ``patience`` steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from embscope.changes.findings import EXPLODE
from embscope.records import Record

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from embscope.integrations.live import Matrices

#: rows the first batches use that are watched (the most frequent first)
USED = 4096
#: other rows watched, drawn with a fixed seed (a baseline for "how much did everything move")
SAMPLE = 1024
#: ids named in a stop line
NAMED = 8


@dataclass
class MatrixCheck(Record):
    """One matrix at one check."""

    #: ``input`` (the embedding) or ``output`` (an untied head)
    matrix: str
    #: new rows watched, and how many of them moved (any change since step 0)
    new_rows: int
    new_moved: int
    #: median relative change of the new rows that moved (null: none moved)
    new_median_change: float | None
    #: watched rows the batches fed since step 0
    used_rows: int
    #: of them, rows a trainable parameter reaches that did not move (higher is worse)
    used_frozen: int
    #: median relative change of the used rows
    used_median_change: float | None
    #: largest row norm / median row norm at step 0 (10 or more: a row is exploding)
    max_norm_ratio: float | None
    #: ids of rows holding NaN/Inf (at most 50)
    nonfinite: list[int] = field(default_factory=list)
    nonfinite_rows: int = 0
    #: ids of rows past EXPLODE × max(step-0 norm, median) (at most 50)
    exploded: list[int] = field(default_factory=list)
    exploded_rows: int = 0
    #: new rows no trainable parameter reaches (they cannot move)
    new_frozen: int = 0


@dataclass
class Check(Record):
    """One check of the watched rows."""

    #: the optimizer step
    step: int
    matrices: list[MatrixCheck]
    #: seconds the check took
    seconds: float

    def logs(self) -> dict[str, float]:
        """Scalars for the trainer's ``logs`` (``embscope/…``; an untied head's under ``embscope/head_…``)."""
        out: dict[str, float] = {}
        for m in self.matrices:
            p = "embscope/" if m.matrix == "input" else "embscope/head_"
            out[p + "new_rows_moved"] = float(m.new_moved)
            if m.new_median_change is not None:
                out[p + "new_rows_median_change"] = m.new_median_change
            out[p + "used_rows_frozen"] = float(m.used_frozen)
            if m.max_norm_ratio is not None:
                out[p + "max_norm_ratio"] = m.max_norm_ratio
            out[p + "nonfinite_rows"] = float(m.nonfinite_rows)
            out[p + "exploded_rows"] = float(m.exploded_rows)
        return out


@dataclass
class _Side:
    """One matrix's step-0 state."""

    name: str
    module: Any
    start: "torch.Tensor"  # (k, d) float32 watched rows at step 0
    start_norm: "torch.Tensor"  # (k,)
    norms0: "torch.Tensor"  # (V,) every row's norm at step 0
    median: float
    trainable: np.ndarray  # (k,) a trainable parameter reaches the row


@dataclass
class Watch:
    """What :func:`start` keeps (see the module docstring)."""

    #: watched ids, sorted
    ids: np.ndarray
    #: per watched id: a new row / used by the first batches
    new: np.ndarray
    used: np.ndarray
    sides: list[_Side]
    #: (V,) bool on the device: ids the embedding's forward saw in training since step 0
    seen: "torch.Tensor"
    #: rows per matrix
    n_rows: int
    #: per matrix, per watched id: moved since step 0 at the last check
    moved: dict[str, np.ndarray] = field(default_factory=dict)


def watched_ids(n_rows: int, new_ids: np.ndarray, counts: np.ndarray | None, *, used: int = USED,
                sample: int = SAMPLE, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ids, new, used)``: the new ids, the ``used`` ids the batches use most, and ``sample`` others.

    >>> ids, new, used = watched_ids(10, np.array([9]), np.array([0, 5, 0, 1]), sample=2)
    >>> ids.tolist(), new.tolist(), used.tolist()
    ([1, 3, 6, 7, 9], [False, False, False, False, True], [True, True, False, False, False])
    """
    new_ids = np.unique(np.asarray(new_ids, dtype=np.int64))
    new_ids = new_ids[(new_ids >= 0) & (new_ids < n_rows)]
    top = np.zeros(0, np.int64)
    if counts is not None and len(counts):
        c = np.asarray(counts[:n_rows])
        nz = np.flatnonzero(c)
        top = nz[np.argsort(-c[nz], kind="stable")][:used]
    rest = np.setdiff1d(np.arange(n_rows), np.union1d(new_ids, top))
    rng = np.random.default_rng(seed)
    extra = rng.choice(rest, size=min(sample, len(rest)), replace=False) if len(rest) else rest
    ids = np.union1d(np.union1d(new_ids, top), extra)
    return ids, np.isin(ids, new_ids), np.isin(ids, top)


def start(mats: "Matrices", new_ids, counts: np.ndarray | None, *, sample: int = SAMPLE) -> Watch:
    """The step-0 state of ``mats`` (module docstring)."""
    import torch

    from embscope.integrations.live import base_weight, row_norms, rows, trainable_rows

    n = int(base_weight(mats.embed).shape[0])
    ids, new, used = watched_ids(n, np.asarray(list(new_ids), dtype=np.int64), counts, sample=sample)
    sides = []
    for name, module in (("input", mats.embed), ("output", mats.head)):
        if module is None:
            continue
        dev = base_weight(module).device
        x0 = rows(module, torch.from_numpy(ids).to(dev))
        norms0 = row_norms(module)
        sides.append(_Side(name=name, module=module, start=x0, start_norm=torch.linalg.vector_norm(x0, dim=1),
                           norms0=norms0, median=float(norms0[torch.isfinite(norms0)].median()) if n else 0.0,
                           trainable=trainable_rows(module, ids)))
    seen = torch.zeros(n, dtype=torch.bool, device=base_weight(mats.embed).device)
    return Watch(ids=ids, new=new, used=used, sides=sides, seen=seen, n_rows=n)


def _median(x: np.ndarray) -> float | None:
    return round(float(np.median(x)), 8) if len(x) else None


def check(w: Watch, step: int) -> Check:
    """Read the watched rows and every row's norm again; the figures of module docstring."""
    import time

    import torch

    from embscope.integrations.live import row_norms, rows

    t0 = time.perf_counter()
    out = []
    used_now = w.seen[torch.from_numpy(w.ids).to(w.seen.device)].cpu().numpy()
    for s in w.sides:
        x = rows(s.module, torch.from_numpy(w.ids).to(s.start.device))
        delta = torch.linalg.vector_norm(x - s.start, dim=1)
        change = torch.where(s.start_norm > 0, delta / s.start_norm.clamp_min(1e-30), delta)
        change = change.cpu().numpy()
        moved = ~np.isfinite(change) | (change > 0)
        w.moved[s.name] = moved
        norms = row_norms(s.module)
        finite = torch.isfinite(norms)
        bad = torch.nonzero(~finite).flatten().cpu().numpy()
        limit = EXPLODE * torch.clamp(s.norms0, min=s.median)
        boom = torch.nonzero(finite & (norms > limit)).flatten().cpu().numpy()
        fin = norms[finite]
        ratio = round(float(fin.max()) / s.median, 4) if len(fin) and s.median > 0 else None
        new_mv = w.new & moved & np.isfinite(change)
        used = used_now & ~w.new
        out.append(MatrixCheck(
            matrix=s.name, new_rows=int(w.new.sum()), new_moved=int((w.new & moved).sum()),
            new_median_change=_median(change[new_mv]), used_rows=int(used.sum()),
            used_frozen=int((used & s.trainable & ~moved).sum()),
            used_median_change=_median(change[used & np.isfinite(change)]), max_norm_ratio=ratio,
            nonfinite=bad[:50].tolist(), nonfinite_rows=len(bad), exploded=boom[:50].tolist(), exploded_rows=len(boom),
            new_frozen=int((w.new & ~s.trainable & ~moved).sum())))
    return Check(step=step, matrices=out, seconds=round(time.perf_counter() - t0, 4))


@dataclass
class Alert:
    """What a check calls for: ``stop`` (stop training) or ``warning``, in one line."""

    kind: str
    #: stable name (``nonfinite-rows``, ``exploded-rows``, ``new-rows-frozen``, ``new-rows-unmoved``)
    code: str
    line: str
    ids: list[int]


def _named(ids: list[int], strings: list[str], total: int | None = None) -> str:
    """The first :data:`NAMED` of ``ids`` with their strings, and how many more of ``total`` rows
    (default ``len(ids)``; ``ids`` may be a capped list of them).

    >>> _named([3, 5], ["a", "b", "c", "d", "e", "f"], total=12)
    "3 'd', 5 'f' (+10 more)"
    """
    total = len(ids) if total is None else total
    shown = ", ".join(f"{i} {strings[i]!r}" if 0 <= i < len(strings) else str(i) for i in ids[:NAMED])
    rest = total - min(len(ids), NAMED)
    return shown + (f" (+{rest} more)" if rest > 0 else "")


def _cause(ids: list[int], new_ids: set[int], weak: set[int]) -> str:
    """The likely cause of a row that blew up, from what it was at step 0."""
    if any(i in new_ids for i in ids):
        return ("new token rows take large updates while the rest of the model adapts: lower the learning rate of the "
                "embedding, or initialise the new rows closer to trained ones (embscope extend --init)")
    if any(i in weak for i in ids):
        return ("the rows were zero or under-trained at step 0 and take large, badly scaled gradients: re-initialise "
                "them before training (embscope check --repair OUT)")
    return "the learning rate or the loss scale is too high: lower it, clip gradients (max_grad_norm), or train in bf16"


def alerts(c: Check, w: Watch, strings: list[str], *, said: set[str], weak: set[int], patience: int) -> list[Alert]:
    """What ``c`` calls for (module docstring); warnings already in ``said`` are not repeated."""
    out = []
    new_ids = set(w.ids[w.new].tolist())
    for m in c.matrices:
        where = "input embedding" if m.matrix == "input" else "output head"
        for ids, what, code in ((m.nonfinite, "hold NaN/Inf", "nonfinite-rows"),
                                (m.exploded, f"grew past {EXPLODE:g}x their step-0 norm and the median", "exploded-rows")):
            if ids:
                n = m.nonfinite_rows if code == "nonfinite-rows" else m.exploded_rows
                out.append(Alert("stop", code, f"embscope: stopped at step {c.step}: {n} row(s) of the {where} {what}: "
                                 f"{_named(ids, strings, n)}; likely cause: {_cause(ids, new_ids, weak)}", ids[:50]))
        key = f"frozen-{m.matrix}"
        if m.new_frozen and m.new_moved == 0 and key not in said:
            side = next(s for s in w.sides if s.name == m.matrix)
            frozen = w.ids[w.new & ~side.trainable].tolist()
            said.add(key)
            out.append(Alert("warning", "new-rows-frozen",
                             f"embscope: step {c.step}: the {m.new_frozen} new token row(s) of the {where} cannot move: "
                             f"no trainable parameter reaches them (the {where} is frozen, as under LoRA on attention "
                             f"only): {_named(frozen, strings)}; fix: LoraConfig(..., trainable_token_indices="
                             f"{frozen[:NAMED]}{'…' if len(frozen) > NAMED else ''}) trains just these rows, or "
                             "modules_to_save=['embed_tokens', 'lm_head'] the whole matrices", frozen))
        key = f"unmoved-{m.matrix}"
        if c.step >= patience and m.new_rows and m.new_moved < m.new_rows - m.new_frozen and key not in said:
            side = next(s for s in w.sides if s.name == m.matrix)
            still = w.ids[w.new & side.trainable & ~w.moved[m.matrix]].tolist()
            if still:
                said.add(key)
                out.append(Alert("warning", "new-rows-unmoved",
                                 f"embscope: step {c.step}: {len(still)} trainable new token row(s) of the {where} have "
                                 f"not moved: {_named(still, strings)}; the batches so far do not use them: check that "
                                 "the data holds the new terms as the new tokenizer splits them", still))
    return out

