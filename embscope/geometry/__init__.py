"""Geometry of the embedding rows: kNN graph, per-row indicators, 2-D map, the token-row scan.

Modules: :mod:`~embscope.geometry.knn` (cosine kNN graph: dispatch, recall, cache),
:mod:`~embscope.geometry.exact` (tiled exact search), :mod:`~embscope.geometry.ivf` (inverted file),
:mod:`~embscope.geometry.indicators` (norms, Magikarp reference similarity, isolation, score),
:mod:`~embscope.geometry.layout` (UMAP map), :mod:`~embscope.geometry.scan` (all of it per model).
"""
