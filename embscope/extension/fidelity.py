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
reused for each strategy (:func:`_suffix_pass`).
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

#: contexts per forward pass
CHUNK = 32
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


def _suffix_pass(p: Parts, cache, mask, lengths, embeds: "torch.Tensor", smask: "torch.Tensor"):
    """(n, S, d) final hidden states of suffix embeddings (n, S, d) read after the cached prefixes
    (a copy of the cache: it grows during the pass)."""
    import torch

    pos = lengths[:, None] + torch.arange(embeds.shape[1])[None, :]
    out = p.base(inputs_embeds=embeds, attention_mask=torch.cat([mask, smask], 1), position_ids=pos,
                 past_key_values=copy.deepcopy(cache), use_cache=True)
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
    import torch

    emb, smask = new_token_suffix(p, ctxs, rows)
    h = _suffix_pass(p, cache, mask, lengths, emb, smask)
    return torch.cat([h[r, :len(c.after) + 1] for r, c in enumerate(ctxs)])


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
    order = sorted(range(len(ctxs)), key=lambda i: len(ctxs[i].prefix))
    kls = {n: [] for n in rows}
    agree = {n: [] for n in rows}
    offs: list[int] = []
    for s in range(0, len(order), CHUNK):
        chunk = [ctxs[i] for i in order[s:s + CHUNK]]
        cache, mask, lengths, logp = reference(p, chunk)
        offs.extend(k for _, k in positions(chunk))
        for name, r in rows.items():
            with torch.no_grad():
                logq = log_probs(p, new_token_hidden(p, cache, mask, lengths, chunk, r))
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


def _hidden(p: Parts, seqs: Sequence[Sequence[int]], embeds_of) -> list["torch.Tensor"]:
    """Per sequence, the (len − 1, d) final hidden states that predict its tokens 2..len;
    ``embeds_of(ids)`` gives the input embeddings of right-padded ids."""
    import torch

    out: list = [None] * len(seqs)
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    for s in range(0, len(order), CHUNK):
        idx = order[s:s + CHUNK]
        ids, mask = _right_padded([seqs[i] for i in idx])
        with torch.no_grad():
            h = p.base(inputs_embeds=embeds_of(ids), attention_mask=mask).last_hidden_state
        for r, i in enumerate(idx):
            out[i] = h[r, :max(len(seqs[i]) - 1, 0)]
    return out


def _nll(hidden, seqs: Sequence[Sequence[int]], n_start: int, logits_of) -> tuple[float, int]:
    """Σ −ln p(t_i | t_<i) over every token after the first ``n_start`` (at least 1) of each
    sequence, and how many tokens that is; ``logits_of(h)`` gives (M, V) logits."""
    import torch

    first = max(n_start, 1) - 1
    hs = [h[first:] for h in hidden]
    targets = [torch.tensor(list(x[first + 1:]), dtype=torch.long) for x in seqs]
    h = torch.cat(hs) if hs else None
    if h is None or h.shape[0] == 0:
        return 0.0, 0
    t = torch.cat(targets)
    total = 0.0
    for a in range(0, h.shape[0], LOGIT_ROWS):
        lp = torch.log_softmax(logits_of(h[a:a + LOGIT_ROWS]).double(), 1)
        total -= float(lp.gather(1, t[a:a + LOGIT_ROWS, None]).sum())
    return total, int(t.shape[0])


def bits_per_byte(lm, texts: Sequence[str], old_tok, ext_tok, start: Sequence[int], new_ids: Sequence[int],
                  rows: dict[str, dict[str, "torch.Tensor"]]) -> tuple[dict, dict[str, dict]]:
    """``(original, {strategy: figures})``: bits per byte and tokens per byte of ``texts``.

    ``rows``: strategy → ``{"embed": (n, d), "output": (n, d)?}`` (tied models: the embed rows
    are the output rows too; a bias gets the mean bias, as :mod:`.diagnostics` does). Keys:
    ``bits_per_byte``, ``tokens_per_byte`` and, per strategy, ``bits_per_byte_change`` and
    ``tokens_per_byte_change`` against the original.
    """
    import torch

    if not texts:
        return {}, {}
    p = parts(lm)
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    start = list(start)
    old = [start + e.ids for e in old_tok.encode_batch(list(texts), add_special_tokens=False)]
    ext = [start + e.ids for e in ext_tok.encode_batch(list(texts), add_special_tokens=False)]
    hidden = _hidden(p, old, lambda ids: _embed_ids(p, ids))
    nats, n_old = _nll(hidden, old, len(start), lambda h: old_logits(p, h))
    # a text without a new term reads the same with both tokenizers: its hidden states are the
    # original's, only the softmax gains the new columns
    changed = [i for i, (a, b) in enumerate(zip(old, ext)) if a != b]
    base = {"bits_per_byte": round(nats / math.log(2) / n_bytes, 5),
            "tokens_per_byte": round(n_old / n_bytes, 5), "bytes": n_bytes, "texts": len(texts)}
    ids_t = torch.tensor(list(new_ids), dtype=torch.long)
    width = max(p.head.shape[0], int(ids_t.max()) + 1)
    out = {}
    for name, r in rows.items():
        emb_rows = r["embed"].float() * p.scale
        out_rows = r.get("output", r["embed"]).float()
        new_bias = None if p.bias is None else p.bias.mean()

        def embeds_of(ids, emb_rows=emb_rows):
            is_new = torch.isin(ids, ids_t)
            e = _embed_ids(p, torch.where(is_new, torch.zeros_like(ids), ids).clamp_max(p.head.shape[0] - 1)).clone()
            if is_new.any():
                where = torch.searchsorted(ids_t.sort().values, ids[is_new])
                rank = ids_t.sort().indices[where]
                e[is_new] = emb_rows[rank]
            return e

        def logits_of(h, out_rows=out_rows, new_bias=new_bias):
            full = torch.empty(h.shape[0], width)
            full[:, :p.head.shape[0]] = h @ p.head.float().T + (0 if p.bias is None else p.bias)
            full[:, ids_t] = h @ out_rows.T + (0 if new_bias is None else new_bias)
            return _cap(p, full)

        h_ext = list(hidden)
        for i, h in zip(changed, _hidden(p, [ext[i] for i in changed], embeds_of)):
            h_ext[i] = h
        nats_e, n_ext = _nll(h_ext, ext, len(start), logits_of)
        bpb = nats_e / math.log(2) / n_bytes
        out[name] = {"bits_per_byte": round(bpb, 5), "tokens_per_byte": round(n_ext / n_bytes, 5),
                     "bits_per_byte_change": round(bpb - base["bits_per_byte"], 5),
                     "tokens_per_byte_change": round(n_ext / n_bytes - base["tokens_per_byte"], 5)}
    return base, out
