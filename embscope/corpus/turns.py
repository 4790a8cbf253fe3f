"""The pieces every record shape is made of: :class:`Example`, :class:`Reject`, chat messages
(typed parts, tool calls, LLaMA-Factory v1 parts), ``tools``, ShareGPT turns and Alpaca turns
(:mod:`embscope.corpus.shapes` says which shape uses what).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

#: ShareGPT ``from`` → chat role (``function_call`` is handled on its own: a tool call)
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                  "model": "assistant", "chatgpt": "assistant", "bing": "assistant", "bard": "assistant",
                  "system": "system", "tool": "tool", "function": "tool", "observation": "tool",
                  "function_call": "assistant"}
#: typed parts of LLaMA-Factory v1 messages
V1_PART_TYPES = ("text", "reasoning", "tool_call", "image_url", "video_url", "audio_url")


class Reject(ValueError):
    """A record that does not fit the shape; ``str()`` is the reason."""


@dataclass
class Example:
    """One training example, as the trainer will see it."""

    #: position of the record in the data, 0-based, in reading order (rejected records count too)
    index: int
    #: the shape it was read as (:data:`FORMATS`)
    format: str
    #: lm, prompt-completion, preference or unpaired (see the module docstring)
    kind: str = "lm"
    #: the conversation of an ``lm`` example (``None`` for plain text)
    messages: list[dict[str, Any]] | None = None
    #: the text of an ``lm`` example (``None`` for conversations)
    text: str | None = None
    #: the prompt (prompt-completion, preference, unpaired): a string or a list of messages
    prompt: Any = None
    #: the completion (prompt-completion, unpaired)
    completion: Any = None
    #: the chosen and rejected completions (preference)
    chosen: Any = None
    rejected: Any = None
    #: KTO: whether the completion is desirable
    label: bool | None = None
    #: tool definitions handed to the template (``tools=``), as transformers and TRL pass them
    tools: list | None = None
    #: extra template variables (TRL's per-example ``chat_template_kwargs``)
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    #: the split it came from (``train``, ``test``, …; None for data without splits)
    split: str | None = None
    #: ShareGPT turns as TRL's ``maybe_convert_to_chatml`` leaves them (``from`` → ``role`` and
    #: ``value`` → ``content``, the values as they are; no ``system`` field): None for other shapes
    raw_turns: list[dict[str, Any]] | None = None
    #: the ``tools`` field as the record holds it, when a string (LLaMA-Factory reads the column as it
    #: is: ``"[]"`` is no tool, but still opens the system slot)
    tools_text: str | None = None
    #: LLaMA-Factory v1 messages (typed parts with ``value``): its v1 renderer uses the model's template
    v1: bool = False

    @property
    def conversational(self) -> bool:
        """Whether the example goes through the chat template."""
        if self.kind == "lm":
            return self.messages is not None
        part = self.prompt if self.kind != "preference" or self.prompt else self.chosen
        return isinstance(part, list)


# ------------------------------------------------------------------ messages and their contents


def _v1_message(m: dict, key: str) -> dict[str, Any]:
    """A LLaMA-Factory v1 message (content: typed parts with ``value``) → the message its renderer
    gives the template (non-multimodal: text parts joined, ``reasoning_content``, ``tool_calls``)."""
    text, reasoning, calls = "", "", []
    for p in m["content"]:
        kind, value = p.get("type"), p.get("value")
        if kind not in V1_PART_TYPES:
            raise Reject(f"{key}: unknown part type {str(kind)[:20]!r}")
        if not isinstance(value, str):
            if kind in ("text", "reasoning", "tool_call"):
                raise Reject(f"{key}: a {kind} part whose value is not a string")
            raise Reject(f"{key}: a {kind} part (images, video and audio are not checked)")
        if kind == "text":
            text += value
        elif kind == "reasoning":
            reasoning += value
        elif kind == "tool_call":
            calls += _tool_calls(value, key)
        else:
            raise Reject(f"{key}: a {kind} part (images, video and audio are not checked)")
    out = {k: v for k, v in m.items() if k not in ("content",)}
    out["content"] = text
    if calls:
        out["tool_calls"] = calls
    if reasoning:
        out["reasoning_content"] = reasoning
    return out


def _is_v1(content) -> bool:
    return isinstance(content, list) and bool(content) and all(
        isinstance(p, dict) and "value" in p and "text" not in p for p in content)


def has_v1(rec: dict) -> bool:
    """Whether a record holds LLaMA-Factory v1 messages (typed parts with ``value``)."""
    return any(isinstance(m, dict) and _is_v1(m.get("content"))
               for key in ("messages", "chosen_messages", "rejected_messages")
               for m in (rec.get(key) if isinstance(rec.get(key), list) else []))


def _content(value, where: str):
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, dict) for p in value):
        for p in value:
            if p.get("type", "text") == "text" and not isinstance(p.get("text"), str):
                raise Reject(f"{where}: a text part without a text string")
        return value
    if value is None:
        raise Reject(f"{where}: no content")
    raise Reject(f"{where}: content is neither a string nor a list of typed parts")


def _tool_calls(value, where: str) -> list[dict[str, Any]]:
    """A JSON tool call (``{"name", "arguments"}``) or a list of them → OpenAI ``tool_calls``."""
    try:
        calls = json.loads(value) if isinstance(value, str) else value
    except (ValueError, RecursionError):
        raise Reject(f"{where}: a tool call that is not JSON") from None
    calls = calls if isinstance(calls, list) else [calls]
    out = []
    for c in calls:
        if not isinstance(c, dict) or not isinstance(c.get("name"), str) or "arguments" not in c:
            raise Reject(f"{where}: a tool call without a name and arguments")
        out.append({"type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}})
    return out


def messages(value, key: str) -> list[dict[str, Any]]:
    """A list of chat messages, checked (role, content or tool calls), v1 parts converted."""
    if not isinstance(value, list) or not value:
        raise Reject(f"{key} is not a non-empty list")
    out = []
    for m in value:
        if not isinstance(m, dict):
            raise Reject(f"{key}: a message is not an object")
        role = m.get("role")
        if not isinstance(role, str) or not role:
            raise Reject(f"{key}: a message without a role")
        if _is_v1(m.get("content")):
            out.append(_v1_message(m, key))
            continue
        msg = dict(m)
        calls = m.get("tool_calls")
        if calls is not None and not (isinstance(calls, list) and all(isinstance(c, dict) for c in calls)):
            raise Reject(f"{key}: tool_calls is not a list of objects")
        if m.get("content") is not None or not calls:
            msg["content"] = _content(m.get("content"), key)
        rc = m.get("reasoning_content")
        if rc is not None and not isinstance(rc, str):
            raise Reject(f"{key}: reasoning_content is not a string")
        out.append(msg)
    return out


def tools(value) -> list | None:
    """A ``tools`` field: a list of tool definitions, or a JSON string of one (LLaMA-Factory,
    TRL ``json.loads`` it); an empty one is None (transformers then renders no tool block)."""
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            raise Reject("tools is a string but not JSON") from None
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise Reject("tools is not a list of tool definitions")
    return value or None


def sharegpt_turn(t, where: str) -> tuple[dict[str, Any], str]:
    """One ShareGPT turn → (message, its ``from``)."""
    if not isinstance(t, dict):
        raise Reject(f"{where}: a turn is not an object")
    who = t.get("from", t.get("role"))
    role = SHAREGPT_ROLES.get(who.lower()) if isinstance(who, str) else None
    if role is None:
        raise Reject(f"{where}: unknown ShareGPT role {str(who)[:20]!r}")
    value = t.get("value", t.get("content"))
    if not isinstance(value, str):
        raise Reject(f"{where}: a turn's value is not a string")
    if who.lower() == "function_call":
        return {"role": "assistant", "content": None, "tool_calls": _tool_calls(value, where)}, who
    return {"role": role, "content": value}, who


def sharegpt(rec: dict) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``conversations`` (+ ``system``) → messages, and the turns as TRL converts them."""
    turns = rec["conversations"]
    if not isinstance(turns, list) or not turns:
        raise Reject("conversations is not a non-empty list")
    out, raw = [], []
    system = rec.get("system")
    if isinstance(system, str) and system:
        out.append({"role": "system", "content": system})
    for t in turns:
        msg, who = sharegpt_turn(t, "conversations")
        out.append(msg)
        raw.append({"role": who, "content": t.get("value", t.get("content"))})
    return out, raw


def alpaca_prompt(rec: dict) -> list[dict[str, Any]]:
    ins, inp = rec.get("instruction"), rec.get("input") or ""
    if not isinstance(ins, str) or not isinstance(inp, str):
        raise Reject("alpaca: instruction or input is not a string")
    msgs = []
    if isinstance(rec.get("system"), str) and rec["system"]:
        msgs.append({"role": "system", "content": rec["system"]})
    msgs.append({"role": "user", "content": "\n".join(x for x in (ins, inp) if x)})  # as LLaMA-Factory joins them
    return msgs


def alpaca(rec: dict) -> list[dict[str, Any]]:
    outp = rec.get("output")
    if not isinstance(outp, str):
        raise Reject("alpaca: output is not a string")
    return [*alpaca_prompt(rec), {"role": "assistant", "content": outp}]
