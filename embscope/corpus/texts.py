"""A corpus's texts as a list, bounded: for the steps that need the texts in memory (the flagged
rows a corpus uses, tokenizer conformance tables), not for the streaming passes."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from embscope.errors import CorpusError

if TYPE_CHECKING:  # pragma: no cover
    from embscope.corpus.readers import ReadOptions

#: bytes of corpus text :func:`read_texts` holds at most (per language): a 1 GB corpus is sampled,
#: not held whole (the passes of :mod:`embscope.corpus.engine` stream the corpus instead)
MAX_CORPUS_BYTES = 256 * 2**20


def read_texts(corpus_path: str | Path, max_bytes: int = MAX_CORPUS_BYTES, *,
               options: "ReadOptions | None" = None) -> list[str]:
    """All texts of a corpus (file or folder), through :func:`embscope.corpus.stream.iter_corpus`,
    read with ``options`` (``--text-field``, ``--lang-field``, ...)."""
    from embscope.corpus.stream import iter_corpus

    texts = [t for batch in iter_corpus(corpus_path, sample_bytes=max_bytes, options=options)
             for t in batch.texts]
    if not texts:
        raise CorpusError(f"{corpus_path} holds no text; pass a folder of .txt/.jsonl/.parquet files")
    return texts
