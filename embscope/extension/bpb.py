"""Bits per byte of a text sample, original against extended, per text, with standard errors; and
the disturbance of old text (next-token KL, new-token mass) on the same passes.

With the tokenizer's tokens t_1..t_n of a text of B UTF-8 bytes, its code length is
``bits = Σ −log₂ p(t_i | t_<i)`` and ``bpb = bits / B``. Bytes do not depend on the tokenizer,
so the original model + tokenizer and the extended model + tokenizer compare directly (NVIDIA's
tokenizer-extension recipe measures BPB for the same reason:
https://docs.nvidia.com/nemotron/nightly/tokenizer-extension/index.html).

**Standard errors.** A sample is n texts with code lengths y_t (bits) and sizes B_t (bytes);
``bpb = Σ y_t / Σ B_t`` is a ratio estimator, whose standard error over texts (the delta method;
Cochran, *Sampling Techniques*, 1977, §6.3) is::

    SE = sqrt( n / (n − 1) · Σ_t (y_t − bpb · B_t)² ) / Σ_t B_t

Worked example: y = [10, 30], B = [10, 10] → bpb 2.0, SE = sqrt(2 · (100 + 100)) / 20 = 1.0. A
change against the original is paired by text (y_t = bits of the strategy − bits of the
original, same text), so its SE is far smaller than either bpb's: the texts' own difficulty
cancels.

**Disturbance.** A text without a new term reads the same with both tokenizers, so its hidden
states h are the original's and only the softmax gains the new output rows r_j (the new input
rows for tied models). Per position, with Z the old partition function:

    KL(p_old ‖ p_new) = ln(Z_new / Z_old) = −ln(1 − m),   m = Σ_j p_new(j)  (new-token mass),

averaged over every position of the sample's unchanged texts (Hewitt 2021 asks for KL ≈ 0: old
text is predicted as before).

**Cost.** Each text runs through the original model once; only texts that hold a new token run
again, all strategies together in length-sorted chunks, with the new rows spliced in as input
embeddings (times the embedding's ``embed_scale``, Gemma) and as extra output columns. The old
head's share of every softmax is computed once per hidden state and shared by every strategy:
``ln p(t) = l_t − logaddexp(lse_old, lse_new)`` (:func:`_nll_with_new`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from embscope.records import Record
from embscope.models.likelihood import ratio_se
from embscope.extension.fidelity import LOGIT_ROWS, Parts, _cap, _embed_ids, _hidden_of, exact, parts

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import torch


@dataclass
class BitsPerByte(Record):
    """The original model and tokenizer on a text sample (:func:`summarize`'s first part)."""

    #: bits per UTF-8 byte (lower is better)
    bits_per_byte: float
    #: its standard error over texts
    bits_per_byte_se: float | None = None
    #: tokens per byte
    tokens_per_byte: float | None = None
    #: bytes of the sample
    bytes: int = 0
    #: texts in it
    texts: int = 0
    #: of those, texts the extended tokenizer reads differently
    texts_changed: int | None = None
    #: what the sample is
    source: str | None = None


@dataclass
class TextLosses:
    """Code lengths of one text sample, per text: the original and each strategy."""

    #: (n,) UTF-8 bytes per text
    bytes: "np.ndarray"
    #: (n,) bits per text with the original model and tokenizer
    original: "np.ndarray"
    #: (n,) tokens per text, original and extended tokenizer (the first token after the start counts)
    tokens_original: "np.ndarray"
    tokens_extended: "np.ndarray"
    #: (n,) bool: the extended tokenizer reads the text differently
    changed: "np.ndarray"
    #: (n,) new-token occurrences per text (extended tokenizer)
    new_tokens: "np.ndarray"
    #: strategy → (n,) bits per text with the extended model and tokenizer
    strategies: dict[str, "np.ndarray"] = field(default_factory=dict)
    #: strategy → per position of the unchanged texts: ``(kl (nats), new-token mass)``, (M,) each
    disturbance: dict[str, tuple["np.ndarray", "np.ndarray"]] = field(default_factory=dict)

    def subset(self, names: Sequence[str]) -> "TextLosses":
        return TextLosses(self.bytes, self.original, self.tokens_original, self.tokens_extended, self.changed,
                          self.new_tokens, {n: self.strategies[n] for n in names}, {n: self.disturbance[n] for n in names
                                                                   if n in self.disturbance})

    def join(self, other: "TextLosses") -> "TextLosses":
        """This sample followed by ``other``, for the strategies both measured."""
        import numpy as np

        names = [n for n in self.strategies if n in other.strategies]
        cat = np.concatenate
        return TextLosses(cat([self.bytes, other.bytes]), cat([self.original, other.original]),
                          cat([self.tokens_original, other.tokens_original]),
                          cat([self.tokens_extended, other.tokens_extended]), cat([self.changed, other.changed]),
                          cat([self.new_tokens, other.new_tokens]),
                          {n: cat([self.strategies[n], other.strategies[n]]) for n in names},
                          {n: tuple(cat([a, b]) for a, b in zip(self.disturbance[n], other.disturbance[n]))
                           for n in names if n in self.disturbance and n in other.disturbance})


def summarize(losses: TextLosses, *, disturbance: bool = False) -> tuple[dict, dict[str, dict]]:
    """``(original, {strategy: figures})`` of a sample: bits and tokens per byte with SEs, the
    changes against the original (paired SEs) and, with ``disturbance``, the disturbance of its
    unchanged texts (module docstring)."""
    b = losses.bytes.astype("float64")
    bpb0, se0 = ratio_se(losses.original, b)
    tpb0 = float(losses.tokens_original.sum()) / max(float(b.sum()), 1.0)
    base = {"bits_per_byte": round(bpb0, 5), "bits_per_byte_se": round(se0, 5), "tokens_per_byte": round(tpb0, 5),
            "bytes": int(b.sum()), "texts": int(len(b)), "texts_changed": int(losses.changed.sum())}
    tpb = float(losses.tokens_extended.sum()) / max(float(b.sum()), 1.0)
    out = {}
    for name, bits in losses.strategies.items():
        bpb, se = ratio_se(bits, b)
        diff, dse = ratio_se(bits - losses.original, b)
        d = {"bits_per_byte": round(bpb, 5), "bits_per_byte_se": round(se, 5),
             "bits_per_byte_change": round(diff, 7), "bits_per_byte_change_se": round(dse, 7),
             "tokens_per_byte": round(tpb, 5), "tokens_per_byte_change": round(tpb - tpb0, 5)}
        if disturbance and name in losses.disturbance and len(losses.disturbance[name][0]):
            kl, mass = losses.disturbance[name]
            d.update(kl=float(kl.mean()), kl_max=float(kl.max()), new_token_mass=float(mass.mean()),
                     new_token_mass_max=float(mass.max()), disturbance_positions=int(len(kl)))
        out[name] = d
    return base, out


def _lse_and_target(logits: "torch.Tensor", target: "torch.Tensor") -> tuple["torch.Tensor", "torch.Tensor"]:
    """(M,) float64 ``logsumexp`` of (M, C) logits and the logit at ``target`` (−inf where the
    target is −1: not among these columns). The logsumexp runs in float32 (it subtracts the
    maximum: ~1e-6 absolute on values ~10), then widens: differences of two of them
    (:func:`disturbance`) keep their relative precision."""
    import torch

    lg = logits.float()
    hit = target >= 0
    tgt = torch.full((lg.shape[0],), float("-inf"), dtype=torch.float64)
    tgt[hit] = lg[hit].gather(1, target[hit, None])[:, 0].double()
    return torch.logsumexp(lg, 1).double(), tgt


def _old_parts(p: Parts, h: "torch.Tensor", targets: "torch.Tensor", drop: "torch.Tensor"):
    """``(lse, target logit)``, (M,) float64 each: the logsumexp of the old head's logits at each
    hidden state (the rows ``drop`` left out: a padded matrix's rows that new ids reuse) and the
    logit of the target where it is one of those columns (−inf where it is not), in blocks of
    :data:`~embscope.extension.fidelity.LOGIT_ROWS`."""
    import torch

    n = p.head.shape[0]
    keep = torch.ones(n, dtype=torch.bool)
    keep[drop[drop < n]] = False
    col = torch.full((n,), -1, dtype=torch.long)
    col[keep] = torch.arange(int(keep.sum()))
    head = p.head[keep].float() if not bool(keep.all()) else p.head.float()
    bias = None if p.bias is None else p.bias[keep]
    lses, tgts = [torch.zeros(0, dtype=torch.float64)], [torch.zeros(0, dtype=torch.float64)]
    with exact():
        for a in range(0, h.shape[0], LOGIT_ROWS):
            lg = h[a:a + LOGIT_ROWS] @ head.T
            if bias is not None:
                lg = lg + bias
            t = targets[a:a + LOGIT_ROWS]
            lse, tgt = _lse_and_target(_cap(p, lg), torch.where(t < n, col[t.clamp_max(n - 1)], -1))
            lses.append(lse)
            tgts.append(tgt)
    return torch.cat(lses), torch.cat(tgts)


def _nll_with_new(p: Parts, h, targets, new_ids, old_parts, out_rows=None, new_bias=None):
    """``(nll, lse_new)``: per position −ln p(t | h) (M,), the softmax over the old columns
    (``old_parts``: their :func:`_old_parts`) and, with ``out_rows``, the new tokens' output rows
    too, and the new columns' logsumexp (−inf without them):

        ln p(t) = l_t − ln(Σ_old e^{l_i} + Σ_new e^{l_j}) = l_t − logaddexp(lse_old, lse_new),

    the value a log-softmax over the concatenated logits gives; the (V, d) head is thus applied
    once per hidden state however many strategies add their columns to it."""
    import torch

    lse_old, tgt_old = old_parts
    if out_rows is None or h.shape[0] == 0:
        return -(tgt_old - lse_old), torch.full_like(lse_old, float("-inf"))
    with exact():
        lg = h @ out_rows.T
        if new_bias is not None:
            lg = lg + new_bias
    rank = torch.full((max(int(new_ids.max()), int(targets.max())) + 1,), -1, dtype=torch.long)
    rank[new_ids] = torch.arange(len(new_ids))
    lse_new, tgt_new = _lse_and_target(_cap(p, lg), rank[targets])
    return -(torch.maximum(tgt_old, tgt_new) - torch.logaddexp(lse_old, lse_new)), lse_new


def disturbance(lse_full: "torch.Tensor", lse_old: "torch.Tensor", lse_new: "torch.Tensor"):
    """Per position ``(KL(p_old ‖ p_new), new-token mass)`` (numpy, float64) from the original
    softmax's logsumexp ``lse_full``, the old columns' in the extended softmax ``lse_old`` (the
    same unless new ids reuse padding rows) and the new columns' ``lse_new``:
    ``KL = ln(e^{lse_old} + e^{lse_new}) − lse_full``, computed as ``softplus`` of differences so a
    KL of 1e-6 keeps its digits.

    >>> import torch
    >>> kl, m = disturbance(torch.zeros(1, dtype=torch.float64), torch.zeros(1, dtype=torch.float64), torch.log(torch.tensor([0.25], dtype=torch.float64)))
    >>> round(float(kl[0]), 4), round(float(m[0]), 4)
    (0.2231, 0.2)
    """
    import torch

    kl = torch.nn.functional.softplus(lse_new - lse_old) + (lse_old - lse_full)
    mass = torch.sigmoid(lse_new - lse_old)
    return kl.clamp_min(0).numpy(), mass.numpy()


def _spliced(p: Parts, embed_rows: Sequence["torch.Tensor"], seqs: Sequence[Sequence[int]],
             ids_t: "torch.Tensor") -> list["torch.Tensor"]:
    """The input embeddings of ``seqs`` (extended ids) once per strategy: old ids looked up, the
    new ids ``ids_t`` given that strategy's rows (``embed_rows``, in ``ids_t`` order)."""
    import torch

    order = ids_t.sort()
    embeds = []
    for new_rows in embed_rows:
        emb_rows = new_rows.float() * p.scale
        for seq in seqs:
            x = torch.tensor([seq])
            is_new = torch.isin(x, ids_t)
            e = _embed_ids(p, torch.where(is_new, torch.zeros_like(x), x).clamp_max(p.head.shape[0] - 1))[0].clone()
            if is_new.any():
                e[is_new[0]] = emb_rows[order.indices[torch.searchsorted(order.values, x[is_new])]]
            embeds.append(e)
    return embeds


def text_losses(lm, texts: Sequence[str], old_tok, ext_tok, start: Sequence[int], new_ids: Sequence[int],
                rows: dict[str, dict[str, "torch.Tensor"]]) -> TextLosses:
    """Per-text code lengths of ``texts`` with the original model and with each strategy's rows.

    ``rows``: strategy → ``{"embed": (n, d), "output": (n, d)?}`` (tied models: the embed rows
    are the output rows too; a bias gets the mean bias). ``start``: the ids every sequence starts
    with (not scored). The first scored token is the one after the start.
    """
    import numpy as np
    import torch

    p = parts(lm)
    n = len(texts)
    start = list(start)
    old = [start + e.ids for e in old_tok.encode_batch(list(texts), add_special_tokens=False)]
    ext = [start + e.ids for e in ext_tok.encode_batch(list(texts), add_special_tokens=False)]
    first = max(len(start), 1) - 1  # hidden state that predicts the first scored token
    ids_t = torch.tensor(list(new_ids), dtype=torch.long)
    sizes = np.array([len(t.encode("utf-8")) for t in texts], dtype=np.int64)
    tok_old = np.array([len(x) - 1 - first for x in old], dtype=np.int64)
    tok_ext = np.array([len(x) - 1 - first for x in ext], dtype=np.int64)
    changed = np.array([a != b for a, b in zip(old, ext)], dtype=bool)
    new_set = set(int(i) for i in new_ids)
    n_new = np.array([sum(1 for i in x if i in new_set) for x in ext], dtype=np.int64)
    out = TextLosses(sizes, np.zeros(n), tok_old, tok_ext, changed, n_new)
    if n == 0:
        out.strategies = {name: np.zeros(0) for name in rows}
        out.disturbance = {name: (np.zeros(0), np.zeros(0)) for name in rows}
        return out

    def targets_of(seqs):
        return torch.cat([torch.tensor(list(x[first + 1:]), dtype=torch.long) for x in seqs]
                         or [torch.zeros(0, dtype=torch.long)])

    def stack(hs):
        hs = [h[first:] for h in hs]
        return torch.cat(hs) if hs else torch.zeros(0, p.head.shape[1])

    def per_text(nll: "torch.Tensor", lengths) -> "np.ndarray":
        owner = torch.repeat_interleave(torch.arange(len(lengths)), torch.as_tensor(lengths, dtype=torch.long))
        return torch.zeros(len(lengths), dtype=torch.float64).index_add_(0, owner, nll.double()).numpy() / math.log(2)

    hidden = _hidden_of(p, [_embed_ids(p, torch.tensor([x]))[0] for x in old])
    h_old, t_old = stack(hidden), targets_of(old)
    parts_old = _old_parts(p, h_old, t_old, ids_t[:0])
    out.original = per_text(_nll_with_new(p, h_old, t_old, ids_t, parts_old)[0], tok_old)
    same = np.flatnonzero(~changed)
    ch = np.flatnonzero(changed)
    h_same, t_same = stack([hidden[i] for i in same]), targets_of([old[i] for i in same])
    ends = np.cumsum(tok_old)
    at = torch.cat([torch.arange(int(ends[i] - tok_old[i]), int(ends[i])) for i in same]
                   or [torch.zeros(0, dtype=torch.long)])
    lse_full = parts_old[0][at]  # the original softmax of the unchanged texts' positions
    if bool((ids_t < p.head.shape[0]).any()):  # new ids reuse head rows: the old columns differ
        parts_same = _old_parts(p, h_same, t_same, ids_t)
    else:
        parts_same = (lse_full, parts_old[1][at])
    # the changed texts, every strategy's input rows spliced in, through the model in one go
    names = list(rows)
    h_changed = _hidden_of(p, _spliced(p, [rows[name]["embed"] for name in names], [ext[i] for i in ch], ids_t))
    t_ext = targets_of([ext[i] for i in ch])
    new_bias = None if p.bias is None else p.bias.mean()
    for k, name in enumerate(names):
        out_rows = rows[name].get("output", rows[name]["embed"]).float()
        nll_same, lse_new = _nll_with_new(p, h_same, t_same, ids_t, parts_same, out_rows, new_bias)
        h_ch = stack(h_changed[k * len(ch):(k + 1) * len(ch)])
        nll_ch, _ = _nll_with_new(p, h_ch, t_ext, ids_t, _old_parts(p, h_ch, t_ext, ids_t), out_rows, new_bias)
        bits = np.zeros(n)
        bits[same] = per_text(nll_same, tok_old[same])
        bits[ch] = per_text(nll_ch, tok_ext[ch])
        out.strategies[name] = bits
        out.disturbance[name] = disturbance(lse_full, parts_same[0], lse_new)
    return out
