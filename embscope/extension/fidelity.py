"""Does a new token mean what its pieces meant? Fidelity of each strategy's input rows.

A held-out context :class:`~embscope.extension.contexts.TermContext` is read twice by the model,
the same prefix both times: once with the term as its old pieces (the original model), once with
the new token in their place (the new row as its input embedding). At the term and at each of
the :data:`~embscope.extension.contexts.AFTER` tokens after it, the two next-token distributions
are compared over the old vocabulary (the new tokens' own output rows left out, so this measures
what the input row carries, not how much mass the new rows take)::

    p = softmax(l_old)  after [.., " unspec", "ified"]     q = softmax(l_new)  after [.., " unspecified"]
    KL(p ‖ q) = Σ_i p_i (ln p_i − ln q_i)                  top-1 agreement = [argmax p = argmax q]

KL = 0 and agreement 1 mean the new token is, to the model, the same as its pieces. Reported at
the term (mean, 90th percentile, top-1) and over the positions after it (mean, top-1). Hewitt
(2021) asks that old text be predicted as before (the disturbance of :mod:`.bpb`); this asks
that *new* text be.

The transformers model runs as it is, with the new rows spliced in as input embeddings
(``inputs_embeds``, times the embedding's own ``embed_scale`` where it has one, Gemma); the
prefix of every context is computed once and its key/value cache repeated for the strategies,
which run together (:func:`new_token_hiddens`). Sequences run in chunks of similar length
(:func:`_length_chunks`), so little padding is computed. Bits per byte, which shares
:class:`Parts` and :func:`_hidden_of`, is :mod:`.bpb`.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from embscope.extension.contexts import TermContext

#: precision of the measuring forward passes (fidelity, bits per byte, distil): ``auto`` (bfloat16
#: autocast where the GEMM-rate probe runs bf16 products :data:`embscope.machine.BF16_GAIN` times
#: faster than float32, :func:`embscope.machine.fast_dtype`: CPUs with AMX or AVX512-BF16; else
#: float32), ``float32`` or ``bfloat16``. Logits and softmaxes are always float32. On SmolLM2-135M
#: + corpora/medical, bfloat16 keeps bits per byte within 0.01 of float32 (changes between
#: strategies within 0.005) and fidelity KLs within 3 % (tests/test_fidelity.py), and ran the
#: forward passes 2.3–2.8× faster on one AMX core
PRECISION = "auto"
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


#: the width the precision is probed at (:func:`embscope.machine.gemm_rates`; the bf16/float32
#: ratio is 4–5× or 0.2–0.3× at every width from 256 to 3584, so one width decides for every model)
PROBE_WIDTH = 1024


def compute_precision() -> str:
    """``float32`` or ``bfloat16``: what :data:`PRECISION` means here (``auto``: the probe's
    :func:`embscope.machine.fast_dtype`, decided once per process)."""
    if PRECISION != "auto":
        return PRECISION
    from embscope.machine import fast_dtype

    return fast_dtype(PROBE_WIDTH)


def forward_precision():
    """The context of every measuring forward pass: bfloat16 autocast or nothing
    (:func:`compute_precision`). Entered once around a whole measurement as well (autocast keeps
    its bfloat16 copies of the weights until the outermost context exits: 1.3× faster on small
    passes than casting them again for every pass), with :func:`exact` around the products that
    must stay float32."""
    import contextlib

    import torch

    if compute_precision() != "bfloat16":
        return contextlib.nullcontext()
    return torch.autocast("cpu", dtype=torch.bfloat16)


def exact():
    """No autocast inside: logits, softmaxes and their sums stay float32."""
    import torch

    return torch.autocast("cpu", enabled=False)


def _cap(p: Parts, logits: "torch.Tensor") -> "torch.Tensor":
    import torch

    return logits if p.softcap is None else torch.tanh(logits / p.softcap) * p.softcap


def old_logits(p: Parts, h: "torch.Tensor") -> "torch.Tensor":
    """(M, V) float32 logits of the head of ``p`` on hidden states (M, d)."""
    with exact():
        out = h.float() @ p.head.float().T
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

    with exact():
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
    with torch.no_grad(), forward_precision():
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
    with forward_precision():
        out = p.base(inputs_embeds=embeds, attention_mask=torch.cat([mask, smask], 1), position_ids=pos,
                     past_key_values=cache, use_cache=True)
    return out.last_hidden_state.float()


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
    ``fidelity_top1_after`` (the positions after the term), ``fidelity_contexts`` and
    ``fidelity_after_positions`` (positions after the term per context, mean).
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
            "fidelity_after_positions": round(float(later.sum()) / max(int(first.sum()), 1), 3),
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

    from embscope.progress import bar

    out: list = [None] * len(embeds)
    d = p.head.shape[1]
    with bar(len(embeds), "running the model", unit="sequences") as advance:
        for idx in _length_chunks([e.shape[0] for e in embeds]):
            width = max(1, max(embeds[i].shape[0] for i in idx))
            x = torch.zeros(len(idx), width, d)
            mask = torch.zeros(len(idx), width, dtype=torch.long)
            for r, i in enumerate(idx):
                x[r, :embeds[i].shape[0]] = embeds[i]
                mask[r, :embeds[i].shape[0]] = 1
            with torch.no_grad(), forward_precision():
                h = p.base(inputs_embeds=x, attention_mask=mask).last_hidden_state.float()
            for r, i in enumerate(idx):
                out[i] = h[r, :max(embeds[i].shape[0] - 1, 0)]
            advance(len(idx))
    return out
