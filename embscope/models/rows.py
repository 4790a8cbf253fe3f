"""Per-row reductions over a loaded matrix (V, d), block by block: the norms and the zero rows that
the token table, the scan, the check and the training callback all read.

>>> import torch
>>> m = torch.tensor([[3.0, 4.0], [0.0, 0.0], [0.0, 1e-20]])
>>> row_norms(m)[:2].tolist(), zero_rows(m).tolist(), zero_rows(m, tol=1e-16).tolist()
([5.0, 0.0], [False, True, False], [False, True, True])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from embscope.models.model import LoadedModel

#: rows per block (fp32: 8192 × 4096 × 4 B = 128 MiB at most)
BLOCK_ROWS = 8192


def row_norms(matrix: "torch.Tensor") -> np.ndarray:
    """(V,) float32 L2 norms ‖x_i‖₂ = sqrt(Σ_j x_ij²), each block converted to float32 in one
    reused buffer (:func:`converted_blocks`)."""
    import torch

    out = torch.empty(matrix.shape[0], dtype=torch.float32)
    for start, block in converted_blocks(matrix, BLOCK_ROWS):
        out[start:start + block.shape[0]] = torch.linalg.vector_norm(block, dim=1).cpu()
    return out.numpy()


def converted_blocks(matrix, rows: int, dtype=None):
    """Yield ``(start, block)`` over ``matrix`` (V, d): ``matrix[start:start + rows]`` in ``dtype``
    (default float32), converted into one buffer reused for every block, so a pass costs no page
    faults after its first block (under glibc's defaults a fresh block of that size is a fresh
    ``mmap``, every 4 KiB page faulted in and zeroed again). A matrix already in ``dtype`` is
    yielded as views; a CUDA one converts per block. The caller must not keep a block past the next
    iteration.

    Measured on the development machine (2 cores, a VM): the 152064 × 3584 bf16 matrix in 8192-row
    blocks to float32, ``.float()`` per block 1.48 s, into the reused buffer 0.34 s.
    """
    import torch

    dtype = dtype or torch.float32
    n = matrix.shape[0]
    if matrix.dtype == dtype or matrix.device.type != "cpu":
        for s in range(0, n, rows):
            yield s, matrix[s:s + rows].to(dtype)
        return
    buf = torch.empty((min(rows, n), *matrix.shape[1:]), dtype=dtype)
    for s in range(0, n, rows):
        part = matrix[s:s + rows]
        yield s, buf[:part.shape[0]].copy_(part)


def zero_rows(matrix: "torch.Tensor", tol: float = 0.0) -> np.ndarray:
    """(V,) bool: every entry of the row has ``|x| ≤ tol`` (``tol`` 0: exactly zero)."""
    import torch

    out = [(matrix[s:s + BLOCK_ROWS].abs() <= tol).all(dim=1).cpu() for s in range(0, matrix.shape[0], BLOCK_ROWS)]
    return torch.cat(out).numpy() if out else np.zeros(0, dtype=bool)


def model_zero_rows(model: "LoadedModel") -> np.ndarray:
    """(V,) bool: the row is exactly zero in the input embedding, or in the head when untied."""
    zero = zero_rows(model.embed)
    if model.output is not None:
        zero |= zero_rows(model.output)
    return zero
