"""What ``EmbscopeCallback`` costs a real fine-tune: SmolLM2-135M (the whole model, as transformers
reads the demo GGUF) trained on the CPU by TRL's ``SFTTrainer`` on medical-corpus lines, the same
run without the callback and with it, side by side.

    python bench/callback.py [--steps 20] [--batch 4] [--length 128]

Prints, for each run, the median and mean step time (between consecutive ``on_step_end`` calls,
so the callback's check is inside the step it runs in), then the callback's own figures: the
seconds before the first step (the step-0 copy, the tokenizer load, the batches' findings) and at
the end (the ``embscope diff`` report), each check's seconds, the forward hook's cost per batch,
and the overhead per step at the run's ``every`` and at the default ``every`` of a long run (50).
Last, whether both runs trained bit-identical weights (the callback reads batches before the first
step: the trainer must still see the same ones).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
OUT = ROOT / "bench" / "out" / "callback"


def _model_folder() -> Path:
    import finetune as ft

    folder = OUT / "smollm2-135m"
    if not (folder / "config.json").is_file():
        ft.cut_model(folder, layers=None)
    return folder


def _texts(n: int) -> list[str]:
    from embscope.corpus.stream import read_texts

    return [t for _, t in zip(range(n), read_texts(ROOT / "corpora" / "medical"))]


def _run(folder: Path, texts: list[str], args, callback):
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    class Clock(TrainerCallback):
        def __init__(self):
            self.ends: list[float] = []

        def on_train_begin(self, *a, **k):
            self.ends.append(time.perf_counter())

        def on_step_end(self, *a, **k):
            self.ends.append(time.perf_counter())

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    clock = Clock()
    cfg = SFTConfig(output_dir=str(OUT / ("with" if callback else "without")), max_steps=args.steps,
                    per_device_train_batch_size=args.batch, learning_rate=1e-4, max_length=args.length, report_to=[],
                    save_strategy="no", logging_steps=10, use_cpu=True, seed=0, disable_tqdm=True)
    trainer = SFTTrainer(model=model, args=cfg, train_dataset=Dataset.from_dict({"text": texts}), processing_class=tok,
                         callbacks=[clock, *([callback] if callback else [])])
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    steps = [b - a for a, b in zip(clock.ends, clock.ends[1:])]
    return trainer, steps, wall, clock


def _hook_cost(batch: int, length: int) -> float:
    """Seconds per training batch of the callback's forward hook (marking the batch's ids)."""
    import torch

    from embscope.integrations.transformers import _seen_hook
    from embscope.integrations.watch import Watch

    w = Watch(ids=None, new=None, used=None, sides=[], seen=torch.zeros(49152, dtype=torch.bool), n_rows=49152)
    hook, emb = _seen_hook(w), torch.nn.Embedding(8, 2)
    ids = torch.randint(0, 49152, (batch, length))
    t0 = time.perf_counter()
    for _ in range(200):
        hook(emb, (ids,))
    return (time.perf_counter() - t0) / 200


def main() -> None:
    import torch

    from embscope.integrations.transformers import EmbscopeCallback, default_every

    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--length", type=int, default=128)
    args = ap.parse_args()
    folder, texts = _model_folder(), _texts(400)
    print(f"SmolLM2-135M, TRL SFTTrainer, {args.steps} steps of {args.batch} x ≤{args.length} tokens, "
          f"{torch.get_num_threads()} threads")
    plain, steps0, wall0, _ = _run(folder, texts, args, None)
    cb = EmbscopeCallback(languages=None)
    tuned, steps1, wall1, clock = _run(folder, texts, args, cb)
    every = default_every(args.steps)
    med0, med1 = statistics.median(steps0[1:]), statistics.median(steps1[1:])
    mean0, mean1 = statistics.mean(steps0[1:]), statistics.mean(steps1[1:])
    checks = [c.seconds for c in cb.checks]
    hook = _hook_cost(args.batch, args.length)
    per_step = (statistics.mean(checks) / every + hook) if checks else hook
    per_step50 = (statistics.mean(checks) / 50 + hook) if checks else hook
    same = torch.equal(plain.model.get_input_embeddings().weight, tuned.model.get_input_embeddings().weight)
    rows = {
        "step_median_s": [round(med0, 3), round(med1, 3)], "step_mean_s": [round(mean0, 3), round(mean1, 3)],
        "train_wall_s": [round(wall0, 2), round(wall1, 2)], "every": every, "checks": len(checks),
        "check_s_mean": round(statistics.mean(checks), 4) if checks else None, "hook_s_per_batch": round(hook, 6),
        "callback_begin_s": cb.seconds.get("begin"), "callback_end_report_s": cb.seconds.get("end"),
        "overhead_per_step_at_every": f"{per_step / med0:.3%}", "overhead_per_step_at_every_50": f"{per_step50 / med0:.3%}",
        "mean_step_ratio_with_over_without": round(mean1 / mean0, 4), "same_weights": same,
    }
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
