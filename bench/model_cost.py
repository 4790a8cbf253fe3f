"""The model's cost per language: ``embscope fertility --model M`` on corpora/udhr, timed in a fresh
process, beside what a user would write (transformers' model, one unit at a time, float32).

- ``embscope``: :func:`embscope.fertility` with ``model=M`` (the model's own tokenizer, its default
  languages: eng, rus, hin, cmn_hans, arb), wall and CPU seconds of the whole call and of its
  model-scoring step, the tokens and work it scored, the dtype and threads it ran on;
- ``loop`` (``--loop``): the same units' bits by ``AutoModelForCausalLM`` on the GGUF, one unit
  per forward pass in float32, the figure it gives beside ours.

The load average before and after is printed: on the shared 2-core development machine the
timings of a loaded run are not the machine's.

    python bench/model_cost.py                    # SmolLM2-135M, the default languages
    python bench/model_cost.py --loop             # and the plain transformers loop
    python bench/model_cost.py --device cuda      # on a GPU
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("EMBSCOPE_QUIET", "1")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_embscope(model: str, device: str, work: float | None) -> dict:
    import embscope

    t0, c0 = time.perf_counter(), _cpu()
    res = embscope.fertility(None, "udhr", model=model, device=device, model_work=work)
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    rec = next(iter(res.summary.sections.languages.corpora.values())).model
    t = res.tables["languages"]
    rows = t.filter(t["bits_per_byte"].is_not_null()).select(["language", "tokens", "parity", "bits_per_byte",
                                                              "bits_per_byte_se", "information_parity"])
    return {"wall": wall, "cpu": cpu, "step": res.summary.timings.get(f"model-cost:udhr"),
            "record": {k: getattr(rec, k) for k in ("languages", "units", "units_available", "texts", "tokens", "work",
                                                    "work_budget", "device", "dtype", "threads", "seconds")},
            "rows": rows.to_dicts()}


def run_loop(model: str, languages: list[str]) -> dict:
    """bits per byte per language by transformers alone, one unit per forward pass, float32."""
    import math

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from embscope.models.resolve import resolve

    path = Path(resolve(model).path)
    t0, c0 = time.perf_counter(), _cpu()
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    lm = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    start = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    out = {}
    with torch.no_grad():
        for lang in languages:
            bits = size = 0.0
            for line in (ROOT / "corpora" / "udhr" / f"{lang}.jsonl").read_text("utf-8").splitlines():
                text = json.loads(line)["text"]
                ids = [start] + tok(text, add_special_tokens=False)["input_ids"]
                logp = torch.log_softmax(lm(input_ids=torch.tensor([ids])).logits[0, :-1].float(), -1)
                bits -= float(logp.gather(1, torch.tensor(ids[1:])[:, None]).sum()) / math.log(2)
                size += len(text.encode("utf-8"))
            out[lang] = bits / size
    return {"wall": time.perf_counter() - t0, "cpu": _cpu() - c0, "bits_per_byte": out}


def load() -> str:
    return open("/proc/loadavg").read().split()[0] if Path("/proc/loadavg").exists() else "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--work", type=float, default=None, help="--model-work (default: fertility's)")
    ap.add_argument("--loop", action="store_true", help="also the plain transformers loop")
    ap.add_argument("--child", choices=("embscope", "loop"), help=argparse.SUPPRESS)
    ap.add_argument("--languages", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child == "embscope":
        print(json.dumps(run_embscope(a.model, a.device, a.work), default=str))
        return
    if a.child == "loop":
        print(json.dumps(run_loop(a.model, a.languages.split(","))))
        return

    def child(*extra: str) -> dict:
        cmd = [sys.executable, __file__, "--model", a.model, "--device", a.device, *extra]
        if a.work is not None:
            cmd += ["--work", str(a.work)]
        return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])

    before = load()
    ours = child("--child", "embscope")
    after = load()
    rec = ours["record"]
    print(f"load average {before} before, {after} after (2 cores: above ~2 the timings are not the machine's)")
    print(f"| model | languages | units | tokens | work 10^12 | dtype | threads | device | step s | call wall s | call cpu s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print(f"| {a.model} | {', '.join(rec['languages'])} | {rec['units']} of {rec['units_available']} | {rec['tokens']:,} | "
          f"{rec['work']:.2f} of {rec['work_budget']:g} | {rec['dtype']} | {rec['threads']} | {rec['device']} | "
          f"{ours['step']:.1f} | {ours['wall']:.1f} | {ours['cpu']:.1f} |")
    print()
    print("| language | tokens | parity | bits/byte | ± se | information parity |")
    print("|---|---|---|---|---|---|")
    for r in ours["rows"]:
        print(f"| {r['language']} | {r['tokens']:,} | {r['parity']:.3f} | {r['bits_per_byte']:.4f} | "
              f"{r['bits_per_byte_se']:.4f} | {r['information_parity']:.3f} |")
    if a.loop:
        loop = child("--child", "loop", "--languages", ",".join(rec["languages"]))
        print(f"\ntransformers one unit at a time, float32: wall {loop['wall']:.1f} s, cpu {loop['cpu']:.1f} s "
              f"(load average {load()} after)")
        for r in ours["rows"]:
            print(f"  {r['language']}: {loop['bits_per_byte'][r['language']]:.4f} bits/byte (embscope {r['bits_per_byte']:.4f})")


if __name__ == "__main__":
    main()
