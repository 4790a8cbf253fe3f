"""Preference records (two completions, one prompt) and unpaired KTO records → examples; the
shapes of :mod:`embscope.corpus.shapes` (``preference``, ``kto``) read here.
"""

from __future__ import annotations

from typing import Any

from embscope.corpus.turns import Example, Reject, alpaca_prompt, messages, sharegpt, sharegpt_turn, tools


def common_prompt(chosen, rejected):
    """TRL's ``extract_prompt`` (``trl/data_utils.py``): the longest common start of the chosen and
    rejected completions (messages, or characters, a space before the split going with the
    completions). Returns ``(prompt, chosen, rejected)``.

    >>> common_prompt("Q: sky? A: blue", "Q: sky? A: green")
    ('Q: sky? A:', ' blue', ' green')
    """
    idx = 0
    n = min(len(chosen), len(rejected))
    while idx < n and chosen[idx] == rejected[idx]:
        idx += 1
    if idx < n and idx > 0 and chosen[idx - 1] == " ":
        idx -= 1
    return chosen[:idx], chosen[idx:], rejected[idx:]


def _side(value, key: str):
    """A completion: a string, a list of messages, or one ShareGPT / chat turn (LLaMA-Factory)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        if "from" in value:
            return [sharegpt_turn(value, key)[0]]
        return messages([value], key)
    return messages(value, key)


def preference(rec: dict) -> Example:
    kw: dict[str, Any] = {"tools": tools(rec.get("tools"))}
    if "chosen_messages" in rec:
        c, r = messages(rec["chosen_messages"], "chosen_messages"), messages(rec.get("rejected_messages"), "rejected_messages")
        p, c, r = common_prompt(c, r)
        return Example(0, "preference", "preference", prompt=p, chosen=c, rejected=r, **kw)
    if "conversations" in rec:
        prompt, whos = sharegpt(rec)
        return Example(0, "preference", "preference", prompt=prompt, chosen=_side(rec["chosen"], "chosen"),
                       rejected=_side(rec["rejected"], "rejected"), raw_turns=whos, **kw)
    if "instruction" in rec:
        ch, rj = rec["chosen"], rec["rejected"]
        if not isinstance(ch, str) or not isinstance(rj, str):
            raise Reject("preference: alpaca chosen and rejected must be strings")
        return Example(0, "preference", "preference", prompt=alpaca_prompt(rec),
                       chosen=[{"role": "assistant", "content": ch}], rejected=[{"role": "assistant", "content": rj}],
                       **kw)
    chosen, rejected = _side(rec["chosen"], "chosen"), _side(rec["rejected"], "rejected")
    if isinstance(chosen, str) != isinstance(rejected, str):
        raise Reject("preference: chosen and rejected must both be strings or both lists of messages")
    prompt = rec.get("prompt")
    if prompt is None:
        prompt, chosen, rejected = common_prompt(chosen, rejected)
        if not prompt:
            raise Reject("preference: no prompt, and chosen and rejected share no start (implicit prompt)")
    else:
        prompt = prompt if isinstance(prompt, str) else messages(prompt, "prompt")
        if isinstance(prompt, str) != isinstance(chosen, str):
            raise Reject("preference: prompt and completions must both be strings or both lists of messages")
    if not chosen or not rejected:
        raise Reject("preference: an empty chosen or rejected completion")
    return Example(0, "preference", "preference", prompt=prompt, chosen=chosen, rejected=rejected, **kw)


def kto(rec: dict) -> Example:
    kw: dict[str, Any] = {"tools": tools(rec.get("tools"))}
    if "kto_tag" in rec or "prompt" not in rec:
        tag = rec["kto_tag"] if "kto_tag" in rec else rec["label"]
        if not isinstance(tag, bool):
            raise Reject("kto: kto_tag is not true or false")
        conv, whos = sharegpt(rec) if "conversations" in rec else (messages(rec.get("messages"), "messages"), None)
        if len(conv) < 2:
            raise Reject("kto: a conversation needs a prompt and a response")
        return Example(0, "kto", "unpaired", prompt=conv[:-1], completion=conv[-1:], label=tag,
                       raw_turns=whos, **kw)
    label = rec["label"]
    if not isinstance(label, bool):
        raise Reject("kto: label is not true or false")
    p, c = rec["prompt"], rec["completion"]
    if isinstance(p, str) and isinstance(c, str):
        return Example(0, "kto", "unpaired", prompt=p, completion=c, label=label, **kw)
    if isinstance(p, list) and isinstance(c, list):
        return Example(0, "kto", "unpaired", prompt=messages(p, "prompt"), completion=messages(c, "completion"),
                       label=label, **kw)
    raise Reject("kto: prompt and completion must both be strings or both lists of messages")
