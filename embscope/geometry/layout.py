"""A 2-D map of the rows: UMAP on the cosine kNN graph that the scan has already built.

UMAP (McInnes, Healy & Melville 2018, "UMAP: Uniform Manifold Approximation and Projection")
turns each row's k nearest neighbours into fuzzy edge weights ``exp(−(dist − ρ_i) / σ_i)`` and lays
the graph out in the plane by stochastic gradient descent. Passing our graph as
``precomputed_knn`` skips UMAP's own neighbour search (the slow part). UMAP wants each row's
first neighbour to be the row itself at distance 0, so column 0 is prepended: for row 5 with
neighbours [8, 2] at cosine [0.9, 0.7] UMAP receives indices [5, 8, 2], distances [0, 0.1, 0.3].

UMAP runs no neighbour search of its own: umap-learn 0.5.12 uses ``precomputed_knn`` at every
size (below 4,096 rows it sets ``force_approximation_algorithm`` so that the small-data path, which
would compute all pairwise distances, is skipped), so the matrix itself is never handed to it.

Quality: *neighbour preservation* = the share of each row's k graph neighbours that are among its
k nearest points in the plane (Euclidean), averaged over up to ``PRESERVE_SAMPLE`` random rows.
1 = the map keeps every neighbourhood; a random layout scores ≈ k/n. Example: row 5 with graph
neighbours {8, 2} and 2-D nearest {8, 9} preserves 1/2.

Large vocabularies: above :data:`MAP_ROWS` rows UMAP lays out only what a person can see — the
rows the scan flagged or marked isolated (``keep``), their graph neighbours, and a seeded sample of
the other rows with their neighbours, up to :data:`MAP_ROWS` — on the graph among those rows; every
other row is then placed at the mean of its placed graph neighbours, round after round (a row whose
neighbours are placed in one round is placed in the next). The report draws at most 30,000 points
(every flagged row and a sample), so what it shows was laid out or sits among the neighbours it
was placed from. The record gives the preservation of the whole map and of the rows laid out
(``laid_out_rows``, ``laid_out_preservation``): measured on Gemma-3-270M in bench/README.md.

Reproducible: ``random_state`` fixes the layout (UMAP then runs single-threaded).

Never fatal (the map is a picture, not a decision): a graph entry that is not a neighbour (id −1,
an id out of range, the row itself, a non-finite similarity, as an approximate graph can leave
when it finds fewer than k) is handed to UMAP as "no edge" (id −1 at the largest cosine distance,
2), so it cannot turn a row's distances into NaN; a row UMAP still leaves non-finite is put at the
mean of its placed neighbours, or left out of the map (NaN, which the report skips) when it has
none; and preservation is measured on the placed rows and their real neighbours.

:class:`LayoutJob` runs the same layout in a separate process (a fresh interpreter, so nothing of the
caller's threads or script is inherited), started as soon as the graph exists: it is single-threaded, so on a
two-core machine it takes the core that the rest of the run (tokenisation, the corpus passes, small
forward passes) leaves idle, and its result is collected when the tables are written.
"""

from __future__ import annotations

import time
import warnings
import numpy as np

from embscope.geometry.records import LayoutRecord

#: above these row counts the layout uses fewer optimisation epochs than UMAP's default (200 for
#: n > 10 000): the map is for browsing, not measurement. Measured on Qwen2-7B's 152064 rows:
#: 100 epochs 35 s, 50 epochs 23 s, with the same clusters visible.
EPOCHS_BY_SIZE = ((100_000, 60), (20_000, 100))
#: above this row count the layout starts from random positions instead of the graph Laplacian's
#: eigenvectors ("spectral"): the eigensolver dominated the cost, and the neighbourhoods came out
#: as well preserved. Measured (bench/layout.py, 2 cores): SmolLM2, 49,152 rows, 100 epochs:
#: spectral 19.8 CPU-s, preservation 0.182; random 11.8 CPU-s, 0.184. Gemma-3-270M, 262,144 rows,
#: 60 epochs: spectral 186.3 CPU-s, 0.080; random 90.7 CPU-s, 0.088.
RANDOM_INIT_ABOVE = 20_000
#: rows on which neighbour preservation is measured
PRESERVE_SAMPLE = 5000
#: rows UMAP lays out at most; the others are placed from their neighbours (module docstring)
MAP_ROWS = 40_000


def layout_record(seconds: float, n_epochs: int, init: str, preservation: float = float("nan"),
                  preservation_rows: int = 0, **counts) -> LayoutRecord:
    """The map's record (fields documented on :class:`~embscope.geometry.records.LayoutRecord`):
    seconds to the millisecond, the preservation to 4 digits (null when not measured)."""
    return LayoutRecord(seconds=round(float(seconds), 3), n_epochs=int(n_epochs), init=init,
                        neighbor_preservation=None if preservation != preservation else round(float(preservation), 4),
                        preservation_rows=int(preservation_rows), **counts)


def neighbor_preservation(neighbors: np.ndarray, xy: np.ndarray, *, sample: int = PRESERVE_SAMPLE,
                          seed: int = 0) -> tuple[float, int]:
    """``(share, rows)``: the mean share of each sampled row's graph neighbours among its nearest
    2-D points, and how many rows it was measured on.

    ``neighbors`` (n, k) graph ids (self excluded; entries < 0 are "no neighbour"); ``xy`` (n, 2)
    coordinates. Only placed rows (finite x and y) are sampled and searched; a row with ``m`` real,
    placed neighbours is compared with its ``m`` nearest placed points. NaN when no row qualifies.
    """
    from scipy.spatial import cKDTree

    n, k = neighbors.shape
    placed = np.isfinite(xy).all(axis=1)
    where = np.flatnonzero(placed)
    nb = np.where((neighbors >= 0) & (neighbors < n), neighbors, -1)
    ok = np.zeros(neighbors.shape, bool)
    ok[nb >= 0] = placed[nb[nb >= 0]]
    cand = where[ok[where].any(axis=1)]
    if len(cand) == 0 or len(where) < 2:
        return float("nan"), 0
    rows = np.random.default_rng(seed).choice(cand, min(sample, len(cand)), replace=False)
    kk = min(k + 1, len(where))
    _, near = cKDTree(xy[where]).query(xy[rows], k=kk)                   # includes the row itself
    near = where[near]
    shares = []
    for a, r in enumerate(rows):
        mine = set(nb[r][ok[r]].tolist())
        shares.append(len(set(near[a][:len(mine) + 1].tolist()) & mine) / len(mine))
    return float(np.mean(shares)), len(rows)


def clean_graph(neighbors: np.ndarray, sims: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """``(idx, dist, missing)``: UMAP's (n, k + 1) neighbour ids and cosine distances, column 0 the
    row itself at distance 0, every entry that is not a neighbour (id < 0 or ≥ n, the row itself, a
    non-finite similarity) as id −1 at distance 2 (UMAP skips id −1); and how many there were.

    >>> idx, dist, missing = clean_graph(np.array([[1, -1], [0, 0]]), np.array([[0.9, -np.inf], [0.8, 0.8]]))
    >>> idx.tolist(), dist.astype(float).round(2).tolist(), missing
    ([[0, 1, -1], [1, 0, -1]], [[0.0, 0.1, 2.0], [0.0, 0.2, 2.0]], 2)
    """
    n, _ = neighbors.shape
    nb = neighbors.astype(np.int64)
    sims = sims.astype(np.float32)
    own = np.arange(n, dtype=np.int64)[:, None]
    bad = (nb < 0) | (nb >= n) | (nb == own) | ~np.isfinite(sims)
    bad[:, 1:] |= (nb[:, 1:] == nb[:, :-1]) & ~bad[:, :-1]           # a repeated id (sorted lists)
    nb = np.where(bad, -1, nb)
    d = np.where(bad, 2.0, np.clip(1.0 - np.nan_to_num(sims), 0.0, 2.0)).astype(np.float32)
    idx = np.hstack([own, nb])                                           # (n, k + 1)
    dist = np.hstack([np.zeros((n, 1), np.float32), d])                  # (n, k + 1)
    return idx, dist, int(bad.sum())


def place_unplaced(xy: np.ndarray, neighbors: np.ndarray) -> tuple[int, int]:
    """Give each non-finite row of ``xy`` (n, 2), in place, the mean position of its placed graph
    neighbours, round after round until no row can be placed; ``(placed, left)``: rows so placed,
    and rows left NaN (no placed neighbour, however far).

    >>> xy = np.array([[0.0, 0.0], [np.nan, np.nan], [np.nan, np.nan], [2.0, 2.0]], np.float32)
    >>> place_unplaced(xy, np.array([[3, 1], [0, 3], [1, -1], [0, 1]])), xy[1].tolist(), xy[2].tolist()
    ((2, 0), [1.0, 1.0], [1.0, 1.0])
    """
    n = len(xy)
    placed = np.isfinite(xy).all(axis=1)
    xy[~placed] = np.nan
    before = int((~placed).sum())
    nb_all = np.where((neighbors >= 0) & (neighbors < n), neighbors, -1)
    while True:
        todo = np.flatnonzero(~placed)
        if not len(todo):
            break
        nb = nb_all[todo]
        ok = (nb >= 0) & placed[np.maximum(nb, 0)]
        has = ok.any(axis=1)
        if not has.any():
            break
        w = ok[has]
        pts = np.where(w[:, :, None], xy[np.maximum(nb[has], 0)], 0.0)    # (r, k, 2); unplaced: 0, not NaN
        xy[todo[has]] = pts.sum(axis=1) / w.sum(axis=1, keepdims=True)
        placed[todo[has]] = True
    left = int((~placed).sum())
    return before - left, left


def map_rows(neighbors: np.ndarray, keep: np.ndarray | None, limit: int = MAP_ROWS, seed: int = 0) -> np.ndarray:
    """The rows UMAP lays out (sorted ids): all when there are at most ``limit``; else the ``keep``
    rows, their graph neighbours, and a seeded sample of the other rows with their neighbours, up
    to ``limit`` (module docstring). Example: 10 rows, limit 4, keep row 7 with neighbours [2, 5]
    → rows 2, 5, 7 and one sampled row."""
    n, k = neighbors.shape
    if n <= limit:
        return np.arange(n)
    rng = np.random.default_rng(seed)
    chosen = np.zeros(n, bool)

    def add(rows: np.ndarray) -> None:
        rows = np.unique(rows[(rows >= 0) & (rows < n)])
        rows = rows[~chosen[rows]]
        room = limit - int(chosen.sum())
        if len(rows) > room:
            rows = rng.choice(rows, room, replace=False)
        chosen[rows] = True

    must = np.flatnonzero(keep) if keep is not None else np.zeros(0, np.int64)
    add(must)
    add(neighbors[must].ravel())
    rest = rng.permutation(np.flatnonzero(~chosen))
    at = 0
    while at < len(rest) and chosen.sum() < limit:  # each sampled row brings its neighbours
        step = max(1, (limit - int(chosen.sum())) // (k + 1))
        take = rest[at:at + step]
        at += step
        take = take[~chosen[take]]
        add(take)
        add(neighbors[take].ravel())
    return np.flatnonzero(chosen)


def cache_umap_kernels() -> int:
    """Turn on numba's on-disk cache for umap-learn's compiled functions; returns how many.

    umap-learn 0.5.12 declares about 100 numba functions (membership strengths, the SGD epoch, the
    spectral helpers) without ``cache=True``, so every process paid ~15 CPU-s compiling those a map uses
    (SmolLM2's map: 26.7 CPU-s in a new process, 11.8 once compiled). ``Dispatcher.enable_caching``
    gives them the cache that ``cache=True`` would have: machine code next to umap's sources, or
    in numba's user-wide cache folder (``$NUMBA_CACHE_DIR``) when that is read-only. It changes no
    result. A dispatcher that cannot be cached (numba says so with a warning) compiles as before.
    """
    import importlib

    from numba.core.dispatcher import Dispatcher

    done = 0
    for name in ("umap.utils", "umap.distances", "umap.sparse", "umap.layouts", "umap.spectral", "umap.umap_"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        for obj in list(vars(mod).values()):
            if isinstance(obj, Dispatcher) and obj._cache.__class__.__name__ == "NullCache":
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        obj.enable_caching()
                    done += 1
                except Exception:  # noqa: BLE001 - an uncacheable function compiles as before
                    pass
    return done


def umap_layout(neighbors: np.ndarray, sims: np.ndarray, *, seed: int = 0,
                n_epochs: int | None = None, data: np.ndarray | None = None,
                init: str | None = None, keep: np.ndarray | None = None,
                max_rows: int = MAP_ROWS) -> tuple[np.ndarray, LayoutRecord]:
    """UMAP coordinates from a cosine kNN graph.

    Args:
        neighbors: (n, k) neighbour ids, self excluded (as :func:`embscope.geometry.knn.knn_graph`
            returns them).
        sims: (n, k) cosine similarities.
        seed: ``random_state`` for UMAP.
        n_epochs: optimisation epochs (default: UMAP's, fewer above the sizes in ``EPOCHS_BY_SIZE``).
        data: ignored (kept for callers that pass the matrix; UMAP only reads the graph).
        init: UMAP's initial layout, ``spectral`` (Laplacian eigenvectors of the graph) or ``random``
            (default: spectral up to :data:`RANDOM_INIT_ABOVE` rows, random above).
        keep: (n,) bool, rows laid out whatever the size (flagged, isolated); see :func:`map_rows`.
        max_rows: rows laid out at most; the others are placed from their neighbours.
    Returns:
        ``(xy, record)``: (n, 2) float32 coordinates (arbitrary units; NaN for a row left off the
        map) and the :class:`~embscope.geometry.records.LayoutRecord`, preservation measured.
    """
    import umap

    t0 = time.perf_counter()
    cache_umap_kernels()
    n, k = neighbors.shape
    _, _, missing = clean_graph(neighbors, sims)
    sub = map_rows(neighbors, keep, max_rows, seed)
    m = len(sub)
    pos = np.full(n, -1, np.int64)
    pos[sub] = np.arange(m)
    nb = neighbors[sub]
    nb_sub = np.where((nb >= 0) & (nb < n), pos[np.clip(nb, 0, n - 1)], -1)   # edges leaving the rows laid out: none
    idx, dist, _ = clean_graph(nb_sub, sims[sub])
    if n_epochs is None:
        n_epochs = next((e for size, e in EPOCHS_BY_SIZE if m > size), None)
    if init is None:
        init = "random" if m > RANDOM_INIT_ABOVE else "spectral"
    # UMAP checks X's length and, with a precomputed graph, reads nothing else from it.
    data = np.zeros((m, 1), np.float32)
    reducer = umap.UMAP(n_neighbors=k + 1, n_components=2, metric="cosine", random_state=seed,
                        n_epochs=n_epochs, precomputed_knn=(idx, dist, None), init=init,
                        verbose=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "n_jobs overridden by random_state", spectral fallbacks
        xy_sub = np.array(reducer.fit_transform(data), dtype=np.float32)
    if m < n:  # a laid-out row with no edge among the rows laid out sits where it started: placed instead
        linked = np.zeros(m, bool)
        edges = idx[:, 1:]
        linked[(edges >= 0).any(axis=1)] = True
        linked[edges[edges >= 0]] = True
        xy_sub[~linked] = np.nan
    xy = np.full((n, 2), np.nan, np.float32)
    xy[sub] = xy_sub
    placed, left = place_unplaced(xy, neighbors)
    seconds = time.perf_counter() - t0
    share, rows = neighbor_preservation(neighbors, xy, seed=seed)
    laid_out = neighbor_preservation(nb_sub, xy_sub, seed=seed)[0] if m < n else None
    epochs = n_epochs if n_epochs is not None else (500 if m <= 10_000 else 200)  # UMAP's default
    return xy, layout_record(seconds, epochs, init, share, rows, missing_edges=missing, placed_by_neighbours=placed,
                             unplaced=left, laid_out_rows=int(m),
                             laid_out_preservation=None if laid_out is None or laid_out != laid_out
                             else round(float(laid_out), 4))


def _layout_child(folder: str) -> int:
    """``python -m embscope.geometry.layout FOLDER``: :class:`LayoutJob`'s process. Reads
    ``graph.npz`` (neighbours, similarities, seed, epochs, rows to keep) from FOLDER, writes ``xy.npy`` and
    ``record.json`` (the :class:`~embscope.geometry.records.LayoutRecord`, or ``{"error": …}``)."""
    import json
    from pathlib import Path

    out = Path(folder)
    try:
        with np.load(out / "graph.npz", allow_pickle=False) as z:
            epochs = int(z["n_epochs"])
            xy, rec = umap_layout(z["neighbors"], z["sims"], seed=int(z["seed"]), n_epochs=epochs if epochs > 0 else None,
                                  keep=z["keep"])
        try:
            import resource

            rec.peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
        except ImportError:  # pragma: no cover - not a Unix
            pass
        np.save(out / "xy.npy", xy, allow_pickle=False)
        (out / "record.json").write_text(json.dumps(rec.to_dict()), encoding="utf-8")
    except BaseException as exc:  # noqa: BLE001 - the parent decides what a failed map means
        (out / "record.json").write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), encoding="utf-8")
        return 1
    return 0


class LayoutJob:
    """:func:`umap_layout` of one graph in a separate process, started now; :meth:`result` waits.

    The process is ``python -m embscope.geometry.layout`` on a private temporary folder that holds
    the graph and, at the end, the coordinates (NumPy files, no pickle); it imports nothing of the
    caller's script (a ``multiprocessing`` spawn would re-run an unguarded one).
    ``EMBSCOPE_LAYOUT_PROCESS=0`` (or a process that cannot start) lays it out in this process
    when the result is asked for; :meth:`cancel` ends the process.
    """

    def __init__(self, neighbors: np.ndarray, sims: np.ndarray, *, seed: int = 0, n_epochs: int | None = None,
                 keep: np.ndarray | None = None):
        import os

        self._args = (np.ascontiguousarray(neighbors), np.ascontiguousarray(sims, dtype=np.float32), seed, n_epochs)
        self._keep = np.zeros(len(neighbors), bool) if keep is None else np.asarray(keep, bool)
        self._proc = self._dir = None
        self.started = time.perf_counter()
        if os.environ.get("EMBSCOPE_LAYOUT_PROCESS", "1") == "0":
            return
        try:
            import subprocess
            import sys
            import tempfile
            from pathlib import Path

            from embscope.children import track

            self._dir = tempfile.TemporaryDirectory(prefix="embscope-layout-")
            np.savez(Path(self._dir.name) / "graph.npz", neighbors=self._args[0], sims=self._args[1],
                     seed=np.int64(seed), n_epochs=np.int64(n_epochs or 0), keep=self._keep)
            root = str(Path(__file__).resolve().parents[2])  # the folder holding this embscope
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
            with open(Path(self._dir.name) / "stderr.txt", "wb") as log:  # a file: a pipe could fill
                self._proc = track(subprocess.Popen(  # it ends with this process (embscope.children)
                    [sys.executable, "-m", "embscope.geometry.layout", self._dir.name, str(os.getpid())],
                    env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log))
        except Exception:  # noqa: BLE001 - no process: lay it out here when asked
            self._proc = None

    def result(self) -> tuple[np.ndarray, LayoutRecord]:
        """:func:`umap_layout`'s ``(xy, record)`` (waiting for the process); a failure is a map of
        NaN whose record says why."""
        import json
        from pathlib import Path

        value = "the layout process ended without a result"
        if self._proc is not None:
            folder = Path(self._dir.name)
            try:
                code = self._proc.wait()
                if not (folder / "record.json").is_file():
                    tail = (folder / "stderr.txt").read_text(encoding="utf-8", errors="replace").strip()
                    raise ValueError(f"exit {code}: {tail.splitlines()[-1] if tail else 'no message'}")
                rec = json.loads((folder / "record.json").read_text(encoding="utf-8"))
                if "error" in rec:
                    value = rec["error"]
                else:
                    return np.load(folder / "xy.npy", allow_pickle=False), LayoutRecord.from_dict(rec)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                value = f"{value} ({type(exc).__name__}: {exc})"
            finally:
                self._dir.cleanup()
        else:
            try:
                return umap_layout(self._args[0], self._args[1], seed=self._args[2], n_epochs=self._args[3],
                                   keep=self._keep)
            except Exception as exc:  # noqa: BLE001 - the map is a picture: its failure is a note
                value = f"{type(exc).__name__}: {exc}"
        n = len(self._args[0])
        return np.full((n, 2), np.nan, np.float32), layout_record(
            time.perf_counter() - self.started, 0, "none", unplaced=n, note=f"no map: {str(value).splitlines()[0][:300]}")

    def cancel(self) -> None:
        """End the process without waiting for its result."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait()
        if self._dir is not None:
            self._dir.cleanup()


if __name__ == "__main__":  # LayoutJob's process: FOLDER and the parent's pid
    import sys

    from embscope.children import die_with_parent

    if len(sys.argv) > 2:
        die_with_parent(int(sys.argv[2]))
    sys.exit(_layout_child(sys.argv[1]))
