"""How likely the model makes a token, the figure verification decides by
(:mod:`embscope.geometry.verify`): ``max_prob`` over repetition prompts and a few greedy steps
(:func:`max_probs`; in bf16 with a float32 re-check near the cut, :func:`prompt_probs`), and
``p(token | text before it)`` where the token occurs in real text (:func:`in_context_probs`).
"""

from __future__ import annotations

from collections.abc import Sequence

#: a row is verified under-trained when its max probability stays below this
MAX_PROB_CUT = 0.01
#: greedy steps generated per prompt
GEN_STEPS = 3
#: rows per forward batch: SmolLM2-135M's 70 verification rows on 2 threads took 2.77 s in
#: batches of 32 and 1.71 s in one of 128 (bf16, AVX-512); 5.34 and 4.46 s in float32 with AVX2
BATCH = 128


def max_probs(lm, prompts, rows: list[int], device: str, *, cut: float | None = MAX_PROB_CUT,
              description: str = "verifying", batch: int | None = None,
              share_prefix: bool = True) -> dict[int, float]:
    """``max_prob`` per row: over prompts and :data:`GEN_STEPS` greedy steps, the probability of the
    row's token, batched (all prompts for one row share a length, so a batch needs no padding).

    With ``cut`` (the default), a row leaves as soon as its probability reaches ``cut``: the
    remaining steps and prompts could only raise a maximum that already says "trained", so the
    verdict ``max_prob < cut`` is the same as with every prompt, and the stored value is a lower
    bound for those rows (exact for the rows that stay below the cut). A trained row mostly costs
    one prompt and one step instead of ``len(prompts) × GEN_STEPS``; ``cut=None`` runs everything.
    Batches of ``batch`` rows (default :data:`BATCH`) run row-major (every prompt of a batch before
    the next batch). The work is bounded by the rows given (:func:`row_tokens` each at most), never
    by a clock: the same rows give the same values on a quiet and on a busy machine.

    ``share_prefix``: a prompt's tokens before its first placeholder are the same for every row
    (causal attention: their keys and values never see the token), so they are run once per
    prompt and their key/value cache is repeated over each batch; only the rest of the prompt
    runs per row (SmolLM2: 12 of 28, 17 of 59 and 13 of 54 tokens are shared). ``False`` runs
    every prompt whole (the reference the tests compare with: same verdicts, values equal to
    float rounding).
    """
    from embscope.progress import bar

    batch = batch or BATCH
    shared = [_prefix_cache(lm, ids, pos, device) if share_prefix else None for _, ids, pos in prompts]
    best: dict[int, float] = {}
    # progress in row × prompt passes (a batch of 17 rows and 3 prompts ticks 3 times, not once)
    with bar(len(rows) * len(prompts), f"{description}: {len(rows):,} rows × {len(prompts)} prompts",
             unit="row-prompts") as advance:
        for s in range(0, len(rows), batch):
            for r in rows[s:s + batch]:
                best[r] = 0.0
            for (name, ids, pos), prefix in zip(prompts, shared):
                chunk = [r for r in rows[s:s + batch] if cut is None or best[r] < cut]
                if chunk:
                    _one_prompt(lm, ids, pos, chunk, best, device, cut, prefix)
                advance(len(rows[s:s + batch]))
    return best


def row_tokens(prompts) -> int:
    """Tokens one row forwards at most in :func:`max_probs` (every prompt after its shared prefix,
    and :data:`GEN_STEPS` − 1 generated tokens each): the unit a verification's work budget counts.

    >>> import numpy as np
    >>> row_tokens([("p", list(range(28)), np.array([12, 13]))])  # 16 after the prefix, 2 steps
    18
    """
    return sum(len(ids) - int(pos[0]) + GEN_STEPS - 1 for _, ids, pos in prompts)


def _prefix_cache(lm, ids, pos, device):
    """``(n, cache)``: the key/value cache of the ``n`` prompt tokens before the first placeholder
    (batch of one), or None when the placeholder comes first."""
    import torch

    n = int(pos[0])
    if n < 1:
        return None
    with torch.no_grad():
        out = lm(input_ids=torch.tensor([ids[:n]], device=device), use_cache=True, logits_to_keep=1)
    return n, out.past_key_values


def _one_prompt(lm, ids, pos, chunk, best, device, cut, prefix=None) -> None:
    """One prompt for one batch of rows: substitute, forward (after the shared ``prefix`` cache
    when given), :data:`GEN_STEPS` greedy steps."""
    import copy

    import torch

    x = torch.tensor(ids, device=device).repeat(len(chunk), 1)
    tok = torch.tensor(chunk, device=device)
    x[:, torch.as_tensor(pos, device=device)] = tok[:, None]
    live = list(chunk)
    with torch.no_grad():
        if prefix is None:
            out = lm(input_ids=x, use_cache=True, logits_to_keep=1)
        else:
            n, cache = prefix
            cache = copy.deepcopy(cache)  # it grows during the pass; the next batch needs it as it is
            cache.batch_repeat_interleave(len(chunk))
            out = lm(input_ids=x[:, n:], past_key_values=cache, use_cache=True, logits_to_keep=1)
        for step in range(GEN_STEPS):
            probs = torch.softmax(out.logits[:, -1].float(), dim=-1)
            p = probs.gather(1, tok[:, None])[:, 0].cpu().tolist()
            for r, v in zip(live, p):
                best[r] = max(best[r], float(v))
            if step + 1 == GEN_STEPS:
                break
            if cut is not None:
                keep = [j for j, v in enumerate(p) if v < cut]
                if not keep:
                    break
                if len(keep) < len(live):  # drop the rows already decided from the KV cache
                    idx = torch.tensor(keep, device=device)
                    out.past_key_values.batch_select_indices(idx)
                    probs, tok = probs[idx], tok[idx]
                    live = [live[j] for j in keep]
            nxt = probs.argmax(dim=-1, keepdim=True)
            out = lm(input_ids=nxt, past_key_values=out.past_key_values, use_cache=True, logits_to_keep=1)


#: the re-check band: a bf16 max_prob in [cut / RECHECK_FACTOR, cut · RECHECK_FACTOR) is run again
#: in float32. Measured bf16-body / float32-head against float32 over every prompt and step
#: (bench/README.md, "Verification in bf16"): |ln p_bf16 − ln p_fp32| at most 0.057 on SmolLM2-135M
#: and 0.13 on Gemma-3-270M (64 and 48 random rows), against ln 2 = 0.69 here
RECHECK_FACTOR = 2.0


def prompt_probs(lm, low, prompts, rows: list[int], device: str, *, cut: float = MAX_PROB_CUT,
                 description: str = "verifying") -> tuple[dict[int, float], int]:
    """``(max_prob per row, rows re-checked)``: :func:`max_probs` on ``low`` (the bf16-body copy,
    :func:`embscope.models.forward.low_precision_copy`), then, on the float32 model ``lm``, every
    row whose bf16 value is within a factor :data:`RECHECK_FACTOR` of ``cut``; ``low=None`` runs
    ``lm`` alone.

    The verdict ``max_prob < cut`` is therefore float32's for every row whose bf16 value is off by
    less than that factor: a row at or above ``cut · F`` in bf16 is above ``cut`` in float32, one
    below ``cut / F`` is below it, and the rows between are float32's own values. In bf16 a row
    leaves early only at ``cut · F`` (the same argument as :func:`max_probs`' early exit).
    """
    if low is None:
        return max_probs(lm, prompts, rows, device, cut=cut, description=description), 0
    probs = max_probs(low, prompts, rows, device, cut=cut * RECHECK_FACTOR, description=description)
    band = [r for r, p in probs.items() if cut / RECHECK_FACTOR <= p < cut * RECHECK_FACTOR]
    if band:
        probs.update(max_probs(lm, prompts, band, device, cut=cut, description=f"{description} (float32 re-check)"))
    return probs, len(band)


#: tokens of one text given to :func:`in_context_probs` (a rendered template is ~40; a corpus text is cut)
CONTEXT_TOKENS = 512


def in_context_probs(lm, texts_ids: Sequence[list[int]], wanted: set[int], device: str) -> dict[int, float]:
    """``max_prob`` of each wanted id where it occurs in real text: ``p(x_t | x_<t)`` with teacher
    forcing, maximised over its occurrences past the first position.

    A special token such as ``<|im_end|>`` cannot be checked by repetition (no text repeats a
    turn end sixteen times, and a model that learned the template predicts it only where a turn
    ends). Its own prompt is the place it is used: the chat template rendered on a short
    conversation, or a corpus text that contains it. A trained template token gets most of the
    probability at its place (SmolLM2-Instruct: ``<|im_end|>`` after the answer); an under-trained
    one stays below the same :data:`MAX_PROB_CUT`. Ids seen only at position 0 (a leading BOS)
    get no value.
    """
    import torch

    best: dict[int, float] = {}
    for ids in texts_ids:
        ids = list(ids)[:CONTEXT_TOKENS]
        hits = [t for t in range(1, len(ids)) if ids[t] in wanted]
        if not hits:
            continue
        x = torch.tensor([ids], device=device)
        with torch.no_grad():
            logits = lm(input_ids=x).logits[0].float()
        logp = torch.log_softmax(logits, dim=-1)
        for t in hits:
            v = float(logp[t - 1, ids[t]].exp())
            best[ids[t]] = max(best.get(ids[t], 0.0), v)
    return best
