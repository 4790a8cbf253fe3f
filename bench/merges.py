"""``extend --method merges`` on a 4 MB target-language corpus: time to learn and apply 1,000 rows,
and held-out token reduction against an independent plain continued BPE.

Data: ``scripts/fetch_language_data.py --only km --wordfreq ''`` (Debian's Khmer LibreOffice help,
4.48 MB); every 10th line is held out, the rest is the training corpus. The held-out tokens are
counted by the written tokenizers loaded in HF ``tokenizers`` (ours: the ``tokenizer.json`` that
``extend --apply --rows-only`` wrote; the reference's: ``tests/references.py``'s merges written
into a copy of the model's tokenizer). The reference recounts every pair at every step, so it is
run at fewer rows (``--ref-rows``) on a slice of the training text (``--ref-bytes``), where ours is
run on the same slice too.

    python bench/merges.py --data ~/.cache/embscope/langdata/libreoffice-help-km.txt
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def held_tokens(tok, texts) -> int:
    return sum(len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--ref-rows", type=int, default=200)
    ap.add_argument("--ref-bytes", type=int, default=400_000)
    args = ap.parse_args()
    from tokenizers import Tokenizer

    from embscope import load_model
    from embscope.models.fullmodel import load_hf_tokenizer
    from tests.references import naive_continued_bpe, with_merges

    lines = [ln for ln in args.data.read_text("utf-8").splitlines() if ln.strip()]
    train, held = [ln for i, ln in enumerate(lines) if i % 10], [ln for i, ln in enumerate(lines) if not i % 10]
    tok = load_hf_tokenizer(load_model(args.model))
    base = held_tokens(tok, held)
    out = {"model": args.model, "train_bytes": sum(len(t.encode()) for t in train), "held_lines": len(held),
           "held_tokens_before": base}
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "train.txt"
        corpus.write_text("\n".join(train) + "\n", "utf-8")
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "embscope", "extend", "--model", args.model, "--corpus", str(corpus),
                        "--method", "merges", "--rows", str(args.rows), "--min-freq", "2", "--no-diagnostics",
                        "--init", "subword-mean", "--apply", f"{tmp}/ext", "--rows-only", "--out", f"{tmp}/rep",
                        "--quiet"], check=True, cwd=ROOT)
        out["extend_apply_s"] = round(time.perf_counter() - t, 1)
        ours = Tokenizer.from_file(f"{tmp}/ext/tokenizer.json")
        out["rows_written"] = ours.get_vocab_size() - tok.get_vocab_size()
        out["held_reduction"] = round(1 - held_tokens(ours, held) / base, 4)
        # the reference, on a slice: ours on the same slice, same rows
        from embscope.tokenizer.learn import learn_merges, write_merges
        from embscope.extension.merges import learning_words
        from collections import Counter

        part, size = [], 0
        for ln in train:
            if size >= args.ref_bytes:
                break
            part.append(ln)
            size += len(ln.encode())
        words = Counter(w for ln in part for w in learning_words(tok, ln))
        t = time.perf_counter()
        learned = learn_merges(tok, words, rows=args.ref_rows, min_freq=2)
        out["ours_slice_learn_s"] = round(time.perf_counter() - t, 2)
        t = time.perf_counter()
        ref = naive_continued_bpe(tok, part, args.ref_rows, 2)
        out["reference_slice_learn_s"] = round(time.perf_counter() - t, 1)
        ext = write_merges(tok, learned)
        ours_slice, ref_slice = (1 - held_tokens(ext.tokenizer, held) / base,
                                 1 - held_tokens(with_merges(tok, ref), held) / base)
        out.update(slice_bytes=size, slice_rows=args.ref_rows, ours_slice_reduction=round(ours_slice, 4),
                   reference_slice_reduction=round(ref_slice, 4), share_of_reference=round(ours_slice / ref_slice, 4),
                   same_merges=learned.merges == ref)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
