"""Keep freed row blocks in the process for the next one (glibc ``mallopt``).

Every pass over a (V, d) matrix works in row blocks: ``m[s:s + B].float()`` is a fresh buffer of
B·d·4 bytes (235 MB for 16384 rows of Qwen2-7B's 3584 columns). glibc serves any allocation above
its mmap threshold (128 KiB, rising to at most 32 MiB as large blocks are freed) with a fresh
``mmap`` and gives it back with ``munmap`` when freed, so every block of every pass page-faults
its whole buffer in again: a minor fault and a zeroed page per 4 KiB, in the kernel.

Measured on this project's 2-core machine, three row-norm passes over a 152064 × 3584 bf16
matrix in 8192-row blocks: 6.7 CPU-s, of which 4.3 s system time and 1.6 M minor faults; with
the settings below 2.3 CPU-s, 0.2 s system time and 86 k faults, at the same peak RSS. (See
``mallopt(3)``: ``M_MMAP_THRESHOLD``, ``M_TRIM_THRESHOLD``.)

:func:`reuse_freed_blocks` raises the mmap threshold to :data:`MMAP_THRESHOLD`, so such blocks
come from the heap and are reused, and keeps up to :data:`TRIM_THRESHOLD` of free heap instead
of returning it at once. :func:`embscope.runner.run` calls it only when ``EMBSCOPE_REUSE_BLOCKS=1``
is set: one test run of the whole suite saw an audit process grow to 23 GB with it, not yet
explained (glibc keeps a free heap per thread arena), so it is opt-in until it is. Elsewhere (not
glibc) it does nothing.
"""

from __future__ import annotations

import ctypes
import functools
import ctypes.util

#: allocations below this come from the heap (a 16384-row float32 block of a 4096-wide matrix is
#: 256 MiB)
MMAP_THRESHOLD = 512 << 20
#: free heap kept by the process before glibc trims it
TRIM_THRESHOLD = 1 << 30

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_done = False


@functools.lru_cache(maxsize=1)
def _libc():
    """glibc's ``mallopt`` and ``malloc_trim``, or None elsewhere (loaded once per process)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        return libc
    except (OSError, AttributeError):
        return None


def reuse_freed_blocks() -> bool:
    """Apply the settings once per process; True when glibc took them."""
    global _done
    if not _done:
        libc = _libc()
        _done = libc is not None and bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) \
            and bool(libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _done


def release_free_blocks() -> None:
    """Hand the heap's free pages back to the kernel (``malloc_trim(0)``), after a step whose
    blocks the next step will not reuse: kept, they would count in the peak resident memory while
    the next step's own buffers grow. A no-op unless :func:`reuse_freed_blocks` took effect."""
    if _done:
        _libc().malloc_trim(0)


def converted_blocks(matrix, rows: int, dtype=None):
    """Yield ``(start, block)`` over ``matrix`` (V, d): ``matrix[start:start + rows]`` in ``dtype``
    (default float32), converted into one buffer reused for every block, so a pass costs no page
    faults after its first block (the fault-free half of :func:`reuse_freed_blocks`, for one pass,
    with no process-wide setting). A matrix already in ``dtype`` is yielded as views; a CUDA one
    converts per block. The caller must not keep a block past the next iteration.

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
