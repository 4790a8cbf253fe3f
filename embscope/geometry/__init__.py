"""Geometry of the embedding rows: kNN graph, per-row indicators, 2-D map, the token-row scan.

Modules: :mod:`~embscope.geometry.knn` (cosine kNN graph: dispatch, recall, cache),
:mod:`~embscope.geometry.exact` (tiled exact search), :mod:`~embscope.geometry.certify` (the certified
graph), :mod:`~embscope.geometry.nndescent` and :mod:`~embscope.geometry.hnsw` (approximate graphs),
:mod:`~embscope.geometry.indicators` (evidence per indicator, Magikarp's indicator, score, flags),
:mod:`~embscope.geometry.reference` (known-unused rows), :mod:`~embscope.geometry.verify`
(prompting the model), :mod:`~embscope.geometry.usage` (flagged rows a corpus uses),
:mod:`~embscope.geometry.layout` (UMAP map), :mod:`~embscope.geometry.scan` (all of it per model).
"""
