"""Chat-template rendering: embscope's bounded renderer (every string counted; strict in-process,
the worker process for what the budget cannot bound) beside transformers' own
``render_jinja_template``, on the same real conversations, in one run.

    python bench/chat_render.py [--n 2000] [--repeat 3]

Templates: SmolLM2's (its GGUF) and Gemma-3's published one (``tests/data``), on ``--n``
conversations of ``scripts/build_corpora.py`` (system turns, multi-turn). Per template and method,
the best of ``--repeat`` passes: microseconds per conversation (wall), CPU microseconds (this
process plus the rendering worker, read from ``/proc``), and the ratio to transformers. Methods:

1. transformers ``render_jinja_template([conv], chat_template=...)`` per conversation (what
   ``apply_chat_template(tokenize=False)`` calls);
2. embscope ``render``, what ``check`` calls (these templates render strictly in-process);
3. the same rendering forced through the worker process (``render_worker.render``): what a
   template the strict budget cannot bound costs per conversation.

Every output is checked equal to transformers' before anything is timed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _worker_cpu() -> float:
    """CPU seconds (user + system) of the rendering worker so far (0 when none runs)."""
    from embscope.models import render_worker

    proc = render_worker._WORKER.proc
    if proc is None:
        return 0.0
    fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _timed(fn, convs, repeat: int) -> tuple[float, float]:
    best = (float("inf"), float("inf"))
    for _ in range(repeat):
        w0, c0, k0 = time.perf_counter(), time.process_time(), _worker_cpu()
        for c in convs:
            fn(c)
        wall = time.perf_counter() - w0
        cpu = time.process_time() - c0 + _worker_cpu() - k0
        best = min(best, (wall, cpu))
    return best[0] / len(convs) * 1e6, best[1] / len(convs) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    from transformers.utils.chat_template_utils import render_jinja_template

    import embscope
    from embscope.models import render_worker
    from embscope.models.chat_template import _bounds, read_chat_template, render, special_token_strings
    from scripts.build_corpora import chat_conversations

    convs = [c["messages"] for c in chat_conversations(ROOT / "corpora", args.n, seed=7)]
    smol = embscope.load_model("smollm2-135m", device="cpu")
    templates = {"SmolLM2": (read_chat_template(smol), special_token_strings(smol)),
                 "Gemma-3": ((ROOT / "tests" / "data" / "gemma3_chat_template.jinja").read_text("utf-8"),
                             {"bos_token": "<bos>", "eos_token": "<eos>"})}
    print(f"{len(convs)} conversations, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
    print("| template | method | µs / conversation (wall) | CPU µs / conversation | CPU vs transformers |")
    print("|---|---|---|---|---|")
    for name, (template, names) in templates.items():
        bounds = _bounds()
        variables = dict(names, add_generation_prompt=False, tools=None, documents=None)
        theirs = lambda c: render_jinja_template([c], chat_template=template, **names)[0][0]  # noqa: E731
        ours = lambda c: render(template, c, **names)  # noqa: E731
        worker = lambda c: render_worker.render(template, c, variables, bounds).text  # noqa: E731
        for c in convs:
            want = theirs(c)
            assert ours(c) == want and worker(c) == want, "embscope's rendering differs from transformers'"
        rows = [("transformers render_jinja_template", theirs), ("embscope render (strict, in-process)", ours),
                ("embscope through the worker process", worker)]
        base = None
        for label, fn in rows:
            wall, cpu = _timed(fn, convs, args.repeat)
            base = base or cpu
            print(f"| {name} | {label} | {wall:.1f} | {cpu:.1f} | {cpu / base:.2f}× |")
    print(f"\nload average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
