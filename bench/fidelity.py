"""Extension diagnostics timed per step: the terms, the whole model, fidelity, bits per byte.

    python bench/fidelity.py [--model smollm2-135m] [--top 200] [--init auto] [--bpb-bytes N] [--json OUT]

Runs :func:`embscope.extension.suggest` once in this process (the corpus passes, then the
diagnostics of every strategy) and prints each step's wall time, the process's CPU seconds
(user + system, all threads) and the load average beside them: on a shared machine wall time
alone says little. Goal (SmolLM2-135M + corpora/medical, 269 new tokens): the diagnostics
within 60 s on the 2-core development machine.

Prints the strategy table too (the score --init auto ranks by and its parts, fidelity, bits per
byte with standard errors, disturbance), recommended first. ``--bpb-bytes 4096`` measures as
``audit`` does (4096).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Timed:
    """A :class:`embscope.progress.Steps` stand-in that records wall and CPU seconds per step."""

    def __init__(self):
        self.rows: list[tuple[str, float, float, float]] = []
        self.timings: dict = {}

    def step(self, name, _what=""):
        import contextlib

        @contextlib.contextmanager
        def run():
            w, c = time.perf_counter(), cpu()
            try:
                yield
            finally:
                self.rows.append((name, time.perf_counter() - w, cpu() - c, os.getloadavg()[0]))
        return run()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--corpus", default=str(ROOT / "corpora" / "medical"))
    ap.add_argument("--top", type=int, default=200)
    ap.add_argument("--init", default="auto", help="comma-separated specs")
    ap.add_argument("--bpb-bytes", type=int, default=24 * 1024, help="held-out corpus bytes (audit: 4096)")
    ap.add_argument("--distil-work", type=float, default=None,
                    help="10^12 multiply-adds (default: extend's, 0 with --bpb-bytes 4096)")
    ap.add_argument("--json", default=None, help="also write the summary and the timings here")
    args = ap.parse_args()

    import embscope
    from embscope.extension import ExtensionOptions, suggest
    from embscope.extension.evaluate import AUDIT_CORPUS_BYTES, plan_for
    from embscope.extension.extension import AUDIT_DISTIL_WORK, DISTIL_WORK
    from embscope.records import to_json

    steps = Timed()
    w0, c0 = time.perf_counter(), cpu()
    model = embscope.load_model(args.model)
    load = (time.perf_counter() - w0, cpu() - c0)
    w1, c1 = time.perf_counter(), cpu()
    budget = args.distil_work
    if budget is None:
        budget = AUDIT_DISTIL_WORK if args.bpb_bytes == AUDIT_CORPUS_BYTES else DISTIL_WORK
    res = suggest(model, args.corpus, ExtensionOptions(top=args.top, init=args.init.split(","), distil_work=budget),
                  steps=steps, plan=plan_for(args.bpb_bytes))
    total = (time.perf_counter() - w1, cpu() - c1)
    print(f"model {args.model}: {res.summary.tokens_added} new tokens; load {load[0]:.1f} s wall, "
          f"{load[1]:.1f} s CPU")
    print(f"{'step':<16}{'wall s':>9}{'cpu s':>9}{'load':>7}")
    diag = [0.0, 0.0]
    for name, w, c, ld in steps.rows:
        print(f"{name:<16}{w:>9.1f}{c:>9.1f}{ld:>7.1f}")
        if name == "diagnostics":
            diag = [w, c]
    print(f"{'suggest total':<16}{total[0]:>9.1f}{total[1]:>9.1f}{os.getloadavg()[0]:>7.1f}")
    print(f"diagnostics: {diag[0]:.1f} s wall, {diag[1]:.1f} s CPU (goal: 60 s)")
    s = res.summary
    print(f"recommended: {s.recommended} — {s.recommended_why}")
    if s.general_note:
        print(s.general_note)
    base, gen = (b.to_dict() if b else {} for b in (s.bits_per_byte_original, s.general_bits_per_byte_original))
    print(f"original: {base.get('bits_per_byte')} ± {base.get('bits_per_byte_se')} bits/byte, "
          f"{base.get('tokens_per_byte')} tokens/byte on {base.get('bytes')} held-out bytes; general text "
          f"{gen.get('bits_per_byte')} bits/byte on {gen.get('bytes')} bytes ({gen.get('source')}); precision "
          f"{s.precision}; {s.new_tokens_per_byte} new tokens per byte; skipped: {s.skipped_strategies}")
    cols = ("score", "score_corpus", "score_general", "score_reading", "score_bytes", "bits_per_byte_change_se",
            "fidelity_kl", "fidelity_kl_after", "fidelity_top1", "general_bits_per_byte_change", "kl",
            "new_token_mass_max", "norm_percentile_median")
    print("| strategy | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for name, d in s.strategies.items():
        print(f"| {name} | " + " | ".join("—" if getattr(d, k) is None else f"{getattr(d, k):.4g}" for k in cols)
              + " |")
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": to_json(s),
                                               "steps": steps.rows, "load": load, "total": total},
                                              default=str, indent=1))


if __name__ == "__main__":
    main()
