"""GPU check: the CUDA path gives the CPU path's answers, and how fast it is. One script, ≤ 5 min.

    python bench/gpu_check.py [--rows 152064] [--dim 3584] [--cpu-sample 2000]

On a machine with a CUDA GPU (torch CUDA build; faiss-gpu optional):

1. builds a 152064 x 3584 bf16 matrix with planted cluster structure on the GPU (the shape of
   Qwen2-7B's embedding);
2. runs embscope's exact kNN (``embscope.geometry.knn.knn_graph(..., method="exact",
   device="cuda")``: fp16 tiles, fp32 re-rank) over every row and times it;
3. compares ``cpu_sample`` random rows against the CPU path (the same code with ``device="cpu"``,
   fp32 tiles) — recall@10 of the GPU neighbours against the CPU ones, and the largest difference
   in the similarities of shared neighbours (tolerance: 2e-3, the fp16 tile error before re-rank
   is removed by the fp32 re-rank);
4. if faiss-gpu is installed, times ``faiss.GpuIndexFlatIP`` exact search as the baseline ratio;
5. runs the audit indicators and the UMAP input on the GPU-loaded matrix and checks the score
   against the CPU run on the same rows (``max |Δ score| ≤ 1e-3``);
6. checks that the kNN cache key (BLAKE2b over every byte, copied to the host block by block) of
   the CUDA matrix equals the key of its CPU copy, and times it;
7. checks that ``method="auto"`` on CUDA picks exact search (the ``ivf``/``refined`` CPU methods
   are only for CPU matrices).

Prints one table; exits non-zero when a tolerance is missed. Without a GPU it says so and exits 0.
"""

from __future__ import annotations

import argparse
import sys
import time


def planted(rows: int, dim: int, device: str, seed: int = 0):
    """Rows = one of 512 cluster centres + noise, 1 % scaled down, bf16 — as bench/make_checkpoint.py."""
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    centres = torch.randn(512, dim, generator=g, device=device)
    assign = torch.randint(0, 512, (rows,), generator=g, device=device)
    x = centres[assign] + 0.7 * torch.randn(rows, dim, generator=g, device=device)
    low = torch.randperm(rows, generator=g, device=device)[: rows // 100]
    x[low] *= 0.05
    return (x * 0.02).to(torch.bfloat16)


def main(argv: list[str] | None = None) -> int:
    import numpy as np
    import torch

    from embscope.geometry.knn import exact_knn, knn_graph, normalize_rows

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=152064)
    ap.add_argument("--dim", type=int, default=3584)
    ap.add_argument("--cpu-sample", type=int, default=2000)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA GPU visible to torch: nothing to check (install a CUDA build of torch)")
        return 0

    print(f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}")
    failures = []
    x = planted(args.rows, args.dim, "cuda")
    torch.cuda.synchronize()

    t0 = time.perf_counter()
    g = knn_graph(x, 10, method="exact", device="cuda", use_cache=False, progress=False)
    torch.cuda.synchronize()
    t_gpu = time.perf_counter() - t0

    rng = np.random.default_rng(0)
    rows = torch.from_numpy(np.sort(rng.choice(args.rows, args.cpu_sample, replace=False)))
    x_cpu = x.cpu()
    t0 = time.perf_counter()
    cpu_sims, cpu_ids = exact_knn(normalize_rows(x_cpu), 10, rows=rows, dtype=torch.float32, progress=False)
    t_cpu = (time.perf_counter() - t0) * args.rows / args.cpu_sample
    gpu_ids = g.neighbors[rows.numpy()]
    gpu_sims = g.sims[rows.numpy()]
    cpu_ids, cpu_sims = cpu_ids.numpy(), cpu_sims.numpy()
    recall = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(gpu_ids, cpu_ids)]))
    diffs = []
    for a, sa, b, sb in zip(gpu_ids, gpu_sims, cpu_ids, cpu_sims):
        common = {i: s for i, s in zip(b, sb)}
        diffs += [abs(float(s) - float(common[i])) for i, s in zip(a, sa) if i in common]
    max_diff = max(diffs) if diffs else float("nan")
    if recall < 0.99:
        failures.append(f"recall@10 vs CPU {recall:.4f} < 0.99")
    if not max_diff <= 2e-3:
        failures.append(f"similarity difference {max_diff:.2e} > 2e-3")

    t_faiss = None
    try:
        import faiss

        if hasattr(faiss, "StandardGpuResources"):
            res = faiss.StandardGpuResources()
            xn = normalize_rows(x).float().cpu().numpy()
            index = faiss.GpuIndexFlatIP(res, args.dim)
            index.add(xn)
            t0 = time.perf_counter()
            index.search(xn, 11)
            t_faiss = time.perf_counter() - t0
    except ImportError:
        pass

    # Indicators on the GPU vs the CPU, same rows.
    from embscope.geometry.indicators import compute_indicators

    cats = ["normal"] * args.rows
    strings = [""] * args.rows
    ind_gpu = compute_indicators(x, None, cats, strings, g.sims)
    ind_cpu = compute_indicators(x_cpu, None, cats, strings, g.sims)
    d_score = float(np.nanmax(np.abs(ind_gpu.undertrained_score - ind_cpu.undertrained_score)))
    if not d_score <= 1e-3:
        failures.append(f"score difference GPU vs CPU {d_score:.2e} > 1e-3")

    from embscope.geometry.knn_cache import matrix_key

    t0 = time.perf_counter()
    key_gpu = matrix_key(x, 10, "auto")
    t_key = time.perf_counter() - t0
    if key_gpu != matrix_key(x_cpu, 10, "auto"):
        failures.append("cache key of the CUDA matrix differs from its CPU copy's")
    small = x[:20000]
    g_auto = knn_graph(small, 10, method="auto", use_cache=False, progress=False)
    if g_auto.method != "exact":
        failures.append(f"auto on CUDA chose {g_auto.method}, expected exact")

    print(f"{'step':<42} {'seconds':>9}")
    print(f"{'cache key (BLAKE2b, all bytes, from GPU)':<42} {t_key:>9.2f}")
    print(f"{'embscope exact kNN, GPU (fp16 tiles + fp32 re-rank)':<42} {t_gpu:>9.1f}")
    print(f"{'embscope exact kNN, CPU (fp32), extrapolated':<42} {t_cpu:>9.1f}")
    if t_faiss is not None:
        print(f"{'faiss GpuIndexFlatIP exact':<42} {t_faiss:>9.1f}")
    print(f"recall@10 of GPU vs CPU on {args.cpu_sample} rows: {recall:.4f}; max |Δ sim| {max_diff:.2e}; "
          f"max |Δ score| {d_score:.2e}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
