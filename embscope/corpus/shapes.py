"""One training record → the example a trainer makes of it, for every record shape trainers read.

Each record is a JSON object; its shape is detected on its own, first that applies
(:data:`FORMATS`):

=====================  ==========================================================================
``preference``         ``chosen`` + ``rejected``: TRL's preference data (``prompt`` explicit or
                       implicit, strings or conversational message lists; TRL ``extract_prompt``
                       takes the common start of an implicit one), LLaMA-Factory's ShareGPT
                       pairs (``conversations`` + ``chosen``/``rejected`` turns), its Alpaca pairs
                       (``instruction``/``input`` + ``chosen``/``rejected`` strings) and its v1
                       ``chosen_messages``/``rejected_messages``
``kto``                unpaired preference: TRL's ``prompt`` + ``completion`` + a boolean
                       ``label``; LLaMA-Factory's ShareGPT ``conversations`` + ``kto_tag``, and its
                       ``messages`` + a boolean ``label`` (``kto_en_demo``): the last turn is the
                       completion
``messages``           ``{"messages": [{"role", "content"}, …]}``: HF chat data, TRL's SFT data,
                       OpenAI fine-tuning files; ``content`` a string or typed parts
                       (``{"type": "text", "text": …}``, given to the template as they are);
                       assistant ``tool_calls``, ``tool`` turns, ``reasoning_content``; a ``tools``
                       list (or JSON string) for the template. LLaMA-Factory v1 parts
                       (``{"type": "text"|"reasoning"|"tool_call", "value": …}``) become what its
                       renderer hands the template (``v1/core/rendering/format.py``
                       ``_to_hf_messages``): text joined, ``reasoning_content``, ``tool_calls``
``sharegpt``           ``{"conversations": [{"from", "value"}, …]}``: human/user → ``user``,
                       gpt/assistant/model → ``assistant``, ``function_call`` → an assistant turn
                       with ``tool_calls`` (its value a JSON ``{"name", "arguments"}`` or a list of
                       them), ``observation``/tool/function → ``tool``; ``system`` and ``tools``
                       fields (LLaMA-Factory ``data/README.md``)
``prompt-completion``  ``{"prompt", "completion"}``: strings, or TRL's conversational lists
``alpaca``             ``{"instruction", "input"?, "output", "system"?}``: one user turn
                       ``instruction`` + ``"\\n"`` + ``input`` (as LLaMA-Factory joins them), one
                       assistant turn ``output``
``text``               ``{"text": …}`` (``--text-field``): plain text
=====================  ==========================================================================

An example has a ``kind``: ``lm`` (a conversation or a text the whole of which is the sequence),
``prompt-completion`` (a prompt and its completion), ``preference`` (a prompt, a chosen and a
rejected completion: two sequences) or ``unpaired`` (KTO: a prompt, a completion and whether it is
desirable). A record that fits no shape raises :class:`Reject` with the reason; the fields a shape
does not read are returned so that the reader can count them (``ignored-fields``).
"""

from __future__ import annotations

from typing import Any

from embscope.corpus.preference import kto, preference
from embscope.corpus.turns import (SHAREGPT_ROLES, Example, Reject, alpaca, has_v1, messages,  # noqa: F401
                                   sharegpt, tools)

#: record shapes, in detection order
FORMATS = ("preference", "kto", "messages", "sharegpt", "prompt-completion", "alpaca", "text")
#: record fields a trainer may carry beside the data that no shape reads on purpose
#: (TRL reads ``chat_template_kwargs`` per example and passes them to the template)
TEMPLATE_KWARGS = "chat_template_kwargs"
#: fields each shape reads (anything else is counted as ignored)
READ_FIELDS = {
    "preference": {"prompt", "chosen", "rejected", "conversations", "system", "tools", "instruction", "input",
                   "chosen_messages", "rejected_messages", "messages", TEMPLATE_KWARGS},
    "kto": {"prompt", "completion", "label", "conversations", "messages", "system", "tools", "kto_tag",
            TEMPLATE_KWARGS},
    "messages": {"messages", "tools", TEMPLATE_KWARGS},
    "sharegpt": {"conversations", "system", "tools", TEMPLATE_KWARGS},
    "prompt-completion": {"prompt", "completion", "tools", TEMPLATE_KWARGS},
    "alpaca": {"instruction", "input", "output", "system", "history", TEMPLATE_KWARGS},
    "text": set(),
}
# ------------------------------------------------------------------ detection


def detect(rec: dict, text_field: str = "text") -> str | None:
    """The shape of one record (:data:`FORMATS`), or None when it fits none."""
    if ("chosen" in rec and "rejected" in rec) or "chosen_messages" in rec:
        return "preference"
    if "kto_tag" in rec or (isinstance(rec.get("label"), bool) and (("completion" in rec and "prompt" in rec)
                                                                  or "messages" in rec)):
        return "kto"
    if "messages" in rec:
        return "messages"
    if "conversations" in rec:
        return "sharegpt"
    if "prompt" in rec and "completion" in rec:
        return "prompt-completion"
    if "instruction" in rec and "output" in rec:
        return "alpaca"
    if text_field in rec:
        return "text"
    return None


def to_example(rec: Any, index: int, fmt: str | None = None, text_field: str = "text") -> tuple[Example, list[str]]:
    """The example a record stands for and the record fields its shape did not read; raises
    :class:`Reject` with the reason when it fits none."""
    if not isinstance(rec, dict):
        raise Reject("the record is not an object")
    found = detect(rec, text_field)
    if fmt is not None and found != fmt:
        raise Reject(f"not {fmt}" + (f" (looks like {found})" if found else ""))
    if found is None:
        keys = ", ".join(sorted(map(str, rec))[:6])
        raise Reject(f"no known fields (keys: {keys})" if keys else "an empty object")
    kwargs = rec.get(TEMPLATE_KWARGS)
    kwargs = {str(k): v for k, v in kwargs.items()} if isinstance(kwargs, dict) else {}
    if found in ("preference", "kto"):
        ex = preference(rec) if found == "preference" else kto(rec)
    elif found == "messages":
        ex = Example(0, found, messages=messages(rec["messages"], "messages"), tools=tools(rec.get("tools")))
    elif found == "sharegpt":
        msgs, whos = sharegpt(rec)
        ex = Example(0, found, messages=msgs, tools=tools(rec.get("tools")), raw_turns=whos)
    elif found == "alpaca":
        if rec.get("history"):
            raise Reject("alpaca: a history field (earlier turns) is not read; convert to messages")
        ex = Example(0, found, messages=alpaca(rec))
    elif found == "prompt-completion":
        p, c = rec["prompt"], rec["completion"]
        kw = {"tools": tools(rec.get("tools"))}
        if isinstance(p, str) and isinstance(c, str):
            ex = Example(0, found, "prompt-completion", prompt=p, completion=c, **kw)
        elif isinstance(p, list) and isinstance(c, list):
            ex = Example(0, found, "prompt-completion", prompt=messages(p, "prompt"),
                         completion=messages(c, "completion"), **kw)
        else:
            raise Reject("prompt-completion: prompt and completion must both be strings or both lists of messages")
    else:
        text = rec[text_field]
        if not isinstance(text, str):
            raise Reject("text: the text field is not a string")
        if not text.strip():
            raise Reject("text: empty")
        ex = Example(0, found, text=text)
    ex.index = index
    ex.template_kwargs = kwargs
    ex.v1 = found in ("messages", "preference") and has_v1(rec)
    ex.tools_text = rec.get("tools") if isinstance(rec.get("tools"), str) else None
    read = READ_FIELDS[found] | ({text_field} if found == "text" else set())
    return ex, [k for k in rec if k not in read]
