"""The prompting verification's forward passes: float32 against the bf16 body (float32 head), 1 and 2 threads.

    python bench/verify.py [--model smollm2-135m] [--rows 64] [--audit REPORT_DIR]

Rows: a seeded random sample of ``--rows`` normal rows, plus, with ``--audit``, every flagged row
and family row of that report's ``tokens.parquet`` (the rows a verification checks, several near
the cut). Each configuration runs every prompt and every greedy step for every row
(``max_probs(cut=None)``, so the work is the same whatever the values) in this process, after one
warm-up batch; wall and CPU seconds (this process, all threads). Then the decisions
(``max_prob < 0.01``): float32 (the reference), bf16 alone, and bf16 with the float32 re-check of
the rows within a factor 2 of the cut (:func:`embscope.geometry.token_probs.prompt_probs`, what a run
does), and the largest |ln p_bf16 − ln p_float32| over the rows. Prints one table.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--audit", type=Path, help="a report folder whose flagged and family rows are added")
    args = ap.parse_args(argv)

    import numpy as np
    import torch

    import embscope
    from embscope.geometry.token_probs import MAX_PROB_CUT, max_probs, prompt_probs
    from embscope.geometry.verify import build_prompts, placeholder_token
    from embscope.machine import gemm_rates
    from embscope.models.forward import low_precision_copy, model_shape
    from embscope.models.fullmodel import load_causal_lm

    model = embscope.load_model(args.model, device="cpu")
    lm = load_causal_lm(model)
    t = time.perf_counter()
    low = low_precision_copy(lm, torch.bfloat16)
    copy_s = time.perf_counter() - t
    cats = np.asarray(model.categories)
    normal = np.flatnonzero(cats[:len(model.vocab)] == "normal")
    rows = set(np.random.default_rng(0).choice(normal, args.rows, replace=False).tolist())
    if args.audit:
        import polars as pl

        tok = pl.read_parquet(args.audit / "tokens.parquet")
        pool = tok.filter((pl.col("flagged") | pl.col("flag_reason").str.contains("family|drift").fill_null(False))
                          & (pl.col("category") == "normal"))
        rows |= set(pool["token_id"].to_list())
    rows = sorted(int(r) for r in rows)
    prompts = build_prompts(model, placeholder_token(model.vocab, model.categories))
    threads = torch.get_num_threads()
    rates = gemm_rates(model_shape(lm)[0]).gflops
    gains = [f"{n} thread(s) {rates.get(f'bfloat16@{n}', 0) / max(rates.get(f'float32@{n}', 1e-9), 1e-9):.1f}x"
             for n in sorted({1, threads})]
    print(f"{args.model}: {len(rows)} rows x {len(prompts)} prompts x 3 steps; bf16 copy {copy_s:.2f} s; "
          f"load average {os.getloadavg()[0]:.1f}; bf16 GEMM gain at the hidden width (embscope.machine): "
          f"{', '.join(gains)}", flush=True)
    values: dict[str, dict[int, float]] = {}
    print("\n| model | body | threads | wall s | CPU s | s per row | vs float32 (same threads) |\n|---|---|---|---|---|---|---|")
    base: dict[int, float] = {}
    for name, net in (("float32", lm), ("bf16 body, float32 head", low)):
        for n in sorted({1, threads}, reverse=True):
            torch.set_num_threads(n)
            max_probs(net, prompts, rows[:4], "cpu", cut=None)  # warm-up: kernels, caches
            w, c = time.perf_counter(), time.process_time()
            values[name] = max_probs(net, prompts, rows, "cpu", cut=None)
            wall, cpu = time.perf_counter() - w, time.process_time() - c
            if name == "float32":
                base[n] = wall
            print(f"| {args.model} | {name} | {n} | {wall:.2f} | {cpu:.2f} | {wall / len(rows):.3f} | "
                  f"{base[n] / wall:.2f}x |", flush=True)
    torch.set_num_threads(threads)
    ref, raw = values["float32"], values["bf16 body, float32 head"]
    checked, rechecked = prompt_probs(lm, low, prompts, rows, "cpu")
    worst = max(abs(math.log(max(raw[r], 1e-30)) - math.log(max(ref[r], 1e-30))) for r in rows)
    flips_raw = sum((raw[r] < MAX_PROB_CUT) != (ref[r] < MAX_PROB_CUT) for r in rows)
    flips = sum((checked[r] < MAX_PROB_CUT) != (ref[r] < MAX_PROB_CUT) for r in rows)
    below = sum(ref[r] < MAX_PROB_CUT for r in rows)
    print(f"\nfloat32: {below} of {len(rows)} rows below the cut; max |ln p_bf16 - ln p_fp32| = {worst:.4f} "
          f"(re-check band ln 2 = 0.693); decision flips: bf16 alone {flips_raw}, bf16 + float32 re-check "
          f"{flips} ({rechecked} rows re-checked); load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
