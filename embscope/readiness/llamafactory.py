"""Examples → the sequences LLaMA-Factory (0.9.5) trains on: its converter, its template encoded
slot by slot (:mod:`embscope.readiness.lf_template`), its processors' labels and truncation.

Each example goes to the stage that reads its shape (``src/llamafactory/data/loader.py``
``_get_dataset_processor``):

==============  ==============================================================================
stage           what LLaMA-Factory builds
==============  ==============================================================================
``sft``         conversations, Alpaca records and prompt/completion (strings too: the template is
                always applied): ``SupervisedDatasetProcessor._encode_data_example``: the turns
                as (prompt, response) pairs (``encode_multiturn``), each prompt out of the loss
                (``train_on_prompt`` puts it in), each response in it (``mask_history``: only the
                last; the pairs are then filled last first); the pairs are cut to ``cutoff_len``
                in turn, each by ``infer_seqlen`` (:func:`infer_seqlen`), and the pairs past the
                cutoff are left out
``rm``/``dpo``  preference pairs: ``PairwiseDatasetProcessor``: the prompt and each response
                (``encode_oneturn``); ``infer_seqlen`` of the prompt and the *longer* response, both
                responses cut to that length
``kto``         KTO records: ``FeedbackDatasetProcessor``: prompt and response, ``infer_seqlen``
``pt``          plain texts: ``PretrainDatasetProcessor``: ``text + eos_token`` (the BOS string
                first when the tokenizer adds one), tokenized without special tokens, cut to
                ``cutoff_len`` keeping the start; its collator is transformers'
                ``DataCollatorForLanguageModeling`` (``train/pt/workflow.py``): labels masked
                *by id* where they equal the PAD
==============  ==============================================================================

The converter (``data/converter.py``, ShareGPT; OpenAI-style ``messages`` are ShareGPT with role
tags): a leading system turn is the system message, then user or observation turns at even
positions and assistant or function-call turns at odd ones, an even count (preference prompts: an
odd count); anything else is dropped with a log line, as the processors drop examples whose prompt
and response do not pair up. ``role: tool`` reads as an observation, an assistant message with
``tool_calls`` as a function call (its JSON ``{"name", "arguments"}`` list).

Reasoning templates (``ReasoningTemplate``, an assistant slot with ``<think>``): a response without
a thought gets an empty one (``<think>\\n\\n</think>\\n\\n``) in the loss (``enable_thinking``
default); pairwise and KTO prompts drop the thoughts of earlier turns; with ``mask_history`` the
thoughts of every turn but the last are dropped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from embscope.readiness.lf_template import (THOUGHT_WORDS, LFError, LFTemplate, call_text, fill, remove_thought,
                                           tool_text)

if TYPE_CHECKING:  # pragma: no cover
    from embscope.corpus.shapes import Example
    from embscope.readiness.options import CheckOptions

#: LLaMA-Factory's ``cutoff_len`` default (``hparams/data_args.py``)
CUTOFF_LEN = 2048
#: chat roles → LLaMA-Factory's (``data_utils.py`` ``Role``)
ROLES = {"user": "user", "assistant": "assistant", "system": "system", "tool": "observation"}
#: why the converter or a processor drops an example (``data/converter.py``, ``processor/*.py``)
BAD_ORDER = "roles do not alternate user/observation then assistant/function_call"
BAD_COUNT = "the turns do not pair into prompts and responses (an odd count, or no assistant turn last)"
BAD_PAIR = "a preference pair needs one chosen and one rejected assistant turn"


@dataclass(frozen=True)
class LFSetup:
    """What LLaMA-Factory's processors need (picklable: worker processes get a copy)."""

    template: LFTemplate
    #: ``cutoff_len``
    cutoff: int = CUTOFF_LEN
    train_on_prompt: bool = False
    mask_history: bool = False
    #: ids of the template's special elements: ``bos``, ``eos`` (the stop word when the template
    #: replaces the EOS) and each ``{"token": …}`` string
    ids: tuple = ()
    #: the EOS string appended to pretraining texts, and the BOS string put first (when the
    #: tokenizer adds one)
    eos_token: str | None = None
    bos_token: str | None = None

    def id(self, name: str) -> int | None:
        return dict(self.ids).get(name)


def infer_seqlen(source_len: int, target_len: int, cutoff_len: int) -> tuple[int, int]:
    """The lengths a prompt and its response are cut to (``processor_utils.infer_seqlen``): a
    response shorter than half the budget is kept whole, else a prompt shorter than half is, else
    both shrink in proportion to their lengths; the prompt takes what the response leaves.

    >>> infer_seqlen(3000, 10, 2048), infer_seqlen(100, 3000, 2048), infer_seqlen(3000, 1500, 2048)
    ((2038, 10), (100, 1948), (1366, 682))
    """
    if target_len * 2 < cutoff_len:
        max_target = cutoff_len
    elif source_len * 2 < cutoff_len:
        max_target = cutoff_len - source_len
    else:
        max_target = int(cutoff_len * (target_len / (source_len + target_len)))
    target = min(max_target, target_len)
    return min(max(cutoff_len - target, 0), source_len), target


# ------------------------------------------------------------------ the converter


def _calls_json(calls: list) -> str:
    """OpenAI ``tool_calls`` → the function-call content LLaMA-Factory reads (a JSON list of
    ``{"name", "arguments"}``)."""
    return json.dumps([c.get("function", c) for c in calls], ensure_ascii=False)


def _turns(messages: list[dict], raw: list[dict] | None) -> list[tuple[str, Any]]:
    """Messages → (LLaMA-Factory role, content); ShareGPT ``function_call`` turns keep their JSON."""
    out = []
    offset = len(messages) - len(raw) if raw is not None else 0
    for k, m in enumerate(messages):
        r = raw[k - offset] if raw is not None and k >= offset else None
        if r is not None and str(r.get("role", "")).lower() == "function_call":
            out.append(("function", r.get("content")))
        elif m.get("tool_calls"):
            out.append(("function", _calls_json(m["tool_calls"])))
        else:
            out.append((ROLES.get(m.get("role"), m.get("role")), m.get("content")))
    return out


def _aligned(turns: list[tuple[str, Any]], ranking: bool) -> str | None:
    """Why the converter breaks these turns (after the system turn), or None."""
    for k, (role, _) in enumerate(turns):
        if role not in (("user", "observation") if k % 2 == 0 else ("assistant", "function")):
            return BAD_ORDER
    if len(turns) % 2 != (1 if ranking else 0) or (not ranking and not turns):
        return BAD_COUNT
    return None


def _split_system(turns: list[tuple[str, Any]]) -> tuple[str, list[tuple[str, Any]]]:
    if turns and turns[0][0] == "system":
        return turns[0][1] if isinstance(turns[0][1], str) else "", turns[1:]
    return "", turns


def _as_turns(part, raw=None) -> list[tuple[str, Any]]:
    """A prompt or a completion: a string is one user (prompt) turn, messages are turns."""
    return [("user", part)] if isinstance(part, str) else _turns(part, raw)


@dataclass
class LFExample:
    """One example as LLaMA-Factory's processors receive it."""

    #: ``sft``, ``rm``, ``kto`` or ``pt``
    stage: str
    system: str = ""
    #: the ``tools`` field as a JSON string ("" when none)
    tools: str = ""
    #: the turns after the system turn (sft: all of them; rm/kto: the prompt)
    turns: list = None  # type: ignore[assignment]
    #: rm: (chosen, rejected); kto: (response,)
    responses: tuple = ()
    text: str = ""


def convert(ex: "Example") -> LFExample | str:
    """``ex`` as LLaMA-Factory's converter hands it to the processor of its stage, or why it is
    dropped (see the module docstring)."""
    tools = ex.tools_text if ex.tools_text is not None else json.dumps(ex.tools, ensure_ascii=False) if ex.tools else ""
    if ex.kind == "lm" and ex.messages is None:
        return LFExample("pt", text=ex.text)
    if ex.kind in ("lm", "prompt-completion"):
        if ex.kind == "lm":
            turns = _turns(ex.messages, ex.raw_turns)
        else:
            completion = [("assistant", ex.completion)] if isinstance(ex.completion, str) else _turns(ex.completion, None)
            turns = _as_turns(ex.prompt) + completion
        system, turns = _split_system(turns)
        why = _aligned(turns, ranking=False)
        return why or LFExample("sft", system, tools, turns)
    if ex.kind == "unpaired":
        completion = [("assistant", ex.completion)] if isinstance(ex.completion, str) else None
        if completion is None:  # a conversation: the raw ShareGPT turns cover prompt and completion
            both = _turns(ex.prompt + ex.completion, ex.raw_turns)
            completion, prompt_turns = both[len(ex.prompt):], both[:len(ex.prompt)]
        else:
            prompt_turns = _as_turns(ex.prompt)
        system, prompt = _split_system(prompt_turns)
        if len(completion) != 1:
            return BAD_COUNT
        return _aligned(prompt + completion, ranking=False) or LFExample("kto", system, tools, prompt,
                                                                        tuple(completion))
    system, prompt = _split_system(_as_turns(ex.prompt, ex.raw_turns))
    if ex.kind == "preference":
        sides = [[("assistant", c)] if isinstance(c, str) else _turns(c, None) for c in (ex.chosen, ex.rejected)]
        if any(len(s) != 1 or s[0][0] not in ("assistant", "function") for s in sides):
            return BAD_PAIR
    return _aligned(prompt, ranking=True) or LFExample("rm", system, tools, prompt, (sides[0][0], sides[1][0]))


# ------------------------------------------------------------------ the template's elements


def elements(setup: LFSetup, turns: list[tuple[str, Any]], system: str, tools: str) -> list[list]:
    """Per turn, its elements (``Template._encode``): strings to tokenize one by one, and ids."""
    t = setup.template
    system = system or t.default_system
    out = []
    for i, (role, content) in enumerate(turns):
        el: list = []
        if i == 0:
            el += list(t.prefix)
            if system or tools:
                el += fill(t.system, system + (tool_text(tools, t.tool_format) if tools else ""))
        if role == "user":
            el += fill(t.user, content)
        elif role == "assistant":
            el += fill(t.assistant, content)
        elif role == "observation":
            el += fill(t.observation, content)
        elif role == "function":
            if not isinstance(content, str):
                raise LFError(f"RuntimeError: Expected a string, got {str(content)[:60]}")
            el += fill(t.function, call_text(content, t.tool_format))
        else:
            raise LFError(f"NotImplementedError: Unexpected role: {role}")
        el = [_special(setup, e) if isinstance(e, tuple) else e for e in el]
        out.append([e for e in el if e is not None and e != ""])
    return out


def _special(setup: LFSetup, e: tuple) -> int | None:
    """A special element's id (``_convert_elements_to_ids``); a BOS or EOS the tokenizer lacks is left out."""
    return setup.id(e[1]) if e[0] == "token" else setup.id(e[0])


def _has_thought(content) -> bool:
    return isinstance(content, str) and (THOUGHT_WORDS[0].strip() in content or THOUGHT_WORDS[1].strip() in content)


def thinking(setup: LFSetup, turns: list, stage: str) -> tuple[list, list[int]]:
    """A reasoning template's turns (earlier thoughts dropped where LLaMA-Factory drops them) and the
    responses (turn indices) that get an empty thought (see the module docstring)."""
    if not setup.template.reasoning:
        return turns, []
    turns = list(turns)
    last = len(turns) - 1
    if stage != "sft" or setup.mask_history:  # encode_oneturn, or encode_multiturn discarding history
        for k in range(1, last - 1, 2):
            turns[k] = (turns[k][0], remove_thought(turns[k][1]) if isinstance(turns[k][1], str) else turns[k][1])
    responses = [last] if stage != "sft" or setup.mask_history else list(range(1, len(turns), 2))
    return turns, [k for k in responses if not _has_thought(turns[k][1])]


# ------------------------------------------------------------------ the processors' labels


def supervised(setup: LFSetup, pairs: list[tuple[list[int], list[int]]]) -> tuple[list[int], list[bool], bool]:
    """``SupervisedDatasetProcessor._encode_data_example``: (ids, loss mask, cut) of the (prompt,
    response) pairs, cut to the cutoff pair by pair (``mask_history``: last pair first)."""
    order = pairs[::-1] if setup.mask_history else pairs
    total, parts = 0, []
    for k, (src, tgt) in enumerate(order):
        if total >= setup.cutoff:
            break
        s_len, t_len = infer_seqlen(len(src), len(tgt), setup.cutoff - total)
        total += s_len + t_len
        trained = not (setup.mask_history and k != 0)
        parts.append((src[:s_len] + tgt[:t_len], [setup.train_on_prompt] * s_len + [trained] * t_len))
    if setup.mask_history:
        parts.reverse()
    ids = [i for p, _ in parts for i in p]
    loss = [m for _, ms in parts for m in ms]
    return ids, loss, len(ids) < sum(len(s) + len(t) for s, t in pairs)


def one_turn(setup: LFSetup, prompt: list[int], responses: list[list[int]]) -> list[tuple[list[int], list[bool], bool]]:
    """Pairwise (two responses) or feedback (one): the prompt and each response cut by
    ``infer_seqlen`` of the prompt and the longest response."""
    s_len, t_len = infer_seqlen(len(prompt), max(len(r) for r in responses), setup.cutoff)
    return [(prompt[:s_len] + r[:t_len], [False] * s_len + [True] * min(t_len, len(r)),
             s_len < len(prompt) or t_len < len(r)) for r in responses]


# ------------------------------------------------------------------ one example, planned then finished


def _refs(el: list, add) -> list:
    """A turn's elements as references: a string → its text's index in the batch, an id → ``(id,)``."""
    return [(e,) if isinstance(e, int) else add(e) for e in el]


def plan(ex: "Example", setup: LFSetup, add) -> tuple | str:
    """The texts ``ex`` needs tokenized, handed to ``add(text) -> index``, and how to assemble its
    sequences from them (:func:`finish`); a string: why LLaMA-Factory drops it. Raises
    :class:`LFError` where LLaMA-Factory raises."""
    lf = convert(ex)
    if isinstance(lf, str):
        return lf
    if lf.stage == "pt":
        return ("pt", [[[add((setup.bos_token or "") + lf.text + (setup.eos_token or ""))]]], None, [])
    turns = lf.turns if lf.stage == "sft" else lf.turns + [lf.responses[0]]
    turns, thought_at = thinking(setup, turns, lf.stage)
    seqs, thoughts = [[_refs(el, add) for el in elements(setup, turns, lf.system, lf.tools)]], [thought_at]
    if lf.stage == "rm":  # the rejected response: the same prompt, its own last turn
        other, other_at = thinking(setup, lf.turns + [lf.responses[1]], lf.stage)
        seqs.append([*seqs[0][:-1], _refs(elements(setup, other, lf.system, lf.tools)[-1], add)])
        thoughts.append(other_at)
    thought = add(THOUGHT_WORDS[0] + THOUGHT_WORDS[1]) if any(thoughts) else None
    return (lf.stage, seqs, thought, thoughts)


def finish(setup: LFSetup, p: tuple, ids: list[list[int]]) -> list[tuple[str, list[int], list[bool] | None, bool, int]]:
    """The planned sequences from the tokenized texts: ``(side, ids, loss mask, cut, length before
    the cut)``; the loss mask is None for pretraining texts (every position; the PAD is masked by id)."""
    stage, seqs, thought, thought_at = p
    per_seq = [[[x for r in el for x in (r if isinstance(r, tuple) else ids[r])] for el in seq] for seq in seqs]
    if stage == "pt":
        full = per_seq[0][0]
        return [("", full[:setup.cutoff], None, len(full) > setup.cutoff, len(full))]
    for turns, at in zip(per_seq, thought_at):  # an empty thought in front of the response, in the loss
        for k in at:
            turns[k] = ids[thought] + turns[k]
    if stage == "sft":
        turns = per_seq[0]
        ids_, loss, cut = supervised(setup, [(turns[i], turns[i + 1]) for i in range(0, len(turns), 2)])
        return [("", ids_, loss, cut, sum(map(len, turns)))]
    prompt = [x for t in per_seq[0][:-1] for x in t]
    responses = [turns[-1] for turns in per_seq]
    sides = ("chosen", "rejected") if stage == "rm" else ("",)
    return [(side, i, m, c, len(prompt) + len(r))
            for side, (i, m, c), r in zip(sides, one_turn(setup, prompt, responses), responses)]


def setup_for(options: "CheckOptions", chat_template: str | None, variables: dict, vocab, *, prefix: list[int],
              eos: int | None, bos: int | None, cutoff: int | None = None) -> LFSetup:
    """LLaMA-Factory's setup for a tokenizer (``get_template_and_fix_tokenizer``): the template
    ``options.lf_template`` names, else the one it reads off ``chat_template`` (the rendered
    template's text), else ``empty``; the EOS the template's stop word replaces; the tokenizer's
    special ids; ``options.train_on_prompt`` and ``options.mask_history`` as they are. Raises a
    one-line :class:`~embscope.errors.SpecError` where LLaMA-Factory would refuse to start."""
    from embscope.errors import SpecError
    from embscope.readiness.lf_template import NAMED, named, parse
    from embscope.models.chat_template import render

    if options.lf_template is not None:
        t = named(options.lf_template)
    elif chat_template is not None:
        pre = vocab.decode(prefix) if prefix else ""
        try:
            t = parse(lambda msgs, gen: render(chat_template, msgs, add_generation_prompt=gen, **variables), pre)
        except Exception as err:  # noqa: BLE001 - a template is untrusted code
            raise SpecError(f"LLaMA-Factory cannot read the slots of this chat template ({type(err).__name__}: "
                            f"{str(err)[:120]}), so it would not start with `template` unset; pass --template NAME "
                            f"({', '.join(NAMED)})") from None
    else:
        t = NAMED["empty"]
    lookup = _token_lookup(vocab)
    if t.replace_eos or t.stop_words:
        missing = [w for w in t.stop_words if lookup(w) is None]
        if missing:
            raise SpecError(f"--template {t.name}: its stop word(s) {missing} are not tokens of this tokenizer; "
                            "LLaMA-Factory would add them as new tokens (resize_vocab) — add them first "
                            "(embscope extend) or pick the model's own template")
        if t.replace_eos:
            eos = lookup(t.stop_words[0])
    ids = {"bos": bos, "eos": eos}
    for slots in (t.user, t.assistant, t.system, t.function, t.observation, t.prefix):
        for e in slots:
            if isinstance(e, tuple) and e[0] == "token":
                ids[e[1]] = lookup(e[1])

    def name(i):
        return vocab.decode([i]) if i is not None else None

    return LFSetup(t, cutoff or CUTOFF_LEN, options.train_on_prompt, options.mask_history, tuple(ids.items()),
                   eos_token=name(eos), bos_token=name(bos) if prefix else None)


def _token_lookup(vocab):
    """``convert_tokens_to_ids`` for a whole-token string (None when it is not one token)."""
    def lookup(s: str) -> int | None:
        got = vocab.encode_batch([s])[0]
        return got[0] if len(got) == 1 and vocab.decode(got) == s else None
    return lookup
