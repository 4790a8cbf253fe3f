"""Does the recommended initialisation start lower and stay lower? A short fine-tune per strategy.

    python bench/init_trial.py [--model smollm2-135m] [--top 200] [--steps 30] [--batch 4] [--seq 64]
                               [--lr 3e-3] [--eval-every 5] [--held-bytes 4096] [--init auto,distil]
                               [--json OUT] [--corpus PATH] [--lang CODE] [--min-freq N] [--norm-correction]

1. :func:`embscope.extension.suggest` on ``corpora/medical`` with ``--init auto,distil`` (every
   strategy, ``distil`` named so that its time budget, estimated in wall seconds and so at the
   mercy of the machine's load, cannot leave it out of the trial): the figures and the score
   ``auto`` ranks by, and its pick.
2. Per strategy, the same short fine-tune from its rows: only the new rows trainable (the model
   frozen; SmolLM2 is tied, so each new row is its token's input and output row), Adam at one
   learning rate, the same batches in the same order (fixed seed): the *fit* texts of the corpus
   (never the held-out ones), tokenized with the extended tokenizer, a start token in front of
   each, packed into sequences of ``--seq`` tokens.
3. Every ``--eval-every`` steps, the held-out loss: bits per byte of the same held-out corpus sample
   the extension measures (4 KB, extended tokenizer; :func:`embscope.extension.bpb.text_losses`,
   all strategies in one pass), and at the start and the end bits per byte on general text (UDHR
   English), each against the original model + tokenizer. With ``--lang CODE`` (a target
   language), also at the start and the end bits per byte on that language's UDHR articles
   (``corpora/udhr/CODE.jsonl``: never in the corpus the rows learn from), and ``suggest`` picks on
   the target language.

Prints one table (Δ bits per byte against the original model at each evaluated step, the area
under the curve, ranks) and the answer: does the strategy ``auto`` recommends start lowest and
stay lowest, and how well the score's order predicts the order after training (Spearman).
CPU-heavy: run it under the shared lock, ``flock /tmp/embscope-heavy.lock nice -n 5 python
bench/init_trial.py``; 564 s wall / 523 CPU-s on the project's 2 shared cores at load 4 (2 Dec).
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


def packed_batches(ext_tok, texts, start, seq: int, batch: int, steps: int, seed: int):
    """``steps`` batches of ``batch`` sequences of ``seq`` ids: every text with ``start`` in front,
    concatenated, cut into sequences, drawn without replacement in a seeded order."""
    import torch

    ids: list[int] = []
    for enc in ext_tok.encode_batch(list(texts), add_special_tokens=False):
        ids.extend(list(start) + enc.ids)
    n = len(ids) // seq
    blocks = torch.tensor(ids[:n * seq]).view(n, seq)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    need = steps * batch
    if need > n:
        order = order.repeat(need // n + 1)
    return [blocks[order[k * batch:(k + 1) * batch]] for k in range(steps)]


def spearman(a, b) -> float:
    """Rank correlation of two equal-length sequences (no ties expected)."""
    import numpy as np

    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1]) if len(a) > 2 else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--corpus", default=str(ROOT / "corpora" / "medical"))
    ap.add_argument("--top", type=int, default=200)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3, help="Adam; the rows' elements have RMS ~0.13 (SmolLM2)")
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--held-bytes", type=int, default=4 * 1024)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init", default="auto,distil", help="comma-separated specs for suggest")
    ap.add_argument("--json", default=None)
    ap.add_argument("--lang", default=None, help="target language: its figures, and the pick on UDHR bits per byte in it")
    ap.add_argument("--min-freq", type=int, default=5)
    ap.add_argument("--norm-correction", action="store_true", help="each strategy's +norm twin too")
    args = ap.parse_args()

    import torch

    import embscope
    from embscope.corpus.stream import read_texts
    from embscope.extension import ExtensionOptions, suggest
    from embscope.extension.bpb import summarize, text_losses
    from embscope.extension.contexts import is_held_out, spread, start_ids
    from embscope.extension.evaluate import general_texts, plan_for
    from embscope.extension.fidelity import compute_precision, forward_precision, parts
    from embscope.models.fullmodel import fastest_threads, load_causal_lm, load_hf_tokenizer
    from embscope.records import to_json

    torch.manual_seed(args.seed)
    w0, c0 = time.perf_counter(), cpu()
    model = embscope.load_model(args.model)
    res = suggest(model, args.corpus, ExtensionOptions(top=args.top, init=args.init.split(","), min_freq=args.min_freq,
                                                       target_lang=args.lang, norm_correction=args.norm_correction),
                  plan=plan_for(24 * 1024))
    t_suggest = (time.perf_counter() - w0, cpu() - c0)
    s = res.summary
    lm = load_causal_lm(model)
    for prm in lm.parameters():
        prm.requires_grad_(False)
    tok, ext = load_hf_tokenizer(model), res.extension.tokenizer
    new_ids = res.token_ids
    start = start_ids(tok, lm.config.bos_token_id)
    p = parts(lm)
    old_rows = p.head.shape[0]
    assert min(new_ids) >= old_rows, "the trial splices new rows after the matrix (no padding rows reused)"
    texts = read_texts(args.corpus)
    held = spread([t for t in texts if is_held_out(t)], args.held_bytes)
    fit = [t for t in texts if not is_held_out(t)]
    general, source = general_texts()
    batches = packed_batches(ext, fit, start, args.seq, args.batch, args.steps, args.seed)
    names = [n for n in s.strategies if n in res.rows]
    rows = {n: torch.nn.Parameter(res.rows[n]["embed"].detach().float().clone()) for n in names}
    opts = {n: torch.optim.Adam([rows[n]], lr=args.lr) for n in names}
    index = torch.full((max(new_ids) + 1,), -1, dtype=torch.long)
    index[torch.tensor(new_ids)] = torch.arange(len(new_ids))
    head = p.head.float()

    def evaluate(sample):
        with torch.no_grad():
            got = text_losses(lm, sample, tok, ext, start, new_ids, {n: {"embed": rows[n].detach()} for n in names})
        base, figs = summarize(got)
        return base, {n: (figs[n]["bits_per_byte_change"], figs[n]["bits_per_byte_change_se"]) for n in names}

    def train_step(name, ids):
        r = rows[name]
        is_new = index[ids.clamp(max=len(index) - 1)] >= 0
        is_new &= ids >= old_rows
        with torch.no_grad():
            emb = p.embed(ids.clamp(max=old_rows - 1)).float()  # (B, L, d), times embed_scale (Gemma)
        emb = torch.where(is_new[..., None], r[index[ids.clamp(max=len(index) - 1)].clamp_min(0)] * p.scale, emb)
        with forward_precision():
            h = p.base(inputs_embeds=emb).last_hidden_state.float()  # (B, L, d)
        logits = torch.cat([h @ head.T, h @ r.T], -1)[:, :-1]  # (B, L − 1, V + n): old head, then new rows
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        opts[name].zero_grad()
        loss.backward()
        opts[name].step()
        return float(loss.detach())

    curves = {n: [] for n in names}
    evals: list[int] = []
    t_train = 0.0
    w1, c1 = time.perf_counter(), cpu()
    with fastest_threads():  # under load one intra-op thread can be 10x faster (fullmodel.py)
        _, g0 = evaluate(general)
        if args.lang:
            from embscope.extension.target import udhr_units

            target = spread(list(udhr_units(args.lang).values()), 8 * 1024)
            t_base, t0 = evaluate(target)
        for step in range(args.steps + 1):
            if step % args.eval_every == 0 or step == args.steps:
                base, figs = evaluate(held)
                evals.append(step)
                for n in names:
                    curves[n].append(figs[n])
                print(f"step {step:3d}: " + ", ".join(f"{n} {figs[n][0]:+.4f}" for n in names), flush=True)
            if step == args.steps:
                break
            t = time.perf_counter()
            for n in names:
                train_step(n, batches[step])
            t_train += time.perf_counter() - t
        _, g1 = evaluate(general)
        if args.lang:
            _, t1 = evaluate(target)
    t_trial = (time.perf_counter() - w1, cpu() - c1)

    rec = s.recommended
    score = {n: s.strategies[n].score for n in names}
    final = {n: curves[n][-1][0] for n in names}
    auc = {n: sum(v for v, _ in curves[n]) / len(curves[n]) for n in names}
    start0 = {n: curves[n][0][0] for n in names}
    print(f"\nmodel {args.model}: {s.tokens_added} new tokens ({s.top_n} terms); {len(held)} held-out texts "
          f"({base['bytes']} bytes, original {base['bits_per_byte']} ± {base['bits_per_byte_se']} bits/byte); "
          f"{args.steps} steps × {args.batch} × {args.seq} tokens, Adam lr {args.lr}, only the new rows trained, "
          f"seed {args.seed}; forward passes in {compute_precision()}")
    print(f"suggest {t_suggest[0]:.0f} s wall / {t_suggest[1]:.0f} CPU-s; trial {t_trial[0]:.0f} s wall / "
          f"{t_trial[1]:.0f} CPU-s (training {t_train:.0f} s); load {os.getloadavg()[0]:.1f}")
    cols = " | ".join(f"Δ bpb @{k}" for k in evals)
    print(f"\n| strategy | auto score | {cols} | mean over steps | Δ general @0 → @{args.steps} |")
    print("|---" * (len(evals) + 4) + "|")
    for n in sorted(names, key=lambda n: (score[n] is None, score[n] if score[n] is not None else 0)):
        mark = " (auto's pick)" if n == rec else ""
        sc = "—" if score[n] is None else f"{score[n]:+.4f}"
        vals = " | ".join(f"{v:+.4f} ± {e:.4f}" for v, e in curves[n])
        print(f"| {n}{mark} | {sc} | {vals} | {auc[n]:+.4f} | {g0[n][0]:+.5f} → {g1[n][0]:+.5f} |")
    if args.lang:
        print(f"\n{args.lang} UDHR ({len(target)} articles, {t_base['bytes']} bytes, original {t_base['bits_per_byte']} "
              f"± {t_base['bits_per_byte_se']} bits/byte), Δ bits per byte at step 0 → {args.steps}:")
        print("| strategy | Δ bpb @0 | Δ bpb @end |\n|---|---|---|")
        for n in sorted(names, key=lambda n: t1[n][0]):
            print(f"| {n} | {t0[n][0]:+.4f} ± {t0[n][1]:.4f} | {t1[n][0]:+.4f} ± {t1[n][1]:.4f} |")
        tl = s.target_language
        if tl is not None and tl.udhr is not None:
            print(f"fertility {tl.udhr.fertility_before} → {tl.udhr.fertility_after}; parity {tl.udhr.parity_before} "
                  f"→ {tl.udhr.parity_after}; English {tl.english_before} → {tl.english_after} ± {tl.english_se} "
                  f"({tl.english_strategy}, retained {tl.english_retained})")
    scored = [n for n in names if score[n] is not None]
    best_start, best_end, best_auc = (min(names, key=d.get) for d in (start0, final, auc))
    rank_end = sorted(names, key=final.get).index(rec) + 1 if rec in names else None
    rho_end = spearman([score[n] for n in scored], [final[n] for n in scored])
    rho_start = spearman([score[n] for n in scored], [start0[n] for n in scored])
    print(f"\nauto recommends {rec}; lowest held-out loss at step 0: {best_start}, after {args.steps} steps: {best_end}, "
          f"over the whole curve: {best_auc}; {rec} ends {rank_end} of {len(names)}")
    print(f"Spearman(score, Δ bpb at step 0) = {rho_start:.2f}; Spearman(score, Δ bpb after {args.steps} steps) = "
          f"{rho_end:.2f} over the {len(scored)} scored strategies")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "summary": {k: v for k, v in s.to_dict().items() if k != "strategies"}, "strategies": to_json(s.strategies),
            "evals": evals, "curves": curves, "general": {"start": g0, "end": g1}, "args": vars(args),
            "target": {"start": t0, "end": t1} if args.lang else None,
            "times": {"suggest": t_suggest, "trial": t_trial, "train_s": t_train}}, default=str, indent=1))


if __name__ == "__main__":
    main()
