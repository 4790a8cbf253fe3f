"""The k-nearest-neighbour graph every geometry method returns (:class:`KnnGraph`) and the error
a matrix the graph cannot be built from raises; the builders are :mod:`embscope.geometry.knn`
(exact, IVF, HNSW) and :mod:`embscope.geometry.certify` (certified)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from embscope.errors import EmbscopeError
from embscope.geometry.records import KnnRecord


class KnnError(EmbscopeError):
    """A matrix that the kNN graph cannot be built from."""


@dataclass
class KnnGraph:
    """A k-nearest-neighbour graph under cosine similarity (self excluded)."""

    #: (n, k) int64 row ids, most similar first
    neighbors: np.ndarray
    #: (n, k) float32 cosine similarity to each neighbour, descending (higher = closer)
    sims: np.ndarray
    #: ``exact``, ``certified``, ``ivf``, ``refined`` or ``hnsw``
    method: str
    k: int
    #: recall@k against fp32 exact search on ``recall_rows`` random rows (1.0 = perfect)
    recall_at_k: float
    #: rows the recall was measured on
    recall_rows: int
    #: seconds spent building the graph (the build that was cached, when ``cached``)
    seconds: float
    #: whether the graph was read from the cache
    cached: bool = False
    #: method details: device, tile dtype, nlist, nprobe, scanned share
    params: dict[str, Any] = field(default_factory=dict)
    #: (n,) whether each row's neighbours are exact search's (None: every row's are, or unknown)
    exact: np.ndarray | None = None

    def record(self) -> KnnRecord:
        """The summary's record (no arrays): the scalars above and ``params``, checked against
        :class:`~embscope.geometry.records.KnnRecord` (a key no field declares is a bug)."""
        return KnnRecord.from_dict({"method": self.method, "k": self.k,
                                    "recall_at_k": round(float(self.recall_at_k), 4), "recall_rows": self.recall_rows,
                                    "seconds": round(float(self.seconds), 3), "cached": self.cached, **self.params},
                                   strict=True)
