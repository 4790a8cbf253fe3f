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
               options: "ReadOptions | None" = None, total_bytes: int | None = None,
               cut: list | None = None) -> list[str]:
    """All texts of a corpus (file or folder), through :func:`embscope.corpus.stream.iter_corpus`,
    read with ``options`` (``--text-field``, ``--lang-field``, ...).

    At most ``max_bytes`` per language and ``total_bytes`` (default ``max_bytes``) in all: the
    total bounds the memory whatever the number of languages. When the total stops the reading,
    ``cut`` (a list) gets the corpus path appended, so the caller can say so.
    """
    from embscope.corpus.stream import iter_corpus

    total = max_bytes if total_bytes is None else total_bytes
    texts: list[str] = []
    size = 0
    stream = iter_corpus(corpus_path, sample_bytes=max_bytes, options=options)
    for batch in stream:
        for t in batch.texts:
            size += len(t.encode("utf-8"))
            if size > total:
                break
            texts.append(t)
        if size > total:
            stream.close()  # the corpus is not read further
            if cut is not None:
                cut.append(str(corpus_path))
            break
    if not texts:
        raise CorpusError(f"{corpus_path} holds no text; pass a folder of .txt/.jsonl/.parquet files")
    return texts
