"""Corpus reading, shared by every pass over text (fertility, extension candidates, data checks).

- :mod:`~embscope.corpus.listing`: corpus paths (files, folders, HF dataset folders, globs) → files;
- :mod:`~embscope.corpus.readers`: one file → records (txt, jsonl, Parquet, Arrow, compressed),
  within the reading limits (:mod:`embscope.limits`);
- :mod:`~embscope.corpus.stream`: files and folders → (language, text) batches, bad records counted,
  and a bounded list of a corpus's texts (:func:`~embscope.corpus.stream.read_texts`);
- :mod:`~embscope.corpus.shards`: the units of work both engines hand out;
- :mod:`~embscope.corpus.backend`: :class:`Engine`, which back end runs a pass;
- :mod:`~embscope.corpus.engine`: map over shards, exact reduce (this process or local workers);
- :mod:`~embscope.corpus.ray_engine`: the same on Ray Data.
"""
