"""The share of training examples whose ids differ between the two tokenizers a GGUF model can be
loaded with: llama.cpp's splitting rebuilt from the file (``check``'s default) and transformers' own
GGUF conversion (``AutoTokenizer.from_pretrained(folder, gguf_file=...)``, what a TRL or
transformers script loading the GGUF gets; ``check --gguf-tokenizer transformers``).

    python bench/gguf_tokenizer.py [--model smollm2-135m] [--trainer trl] [DATA ...]

Default data: LLaMA-Factory's demo sets (``scripts/fetch_trainer_data.py``) and the shipped chat
sample. Per file: examples, examples whose sequences (ids) differ, and the share. Not a timing.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LF_SETS = ("alpaca_en_demo.json", "alpaca_zh_demo.json", "identity.json", "glaive_toolcall_en_demo.json",
           "glaive_toolcall_zh_demo.json", "dpo_en_demo.json", "dpo_zh_demo.json", "kto_en_demo.json",
           "c4_demo.jsonl")


def default_data() -> list[Path]:
    base = os.environ.get("EMBSCOPE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "embscope")
    lf = Path(base) / "llamafactory-data"
    return [ROOT / "corpora" / "chat" / "medical-chat.jsonl", *(lf / n for n in LF_SETS if (lf / n).is_file())]


def differing(model, path: Path, trainer: str) -> tuple[int, int]:
    """(examples, examples whose sequences' ids differ between the two tokenizers)."""
    from embscope.corpus.conversations import iter_examples
    from embscope.readiness import trainer_sequences
    from embscope.readiness.options import CheckOptions

    examples = list(iter_examples([str(path)]))
    ids = {}
    for tok in ("llamacpp", "transformers"):
        seqs: dict[int, list] = {}
        for s in trainer_sequences(model, examples, CheckOptions(trainer=trainer, gguf_tokenizer=tok)).sequences:
            seqs.setdefault(s.index, []).append(s.ids)
        ids[tok] = seqs
    return len(examples), sum(ids["llamacpp"].get(ex.index) != ids["transformers"].get(ex.index) for ex in examples)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", nargs="*", type=Path)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--trainer", default="trl")
    args = ap.parse_args(argv)
    import embscope

    model = embscope.load_model(args.model, device="cpu")
    total = [0, 0]
    print(f"| data ({args.trainer}) | examples | other ids under transformers' GGUF tokenizer |\n|---|---|---|")
    for path in args.data or default_data():
        n, d = differing(model, path, args.trainer)
        total[0] += n
        total[1] += d
        print(f"| {path.name} | {n:,} | {d:,} ({d / max(n, 1):.1%}) |")
    print(f"| all | {total[0]:,} | {total[1]:,} ({total[1] / max(total[0], 1):.1%}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
