"""Examples → the token sequences a trainer feeds the model, with their loss masks
(:mod:`embscope.readiness.trainers` says which trainer does what).

- A conversation is rendered by the chat template with ``add_generation_prompt=False`` and the
  example's ``tools`` (:func:`embscope.models.chat_template.render`, transformers' environment), then
  tokenized without special tokens: ``tokenizer.apply_chat_template(conv, tokenize=True)``.
- A string is tokenized as ``tokenizer(text)``: the tokenizer's own prefix and suffix (BOS, EOS;
  :mod:`embscope.readiness.specials`) around its ids; TRL appends the EOS string first.
- A prompt and its completion (prompt-completion, DPO's chosen and rejected, KTO) are tokenized as
  TRL does: the prompt alone (conversations: rendered with ``add_generation_prompt=True``) and
  prompt + completion; the completion starts at their common prefix (``common_prefix_length``), and
  for DPO at the shorter of the two (chosen, rejected).
- Assistant turns (Axolotl, LLaMA-Factory) are found the way those trainers find them, by rendering
  the conversation up to each turn: the turn's text runs from the end of the rendering of the
  turns before it with ``add_generation_prompt=True`` to the end of the rendering that includes it;
  Axolotl keeps the turn's content and the EOS within three tokens after it, LLaMA-Factory the
  whole slot. Characters map to tokens by tokenizing the text up to the boundary
  (the common prefix of its ids and the whole sequence's).

The loss mask is per position: ``labels != -100`` as the trainer's collator returns them (the
first position included; the model's shift drops it). A profile that masks by id clears every
position holding the pad id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from embscope.corpus.shapes import Example
    from embscope.readiness.trainers import Trainer

#: Axolotl looks for the EOS at most this many tokens after a trained turn's content
#: (``abs(token_idx - turn_end_idx) <= 3`` in ``ChatTemplateStrategy._tokenize_single_prompt``)
AXOLOTL_EOS_WINDOW = 3
#: characters a batch holds before it is tokenized: as many as one conversation may render
#: (:data:`embscope.models.chat_template.MAX_RENDER_CHARS`), so a template that renders every tiny
#: record to its cap is tokenized one record at a time, not a thousand at once
BATCH_CHARS = 1 << 24
#: roles a chat template is written for; ShareGPT's own values (``human``, ``gpt``) are not
CHAT_ROLES = frozenset({"system", "user", "assistant", "tool"})


@dataclass
class TrainSequence:
    """One sequence the model trains on."""

    #: example index
    index: int
    #: token ids, in order
    ids: list[int]
    #: per position: in the loss; None means every position (the common case, kept cheap)
    loss: list[bool] | None
    #: went through the chat template
    chat: bool
    #: ``""``, or ``chosen`` / ``rejected`` for DPO
    side: str = ""
    #: cut at the length limit
    cut: bool = False
    #: its length before the cut
    length: int = 0
    #: the collator masks this sequence's labels by id where they equal the PAD
    by_id: bool = False


@dataclass
class Context:
    """What building sequences needs: picklable, so that worker processes get their own copy."""

    vocab: Any
    trainer: "Trainer"
    #: the chat template (None: none shipped)
    template: str | None
    #: the template's variables (the tokenizer's named special tokens)
    variables: dict[str, str]
    #: what ``tokenizer(text)`` puts around the ids
    prefix: list[int]
    suffix: list[int]
    #: the pad the trainer pads with (None: none)
    pad_id: int | None
    #: the EOS id and string (TRL appends the string to plain texts)
    eos_id: int | None
    eos_token: str | None
    #: truncate sequences to this many tokens (None: no truncation)
    max_length: int | None = None
    #: LLaMA-Factory's template and processors (``--trainer llamafactory``;
    #: :class:`embscope.readiness.llamafactory.LFSetup`)
    lf: Any = None
    #: Unsloth's responses-only markers (:class:`embscope.readiness.responses_only.Markers`)
    responses_only: Any = None


@dataclass
class Built:
    """A batch's sequences and what went wrong on the way."""

    sequences: list[TrainSequence] = field(default_factory=list)
    #: example index → render error (``TypeError: …``)
    failed: dict[int, str] = field(default_factory=dict)
    #: example index → refusal (``render refused: …``)
    refused: dict[int, str] = field(default_factory=dict)
    #: conversations left unrendered: there is no template
    untemplated: list[int] = field(default_factory=list)
    #: examples whose prompt is not a token prefix of prompt + completion (the trainer cuts the prompt)
    not_prefix: list[int] = field(default_factory=list)
    #: ShareGPT examples TRL renders with roles the template does not know (human, gpt, …)
    raw_roles: dict[int, list[str]] = field(default_factory=dict)
    #: UTF-8 bytes of the texts the sequences were tokenized from
    nbytes: int = 0
    #: example index → why the trainer itself drops it (LLaMA-Factory's role order)
    dropped: dict[int, str] = field(default_factory=dict)


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Leading ids ``a`` and ``b`` share (TRL's ``common_prefix_length``).

    >>> common_prefix_length([1, 2, 3], [1, 2, 4, 5])
    2
    """
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class _Refused(Exception):
    pass


class _Failed(Exception):
    pass


def _render(ctx: Context, messages, ex: "Example", generation: bool = False) -> str:
    from jinja2.exceptions import TemplateError

    from embscope.models.chat_template import RecordRefused, RenderRefused, render

    try:
        return render(ctx.template, messages, add_generation_prompt=generation, tools=ex.tools,
                      **{**ctx.variables, **ex.template_kwargs})
    except (RenderRefused, RecordRefused) as err:  # the template, or this record alone, past a bound
        raise _Refused(str(err)) from None
    except TemplateError as err:
        raise _Failed(f"{type(err).__name__}: {str(err)[:160]}") from None
    except Exception as err:  # noqa: BLE001 - a template is untrusted code: any error is that record's
        raise _Failed(f"{type(err).__name__}: {str(err)[:160]}") from None


#: Axolotl's default ``roles`` (``ChatTemplatePrompter``): ShareGPT values it maps; others are kept
MAPPED_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system",
                "tool": "tool"}


def _conversation(ctx: Context, ex: "Example") -> list[dict[str, Any]]:
    """The messages the trainer gives the template: ShareGPT turns as the profile's
    ``sharegpt_roles`` says (TRL keeps the ``from`` values and the ``system`` field unread; Axolotl
    maps the usual ones and adds the ``system`` field), other shapes as read."""
    if ex.raw_turns is None:
        return ex.messages
    if ctx.trainer.sharegpt_roles == "raw":
        return ex.raw_turns
    head = ex.messages[:len(ex.messages) - len(ex.raw_turns)]  # the system field's message
    return head + [{"role": MAPPED_ROLES.get(str(r["role"]).lower(), r["role"]), "content": r["content"]}
                   for r in ex.raw_turns]


class _Batch:
    """Texts to tokenize, collected first and tokenized in one call."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.texts: list[str] = []
        self.special: list[bool] = []  # tokenizer(text) (prefix/suffix) rather than add_special_tokens=False
        self.chars = 0

    def add(self, text: str, special: bool = False) -> int:
        self.texts.append(text)
        self.special.append(special)
        self.chars += len(text)
        return len(self.texts) - 1

    def run(self) -> list[list[int]]:
        ids = self.ctx.vocab.encode_batch(self.texts) if self.texts else []
        p, s = self.ctx.prefix, self.ctx.suffix
        return [[*p, *x, *s] if sp and (p or s) else x for x, sp in zip(ids, self.special)]


def build(examples: Sequence["Example"], ctx: Context, out: Built | None = None) -> Built:
    """The sequences of ``examples`` under ``ctx.trainer`` (see the module docstring)."""
    out = out if out is not None else Built()
    batch = _Batch(ctx)
    plans: list[tuple[Any, ...]] = []
    t = ctx.trainer
    eos = ctx.eos_token or ""
    for ex in examples:
        if batch.chars > BATCH_CHARS:  # a template that renders each record huge: tokenize what is held now
            _finish_plans(ctx, plans, batch.run(), out)
            batch, plans = _Batch(ctx), []
        try:
            if ctx.lf is not None and not ex.v1:
                _plan_lf(ctx, ex, batch, plans, out)
                continue
            if ex.kind == "lm" and ex.messages is None:  # plain text
                text = ex.text + eos if t.text_eos and eos and not ex.text.endswith(eos) else ex.text
                plans.append(("text", ex, batch.add(text, special=True)))
                out.nbytes += len(text.encode("utf-8"))
                continue
            if ex.conversational and ctx.template is None:
                out.untemplated.append(ex.index)
                continue
            if ex.kind == "lm":
                msgs = _conversation(ctx, ex)
                if ex.raw_turns is not None:
                    odd = sorted({m["role"] for m in msgs} - CHAT_ROLES)
                    if odd:
                        out.raw_roles[ex.index] = odd
                full = _render(ctx, msgs, ex)
                out.nbytes += len(full.encode("utf-8"))
                if t.chat_loss == "all":
                    plans.append(("chat", ex, batch.add(full)))
                else:
                    plans.append(("turns", ex, batch.add(full), _turns(ctx, msgs, ex, full, batch)))
                continue
            pairs = [("", ex.completion)] if ex.kind != "preference" else [("chosen", ex.chosen), ("rejected", ex.rejected)]
            if ex.conversational:
                prompt = batch.add(_render(ctx, ex.prompt, ex, generation=True))
                fulls = [(side, batch.add(_render(ctx, ex.prompt + c, ex))) for side, c in pairs]
            else:
                prompt = batch.add(ex.prompt, special=True)
                fulls = [(side, batch.add(ex.prompt + (c + eos if t.text_eos and eos and not c.endswith(eos) else c),
                                          special=True)) for side, c in pairs]
            plans.append(("split", ex, prompt, fulls))
            out.nbytes += sum(len(batch.texts[j].encode("utf-8")) for _, j in fulls)
        except _Refused as err:
            out.refused[ex.index] = str(err)
        except _Failed as err:
            out.failed[ex.index] = str(err)
    _finish_plans(ctx, plans, batch.run(), out)
    return out


def _plan_lf(ctx: Context, ex: "Example", batch: "_Batch", plans: list, out: Built) -> None:
    """LLaMA-Factory's plan for ``ex`` (:mod:`embscope.readiness.llamafactory`), or why it drops or
    fails on it."""
    from embscope.readiness.lf_template import LFError
    from embscope.readiness.llamafactory import plan

    start = len(batch.texts)
    try:
        p = plan(ex, ctx.lf, batch.add)
    except LFError as err:
        out.failed[ex.index] = f"LLaMA-Factory: {err}"
        return
    if isinstance(p, str):
        out.dropped[ex.index] = p
        return
    plans.append(("lf", ex, p))
    out.nbytes += sum(len(x.encode("utf-8")) for x in batch.texts[start:])


def _finish_plans(ctx: Context, plans: list[tuple[Any, ...]], ids: list[list[int]], out: Built) -> None:
    """The sequences of the examples planned in one tokenized batch, in order; an example the
    trainer drops (:func:`_dropped`) gives none, its reason goes to ``out.dropped``."""
    t = ctx.trainer
    for plan in plans:
        kind, ex = plan[0], plan[1]
        prompt_len = None
        if kind == "lf":
            from embscope.readiness.llamafactory import finish

            seqs = [_finish(ctx, ex.index, seq, loss, plan[2][0] != "pt", side, by_id=loss is None, cut=cut,
                            length=length)  # pretraining texts: transformers' collator masks the PAD by id
                    for side, seq, loss, cut, length in finish(ctx.lf, plan[2], ids)]
        elif kind in ("text", "chat"):
            seqs = [_finish(ctx, ex.index, ids[plan[2]], None, kind == "chat")]
        elif kind == "turns":
            seq = ids[plan[2]]
            seqs = [_finish(ctx, ex.index, seq, _turn_mask(ctx, seq, plan[3], ids), True)]
        else:
            prompt_ids = ids[plan[2]]
            fulls = [(side, ids[j]) for side, j in plan[3]]
            prompt_len = min(common_prefix_length(prompt_ids, f) for _, f in fulls)
            if prompt_len < len(prompt_ids):
                out.not_prefix.append(ex.index)
            seqs = [_finish(ctx, ex.index, f, [i >= prompt_len for i in range(len(f))] if t.completion_only else None,
                            ex.conversational, side) for side, f in fulls]
        why = _dropped(ctx, ex, seqs, prompt_len)
        if why is None and ctx.responses_only is not None and ex.kind in ("lm", "prompt-completion"):
            from embscope.readiness.responses_only import DROP, mask

            for s in seqs:  # Unsloth rewrites the labels TRL built, then drops what it left unlabelled
                s.loss = mask(s.ids, s.loss, ctx.responses_only)
            why = DROP if any(not any(s.loss) for s in seqs) else None
        if why is None:
            out.sequences += seqs
        else:
            out.dropped[ex.index] = why


def _dropped(ctx: Context, ex: "Example", seqs: list[TrainSequence], prompt_len: int | None) -> str | None:
    """Why the trainer drops this example's sequences before training, or None
    (:mod:`embscope.readiness.trainers`: ``prompt_drop``, ``long_drop``, ``unlabelled_drop``)."""
    t, limit = ctx.trainer, ctx.max_length
    if t.prompt_drop and limit is not None and prompt_len is not None and ex.kind in ("preference", "unpaired") \
            and prompt_len >= limit:
        return t.prompt_drop.format(trainer="DPOTrainer" if ex.kind == "preference" else "KTOTrainer")
    if t.long_drop and limit is not None and any(s.length > limit for s in seqs):
        return t.long_drop
    if t.unlabelled_drop and (limit is not None or not t.unlabelled_drop_needs_limit) and \
            any(s.loss is not None and not any(s.loss) for s in seqs):
        return t.unlabelled_drop
    return None


def _turns(ctx: Context, msgs, ex: "Example", full: str, batch: _Batch) -> list[tuple[int, int, int, str]]:
    """Per assistant turn: ``(batch index of the text before its span, of the text through it,
    Axolotl: the span's end in characters (-1 otherwise), "")`` — boundaries as token counts are
    read after tokenizing."""
    spans = []
    for k, m in enumerate(msgs):
        if m.get("role") != "assistant":
            continue
        start = len(_render(ctx, msgs[:k], ex, generation=True)) if k else 0
        through = _render(ctx, msgs[:k + 1], ex)
        end = len(through) if full.startswith(through) else len(full)
        if ctx.trainer.chat_loss == "assistant-content":
            content = m.get("content")
            text = content if isinstance(content, str) else "".join(
                p.get("text", "") for p in content or [] if isinstance(p, dict))
            at = full.find(text, start, end) if text else -1
            if at < 0:
                continue
            start, end = at, at + len(text)
        spans.append((batch.add(full[:start]), batch.add(full[:end])))
    return spans


def _turn_mask(ctx: Context, seq: list[int], spans, ids) -> list[bool]:
    """The loss mask of the assistant spans (token boundaries from the prefixes' ids)."""
    loss = [False] * len(seq)
    eos = ctx.eos_id
    for a, b in spans:
        lo = common_prefix_length(ids[a], seq)
        hi = common_prefix_length(ids[b], seq)
        for i in range(lo, hi):
            loss[i] = True
        if ctx.trainer.chat_loss == "assistant-content" and eos is not None:
            for i in range(hi, min(len(seq), hi + AXOLOTL_EOS_WINDOW + 1)):
                if seq[i] == eos:
                    loss[i] = True
                    break
    return loss


def _finish(ctx: Context, index: int, ids: list[int], loss: list[bool] | None, chat: bool,
            side: str = "", *, by_id: bool | None = None, cut: bool | None = None,
            length: int | None = None) -> TrainSequence:
    """Truncate (keep the start; ``cut``/``length`` given: already cut by the trainer's own rule) and
    clear the pad id's positions when the collator masks by id (``by_id``; default: the profile's)."""
    by_id = ctx.trainer.masks_pad_by_id if by_id is None else by_id
    if cut is None:
        length = len(ids)
        cut = ctx.max_length is not None and len(ids) > ctx.max_length
        if cut:
            ids = ids[:ctx.max_length]
            loss = loss[:ctx.max_length] if loss is not None else None
    if by_id and ctx.pad_id is not None and ctx.pad_id in ids:
        loss = [(True if loss is None else loss[i]) and x != ctx.pad_id for i, x in enumerate(ids)]
    return TrainSequence(index, ids, loss, chat, side, cut, length or len(ids), by_id)
