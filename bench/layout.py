"""Benchmark: the 2-D map's cost against its quality, per epoch count and initialisation.

    python bench/layout.py [--model smollm2-135m] [--epochs default,200] [--init spectral]

For one model: the cosine kNN graph the scan uses (from the kNN cache when it is there), then
:func:`embscope.geometry.layout.umap_layout` once per (epochs, init) pair, each in this process
one after the other. Prints wall and CPU seconds and the neighbour preservation (the share of a
row's graph neighbours among its 10 nearest points in the plane, on 5,000 random rows; a random
layout scores ≈ k/n). ``default`` is embscope's epoch count for the model's size
(:data:`embscope.geometry.layout.EPOCHS_BY_SIZE`); 200 is UMAP's own default above 10,000 rows.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    import embscope
    from embscope.geometry.knn import knn_graph
    from embscope.geometry.layout import EPOCHS_BY_SIZE, umap_layout

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--epochs", default="default,200")
    ap.add_argument("--init", default="spectral")
    args = ap.parse_args()
    model = embscope.load_model(args.model, device="cpu")
    t0 = time.perf_counter()
    g = knn_graph(model.embed, 10, progress=False)
    n = len(g.neighbors)
    print(f"{args.model}: {n} rows; kNN graph [{g.info.method}] {time.perf_counter() - t0:.1f} s "
          f"(cached: {g.info.cached}); load {os.getloadavg()[0]:.1f}", flush=True)
    default = next((e for size, e in EPOCHS_BY_SIZE if n > size), None)
    print("\n| model | epochs | init | wall s | CPU s | neighbour preservation |\n|---|---|---|---|---|---|")
    for ep in args.epochs.split(","):
        epochs = default if ep == "default" else int(ep)
        for init in args.init.split(","):
            w, c = time.perf_counter(), time.process_time()
            _, rec = umap_layout(g.neighbors, g.sims, n_epochs=epochs, init=init)
            print(f"| {args.model} | {rec.n_epochs} | {init} | {time.perf_counter() - w:.1f} | "
                  f"{time.process_time() - c:.1f} | {rec.neighbor_preservation:.3f} |", flush=True)
    print(f"\nload at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
