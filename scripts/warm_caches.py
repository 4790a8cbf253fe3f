"""Compile, once, the numba functions a first audit would otherwise compile (install time, not run time).

    python scripts/warm_caches.py

embscope's kNN kernels (:mod:`embscope.geometry.kernels`) carry ``cache=True``; umap-learn's
functions get numba's on-disk cache from :func:`embscope.geometry.layout.cache_umap_kernels`. Both
caches are filled by the first call with each argument type, which cost a cold Quickstart audit
tens of CPU-seconds. This script makes those calls on small random inputs of the same types (the
sizes do not matter to numba: it compiles per dtype, dimension and layout). Nothing is
precomputed about any model: the caches hold machine code only. It prints what it compiled and
how long it took; a failure leaves the caches as they were and is reported, not fatal.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    import numpy as np

    t0 = time.perf_counter()
    try:
        import torch

        from embscope.geometry.exact import normalize_rows, symmetric_knn
        from embscope.geometry.kernels import CACHED, refine, reverse_lists, select_into  # noqa: F401
        from embscope.geometry.layout import umap_layout

        rng = np.random.default_rng(0)
        x = normalize_rows(torch.from_numpy(rng.standard_normal((6000, 32)).astype(np.float32)))
        sims, ids = symmetric_knn(x, 10, block=2000, progress=False)   # select_into, select_cols_into
        from embscope.geometry.certify import certified_graph
        from embscope.geometry.exact import exact_knn

        exact_knn(x, 10, rows=torch.arange(100), dtype=torch.bfloat16, progress=False)  # rerank_into
        certified_graph(x, 10, draws=200, progress=False)  # the join's kernels, merge_into, offer_cols
        s, i = sims.numpy().copy(), ids.numpy().copy()
        rev, rev_new = reverse_lists(i, 10, seed=0, new=np.ones(i.shape, np.bool_))
        refine(np.ascontiguousarray(x.numpy()), i.copy(), np.ones(i.shape, np.bool_), rev, rev_new, s, i,
               np.zeros(i.shape, np.bool_))
        t1 = time.perf_counter()
        for init in ("spectral", "random"):  # the two initial layouts a map can start from
            umap_layout(ids.numpy(), sims.numpy(), seed=0, n_epochs=5, init=init)
        t2 = time.perf_counter()
    except Exception as exc:  # noqa: BLE001 - warming is an optimisation; the audit compiles what is missing
        print(f"warm_caches: skipped ({type(exc).__name__}: {exc}); the first audit compiles instead")
        return 0
    print(f"warm_caches: kNN kernels {t1 - t0:.1f} s, UMAP functions {t2 - t1:.1f} s "
          f"(on-disk cache: {'yes' if CACHED else 'no, compiled in memory only'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
