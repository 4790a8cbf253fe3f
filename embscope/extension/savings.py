"""The savings pass of an extension: the corpus re-tokenized by the original and the extended
tokenizer in one read, on any engine (:mod:`embscope.corpus.engine`: map :func:`shard_savings` over
shards, reduce by adding).

Tokens saved = Σ tokens before − Σ tokens after, over every text; per-id counts under each tokenizer
feed the new tokens' frequencies, and the extension's cuts are counted on every text
(:func:`embscope.tokenizer.tokenization_check.count_changes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    from tokenizers import Tokenizer


def _add(a, b):
    a += b
    return a


def shard_savings(tok: "Tokenizer", ext, batches):
    """Map step of the savings pass over one shard: ``(counts under tok, counts under the extended
    tokenizer, what the extension changed)``; ``ext`` is a
    :class:`~embscope.tokenizer.extend.TokenizerExtension` (or a bare extended ``Tokenizer``:
    counts only)."""
    import numpy as np

    from embscope.tokenizer.tokenization_check import Changes, count_changes
    from embscope.tokenizer.extend import TokenizerExtension

    full = isinstance(ext, TokenizerExtension)
    ext_tok = ext.tokenizer if full else ext
    size_old, size_new = tok.get_vocab_size(with_added_tokens=True), ext_tok.get_vocab_size(with_added_tokens=True)
    counts, counts_ext = np.zeros(size_old, dtype=np.int64), np.zeros(size_new, dtype=np.int64)
    changed = Changes()
    for batch in batches:
        for i in range(0, len(batch.texts), 2048):
            texts = list(batch.texts[i:i + 2048])
            olds = tok.encode_batch(texts, add_special_tokens=False)
            news = ext_tok.encode_batch(texts, add_special_tokens=False)
            for encs, c, size in ((olds, counts, size_old), (news, counts_ext, size_new)):
                ids = np.asarray([j for e in encs for j in e.ids], dtype=np.int64)
                c += np.bincount(ids, minlength=size)[:size]
            if full:
                changed.add(count_changes(texts, olds, news, ext))
    return counts, counts_ext, changed


def _add_savings(a, b):
    a[2].add(b[2])
    return _add(a[0], b[0]), _add(a[1], b[1]), a[2]


@dataclass
class Savings:
    """What the savings pass measured (:func:`corpus_savings`)."""

    #: corpus tokens under the original tokenizer, and per token id (V,)
    before: int
    counts: "np.ndarray"
    #: corpus tokens under the extended tokenizer, and per token id of the extended vocabulary
    after: int
    counts_extended: "np.ndarray"
    #: what the extension changed (:class:`~embscope.tokenizer.extend.Changes`: new tokens, cuts)
    changes: object
    #: the corpus report of the pass
    report: object


def corpus_savings(tok: "Tokenizer", ext, corpus, *, engine=None, sample_bytes: int | None = None,
                   options=None) -> Savings:
    """Tokens before and after extension, in one pass over a corpus on an engine.

    ``ext``: the :class:`~embscope.tokenizer.extend.TokenizerExtension` (or a bare extended
    ``Tokenizer``). Reading the corpus once serves both tokenizers: totals and counts per id
    under each (as :func:`~embscope.extension.candidates.token_counts`), and, for an extension, its cuts
    (:func:`~embscope.tokenizer.extend.count_changes`) over every text.
    """
    import functools

    from embscope.corpus.engine import run_pass

    (counts, counts_ext, changed), report = run_pass(
        corpus, functools.partial(shard_savings, tok, ext), _add_savings, engine=engine,
        sample_bytes=sample_bytes, options=options, description="re-tokenizing")
    return Savings(int(counts.sum()), counts, int(counts_ext.sum()), counts_ext, changed, report)
