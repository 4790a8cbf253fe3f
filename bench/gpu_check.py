"""GPU check: the CUDA path gives the CPU path's answers, and how fast it is. One script, ≤ 5 min.

    python bench/gpu_check.py [--shapes 152064x3584,262144x640] [--real rows.npy] [--cpu-sample 2000]

On a machine with a CUDA GPU (torch CUDA build; faiss-gpu optional), for each matrix:

1. synthetic matrices built on the GPU, bf16: ``152064x3584`` (Qwen2-7B's embedding shape) with 512
   planted clusters, 1 % of rows scaled down (as bench/make_checkpoint.py); any other shape is
   *diffuse* Gaussian rows (no clusters, like Gemma-3's real rows: high intrinsic dimension);
   ``--real`` adds a real matrix saved as ``.npy`` (e.g. a random sample of Gemma-3-270M's rows);
2. embscope's exact kNN on every row (``knn_graph(..., method="exact", device="cuda")``: fp16
   tiles, fp32 re-rank), timed, with the peak GPU memory;
3. ``cpu_sample`` random rows against the CPU path (the same code with ``device="cpu"``, fp32
   tiles): recall@10 of the GPU neighbours against the CPU ones, tie-aware (a neighbour counts when
   its similarity reaches the CPU's 10th: duplicate rows tie; ≥ 0.99), by id for information, and the largest difference in the
   similarities of shared neighbours (≤ 2e-3);
4. with faiss-gpu, ``faiss.GpuIndexFlatIP`` exact search as the baseline ratio;
5. the audit indicators on the GPU matrix against the CPU copy (``max |Δ score| ≤ 1e-3``);
6. the kNN cache key (XXH3-128 or BLAKE2b over every byte, copied to the host block by block) of
   the CUDA matrix equals its CPU copy's;
7. ``method="auto"`` on CUDA picks exact search (the certified graph's join is a CPU path);

and once:

8. the CPU's all-rows path (the symmetric fp32 search, each pair once) against CUDA on every row
   of a 30,000-row subset of the first matrix: tie-aware recall@10 ≥ 0.999 and Spearman's ρ of the
   knot and isolation indicators ≥ 0.999 (the GPU machine's many cores make this minutes);
9. the fp16 re-check on CUDA: real-like rows plus 300 near-copies of one (cosine ≈ 0.9999, as
   Gemma-3's unused rows): fp16 tiles alone cannot order such a cluster, so rows whose last fp16
   candidate lies within the error bound are searched again in fp32; the result must equal fp32
   search (tie-aware recall 1.0, max |Δ sim| ≤ 2e-6), and the number of re-searched rows is shown;
10. verification by prompting (``embscope.geometry.token_probs.max_probs``, batched repetition
   prompts with greedy steps) on CUDA against the CPU, on a small randomly initialised Llama built
   from a config (no weights to download): ``max |Δ max_prob| ≤ 1e-4`` (fp32 on both);
11. the certified graph (``knn_graph(..., method="certified")``: it runs on the host, the matrix
   copied there) on a 60,000-row subset of the first matrix against CUDA exact search: the flagged
   and isolated rows of the indicators it feeds equal exact search's (0 flips), and every flagged
   or isolated row is among the rows it searched exactly.

Prints one table; exits non-zero when a tolerance is missed. Without a GPU it says so and exits 0.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def synthetic(rows: int, dim: int, device: str, seed: int = 0):
    """Planted clusters at the 7B shape (as bench/make_checkpoint.py); diffuse Gaussian rows otherwise."""
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    if (rows, dim) != (152064, 3584):
        return (torch.randn(rows, dim, generator=g, device=device) * 0.02).to(torch.bfloat16)
    centres = torch.randn(512, dim, generator=g, device=device)
    assign = torch.randint(0, 512, (rows,), generator=g, device=device)
    x = centres[assign] + 0.7 * torch.randn(rows, dim, generator=g, device=device)
    low = torch.randperm(rows, generator=g, device=device)[: rows // 100]
    x[low] *= 0.05
    return (x * 0.02).to(torch.bfloat16)


def check_matrix(name: str, x, cpu_sample: int, failures: list[str]) -> dict:
    """Steps 2–7 on one CUDA matrix; returns the row of the table."""
    import torch

    from embscope.geometry.exact import exact_knn, normalize_rows
    from embscope.geometry.indicators import compute_indicators
    from embscope.geometry.knn import knn_graph
    from embscope.geometry.knn_cache import matrix_key

    n, d = x.shape
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    g = knn_graph(x, 10, method="exact", device="cuda", use_cache=False, progress=False)
    torch.cuda.synchronize()
    t_gpu = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() / 2**30

    rng = np.random.default_rng(0)
    rows = torch.from_numpy(np.sort(rng.choice(n, min(cpu_sample, n), replace=False)))
    x_cpu = x.cpu()
    t0 = time.perf_counter()
    cpu_sims, cpu_ids = exact_knn(normalize_rows(x_cpu), 10, rows=rows, progress=False)
    t_cpu = (time.perf_counter() - t0) * n / len(rows)
    gpu_ids, gpu_sims = g.neighbors[rows.numpy()], g.sims[rows.numpy()]
    cpu_ids, cpu_sims = cpu_ids.numpy(), cpu_sims.numpy()
    recall_ids = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(gpu_ids, cpu_ids)]))
    # Tie-aware: a GPU neighbour counts when its fp32 similarity reaches the CPU's k-th (rows that
    # are exact duplicates, e.g. never-trained rows, tie and may come in any order).
    recall = float(np.mean(gpu_sims >= cpu_sims[:, -1:] - 1e-5))
    diffs = []
    for a, sa, b, sb in zip(gpu_ids, gpu_sims, cpu_ids, cpu_sims):
        common = dict(zip(b, sb))
        diffs += [abs(float(s) - float(common[i])) for i, s in zip(a, sa) if i in common]
    max_diff = max(diffs) if diffs else float("nan")
    if recall < 0.99:
        failures.append(f"{name}: recall@10 (tie-aware) vs CPU {recall:.4f} < 0.99")
    if not max_diff <= 2e-3:
        failures.append(f"{name}: similarity difference {max_diff:.2e} > 2e-3")

    t_faiss = None
    try:
        import faiss

        if hasattr(faiss, "StandardGpuResources"):
            res = faiss.StandardGpuResources()
            xn = normalize_rows(x).float().cpu().numpy()
            index = faiss.GpuIndexFlatIP(res, d)
            index.add(xn)
            t0 = time.perf_counter()
            index.search(xn, 11)
            t_faiss = time.perf_counter() - t0
    except ImportError:
        pass

    cats, strings = ["normal"] * n, [""] * n
    ind_gpu = compute_indicators(x, None, cats, strings, g.sims)
    ind_cpu = compute_indicators(x_cpu, None, cats, strings, g.sims)
    d_score = float(np.nanmax(np.abs(ind_gpu.undertrained_score - ind_cpu.undertrained_score)))
    if not d_score <= 1e-3:
        failures.append(f"{name}: score difference GPU vs CPU {d_score:.2e} > 1e-3")

    t0 = time.perf_counter()
    key_gpu = matrix_key(x, 10, "auto")
    t_key = time.perf_counter() - t0
    if key_gpu != matrix_key(x_cpu, 10, "auto"):
        failures.append(f"{name}: cache key of the CUDA matrix differs from its CPU copy's")
    g_auto = knn_graph(x[:20000], 10, method="auto", use_cache=False, progress=False)
    if g_auto.info.method != "exact":
        failures.append(f"{name}: auto on CUDA chose {g_auto.info.method}, expected exact")
    return {"matrix": f"{name} {n}x{d}", "gpu_s": t_gpu, "peak_gib": peak, "cpu_s": t_cpu,
            "faiss_s": t_faiss, "recall": recall, "recall_ids": recall_ids, "max_dsim": max_diff, "max_dscore": d_score, "key_s": t_key}


def check_symmetric(x, failures: list[str], rows: int = 30000) -> str:
    """Step 8: the CPU symmetric all-rows search against CUDA exact search on a subset."""
    import torch
    from scipy.stats import spearmanr

    from embscope.geometry.exact import exact_knn, normalize_rows, symmetric_knn

    pick = torch.from_numpy(np.sort(np.random.default_rng(8).choice(len(x), min(rows, len(x)), replace=False)))
    sub = x[pick.to(x.device)]
    t0 = time.perf_counter()
    gv, _ = exact_knn(normalize_rows(sub), 10, dtype=torch.float16, progress=False)
    torch.cuda.synchronize()
    t_gpu = time.perf_counter() - t0
    t0 = time.perf_counter()
    cv, _ = symmetric_knn(normalize_rows(sub.cpu()), 10, progress=False)
    t_cpu = time.perf_counter() - t0
    gv, cv = gv.cpu().numpy(), cv.numpy()
    recall = float(np.mean(gv >= cv[:, -1:] - 1e-5))
    rho_k = float(spearmanr(gv.mean(1), cv.mean(1)).statistic)
    rho_i = float(spearmanr(gv[:, 0], cv[:, 0]).statistic)
    if recall < 0.999 or rho_k < 0.999 or rho_i < 0.999:
        failures.append(f"symmetric CPU search vs CUDA: recall {recall:.4f}, knot ρ {rho_k:.4f}, isolation ρ {rho_i:.4f}")
    return (f"CPU symmetric search vs CUDA fp16 on {len(pick)} rows: CPU {t_cpu:.1f} s ({torch.get_num_threads()} "
            f"threads), CUDA {t_gpu:.2f} s, tie-aware recall {recall:.4f}, knot ρ {rho_k:.5f}, isolation ρ {rho_i:.5f}")


def check_fp16_recheck(failures: list[str]) -> str:
    """Step 9: fp16 tiles inside a collapsed cluster equal fp32 search on CUDA."""
    import torch

    from embscope.geometry import exact
    from embscope.geometry.exact import exact_knn, normalize_rows

    g = torch.Generator().manual_seed(9)
    base = torch.randn(3000, 384, generator=g)
    copies = base[7] + 0.01 * base[7].norm() * torch.randn(300, 384, generator=g) / 384 ** 0.5
    xn = normalize_rows(torch.cat([base, copies]).cuda())
    rows = torch.arange(2990, len(xn), device="cuda")
    ref_v, _ = exact_knn(xn, 10, rows=rows, dtype=torch.float32, progress=False)
    calls = []
    inner = exact.exact_knn

    def counting(*a, **kw):  # the fp32 re-search of unsafe rows calls exact_knn again
        if kw.get("dtype") == torch.float32 and kw.get("rows") is not None:
            calls.append(len(kw["rows"]))
        return inner(*a, **kw)

    exact.exact_knn = counting
    try:
        v, _ = inner(xn, 10, rows=rows, dtype=torch.float16, progress=False)
    finally:
        exact.exact_knn = inner
    recall = float((v >= ref_v[:, -1:] - 1e-6).float().mean())
    dmax = float((v - ref_v).abs().max())
    if recall < 1.0 or dmax > 2e-6:
        failures.append(f"fp16 re-check in a collapsed cluster: recall {recall:.4f}, max |Δ sim| {dmax:.1e}")
    return (f"fp16 re-check, 310 rows in and near a 300-row cluster: recall {recall:.4f}, max |Δ sim| {dmax:.1e}, "
            f"rows searched again in fp32: {sum(calls)}")


def check_certified(x, failures: list[str], rows: int = 60000) -> str:
    """Step 11: the certified graph's decisions against CUDA exact search's on a subset."""
    import torch

    from embscope.geometry.indicators import Neighbors, compute_indicators
    from embscope.geometry.knn import knn_graph

    pick = torch.from_numpy(np.sort(np.random.default_rng(11).choice(len(x), min(rows, len(x)), replace=False)))
    sub = x[pick.to(x.device)]
    t0 = time.perf_counter()
    ex = knn_graph(sub, 10, method="exact", device="cuda", use_cache=False, progress=False)
    t_gpu = time.perf_counter() - t0
    t0 = time.perf_counter()
    ce = knn_graph(sub, 10, method="certified", use_cache=False, progress=False)
    t_cert = time.perf_counter() - t0
    cats, strings = ["normal"] * len(sub), [""] * len(sub)
    fit = {k: tuple(v) for k, v in ce.info.knn_fit.items()}
    a = compute_indicators(sub.cpu(), None, cats, strings, Neighbors(ex.sims, ids=ex.neighbors))
    b = compute_indicators(sub.cpu(), None, cats, strings, Neighbors(ce.sims, ids=ce.neighbors, fit=fit))
    flips = int((a.flagged != b.flagged).sum() + (a.isolated != b.isolated).sum())
    decided = np.flatnonzero(a.flagged | a.isolated)
    missing = int((~ce.exact[decided]).sum())
    if flips or missing:
        failures.append(f"certified vs CUDA exact on {len(sub)} rows: {flips} decision flips, "
                        f"{missing} decided rows not searched exactly")
    cert = ce.info.certificate
    return (f"certified (host) vs CUDA exact on {len(sub)} rows: {flips} flips; {cert.exact_rows} rows searched "
            f"exactly, {cert.rounds} round(s); host {t_cert:.1f} s, CUDA exact {t_gpu:.2f} s")


def check_verification(failures: list[str]) -> str:
    """Step 10: ``max_probs`` on CUDA vs CPU on a seeded random Llama (fp32)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from embscope.geometry.token_probs import max_probs

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=4096, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512)
    lm = LlamaForCausalLM(cfg).eval()
    prompts = [("echo", [1, 17, 99, 17, 23, 99, 17, 5], np.array([2, 5])),
               ("repeat", [1, 40, 41, 99, 99, 99, 42], np.array([3, 4, 5]))]
    rows = list(range(100, 164))
    t0 = time.perf_counter()
    cpu = max_probs(lm, prompts, rows, "cpu", description="verify (cpu)")
    t_cpu = time.perf_counter() - t0
    lm = lm.to("cuda")
    t0 = time.perf_counter()
    gpu = max_probs(lm, prompts, rows, "cuda", description="verify (cuda)")
    torch.cuda.synchronize()
    t_gpu = time.perf_counter() - t0
    d = max(abs(cpu[r] - gpu[r]) for r in rows)
    if not d <= 1e-4:
        failures.append(f"verification: max |Δ max_prob| GPU vs CPU {d:.2e} > 1e-4")
    return (f"verification, {len(rows)} rows × {len(prompts)} prompts on a random 4-layer Llama: "
            f"CPU {t_cpu:.2f} s, CUDA {t_gpu:.2f} s, max |Δ max_prob| {d:.2e}")


def main(argv: list[str] | None = None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="152064x3584,262144x640",
                    help="synthetic matrices, ROWSxDIM, comma-separated (empty: none)")
    ap.add_argument("--real", action="append", default=[], help="a real (rows, dim) matrix saved as .npy")
    ap.add_argument("--cpu-sample", type=int, default=2000)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA GPU visible to torch: nothing to check (install a CUDA build of torch)")
        return 0

    print(f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; "
          f"CPU threads {torch.get_num_threads()}", flush=True)
    failures: list[str] = []
    table = []
    for shape in filter(None, args.shapes.split(",")):
        rows, dim = (int(v) for v in shape.lower().split("x"))
        kind = "planted" if (rows, dim) == (152064, 3584) else "diffuse"
        table.append(check_matrix(f"synthetic {kind}", synthetic(rows, dim, "cuda"), args.cpu_sample, failures))
        print(table[-1], flush=True)
        torch.cuda.empty_cache()
    for path in args.real:
        x = torch.from_numpy(np.load(path)).to("cuda", torch.bfloat16)
        table.append(check_matrix(f"real {path.rsplit('/', 1)[-1]}", x, args.cpu_sample, failures))
        print(table[-1], flush=True)
    lines = []
    if table:
        first = synthetic(*(int(v) for v in args.shapes.split(",")[0].lower().split("x")), "cuda") \
            if args.shapes else torch.from_numpy(np.load(args.real[0])).to("cuda", torch.bfloat16)
        lines.append(check_symmetric(first, failures))
        print(lines[-1], flush=True)
        lines.append(check_certified(first, failures))
        print(lines[-1], flush=True)
        del first
    lines.append(check_fp16_recheck(failures))
    print(lines[-1], flush=True)
    lines.append(check_verification(failures))

    print(f"\n| matrix | embscope exact kNN, GPU (s) | peak GPU GiB | embscope exact kNN, CPU (s, extrapolated) "
          f"| faiss GpuIndexFlatIP (s) | recall@10 GPU vs CPU (tie-aware; by id) | max Δ sim | max Δ score | cache key (s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in table:
        faiss_s = f"{r['faiss_s']:.1f}" if r["faiss_s"] is not None else "no faiss-gpu"
        print(f"| {r['matrix']} | {r['gpu_s']:.2f} | {r['peak_gib']:.1f} | {r['cpu_s']:.1f} | {faiss_s} | "
              f"{r['recall']:.4f}; {r['recall_ids']:.4f} | {r['max_dsim']:.1e} | {r['max_dscore']:.1e} | {r['key_s']:.2f} |")
    for line in lines:
        print(line)
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
