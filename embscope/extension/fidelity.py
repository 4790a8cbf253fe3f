"""Does a new token mean what its pieces meant? Fidelity and bits per byte of each strategy.

**Fidelity.** A held-out context :class:`~embscope.extension.contexts.TermContext` is read twice
by the model, the same prefix both times: once with the term as its old pieces (the original
model), once with the new token in their place (the new row as its input embedding). At the
term and at each of the :data:`~embscope.extension.contexts.AFTER` tokens after it, the two
next-token distributions are compared over the old vocabulary (the new tokens' own output rows
left out, so this measures what the input row carries, not how much mass the new rows take)::

    p = softmax(l_old)  after [.., " unspec", "ified"]     q = softmax(l_new)  after [.., " unspecified"]
    KL(p ‖ q) = Σ_i p_i (ln p_i − ln q_i)                  top-1 agreement = [argmax p = argmax q]

KL = 0 and agreement 1 mean the new token is, to the model, the same as its pieces. Reported at
the term (mean, 90th percentile, top-1) and over the positions after it (mean, top-1). Hewitt
(2021) asks that old text be predicted as before (the disturbance checks in
:mod:`.diagnostics`); this asks that *new* text be.

**Bits per byte** (held-out domain text, zero-shot): with the tokenizer's tokens t_1..t_n of a
text of B UTF-8 bytes, ``bpb = Σ −log₂ p(t_i | t_<i) / B``. Bytes do not depend on the tokenizer,
so the original model + tokenizer and the extended model + tokenizer compare directly; fewer
tokens per byte is the saving, a higher bpb the price (NVIDIA's tokenizer-extension recipe
measures BPB for the same reason:
https://docs.nvidia.com/nemotron/nightly/tokenizer-extension/index.html).

Both run the transformers model as it is, with the new rows spliced in as input embeddings
(``inputs_embeds``, times the embedding's own ``embed_scale`` where it has one, Gemma) and as
extra output columns; the prefix of every context is computed once and its key/value cache
repeated for the strategies, which run together (:func:`new_token_hiddens`). Sequences run in
chunks of similar length (:func:`_length_chunks`), so little padding is computed. Bits per byte
runs each held-out text through the original model once; only the texts that hold a new term run
again, all strategies together, and the old head's share of every softmax is computed once per
hidden state (:func:`_nll_with_new`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from embscope.extension.contexts import TermContext

#: contexts (sequences) per forward pass, at most
CHUNK = 32
#: sequences per suffix pass of :func:`new_token_hiddens` (strategies × contexts): its cache holds
#: this many copies of a prefix's keys and values (SmolLM2, 48-token prefixes: ≈ 280 MB)
SUFFIX_ROWS = 128
#: positions per logits block: 128 × 262 144 float32 (Gemma-3) = 128 MiB
LOGIT_ROWS = 128


@dataclass
class Parts:
    """The pieces of a causal LM the measurements splice into."""

    #: the decoder (embeddings → final norm); returns ``last_hidden_state``
    base: object
    #: input embedding module (applies ``embed_scale`` itself where it has one)
    embed: object
    #: multiplier the embedding module applies to its rows (Gemma: √d), 1.0 elsewhere
    scale: float
    #: (V, d) output head and its bias (None for most models)
    head: "torch.Tensor"
    bias: "torch.Tensor | None"
    #: ``final_logit_softcapping`` (Gemma 2), else None
    softcap: float | None


def parts(lm) -> Parts:
    """:class:`Parts` of a transformers ``*ForCausalLM``."""
    embed = lm.get_input_embeddings()
    head = lm.get_output_embeddings()
    scale = getattr(embed, "embed_scale", 1.0)
    scale = float(scale) if not hasattr(scale, "item") else float(scale.item())
    bias = getattr(head, "bias", None)
    cap = getattr(lm.config, "final_logit_softcapping", None) or None
    return Parts(base=getattr(lm, lm.base_model_prefix), embed=embed, scale=scale,
                 head=head.weight.detach(), bias=None if bias is None else bias.detach().float(),
                 softcap=None if cap is None else float(cap))


def _cap(p: Parts, logits: "torch.Tensor") -> "torch.Tensor":
    import torch

    return logits if p.softcap is None else torch.tanh(logits / p.softcap) * p.softcap


def old_logits(p: Parts, h: "torch.Tensor") -> "torch.Tensor":
    """(M, V) logits of the head of ``p`` on hidden states (M, d)."""
    out = h @ p.head.float().T
    if p.bias is not None:
        out = out + p.bias
    return _cap(p, out)


def old_vocabulary(p: Parts, new_ids: Sequence[int]) -> Parts:
    """``p`` with its head cut to the old vocabulary: the rows of new ids (padding rows a padded
    matrix reuses for them) left out. Copies the head only when there are such rows."""
    import dataclasses

    import torch

    drop = [i for i in new_ids if i < p.head.shape[0]]
    if not drop:
        return p
    keep = torch.ones(p.head.shape[0], dtype=torch.bool)
    keep[torch.tensor(drop, dtype=torch.long)] = False
    return dataclasses.replace(p, head=p.head[keep], bias=None if p.bias is None else p.bias[keep])


def log_probs(p: Parts, h: "torch.Tensor") -> "torch.Tensor":
    """(M, V) float32 log-softmax of :func:`old_logits`, in blocks of :data:`LOGIT_ROWS`."""
    import torch

    return torch.cat([torch.log_softmax(old_logits(p, h[a:a + LOGIT_ROWS]).double(), 1).float()
                      for a in range(0, h.shape[0], LOGIT_ROWS)])


def _left_padded(prefixes: Sequence[Sequence[int]]):
    """(ids, mask, positions) of prefixes padded on the left to one length, (n, P) each."""
    import torch

    n, width = len(prefixes), max(len(x) for x in prefixes)
    ids = torch.zeros(n, width, dtype=torch.long)
    mask = torch.zeros(n, width, dtype=torch.long)
    for r, x in enumerate(prefixes):
        ids[r, width - len(x):] = torch.tensor(list(x))
        mask[r, width - len(x):] = 1
    pos = (mask.cumsum(1) - 1).clamp_min(0)
    return ids, mask, pos


def _prefix_pass(p: Parts, prefixes):
    """The key/value cache of the left-padded prefixes, with their mask and lengths."""
    import torch

    ids, mask, _ = _left_padded(prefixes)
    pos = (mask.cumsum(1) - 1).clamp_min(0)
    with torch.no_grad():
        out = p.base(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
    return out.past_key_values, mask, mask.sum(1)


def _suffix_pass(p: Parts, cache, mask, lengths, embeds: "torch.Tensor", smask: "torch.Tensor", repeat: int = 1):
    """(n·repeat, S, d) final hidden states of suffix embeddings (n·repeat, S, d) read after the n
    cached prefixes (a copy of the cache: it grows during the pass). With ``repeat`` > 1 each
    prefix serves ``repeat`` consecutive suffix rows (row ``i·repeat + j`` reads prefix ``i``)."""
    import torch

    cache = copy.deepcopy(cache)
    if repeat > 1:
        cache.batch_repeat_interleave(repeat)
        mask, lengths = mask.repeat_interleave(repeat, 0), lengths.repeat_interleave(repeat, 0)
    pos = lengths[:, None] + torch.arange(embeds.shape[1])[None, :]
    out = p.base(inputs_embeds=embeds, attention_mask=torch.cat([mask, smask], 1), position_ids=pos,
                 past_key_values=cache, use_cache=True)
    return out.last_hidden_state


def _embed_ids(p: Parts, ids: "torch.Tensor") -> "torch.Tensor":
    import torch

    with torch.no_grad():
        return p.embed(ids).float()


def _right_padded(seqs: Sequence[Sequence[int]]):
    import torch

    width = max(1, max(len(s) for s in seqs))
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros(len(seqs), width, dtype=torch.long)
    for r, s in enumerate(seqs):
        if s:
            ids[r, :len(s)] = torch.tensor(list(s))
            mask[r, :len(s)] = 1
    return ids, mask


def new_token_suffix(p: Parts, ctxs: Sequence["TermContext"], rows: "torch.Tensor"):
    """(embeds (n, 1 + A, d), mask (n, 1 + A)): the new row (scaled as the embedding scales its
    rows), then the old ids after the term."""
    ids, mask = _right_padded([[0] + c.after for c in ctxs])
    emb = _embed_ids(p, ids)
    term = rows[[c.term for c in ctxs]].float() * p.scale  # (n, d)
    emb = emb.clone()
    emb[:, 0] = term
    return emb, mask


def reference(p: Parts, ctxs: Sequence["TermContext"]):
    """``(cache, mask, lengths, logp)``: the prefixes' cache and the original model's log-probs
    (over the head of ``p``) at the term's last piece and each token after it, (M, V) for the M
    positions in :func:`positions` order."""
    import torch

    cache, mask, lengths = _prefix_pass(p, [c.prefix for c in ctxs])
    ids, smask = _right_padded([c.pieces + c.after for c in ctxs])
    with torch.no_grad():
        h = _suffix_pass(p, cache, mask, lengths, _embed_ids(p, ids), smask)
        sel = torch.cat([h[r, len(c.pieces) - 1: len(c.pieces) + len(c.after)] for r, c in enumerate(ctxs)])
        logp = log_probs(p, sel)
    return cache, mask, lengths, logp


def positions(ctxs: Sequence["TermContext"]) -> list[tuple[int, int]]:
    """(context, offset) of each compared position: offset 0 after the term, 1..A after its
    following tokens."""
    return [(r, k) for r, c in enumerate(ctxs) for k in range(len(c.after) + 1)]


def new_token_hidden(p: Parts, cache, mask, lengths, ctxs, rows: "torch.Tensor") -> "torch.Tensor":
    """(M, d) final hidden states at the compared positions with the new token in place."""
    return new_token_hiddens(p, cache, mask, lengths, ctxs, [rows])[0]


def new_token_hiddens(p: Parts, cache, mask, lengths, ctxs, rows: Sequence["torch.Tensor"]) -> list["torch.Tensor"]:
    """:func:`new_token_hidden` for several strategies' rows, in forward passes of up to
    :data:`SUFFIX_ROWS` sequences: each prefix's cache is repeated once per strategy, so the small
    suffix passes (1 + A tokens a context) run as one larger batch instead of one per strategy."""
    import torch

    per = max(1, SUFFIX_ROWS // max(1, len(ctxs)))  # strategies per pass
    out: list["torch.Tensor"] = []
    for g in range(0, len(rows), per):
        group = rows[g:g + per]
        suffixes = [new_token_suffix(p, ctxs, r) for r in group]
        emb = torch.stack([e for e, _ in suffixes], 1).flatten(0, 1)        # row i·len(group) + j
        smask = torch.stack([m for _, m in suffixes], 1).flatten(0, 1)
        h = _suffix_pass(p, cache, mask, lengths, emb, smask, repeat=len(group))
        h = h.unflatten(0, (len(ctxs), len(group)))                           # (n, strategies, S, d)
        out.extend(torch.cat([h[r, j, :len(c.after) + 1] for r, c in enumerate(ctxs)]) for j in range(len(group)))
    return out


def kl_top1(logp: "torch.Tensor", logq: "torch.Tensor"):
    """Per position KL(p ‖ q) (nats) and top-1 agreement, from log-probs (M, V) each.

    >>> import torch
    >>> lp = torch.log(torch.tensor([[0.5, 0.5]])); lq = torch.log(torch.tensor([[0.25, 0.75]]))
    >>> [round(float(v), 4) for v in kl_top1(lp, lq)[0]], kl_top1(lp, lp)[1].tolist()
    ([0.1438], [True])
    """
    kl = (logp.exp() * (logp - logq)).sum(1)
    return kl.clamp_min(0.0), logp.argmax(1) == logq.argmax(1)


def fidelity(lm, ctxs: Sequence["TermContext"], rows: dict[str, "torch.Tensor"],
             new_ids: Sequence[int]) -> dict[str, dict[str, float]]:
    """Per strategy (``rows``: name → (n_terms, d) input rows): fidelity figures on ``ctxs``.

    Keys: ``fidelity_kl`` (mean KL at the term, nats), ``fidelity_kl_p90``, ``fidelity_top1``
    (share of contexts whose most likely next token agrees), ``fidelity_kl_after`` and
    ``fidelity_top1_after`` (the positions after the term), ``fidelity_contexts``.
    """
    import torch

    if not ctxs:
        return {}
    p = old_vocabulary(parts(lm), new_ids)
    kls = {n: [] for n in rows}
    agree = {n: [] for n in rows}
    offs: list[int] = []
    # chunks of similar prefix length: the left-padded prefix pass computes little padding
    for idx in _length_chunks([len(c.prefix) for c in ctxs]):
        chunk = [ctxs[i] for i in idx]
        cache, mask, lengths, logp = reference(p, chunk)
        offs.extend(k for _, k in positions(chunk))
        with torch.no_grad():
            hidden = new_token_hiddens(p, cache, mask, lengths, chunk, list(rows.values()))
            logqs = [log_probs(p, h) for h in hidden]
        for name, logq in zip(rows, logqs):
            kl, top = kl_top1(logp, logq)
            kls[name].append(kl)
            agree[name].append(top)
    at = torch.tensor(offs)
    out = {}
    for name in rows:
        kl, top = torch.cat(kls[name]).double(), torch.cat(agree[name]).double()
        first, later = at == 0, at > 0
        out[name] = {
            "fidelity_kl": round(float(kl[first].mean()), 4),
            "fidelity_kl_p90": round(float(kl[first].quantile(0.9)), 4),
            "fidelity_top1": round(float(top[first].mean()), 4),
            "fidelity_kl_after": round(float(kl[later].mean()), 4) if later.any() else None,
            "fidelity_top1_after": round(float(top[later].mean()), 4) if later.any() else None,
            "fidelity_contexts": int(first.sum()),
        }
    return out


def _length_chunks(lengths: Sequence[int], size: int = CHUNK, slack: float = 1.25) -> list[list[int]]:
    """Indices by increasing length, cut into chunks of at most ``size`` whose padding (computed,
    then thrown away) stays within ``slack − 1`` of their real tokens, plus 8 tokens.

    >>> _length_chunks([3, 1, 2, 9], size=3)
    [[1, 2, 0], [3]]
    """
    out: list[list[int]] = []
    cur: list[int] = []
    real = 0
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        n = max(lengths[i], 1)
        if cur and (len(cur) >= size or (len(cur) + 1) * n - (real + n) > (slack - 1) * (real + n) + 8):
            out.append(cur)
            cur, real = [], 0
        cur.append(i)
        real += n
    return out + ([cur] if cur else [])


def _hidden_of(p: Parts, embeds: Sequence["torch.Tensor"]) -> list["torch.Tensor"]:
    """Per input sequence of embeddings (L, d), the (L − 1, d) final hidden states that predict
    its tokens 2..L; right-padded in chunks of similar length (:func:`_length_chunks`)."""
    import torch

    out: list = [None] * len(embeds)
    d = p.head.shape[1]
    for idx in _length_chunks([e.shape[0] for e in embeds]):
        width = max(1, max(embeds[i].shape[0] for i in idx))
        x = torch.zeros(len(idx), width, d)
        mask = torch.zeros(len(idx), width, dtype=torch.long)
        for r, i in enumerate(idx):
            x[r, :embeds[i].shape[0]] = embeds[i]
            mask[r, :embeds[i].shape[0]] = 1
        with torch.no_grad():
            h = p.base(inputs_embeds=x, attention_mask=mask).last_hidden_state
        for r, i in enumerate(idx):
            out[i] = h[r, :max(embeds[i].shape[0] - 1, 0)]
    return out


def _lse_and_target(logits: "torch.Tensor", target: "torch.Tensor") -> tuple["torch.Tensor", "torch.Tensor"]:
    """(M,) float64 ``logsumexp`` of (M, C) logits and the logit at ``target`` (−inf where the
    target is −1: not among these columns)."""
    import torch

    lg = logits.double()
    hit = target >= 0
    tgt = torch.full((lg.shape[0],), float("-inf"), dtype=torch.float64)
    tgt[hit] = lg[hit].gather(1, target[hit, None])[:, 0]
    return torch.logsumexp(lg, 1), tgt


def _old_parts(p: Parts, h: "torch.Tensor", targets: "torch.Tensor", drop: "torch.Tensor"):
    """``(lse, target logit)``, (M,) float64 each: the logsumexp of the old head's logits at each
    hidden state (the rows ``drop`` left out: a padded matrix's rows that new ids reuse) and the
    logit of the target where it is one of those columns (−inf where it is not), in blocks of
    :data:`LOGIT_ROWS`."""
    import torch

    n = p.head.shape[0]
    keep = torch.ones(n, dtype=torch.bool)
    keep[drop[drop < n]] = False
    col = torch.full((n,), -1, dtype=torch.long)
    col[keep] = torch.arange(int(keep.sum()))
    head = p.head[keep].float() if not bool(keep.all()) else p.head.float()
    bias = None if p.bias is None else p.bias[keep]
    lses, tgts = [torch.zeros(0, dtype=torch.float64)], [torch.zeros(0, dtype=torch.float64)]
    for a in range(0, h.shape[0], LOGIT_ROWS):
        lg = h[a:a + LOGIT_ROWS] @ head.T
        if bias is not None:
            lg = lg + bias
        t = targets[a:a + LOGIT_ROWS]
        lse, tgt = _lse_and_target(_cap(p, lg), torch.where(t < n, col[t.clamp_max(n - 1)], -1))
        lses.append(lse)
        tgts.append(tgt)
    return torch.cat(lses), torch.cat(tgts)


def _nll_with_new(p: Parts, h, targets, new_ids, old_parts, out_rows=None, new_bias=None) -> float:
    """Σ −ln p(t | h) over positions, the softmax over the old columns (``old_parts``: their
    :func:`_old_parts`) and, with ``out_rows``, the new tokens' output rows too:

        ln p(t) = l_t − ln(Σ_old e^{l_i} + Σ_new e^{l_j}) = l_t − logaddexp(lse_old, lse_new),

    the value a log-softmax over the concatenated logits gives; the (V, d) head is thus applied
    once per hidden state however many strategies add their columns to it."""
    import torch

    lse_old, tgt_old = old_parts
    if h.shape[0] == 0:
        return 0.0
    if out_rows is None:
        return float(-(tgt_old - lse_old).sum())
    lg = h @ out_rows.T
    if new_bias is not None:
        lg = lg + new_bias
    rank = torch.full((max(int(new_ids.max()), int(targets.max())) + 1,), -1, dtype=torch.long)
    rank[new_ids] = torch.arange(len(new_ids))
    lse_new, tgt_new = _lse_and_target(_cap(p, lg), rank[targets])
    return float(-(torch.maximum(tgt_old, tgt_new) - torch.logaddexp(lse_old, lse_new)).sum())


def bits_per_byte(lm, texts: Sequence[str], old_tok, ext_tok, start: Sequence[int], new_ids: Sequence[int],
                  rows: dict[str, dict[str, "torch.Tensor"]]) -> tuple[dict, dict[str, dict]]:
    """``(original, {strategy: figures})``: bits per byte and tokens per byte of ``texts``.

    ``rows``: strategy → ``{"embed": (n, d), "output": (n, d)?}`` (tied models: the embed rows
    are the output rows too; a bias gets the mean bias, as :mod:`.diagnostics` does). Keys:
    ``bits_per_byte``, ``tokens_per_byte`` and, per strategy, ``bits_per_byte_change`` and
    ``tokens_per_byte_change`` against the original.

    Computed once and shared by every strategy: the original model's hidden states of every
    text, and the old head's part of each softmax (``logaddexp`` splits it, :func:`_nll_with_new`). A
    text without a new term reads the same with both tokenizers, so its hidden states are the
    original's and only the new columns are added per strategy; the texts that hold a new term
    run through the model once per strategy, all strategies together in length-sorted chunks.
    """
    import torch

    if not texts:
        return {}, {}
    p = parts(lm)
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    start = list(start)
    old = [start + e.ids for e in old_tok.encode_batch(list(texts), add_special_tokens=False)]
    ext = [start + e.ids for e in ext_tok.encode_batch(list(texts), add_special_tokens=False)]
    first = max(len(start), 1) - 1  # the first predicted token is the one after the start
    ids_t = torch.tensor(list(new_ids), dtype=torch.long)

    def targets_of(seqs):
        return torch.cat([torch.tensor(list(x[first + 1:]), dtype=torch.long) for x in seqs] or [torch.zeros(0, dtype=torch.long)])

    def stack(hs):
        hs = [h[first:] for h in hs]
        return torch.cat(hs) if hs else torch.zeros(0, p.head.shape[1])

    hidden = _hidden_of(p, [_embed_ids(p, torch.tensor([x]))[0] for x in old])
    changed = [i for i, (a, b) in enumerate(zip(old, ext)) if a != b]
    same = sorted(set(range(len(old))) - set(changed))
    h_old, t_old = stack(hidden), targets_of(old)
    parts_old = _old_parts(p, h_old, t_old, ids_t[:0])
    nats = _nll_with_new(p, h_old, t_old, ids_t, parts_old)
    n_old = int(t_old.shape[0])
    base = {"bits_per_byte": round(nats / math.log(2) / n_bytes, 5),
            "tokens_per_byte": round(n_old / n_bytes, 5), "bytes": n_bytes, "texts": len(texts)}
    # the unchanged texts' old parts, kept for every strategy
    h_same, t_same = stack([hidden[i] for i in same]), targets_of([old[i] for i in same])
    if bool((ids_t < p.head.shape[0]).any()):  # new ids reuse head rows: the old columns differ
        parts_same = _old_parts(p, h_same, t_same, ids_t)
    else:
        ends = torch.tensor([len(x) - 1 - first for x in old]).cumsum(0).tolist()
        at = torch.cat([torch.arange(ends[i] - (len(old[i]) - 1 - first), ends[i]) for i in same]
                       or [torch.zeros(0, dtype=torch.long)])
        parts_same = (parts_old[0][at], parts_old[1][at])
    # the changed texts, every strategy's input rows spliced in, through the model in one go
    names = list(rows)
    order = ids_t.sort()
    embeds = []
    for name in names:
        emb_rows = rows[name]["embed"].float() * p.scale
        for i in changed:
            x = torch.tensor([ext[i]])
            is_new = torch.isin(x, ids_t)
            e = _embed_ids(p, torch.where(is_new, torch.zeros_like(x), x).clamp_max(p.head.shape[0] - 1))[0].clone()
            if is_new.any():
                e[is_new[0]] = emb_rows[order.indices[torch.searchsorted(order.values, x[is_new])]]
            embeds.append(e)
    h_changed = _hidden_of(p, embeds)
    t_ext = targets_of([ext[i] for i in changed])
    n_ext = int(t_same.shape[0] + t_ext.shape[0])
    new_bias = None if p.bias is None else p.bias.mean()
    out = {}
    for k, name in enumerate(names):
        out_rows = rows[name].get("output", rows[name]["embed"]).float()
        h_ch = stack(h_changed[k * len(changed):(k + 1) * len(changed)])
        nats_e = (_nll_with_new(p, h_same, t_same, ids_t, parts_same, out_rows, new_bias)
                  + _nll_with_new(p, h_ch, t_ext, ids_t, _old_parts(p, h_ch, t_ext, ids_t), out_rows, new_bias))
        bpb = nats_e / math.log(2) / n_bytes
        out[name] = {"bits_per_byte": round(bpb, 5), "tokens_per_byte": round(n_ext / n_bytes, 5),
                     "bits_per_byte_change": round(bpb - base["bits_per_byte"], 5),
                     "tokens_per_byte_change": round(n_ext / n_bytes - base["tokens_per_byte"], 5)}
    return base, out
