"""The trainer's own batches → ``check``'s counts and findings.

``embscope check`` rebuilds the sequences a trainer would build from a profile of it
(:mod:`embscope.readiness.trainers`); inside the training loop the real collator's output is at hand,
so nothing is modelled. A batch is a dict of ``(B, T)`` arrays:

- ``input_ids``; ``attention_mask`` (1 = a real position; absent: every position is real);
- ``labels`` (``-100`` = out of the loss; causal LMs shift them, so position 0 is never a target),
  or ``completion_mask`` (TRL's ``DataCollatorForPreference``: 1 = in the loss), or neither (every
  real position is a target).

Per sequence (a batch row cut to its real positions) :func:`encode` counts each id as an input,
as a label (a loss position past the first), and per sequence; ``pad_masked`` counts the positions
where the PAD id sits right after a position in the loss but is itself out of it: the EOS a
collator masks *by id* when PAD = EOS (transformers' ``DataCollatorForLanguageModeling``), which
the model then never learns to produce. The counts feed the same rules as ``check``
(:func:`embscope.readiness.findings.find`) with a trainer profile measured from the batches.

>>> import numpy as np
>>> b = {"input_ids": np.array([[5, 6, 2, 2]]), "attention_mask": np.array([[1, 1, 1, 0]]),
...      "labels": np.array([[5, 6, -100, -100]])}
>>> enc = encode([b], pad_id=2, n_rows=8)
>>> enc.tokens, enc.counts.tolist(), enc.label_counts.tolist(), enc.pad_masked
(3, [0, 0, 1, 0, 0, 1, 1, 0], [0, 0, 0, 0, 0, 0, 1, 0], 1)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from embscope.readiness.encode import Encoded
    from embscope.readiness.record import Finding
    from embscope.models.model import LoadedModel

#: batches read before the first step: enough to see the collator's habits (PAD, EOS, lengths,
#: the ids the first steps train) at a few seconds' cost on a large dataset
BATCHES = 16
#: the batch keys read (everything else a collator returns is left alone)
KEYS = ("input_ids", "attention_mask", "labels", "completion_mask")


def is_stream(dataloader) -> bool:
    """Whether ``dataloader`` reads a ``torch.utils.data.IterableDataset`` (a stream, or a shard of
    one): an iterator over it may consume items the trainer would then never see, so its batches
    are not read ahead (:class:`Capture` takes the ones the trainer itself draws)."""
    from torch.utils.data import IterableDataset

    loader = getattr(dataloader, "base_dataloader", dataloader)
    return isinstance(getattr(loader, "dataset", None), IterableDataset)


class Capture:
    """A forward pre-hook on the training model that keeps the first ``limit`` batches the trainer
    feeds it in training mode (the keys of :data:`KEYS`, as numpy arrays); nothing is read from the
    data. ``remove()`` takes the hook off; it also goes once ``limit`` batches are kept."""

    def __init__(self, model, limit: int = BATCHES) -> None:
        self.limit, self.batches = limit, []
        self._handle = model.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module, args, kwargs):
        if not module.training or len(self.batches) >= self.limit:
            return None
        got = dict(kwargs)
        if "input_ids" not in got and args and hasattr(args[0], "dtype"):
            got["input_ids"] = args[0]
        if got.get("input_ids") is not None:
            self.batches.append({k: np.asarray(got[k].detach().cpu()) if hasattr(got[k], "detach") else np.asarray(got[k])
                                 for k in KEYS if got.get(k) is not None})
        if len(self.batches) >= self.limit:
            self.remove()
        return None

    def remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None


def sample_batches(dataloader, limit: int = BATCHES) -> list[dict[str, np.ndarray]]:
    """The first ``limit`` batches ``dataloader`` yields, as numpy arrays, leaving the training run
    as it was: the global random states (Python, numpy, torch, CUDA) are restored afterwards, and an
    accelerate-prepared loader is read through its ``base_dataloader`` (its epoch counter and
    gradient-sync state untouched), so the trainer then sees exactly the batches it would have."""
    import random

    import torch

    states = (random.getstate(), np.random.get_state(), torch.get_rng_state(),
              torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None)
    loader = getattr(dataloader, "base_dataloader", dataloader)
    out: list[dict[str, np.ndarray]] = []
    it = iter(loader)
    try:
        for batch in it:
            if not isinstance(batch, Mapping) or "input_ids" not in batch:  # BatchEncoding is a Mapping
                break
            out.append({k: np.asarray(batch[k].detach().cpu()) if hasattr(batch[k], "detach") else np.asarray(batch[k])
                        for k in KEYS if k in batch})
            if len(out) >= limit:
                break
    finally:
        close = getattr(it, "close", None) or getattr(it, "_shutdown_workers", None)
        if close is not None:
            close()
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        if states[3] is not None:
            torch.cuda.set_rng_state_all(states[3])
    return out


def _sequences(batch: dict[str, np.ndarray]) -> Iterable[tuple[np.ndarray, np.ndarray]]:
    """``(ids, loss)`` per batch row: its real positions and which of them are in the loss."""
    ids = np.asarray(batch["input_ids"], dtype=np.int64)
    if ids.ndim == 1:
        ids = ids[None, :]
    real = np.asarray(batch["attention_mask"]).astype(bool) if "attention_mask" in batch else np.ones(ids.shape, bool)
    if "labels" in batch:
        loss = np.asarray(batch["labels"]).reshape(ids.shape) != -100
    elif "completion_mask" in batch:
        loss = np.asarray(batch["completion_mask"]).reshape(ids.shape).astype(bool)
    else:
        loss = real
    for row, keep, lab in zip(ids, real.reshape(ids.shape), loss):
        yield row[keep], lab[keep]


def encode(batches: Sequence[dict[str, np.ndarray]], *, pad_id: int | None, n_rows: int,
           bos_id: int | None = None, watch: np.ndarray | None = None) -> "Encoded":
    """The :class:`~embscope.readiness.encode.Encoded` of ``batches`` (module docstring); every
    sequence is its own example, numbered in batch order. ``watch``: the ids whose first example
    indices are kept (default: all)."""
    from embscope.readiness.encode import EXAMPLES, Encoded

    enc = Encoded(counts=np.zeros(n_rows, np.int64), label_counts=np.zeros(n_rows, np.int64),
                  example_counts=np.zeros(n_rows, np.int64))
    index = 0
    for batch in batches:
        for ids, loss in _sequences(batch):
            enc.examples += 1
            enc.sequences += 1
            enc.tokens += len(ids)
            enc.lengths.append(len(ids))
            enc.indices.append(index)
            top = int(ids.max()) + 1 if len(ids) else 0
            if top > len(enc.counts):  # an id past the matrix: id-beyond-matrix
                for name in ("counts", "label_counts", "example_counts"):
                    setattr(enc, name, np.concatenate([getattr(enc, name), np.zeros(top - len(getattr(enc, name)),
                                                                                     np.int64)]))
            n = len(enc.counts)
            enc.counts += np.bincount(ids, minlength=n)
            labels = ids[1:][loss[1:]]
            enc.label_counts += np.bincount(labels, minlength=n)
            enc.loss_tokens.append(int(len(labels)))
            distinct = np.unique(ids)
            enc.example_counts[distinct] += 1
            for i in distinct.tolist():
                if (watch is None or i >= len(watch) or watch[i]) and len(enc.where.setdefault(i, [])) < EXAMPLES:
                    enc.where[i].append(index)
            if not len(labels):
                enc.unlabelled += 1
                if len(enc.unlabelled_examples) < EXAMPLES:
                    enc.unlabelled_examples.append(index)
            if bos_id is not None and len(ids) > 1 and ids[0] == bos_id and ids[1] == bos_id:
                enc.double_bos["text"].append(index)
            if pad_id is not None and len(ids) > 1:
                masked = int(np.count_nonzero((ids[1:] == pad_id) & ~loss[1:] & loss[:-1]))
                if masked:
                    enc.pad_masked += masked
                    if len(enc.pad_masked_examples) < EXAMPLES:
                        enc.pad_masked_examples.append(index)
            index += 1
    return enc


def findings(model: "LoadedModel", enc: "Encoded", *, pad_id: int | None, pad_how: str,
             flagged: np.ndarray | None = None, status: Sequence[str | None] | None = None) -> "list[Finding]":
    """``check``'s findings for the measured counts ``enc`` of ``model`` (a copy of the training
    model's matrices with its tokenizer as the trainer set it up). The trainer profile is measured:
    it masks the PAD by id when the batches hold a PAD right after a loss position and out of the
    loss (:func:`encode`'s ``pad_masked``) and never have it as a label."""
    from embscope.config import max_positions
    from embscope.corpus.conversations import DataRead
    from embscope.models.rows import model_zero_rows
    from embscope.readiness.findings import CheckFacts, find
    from embscope.readiness.record import PadChoice
    from embscope.readiness.specials import special_ids
    from embscope.readiness.trainers import TRAINERS

    by_id = bool(pad_id is not None and enc.pad_masked and pad_id < len(enc.label_counts)
                 and enc.label_counts[pad_id] == 0)
    like = TRAINERS["transformers" if by_id else "trl"]
    profile = dataclasses.replace(like, name="this trainer", title="the trainer's own collator, measured on its "
                                  f"first {enc.sequences} sequences", max_length=None, unlabelled_drop="", prompt_drop="",
                                  long_drop="")
    strings = model.token_strings()
    pad = PadChoice(id=pad_id, token=strings[pad_id] if pad_id is not None and 0 <= pad_id < len(strings) else None,
                    how=pad_how)
    context, key = max_positions(model.config)
    facts = CheckFacts(model=model, specials=special_ids(model), encoded=enc, data=DataRead(), flagged=flagged,
                  zero_row=model_zero_rows(model), context=context, context_from=f"config {key}" if key else "unknown",
                  template=None, trainer=profile, pad=pad, status=status)
    out = find(facts)
    eos = facts.specials.ids("eos")
    seen_eos = pad_id is not None and pad_id in eos and (enc.pad_masked or (pad_id < len(enc.label_counts)
                                                                           and enc.label_counts[pad_id]))
    if pad_id is not None and pad_id in eos and not seen_eos:  # no EOS in the batches: nothing to measure
        out = [dataclasses.replace(
            f, message=f"PAD is the EOS ({pad_how}: {pad.token!r}); the first {enc.sequences} training sequences hold "
            "no EOS at a real position, so the model is not taught to stop on this data (and whether the collator "
            "would mask it cannot be seen)", fix="append the EOS to each text (tokenizer(text + tokenizer.eos_token)); "
            "TRL's SFTTrainer does it for you") if f.code == "pad-is-eos" else f for f in out]
    return out
