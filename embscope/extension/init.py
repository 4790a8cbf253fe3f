"""How to fill the rows of new tokens: a registry of initialisation strategies.

Every strategy maps an :class:`InitContext` (one trained matrix, which of its rows are trustworthy,
and the old-tokenizer pieces of each new term) to an ``(n_new, d)`` tensor. It runs once per matrix:
the input embedding and, for untied models, the output (LM-head) matrix.

Reference rows ("trained rows") exclude special tokens, padding rows past the tokenizer, rows the
tokenizer can never emit (``unreachable``) and rows flagged as under-trained in a ``tokens`` table:
every mean below is over trained rows only, so a never-updated row cannot leak into a new one.

Strategies (``--init NAME``):

- ``mean``: μ = mean of the trained rows. Every new token gets the same row.
- ``hewitt``: a sample from N(μ, εΣ), Σ the covariance of the trained rows, ε = 1e-5 (Hewitt 2021,
  "Initializing New Word Embeddings for Pretrained Language Models"; HF
  ``resize_token_embeddings(mean_resizing=True)`` samples the same way with ε = 1e-9). With tied embeddings a new row e gets logit
  h·e ≈ h·μ, so it takes about the average token's probability — the next-token distribution of
  old text barely moves (KL ≈ 0).
- ``subword-mean``: the mean of the rows of the pieces the old tokenizer produces for the term
  (FVT, Gee et al. 2022, "Fast Vocabulary Transfer for Language Model Compression").
  " hypertension" = [" hyper", "tension"] → (E[" hyper"] + E["tension"]) / 2.
- ``weighted-subword``: like ``subword-mean`` but each piece is weighted by its inverse document
  frequency in the domain corpus, w_i ∝ ln((T + 1) / (c_i + 1)), T the corpus's token count and c_i
  the piece's count. Frequent glue pieces ("al", "ing", "ation") say little about what the term
  means; rare specific ones (" metac", "arp") say more. Example: T = 600 000, counts
  [120, 3000, 900] → raw weights [8.51, 5.30, 6.50] → normalised [0.419, 0.261, 0.320]. Without
  counts all weights are equal (= ``subword-mean``).
- ``knn-pull``: ``subword-mean``, pulled halfway toward the mean of its k = 10 nearest trained rows
  (cosine), keeping the subword mean's norm:
  ``s = subword-mean``, ``m = mean(E[nn_k(s)])``, ``x = (1 − α) s + α m`` with α = 0.5,
  ``x ← x · ‖s‖ / ‖x‖``. The average of a term's pieces can land between clusters, in a region no
  trained token occupies; the pull moves its direction into the populated region around it, while
  the norm stays that of the average. The norm is kept on purpose: with tied embeddings a row's norm
  is its logit scale. Measured on SmolLM2-135M (200 ICD-10 terms, 230 held-out tokens),
  rescaling the pulled rows to the median trained-row norm instead raised the mean
  KL(p_old ‖ p_new) from 9e-6 to 0.098 nats and put up to 99.9 % of one position's next-token
  mass on new tokens (10th-percentile norm: KL 0.006, max mass 47 %).
- ``subword-mean-norm``: ``subword-mean`` rescaled to the median norm of the trained rows,
  ``x = s · median‖E_trained‖ / ‖s‖``. Averaging shrinks rows (the mean of k unrelated vectors has
  about 1/√k of their norm); NVIDIA's tokenizer-extension recipe corrects the input rows' norm to
  the median norm of the target script's existing rows ("subword/uniform … with input norm
  correction to the median Devanagari norm",
  https://docs.nvidia.com/nemotron/nightly/tokenizer-extension/reference/init-embeddings-config.html).
  Here every trained row is the reference (one domain, not one script).
- ``omp``: sparse combination of trained rows found in a donor space (GloVe), as mergekit's
  tokensurgeon does (:mod:`embscope.extension.omp`).
- ``distil``: each new input row fitted, the model frozen, so that the model's next-token
  distributions after the new token match those after the old pieces on corpus contexts
  (:mod:`embscope.extension.distil`; Dobler, Elliott & de Melo 2025, "Token Distillation").
  Needs the whole model; output rows of untied models stay ``subword-mean``.
- ``focus``: sparsemax-weighted combinations of old rows, the weights from static embeddings
  trained on the corpus itself (:mod:`embscope.extension.focus`; Dobler & de Melo 2023, FOCUS).
- ``random``: a sample from N(μ, Σ), the trained rows' own distribution (Hewitt's sampler with
  ε = 1): a row that looks like any trained row and knows nothing; the baseline every trial reports.

Any strategy with ``+norm`` (``subword-mean+norm``; ``--norm-correction`` adds the ``+norm`` twin of
every strategy diagnosed) has its rows rescaled to the mean norm of the model's rows in each new
token's script (:mod:`embscope.extension.norms`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from embscope.errors import SpecError, did_you_mean

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import torch

#: Hewitt's ε: the covariance is scaled down so samples stay within ~1e-2.5 σ of the mean (HF
#: transformers' ``mean_resizing`` uses 1e-9, which makes the new rows practically equal to μ)
HEWITT_EPS = 1e-5
#: rows per chunk when scanning a (V, d) matrix: 8192 × 4096 float32 = 128 MiB at most
CHUNK_ROWS = 8192
#: the spec suffix that rescales a strategy's rows per script (:mod:`embscope.extension.norms`)
NORM_SUFFIX = "+norm"
#: knn-pull: neighbours and pull strength (0 = pure subword-mean, 1 = neighbour mean)
KNN_K = 10
KNN_ALPHA = 0.5


class UnknownStrategy(SpecError):
    """An ``--init`` name that is not in the registry."""


@dataclass
class InitContext:
    """Everything a strategy may use, for one matrix."""

    #: (V, d) trained matrix (input embedding or output head) in its stored dtype; strategies
    #: convert the row chunks they read to float32/float64
    matrix: "torch.Tensor"
    #: (V,) bool: rows usable as references (see module docstring)
    trained: "torch.Tensor"
    #: per new term, the old tokenizer's piece ids
    pieces: Sequence[Sequence[int]]
    #: (V,) corpus count of each token id under the old tokenizer, or None (weighted-subword only)
    piece_counts: "np.ndarray | None" = None
    #: random seed (hewitt)
    seed: int = 0
    #: per row, its decoded text (" hyper"), and per new term its text (omp's donor lookups)
    token_text: "Sequence[str] | None" = None
    terms: "Sequence[str] | None" = None
    #: ``distil``: rows (n, d) to start from → fitted rows; None where no model and contexts
    distil: "Callable[[torch.Tensor], torch.Tensor] | None" = None
    #: ``focus``: the new tokens' ids (extended tokenizer), in ``pieces`` order, and the corpus's
    #: static embeddings (a memoised call: both matrices of an untied model share one training)
    new_ids: "Sequence[int] | None" = None
    static: "Callable[[], object] | None" = None
    #: values derived from the matrix alone (trained mean, trained norms), computed once per
    #: context: each is a pass over a matrix that is gigabytes at 7B scale
    memo: dict = field(default_factory=dict, repr=False, compare=False)


def trained_mask(categories: Sequence[str], n_rows: int, flagged: Sequence[int] = ()) -> "torch.Tensor":
    """(V,) bool: rows that are neither special, padding, unreachable nor flagged as under-trained."""
    import torch

    bad = {"special", "padding", "unreachable"}
    mask = torch.tensor([i < len(categories) and categories[i] not in bad for i in range(n_rows)])
    if len(flagged):
        idx = torch.as_tensor(list(flagged), dtype=torch.long)
        mask[idx[(idx >= 0) & (idx < n_rows)]] = False
    return mask


def trained_mean(ctx: InitContext) -> "torch.Tensor":
    """μ: (d,) mean of the trained rows (:func:`_trained_pass`)."""
    if "mean" not in ctx.memo:
        _trained_pass(ctx)
    return ctx.memo["mean"].clone()


def _trained_pass(ctx: InitContext) -> None:
    """One pass over the matrix for the trained rows' mean and norms (memoised): each 8192-row
    block converted into one reused float32 buffer, its masked sum a float32 product with the
    0/1 mask (chunk sums accumulated in float64) and its rows' norms. At 152064 × 3584 bf16 this
    reads the matrix once instead of twice, with no boolean-indexed copy of each block."""
    import torch

    from embscope.models.rows import converted_blocks

    total = torch.zeros(ctx.matrix.shape[1], dtype=torch.float64)
    norms = []
    for s, blk in converted_blocks(ctx.matrix, CHUNK_ROWS, torch.float32):
        keep = ctx.trained[s:s + CHUNK_ROWS]
        total += (keep.float() @ blk).double()
        norms.append(torch.linalg.vector_norm(blk, dim=1)[keep])
    ctx.memo["mean"] = (total / max(int(ctx.trained.sum()), 1)).float()
    ctx.memo["norms"] = torch.cat(norms)


def init_mean(ctx: InitContext) -> "torch.Tensor":
    return trained_mean(ctx).expand(len(ctx.pieces), -1).clone()


def init_hewitt(ctx: InitContext) -> "torch.Tensor":
    """Sample each new row from N(μ, εΣ), Σ the covariance of the trained rows (Hewitt 2021)
    (:func:`_sample`)."""
    return _sample(ctx, HEWITT_EPS)


def init_random(ctx: InitContext) -> "torch.Tensor":
    """Sample each new row from N(μ, Σ): the trained rows' mean and covariance (:func:`_sample`)."""
    return _sample(ctx, 1.0)


def _sample(ctx: InitContext, eps: float) -> "torch.Tensor":
    """Rows drawn from N(μ, εΣ), Σ the covariance of the trained rows.

    Σ (d × d) is never formed: with X_c the (n, d) centred trained rows, Σ = X_cᵀX_c / n, and
    x = μ + √(ε/n) · X_cᵀ z with z ~ N(0, I_n) has exactly covariance εΣ. Built in row chunks:
    O(m·n·d) for m new rows instead of O(n·d²) for Σ and O(d³) for its factorisation
    (Qwen2-7B: 0.2 TFLOP instead of 2 TFLOP + an eigendecomposition of 3584²).
    """
    import torch

    from embscope.models.rows import converted_blocks

    mu = trained_mean(ctx)
    g = torch.Generator().manual_seed(ctx.seed)
    m = len(ctx.pieces)
    acc = torch.zeros(m, mu.shape[0], dtype=torch.float32)
    z_sum = torch.zeros(m, dtype=torch.float64)
    n = 0
    # X_cᵀz = Xᵀz − μ·Σz: each block is read as it is (a reused float32 buffer), its untrained
    # rows given weight 0, instead of copying and centring the trained rows
    for s, blk in converted_blocks(ctx.matrix, CHUNK_ROWS, torch.float32):
        keep = ctx.trained[s:s + CHUNK_ROWS]
        z = torch.randn(m, int(keep.sum()), generator=g)                                # (m, c)
        wide = torch.zeros(m, blk.shape[0])
        wide[:, keep] = z
        acc += wide @ blk                                                                # (m, d)
        z_sum += z.sum(1, dtype=torch.float64)
        n += z.shape[1]
    acc -= (z_sum[:, None] * mu.double()[None, :]).float()
    return mu + acc * (eps / max(n, 1)) ** 0.5


def _piece_rows(ctx: InitContext, ids: Sequence[int]):
    """The trained piece ids of one term (duplicates kept: a repeated piece counts twice)."""
    return [i for i in ids if 0 <= i < ctx.matrix.shape[0] and bool(ctx.trained[i])]


def _weighted(ctx: InitContext, weight: Callable[[list[int]], "torch.Tensor"]) -> "torch.Tensor":
    import torch

    mu = trained_mean(ctx)
    out = torch.empty(len(ctx.pieces), ctx.matrix.shape[1])
    for k, ids in enumerate(ctx.pieces):
        keep = _piece_rows(ctx, ids)
        if not keep:  # every piece untrained: nothing better than the mean
            out[k] = mu
            continue
        w = weight(keep).double()
        out[k] = ((w / w.sum())[:, None] * ctx.matrix[keep].double()).sum(0).float()
    return out


def init_subword_mean(ctx: InitContext) -> "torch.Tensor":
    import torch

    return _weighted(ctx, lambda ids: torch.ones(len(ids)))


def idf_weights(ids: Sequence[int], counts: "np.ndarray | None") -> "torch.Tensor":
    """w_i = ln((T + 1) / (c_i + 1)) (unnormalised); all ones without counts.

    >>> import numpy as np
    >>> c = np.zeros(5, dtype=np.int64); c[[1, 2, 3]] = [120, 3000, 900]; c[4] = 600_000 - 4020
    >>> [round(float(v), 2) for v in idf_weights([1, 2, 3], c)]
    [8.51, 5.3, 6.5]
    """
    import math

    import torch

    if counts is None:
        return torch.ones(len(ids))
    total = float(counts.sum())
    return torch.tensor([math.log((total + 1) / (float(counts[i]) + 1)) if i < len(counts) else 1.0
                         for i in ids]).clamp_min(1e-3)


def init_weighted_subword(ctx: InitContext) -> "torch.Tensor":
    return _weighted(ctx, lambda ids: idf_weights(ids, ctx.piece_counts))


def nearest_trained(ctx: InitContext, queries: "torch.Tensor", k: int):
    """``(sims, ids)``: top-k cosine neighbours of each query among trained rows, (n, k) each
    (:func:`embscope.extension.nearest.nearest_rows`: bf16 candidates re-scored in float32
    where this CPU multiplies bf16 faster). Equal queries are searched once (``mean`` gives every
    new term the same row)."""
    import torch

    distinct, inverse = torch.unique(queries.float(), dim=0, return_inverse=True)
    if distinct.shape[0] < queries.shape[0]:
        sims, ids = nearest_trained(ctx, distinct, k)
        return sims[inverse], ids[inverse]
    from embscope.extension.nearest import nearest_rows

    norms = torch.zeros(ctx.matrix.shape[0])
    norms[ctx.trained] = trained_norms(ctx)  # the rows' norms, computed once per matrix
    return nearest_rows(ctx.matrix, ctx.trained, queries, k, norms=norms)


def trained_norms(ctx: InitContext) -> "torch.Tensor":
    """(n_trained,) L2 norms of the trained rows (:func:`_trained_pass`)."""
    if "norms" not in ctx.memo:
        _trained_pass(ctx)
    return ctx.memo["norms"]


def init_knn_pull(ctx: InitContext) -> "torch.Tensor":
    s = init_subword_mean(ctx)
    _, nn = nearest_trained(ctx, s, KNN_K)  # (n, k)
    m = ctx.matrix[nn].float().mean(1)  # (n, k, d) -> (n, d)
    x = (1 - KNN_ALPHA) * s + KNN_ALPHA * m
    return x * (s.norm(dim=1, keepdim=True) / x.norm(dim=1, keepdim=True).clamp_min(1e-12))


def init_subword_mean_norm(ctx: InitContext) -> "torch.Tensor":
    s = init_subword_mean(ctx)
    target = trained_norms(ctx).median()
    return s * (target / s.norm(dim=1, keepdim=True).clamp_min(1e-12))


def init_omp(ctx: InitContext) -> "torch.Tensor":
    """OMP in GloVe space, coefficients applied to the trained rows (:mod:`.omp`); terms GloVe
    lacks keep their subword mean. ``ctx.memo["omp_known"]``: how many terms GloVe knew."""
    import torch

    from embscope.extension.omp import glove, omp_rows, sparsity, word_of

    if ctx.token_text is None or ctx.terms is None:
        raise SpecError("--init omp needs the token and term texts; run it through suggest()")
    vocab, vectors = glove()
    shared: dict[str, int] = {}
    for i in torch.nonzero(ctx.trained).flatten().tolist():
        if i >= len(ctx.token_text):
            continue
        text = ctx.token_text[i]
        w = word_of(text)
        if w in vocab and any(ch.isalpha() for ch in w) and (w not in shared or text[:1] in (" ", "▁")):
            shared[w] = i
    out = init_subword_mean(ctx)
    known = [k for k, t in enumerate(ctx.terms) if word_of(t) in vocab]
    ctx.memo["omp_known"] = len(known)
    if not known or not shared:
        return out
    words = list(shared)
    donor = torch.from_numpy(vectors[[vocab[w] for w in words]].astype("float32"))
    model_rows = ctx.matrix[[shared[w] for w in words]].float()
    targets = torch.from_numpy(vectors[[vocab[word_of(ctx.terms[k])] for k in known]].astype("float32"))
    out[known] = omp_rows(targets, donor, model_rows, sparsity(donor.shape[1]))
    return out


def init_distil(ctx: InitContext) -> "torch.Tensor":
    if ctx.distil is None:
        raise SpecError("--init distil fits each row through the whole model on corpus contexts: it needs a "
                        "model that loads whole here (a causal LM under the size limit) and the diagnostics on")
    return ctx.distil(init_subword_mean(ctx))


#: name → strategy; ``--init`` accepts these names
STRATEGIES: dict[str, Callable[[InitContext], "torch.Tensor"]] = {
    "mean": init_mean,
    "hewitt": init_hewitt,
    "subword-mean": init_subword_mean,
    "weighted-subword": init_weighted_subword,
    "knn-pull": init_knn_pull,
    "subword-mean-norm": init_subword_mean_norm,
    "omp": init_omp,
    "distil": init_distil,
    "focus": lambda ctx: _focus(ctx),
    "random": init_random,
}


def _focus(ctx: InitContext) -> "torch.Tensor":
    from embscope.extension.focus import init_focus

    return init_focus(ctx, init_subword_mean(ctx))


#: ``--init auto``: diagnose these and recommend one (:mod:`embscope.extension.choose`)
AUTO = "auto"
#: strategies ``auto`` leaves out unless named (none: ``distil``, which runs the whole model forward
#: and backward a few times per row, is in ``auto`` when its work fits its budget,
#: ``ExtensionOptions.distil_work``)
NAMED_ONLY: tuple[str, ...] = ()


def auto_strategies() -> list[str]:
    """What ``--init auto`` diagnoses: every strategy (``distil`` within its work budget)."""
    return [n for n in STRATEGIES if n not in NAMED_ONLY]


def expand_specs(specs: Sequence[str], norm_correction: bool = False) -> list[str]:
    """Validated specs, ``auto`` replaced by :func:`auto_strategies` (duplicates dropped); with
    ``norm_correction``, each followed by its ``+norm`` twin (:mod:`.norms`).

    >>> expand_specs(["subword-mean", "auto"])[:3]
    ['subword-mean', 'mean', 'hewitt']
    >>> "distil" in expand_specs(["auto"])
    True
    >>> expand_specs(["focus", "mean/random"], norm_correction=True)
    ['focus', 'focus+norm', 'mean/random', 'mean+norm/random+norm']
    """
    out: list[str] = []
    for spec in specs:
        for s in (auto_strategies() if spec == AUTO else [spec]):
            twins = [s]
            if norm_correction:
                twins.append("/".join(p if p.endswith(NORM_SUFFIX) else p + NORM_SUFFIX for p in s.split("/")))
            for t in twins:
                parse_init(t)
                if t not in out:
                    out.append(t)
    return out


def check_strategy(name: str) -> str:
    """``name`` if registered (with or without the ``+norm`` suffix), else :class:`UnknownStrategy`
    with a "did you mean"."""
    base = name.removesuffix(NORM_SUFFIX)
    if base not in STRATEGIES:
        raise UnknownStrategy(f"unknown --init strategy {name!r}{did_you_mean(base, [*STRATEGIES, AUTO])}; "
                              f"choose from {AUTO}, {', '.join(STRATEGIES)} (any with {NORM_SUFFIX})")
    return name


def parse_init(spec: str) -> tuple[str, str]:
    """``"NAME"`` → (NAME, NAME); ``"IN/OUT"`` → per matrix: input rows, output rows (untied models).

    >>> parse_init("subword-mean"), parse_init("subword-mean/hewitt")
    (('subword-mean', 'subword-mean'), ('subword-mean', 'hewitt'))
    """
    parts = [p.strip() for p in spec.split("/")]
    if len(parts) > 2 or not all(parts):
        raise UnknownStrategy(f"--init {spec!r} is not NAME or INPUT/OUTPUT (e.g. subword-mean/hewitt)")
    return check_strategy(parts[0]), check_strategy(parts[-1])


def initialise(name: str, ctx: InitContext) -> "torch.Tensor":
    """Rows for the new terms, ``(len(ctx.pieces), d)`` float32, by strategy ``name`` (``NAME+norm``:
    then rescaled per script, :func:`embscope.extension.norms.norm_correct`)."""
    from embscope.extension.norms import norm_correct

    base = check_strategy(name).removesuffix(NORM_SUFFIX)
    if not name.endswith(NORM_SUFFIX):
        return STRATEGIES[base](ctx)
    key = f"rows:{base}"  # NAME and NAME+norm share one run of NAME (distil fits once)
    if key not in ctx.memo:
        ctx.memo[key] = STRATEGIES[base](ctx)
    return norm_correct(ctx, ctx.memo[key], trained_norms(ctx))
