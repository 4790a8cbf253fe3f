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

Reproducible: ``random_state`` fixes the layout (UMAP then runs single-threaded).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import numpy as np

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


@dataclass
class Layout:
    """2-D coordinates per row."""

    #: (n,) float32 x coordinate (arbitrary units)
    x: np.ndarray
    #: (n,) float32 y coordinate
    y: np.ndarray
    #: seconds spent
    seconds: float
    #: epochs UMAP ran
    n_epochs: int
    #: neighbour preservation (see the module docstring), NaN when not measured
    preservation: float = float("nan")
    #: UMAP's initial layout: ``spectral`` or ``random``
    init: str = "spectral"

    def record(self) -> dict:
        """JSON-able summary (no arrays)."""
        return {"seconds": round(self.seconds, 3), "n_epochs": self.n_epochs, "init": self.init,
                "neighbor_preservation": None if self.preservation != self.preservation
                else round(self.preservation, 4), "preservation_rows": min(PRESERVE_SAMPLE, len(self.x))}


def neighbor_preservation(neighbors: np.ndarray, xy: np.ndarray, *, sample: int = PRESERVE_SAMPLE,
                          seed: int = 0) -> float:
    """Mean share of each sampled row's graph neighbours among its k nearest 2-D points.

    ``neighbors`` (n, k) graph ids (self excluded); ``xy`` (n, 2) coordinates.
    """
    from scipy.spatial import cKDTree

    n, k = neighbors.shape
    rows = np.random.default_rng(seed).choice(n, min(sample, n), replace=False)
    _, near = cKDTree(xy).query(xy[rows], k=k + 1)                       # includes the row itself
    hits = [len(set(near[a].tolist()) & set(neighbors[r].tolist())) for a, r in enumerate(rows)]
    return float(np.mean(hits) / k)


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
                n_epochs: int | None = None, data: np.ndarray | None = None, init: str | None = None) -> Layout:
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
    Returns:
        :class:`Layout`, with its neighbour preservation measured.
    """
    import umap

    t0 = time.perf_counter()
    cache_umap_kernels()
    n, k = neighbors.shape
    self_col = np.arange(n, dtype=np.int64)[:, None]
    idx = np.hstack([self_col, neighbors.astype(np.int64)])                 # (n, k + 1)
    dist = np.hstack([np.zeros((n, 1), np.float32),
                      np.clip(1.0 - sims.astype(np.float32), 0.0, 2.0)])      # (n, k + 1)
    if n_epochs is None:
        n_epochs = next((e for size, e in EPOCHS_BY_SIZE if n > size), None)
    if init is None:
        init = "random" if n > RANDOM_INIT_ABOVE else "spectral"
    # UMAP checks X's length and, with a precomputed graph, reads nothing else from it.
    data = np.zeros((n, 1), np.float32)
    reducer = umap.UMAP(n_neighbors=k + 1, n_components=2, metric="cosine", random_state=seed,
                        n_epochs=n_epochs, precomputed_knn=(idx, dist, None), init=init,
                        verbose=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "n_jobs overridden by random_state", spectral fallbacks
        xy = reducer.fit_transform(data)
    xy = np.asarray(xy, dtype=np.float32)
    seconds = time.perf_counter() - t0
    return Layout(x=xy[:, 0].copy(), y=xy[:, 1].copy(), seconds=seconds,
                  n_epochs=int(n_epochs if n_epochs is not None else (500 if n <= 10_000 else 200)),  # UMAP's
                  preservation=neighbor_preservation(neighbors, xy, seed=seed), init=init)
