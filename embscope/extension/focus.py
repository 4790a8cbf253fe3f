"""``focus``: new rows as sparse combinations of old rows, chosen in a static embedding space
trained on the corpus itself (FOCUS: Dobler & de Melo 2023, "FOCUS: Effective Embedding
Initialization for Monolingual Specialization of Multilingual Models", EMNLP, arXiv 2305.14481).

1. The corpus's fit texts (never the held-out ones) are tokenized with the *extended* tokenizer and
   static token embeddings are trained on those id sequences (fastText skip-gram, token level,
   without character n-grams: each token id is one "word"). Old and new tokens then live in one
   space learned from the target text.
2. The *overlapping* tokens are the old tokens with a trained model row that occur in that
   text: they have both a model row E[j] and a static vector a_j.
3. For a new token with static vector a, the similarities c_j = cos(a, a_j) over the overlapping
   tokens go through sparsemax (Martins & Astudillo 2016, "From Softmax to Sparsemax"), the
   Euclidean projection onto the probability simplex:

       w = sparsemax(c) = max(c − τ, 0),  τ such that Σ_j w_j = 1,

   which keeps only the few most similar tokens, and the new row is ``Σ_j w_j E[j]``.

Worked sparsemax example: c = [0.9, 0.8, 0.1] → sorted cumulative sums 0.9, 1.7, 1.8; the support
is k = 2 (1 + 2·0.8 = 2.6 > 1.7, 1 + 3·0.1 = 1.3 < 1.8), τ = (1.7 − 1) / 2 = 0.35 →
w = [0.55, 0.45, 0].

A new token the text never holds has no static vector; it keeps its subword mean (FOCUS gives
such tokens a random row; the subword mean is the better start when the pieces are known).
``ctx.memo["focus"]`` keeps ``(overlap ids, per new token (support ids, weights))`` for inspection.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import torch

#: static vector size: FOCUS trains 300-d fastText vectors; 100 keeps training on a few MB of text
#: within a minute on one core, and cosine neighbours of frequent tokens barely change above it
DIM = 100
#: passes over the text (FOCUS's default for its own fastText model)
EPOCHS = 3
#: skip-gram context window, in tokens (fastText's default)
WINDOW = 5
#: most corpus bytes the static embeddings are trained on
TRAIN_BYTES = 8 << 20
#: new rows per similarity block: 1024 × 50,000 overlapping tokens float32 = 200 MiB at most
BLOCK = 1024


@dataclass
class StaticEmbeddings:
    """Static token vectors trained on the corpus (step 1 of the module docstring)."""

    #: (n,) token ids (extended tokenizer) that received a vector
    ids: "np.ndarray"
    #: (n, DIM) float32, L2-normalised
    vectors: "np.ndarray"


def sparsemax(z: "torch.Tensor") -> "torch.Tensor":
    """Row-wise sparsemax of (m, k) scores (module docstring): the closest point of the simplex.

    >>> import torch
    >>> [round(v, 2) for v in sparsemax(torch.tensor([[0.9, 0.8, 0.1]]))[0].tolist()]
    [0.55, 0.45, 0.0]
    """
    import torch

    zs, _ = torch.sort(z, dim=1, descending=True)                         # (m, k)
    cum = zs.cumsum(1)
    k = torch.arange(1, z.shape[1] + 1, dtype=z.dtype, device=z.device)   # (k,)
    support = (1 + k * zs) > cum                                          # (m, k), a prefix of True
    size = support.sum(1, keepdim=True)                                   # (m, 1) ≥ 1
    tau = (cum.gather(1, size - 1) - 1) / size.to(z.dtype)
    return (z - tau).clamp_min(0)


def train_static(sequences: Iterable[Sequence[int]], *, dim: int = DIM, epochs: int = EPOCHS) -> StaticEmbeddings:
    """Skip-gram vectors for the token ids of ``sequences`` (fastText with its fixed seed, on one
    thread: the same sequences give the same vectors)."""
    import numpy as np

    try:
        import fasttext
    except ImportError as err:  # pragma: no cover - pinned in requirements.txt
        from embscope.errors import SpecError

        raise SpecError("--init focus trains fastText vectors: pip install fasttext-wheel==0.9.2 "
                        "(requirements.txt)") from err
    fd, path = tempfile.mkstemp(suffix=".txt", prefix="embscope-focus-")
    written = 0
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            for seq in sequences:
                if len(seq) < 2:
                    continue
                f.write(" ".join(f"t{i}" for i in seq) + "\n")
                written += len(seq)
        if written == 0:
            return StaticEmbeddings(np.zeros(0, dtype=np.int64), np.zeros((0, dim), dtype=np.float32))
        model = fasttext.train_unsupervised(path, model="skipgram", dim=dim, epoch=epochs, ws=WINDOW, minCount=1,
                                            minn=0, maxn=0, thread=1, verbose=0)
    finally:
        os.unlink(path)
    words = [w for w in model.words if w.startswith("t") and w[1:].isdigit()]
    vecs = np.stack([model.get_word_vector(w) for w in words]).astype(np.float32)
    vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    return StaticEmbeddings(np.array([int(w[1:]) for w in words], dtype=np.int64), vecs)


def focus_weights(new_vecs: "torch.Tensor", overlap_vecs: "torch.Tensor"):
    """Per new vector, ``(support indices into the overlap, weights)``: sparsemax of the cosine
    similarities (both inputs L2-normalised, (m, D) and (k, D)), in blocks of :data:`BLOCK` rows."""
    out = []
    for a in range(0, new_vecs.shape[0], BLOCK):
        w = sparsemax(new_vecs[a:a + BLOCK] @ overlap_vecs.T)             # (b, k)
        for row in w:
            idx = row.nonzero().flatten()
            out.append((idx, row[idx]))
    return out


def init_focus(ctx, fallback: "torch.Tensor") -> "torch.Tensor":
    """FOCUS rows (module docstring) for an :class:`~embscope.extension.init.InitContext` with
    ``static`` (the corpus's static embeddings); ``fallback`` (n_new, d): the rows of new tokens
    without a static vector (their subword mean)."""
    import torch

    from embscope.errors import SpecError

    if ctx.static is None or ctx.new_ids is None:
        raise SpecError("--init focus trains static embeddings on the corpus; run it through suggest() "
                        "(extend) with the corpus")
    emb = ctx.static()
    out = fallback.clone()
    pos = {int(t): k for k, t in enumerate(emb.ids.tolist())}
    n_old = ctx.matrix.shape[0]
    new_set = {int(i) for i in ctx.new_ids}
    overlap = [t for t in emb.ids.tolist() if t < n_old and t not in new_set and bool(ctx.trained[t])]
    have = [k for k, t in enumerate(ctx.new_ids) if int(t) in pos]
    ctx.memo["focus_missing"] = len(ctx.new_ids) - len(have)
    if not overlap or not have:
        ctx.memo["focus"] = (overlap, {})
        return out
    vecs = torch.from_numpy(emb.vectors)
    a_old = vecs[[pos[t] for t in overlap]]                               # (k, D)
    a_new = vecs[[pos[int(ctx.new_ids[k])] for k in have]]                # (m, D)
    weights = focus_weights(a_new, a_old)
    ids_t = torch.tensor(overlap)
    for k, (idx, w) in zip(have, weights):
        rows = ctx.matrix[ids_t[idx]].double()                            # (s, d)
        out[k] = (w.double()[:, None] * rows).sum(0).float()
    ctx.memo["focus"] = (overlap, {k: (ids_t[idx].tolist(), w.tolist()) for k, (idx, w) in zip(have, weights)})
    return out


def corpus_static(corpus_path, ext_tok, sample_bytes=None, options=None):
    """A memoised call: static embeddings (:func:`train_static`) of the corpus's fit texts (never
    the held-out ones), tokenized with ``ext_tok``, at most :data:`TRAIN_BYTES` of them. Trains on
    the first call only (strategies without ``focus`` never pay for it)."""
    cache: dict[str, StaticEmbeddings] = {}

    def sequences():
        import warnings

        from embscope.corpus.stream import CorpusWarning, iter_corpus
        from embscope.extension.contexts import is_held_out

        seen = 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CorpusWarning)
            for batch in iter_corpus(corpus_path, sample_bytes=sample_bytes, options=options):
                fit = [t for t in batch.texts if not is_held_out(t)]
                for enc in ext_tok.encode_batch(fit, add_special_tokens=False):
                    yield enc.ids
                seen += sum(len(t.encode("utf-8")) for t in fit)
                if seen >= TRAIN_BYTES:
                    return

    def get() -> StaticEmbeddings:
        if "static" not in cache:
            cache["static"] = train_static(sequences())
        return cache["static"]

    return get
