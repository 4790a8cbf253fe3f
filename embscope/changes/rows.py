"""Matrices read by row blocks, and the one pass that compares a tuned matrix with its reference.

A :class:`Rows` is an (n, d) matrix that hands out float32 row blocks: a stored tensor (memory-mapped
safetensors, dequantised GGUF, a tensor on the GPU), or a base matrix with a PEFT adapter's changes
on top (whole rows replaced, a low-rank delta added, rows past the base appended). Nothing is ever
materialised whole: a 152,064 × 3584 pair is read once, 4096 rows at a time.

Per row ``i`` with tuned row ``t`` and reference row ``r`` (the base row; for a row added past the
base vocabulary, its initial row):

- ``delta``       ‖t − r‖₂
- ``rel_delta``   ‖t − r‖₂ / ‖r‖₂ (null where ‖r‖ = 0)
- ``cos``         t·r / (‖t‖ ‖r‖)
- ``norm_change`` ‖t‖ / ‖r‖ − 1

e.g. r = (3, 4), t = (3, 4.5): delta 0.5, rel_delta 0.1, cos 0.9991, norm_change 0.0770.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: rows per block: a (4096, 3584) float32 block is 59 MB; a handful of them live at once
BLOCK = 4096


class Rows:
    """An (n, d) matrix read as float32 row blocks (see the module docstring)."""

    n: int
    d: int
    #: storage format of the rows that differ from the base (``BF16``, ``F32``, ``Q8_0``, …)
    format: str

    def block(self, a: int, b: int, out: "torch.Tensor | None" = None) -> "torch.Tensor":  # pragma: no cover
        """Rows ``a..b-1`` as a float32 (b − a, d) tensor, never a view of the stored matrix: written into
        ``out[:b - a]`` when given (a buffer reused block after block: no fresh pages per block)."""
        raise NotImplementedError

    def take(self, ids) -> "torch.Tensor":
        """Rows ``ids`` (any order) as a float32 (len(ids), d) tensor (on the matrix's device)."""
        import torch

        ids = np.asarray(ids, dtype=np.int64)
        if not len(ids):
            return torch.zeros(0, self.d)
        out = []
        for a in range(0, len(ids), BLOCK):
            part = ids[a:a + BLOCK]
            lo, hi = int(part.min()), int(part.max()) + 1
            if hi - lo <= 4 * BLOCK:  # close together: one block read, then gather
                blk = self.block(lo, hi)
                out.append(blk[torch.from_numpy(part - lo).to(blk.device)])
            else:
                out.append(torch.cat([self.block(int(i), int(i) + 1) for i in part]))
        return torch.cat(out)


@dataclass
class Dense(Rows):
    """A stored (n, d) tensor in any dtype; blocks are converted to float32 on the fly."""

    tensor: "torch.Tensor"
    format: str

    @property
    def n(self) -> int:  # type: ignore[override]
        return int(self.tensor.shape[0])

    @property
    def d(self) -> int:  # type: ignore[override]
        return int(self.tensor.shape[1])

    def block(self, a: int, b: int, out=None):
        import torch

        rows = self.tensor[a:b]  # a fresh float32 block, never a view: callers may write into it
        if out is not None and out.device == rows.device:
            return out[:b - a].copy_(rows)
        return rows.clone() if rows.dtype == torch.float32 else rows.float()

    def take(self, ids):
        import torch

        return self.tensor[torch.as_tensor(np.asarray(ids, dtype=np.int64)).to(self.tensor.device)].float()


@dataclass
class Patched(Rows):
    """``base`` with changes on top, in the order PEFT merges them: rows past ``base`` are zero
    unless ``extra`` gives them; then ``+ lowrank[0][i] @ lowrank[1]`` (a LoRA delta,
    (n, r) @ (r, d)); then rows ``ids`` replaced by ``values`` (trainable tokens)."""

    base: Rows
    n_rows: int
    format: str
    #: (k, d) rows appended past ``base`` (a resized matrix), or None
    extra: "torch.Tensor | None" = None
    #: ((n, r), (r, d)) factors of a low-rank delta, float32, or None
    lowrank: "tuple[torch.Tensor, torch.Tensor] | None" = None
    #: row ids replaced, and their (k, d) values
    ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    values: "torch.Tensor | None" = None

    @property
    def n(self) -> int:  # type: ignore[override]
        return self.n_rows

    @property
    def d(self) -> int:  # type: ignore[override]
        return self.base.d

    def block(self, a: int, b: int, out=None):
        import torch

        nb = self.base.n
        parts = [self.base.block(a, min(b, nb), out if b <= nb else None)] if a < nb else []
        dev = parts[0].device if parts else "cpu"
        if b > nb:
            lo = max(a, nb) - nb
            if self.extra is not None:
                parts.append(self.extra[lo:b - nb].float().to(dev))
            else:
                parts.append(torch.zeros(b - max(a, nb), self.d, device=dev))
        x = torch.cat(parts) if len(parts) > 1 else parts[0]
        if self.lowrank is not None:
            x.add_((self.lowrank[0][a:b].float() @ self.lowrank[1].float()).to(dev))
        if len(self.ids):
            hit = np.flatnonzero((self.ids >= a) & (self.ids < b))
            if len(hit):
                x[torch.from_numpy(self.ids[hit] - a).to(dev)] = self.values[torch.from_numpy(hit)].float().to(dev)
        return x


@dataclass
class RowStats:
    """The pass's output: one entry per tuned row (float32/bool arrays of length n)."""

    delta: np.ndarray
    rel_delta: np.ndarray
    cos: np.ndarray
    norm_change: np.ndarray
    #: ‖t‖ and ‖r‖
    tuned_norm: np.ndarray
    ref_norm: np.ndarray
    #: every entry of the tuned row is finite
    finite: np.ndarray


def compare(tuned: Rows, reference: Callable[..., "torch.Tensor"], *, device: str = "cpu",
            visit: Callable[[int, "torch.Tensor", "torch.Tensor"], None] | None = None) -> RowStats:
    """Compare every row of ``tuned`` with ``reference(a, b, out)`` (the reference rows a..b-1), one
    block at a time; ``visit(a, tuned_block, ref_block)`` sees each block first (the map projection).

    Memory passes per block: two reads into reused float32 buffers, ‖t‖ and ‖r‖, t − r in place and
    its norm; the cosine follows from the three norms, ``t·r = (‖t‖² + ‖r‖² − ‖t − r‖²) / 2`` (its
    rounding, ~1e-7 of ‖t‖‖r‖, is far below what the report prints), so no product pass is needed.

    Example: ``compare(Dense(t, "F32"), lambda a, b, out=None: base[a:b].clone())``.
    """
    import torch

    n = tuned.n
    out = {k: np.empty(n, np.float32) for k in ("delta", "rel_delta", "cos", "norm_change", "tuned_norm", "ref_norm")}
    finite = np.empty(n, dtype=bool)
    step = min(BLOCK, max(n, 1))
    tbuf = torch.empty(step, tuned.d, device=device)
    rbuf = torch.empty(step, tuned.d, device=device)
    with torch.no_grad():
        for a in range(0, n, BLOCK):
            b = min(a + BLOCK, n)
            t = tuned.block(a, b, tbuf).to(device)  # (B, d) float32
            r = reference(a, b, rbuf).to(device)    # (B, d) float32
            if visit is not None:
                visit(a, t, r)
            tn = torch.linalg.vector_norm(t, dim=1)
            rn = torch.linalg.vector_norm(r, dim=1)
            dn = torch.linalg.vector_norm(t.sub_(r), dim=1)  # t is now t − r
            ok = torch.isfinite(tn) & torch.isfinite(dn)
            tn64, rn64, dn64 = tn.double(), rn.double(), dn.double()
            dot = (tn64 * tn64 + rn64 * rn64 - dn64 * dn64) / 2
            has = rn > 0
            safe = torch.where(has, rn64, torch.ones((), dtype=torch.float64, device=device))
            nan = torch.full_like(tn64, float("nan"))
            both = has & (tn > 0) & ok
            cos = torch.where(both, dot / (safe * torch.where(tn > 0, tn64, torch.ones_like(tn64))), nan).clamp(-1, 1)
            out["delta"][a:b] = torch.where(ok, dn64, nan).cpu().numpy()
            out["rel_delta"][a:b] = torch.where(ok & has, dn64 / safe, nan).cpu().numpy()
            out["cos"][a:b] = cos.cpu().numpy()
            out["norm_change"][a:b] = torch.where(ok & has, tn64 / safe - 1, nan).cpu().numpy()
            out["tuned_norm"][a:b] = torch.where(ok, tn64, torch.full_like(tn64, float("inf"))).cpu().numpy()
            out["ref_norm"][a:b] = rn.cpu().numpy()
            finite[a:b] = ok.cpu().numpy()
    return RowStats(finite=finite, **out)
