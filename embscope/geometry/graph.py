"""The k-nearest-neighbour graph every geometry method returns (:class:`KnnGraph`) and the error
a matrix the graph cannot be built from raises; the builders are :mod:`embscope.geometry.knn`
(exact, NN-descent, HNSW) and :mod:`embscope.geometry.certify` (certified)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from embscope.errors import EmbscopeError
from embscope.geometry.records import KnnRecord


class KnnError(EmbscopeError):
    """A matrix that the kNN graph cannot be built from."""


@dataclass
class KnnGraph:
    """A k-nearest-neighbour graph under cosine similarity (self excluded): the arrays, and the
    record of how they were built (method, k, recall, seconds, cache, the method's details; the
    summary's ``knn``)."""

    #: (n, k) int64 row ids, most similar first
    neighbors: np.ndarray
    #: (n, k) float32 cosine similarity to each neighbour, descending (higher = closer)
    sims: np.ndarray
    #: how the graph was built (:class:`~embscope.geometry.knn_record.KnnRecord`)
    info: KnnRecord
    #: (n,) whether each row's neighbours are exact search's (None: every row's are, or unknown)
    exact: np.ndarray | None = None
