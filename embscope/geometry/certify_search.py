"""The graph under certification (:mod:`embscope.geometry.certify`): its rows searched exactly on
demand, each search offering every other row its cosines to them (:class:`Search`), rows searched
in batches until a condition holds (:func:`settle`), and the two values the cuts read (:func:`knot_and_isolation`).
"""

from __future__ import annotations

import time

import numpy as np

from embscope.geometry.indicators import transform


def knot_and_isolation(sims: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(−log(1 − knot), isolation) per row of a (r, k) similarity block."""
    s = np.asarray(sims, dtype=np.float64)
    return transform("knot", s.mean(axis=1)), 1.0 - s[:, 0]


class Search:
    """The graph being certified: merged base + join, the exact rows, and exact search on demand."""

    def __init__(self, xn, sims, ids, exact, k, progress):
        self.xn, self.sims, self.ids, self.exact, self.k, self.progress = xn, sims, ids, exact, k, progress
        self.by_reason: dict[str, int] = {}
        self.seconds = 0.0

    def search(self, rows: np.ndarray, reason: str, offer: bool = True) -> int:
        """Exact neighbours for ``rows`` not yet exact, every other row's cosines to them offered to
        its list (``offer``); the tiles are whatever the probe finds faster: float32, or a bf16
        screen whose survivors are scored in float32 from each row's graph k-th up and whose
        offers are scored again (:func:`~embscope.geometry.exact.screened_knn`); returns how many
        were searched."""
        import torch

        from embscope.geometry.exact import exact_knn, screened_knn
        from embscope.geometry.probe import plan_tiles, threads

        rows = np.unique(np.asarray(rows, dtype=np.int64))
        rows = rows[~self.exact[rows]]
        if not len(rows):
            return 0
        t0 = time.perf_counter()
        n, d = self.xn.shape
        plan = plan_tiles(len(rows) * n * d, d, unsafe=0.0)
        lists = (self.sims, self.ids) if offer else None
        if plan.dtype == "float32":
            v, i = exact_knn(self.xn, self.k, rows=torch.from_numpy(rows), threads=plan.threads,
                             progress=self.progress and len(rows) > 4096, offer=lists)
            v, i = v.numpy(), i.numpy()
        else:  # another order of the same float32 sums may round the graph's k-th up by d·2^-24
            floor = np.nan_to_num(self.sims[rows, -1].astype(np.float64), nan=-np.inf) - d * 2.0 ** -24
            with threads(plan.threads):
                v, i = screened_knn(self.xn, rows, self.k, plan.torch_dtype(), floor=floor, offer=lists,
                                    progress=self.progress and len(rows) > 4096)
        self.sims[rows], self.ids[rows] = v, i
        self.exact[rows] = True
        self.by_reason[reason] = self.by_reason.get(reason, 0) + len(rows)
        self.seconds += time.perf_counter() - t0
        return len(rows)


#: rows per batch when rows are searched until a condition holds (each batch's offers may lift the
#: next rows' bounds past it)
BATCH = 1024


def settle(run: Search, need, reason: str, cap: int | None = None) -> bool:
    """Search ``need()`` (row ids, most urgent first) in batches until it is empty; False, searching
    nothing more, when more than ``cap`` rows would be needed (a list that cannot be proven is then
    drawn from the rows searched exactly, so its figures are exact search's: :func:`embscope.geometry.scan._listable`;
    searching its most urgent batch anyway cost the real 7B rows 21 CPU-s and proved nothing)."""
    done = 0
    while True:
        rows = need()
        if not len(rows):
            return True
        if cap is not None and done + len(rows) > cap and len(rows) > BATCH:
            return False
        done += run.search(rows[:BATCH], reason)
