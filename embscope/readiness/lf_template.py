"""LLaMA-Factory's chat templates as it encodes them: slots per role, filled and tokenized slot by
slot (``--trainer llamafactory``, ``--template NAME``).

LLaMA-Factory (0.9.5, ``src/llamafactory/data/template.py``) does not render the model's Jinja
template when it trains. Its ``Template`` holds *slots* per role: strings with a ``{{content}}``
placeholder, and special tokens named by role (``{"bos_token"}``, ``{"eos_token"}``) or by string
(``{"token": "<|user|>"}``). ``Template._encode`` lists, per message, the elements of its slot (the
first message also gets the prefix and the system slot holding the system message, or
``default_system``, followed by the tool list's text), and ``_convert_elements_to_ids`` tokenizes
*each string element on its own* (``tokenizer.encode(elem, add_special_tokens=False)``): ids never
merge across two elements, where tokenizing the whole rendering would (a reply of one space after
``"assistant\\n"`` is ``Ċ`` + ``Ġ`` there, ``ĊĠ`` in one piece).

Which template (``get_template_and_fix_tokenizer``):

- ``template`` unset and the tokenizer has a chat template: ``parse_template`` renders it on
  placeholder conversations and reads the slots off the text (:func:`parse`, the same steps);
- unset, no chat template: ``empty``;
- a name: its registration; :data:`NAMED` holds the ones modelled here (others: a one-line error).

Tools (``formatter.py`` ``ToolFormatter``/``FunctionFormatter``, ``tool_utils.py``): the tool list
becomes text appended to the system message, and a tool call (a ``function_call`` turn: JSON
``{"name", "arguments"}`` or a list of them) becomes text in the assistant slot, both in the
template's tool format (:func:`tool_text`, :func:`call_text`: ``default`` and ``qwen``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any, Callable

#: a special element of a slot: ("bos",), ("eos",) or ("token", "<|user|>")
Special = tuple
BOS, EOS = ("bos",), ("eos",)
#: LLaMA-Factory's default thought and tool-call words (``register_template``)
THOUGHT_WORDS = ("<think>\n", "\n</think>\n\n")
TOOL_CALL_WORDS = ("<tool_call>", "</tool_call>")


@dataclass(frozen=True)
class LFTemplate:
    """One template: slots per role (strings with ``{{content}}``, or :data:`Special` elements)."""

    #: its name (``parsed`` for one read off the model's chat template)
    name: str
    user: tuple
    assistant: tuple
    system: tuple
    function: tuple
    observation: tuple
    prefix: tuple = ()
    #: the system message when the example has none
    default_system: str = ""
    #: ``default`` or ``qwen`` (``tool_utils.py`` ``TOOLS``)
    tool_format: str = "default"
    #: stop words; the first replaces the tokenizer's EOS when ``replace_eos``
    stop_words: tuple = ()
    replace_eos: bool = False
    #: the assistant slot holds ``<think>`` (a ``ReasoningTemplate``: an empty thought is added)
    reasoning: bool = False


def _register(name: str, user: tuple = ("{{content}}",), assistant: tuple | None = None, *,
              system: tuple | None = None, function: tuple | None = None, observation: tuple | None = None,
              **kw: Any) -> LFTemplate:
    """A registered template with ``register_template``'s defaults: the assistant slot the content
    and the EOS, the function slot the assistant's, the system slot the content alone, the
    observation slot the user's."""
    assistant = assistant if assistant is not None else ("{{content}}", EOS)
    return LFTemplate(name, user, assistant, system or ("{{content}}",), function or assistant,
                      observation or user, **kw)


_CHATML_USER = ("<|im_start|>user\n{{content}}<|im_end|>\n<|im_start|>assistant\n",)
_CHATML_ASSISTANT = ("{{content}}<|im_end|>\n",)
_CHATML_SYSTEM = ("<|im_start|>system\n{{content}}<|im_end|>\n",)

#: the registered templates modelled (``template.py``, 0.9.5), by name
NAMED: dict[str, LFTemplate] = {t.name: t for t in (
    _register("empty", assistant=("{{content}}",)),
    _register("default", ("Human: {{content}}", EOS, "\nAssistant:"), ("{{content}}", EOS, "\n"),
              system=("System: {{content}}", EOS, "\n")),
    _register("alpaca", ("### Instruction:\n{{content}}\n\n### Response:\n",), ("{{content}}", EOS, "\n\n"),
              default_system="Below is an instruction that describes a task. Write a response that appropriately "
                             "completes the request.\n\n"),
    _register("chatml", _CHATML_USER, _CHATML_ASSISTANT, system=_CHATML_SYSTEM,
              observation=("<|im_start|>tool\n{{content}}<|im_end|>\n<|im_start|>assistant\n",),
              stop_words=("<|im_end|>", "<|im_start|>"), replace_eos=True),
    _register("smollm", _CHATML_USER, _CHATML_ASSISTANT, system=_CHATML_SYSTEM, stop_words=("<|im_end|>",)),
    _register("smollm2", _CHATML_USER, _CHATML_ASSISTANT, system=_CHATML_SYSTEM, stop_words=("<|im_end|>",),
              default_system="You are a helpful AI assistant named SmolLM, trained by Hugging Face."),
    _register("qwen", _CHATML_USER, _CHATML_ASSISTANT, system=_CHATML_SYSTEM, function=_CHATML_ASSISTANT,
              observation=("<|im_start|>user\n<tool_response>\n{{content}}\n</tool_response><|im_end|>\n"
                           "<|im_start|>assistant\n",),
              tool_format="qwen", stop_words=("<|im_end|>",), replace_eos=True,
              default_system="You are Qwen, created by Alibaba Cloud. You are a helpful assistant."),
)}


def named(name: str) -> LFTemplate:
    """The registered template ``name``; an unknown or unmodelled name is a one-line error."""
    from embscope.errors import SpecError, did_you_mean

    if name not in NAMED:
        raise SpecError(f"--template {name!r} is not one of LLaMA-Factory's templates modelled here"
                        f"{did_you_mean(name, NAMED)}; choose from {', '.join(NAMED)}, or leave --template out "
                        "to read the model's own chat template as LLaMA-Factory does")
    return NAMED[name]


def find_diff(short: str, long: str) -> str:
    """The characters of ``long`` left over when ``short`` is matched into it greedily, in order
    (``parse_template``'s ``find_diff``: the default system message is what the conversation
    without a system turn holds more than the one with an empty system turn).

    >>> find_diff("<s>\\n<u>", "<s>Be brief.\\n<u>")
    'Be brief.'
    """
    i, out = 0, []
    for ch in long:
        if i < len(short) and short[i] == ch:
            i += 1
        else:
            out.append(ch)
    return "".join(out)


def parse(render: Callable[[list, bool], str], prefix: str) -> LFTemplate:
    """The template LLaMA-Factory reads off a chat template (``parse_template``): ``render(messages,
    add_generation_prompt)`` renders it; ``prefix`` is ``decode(encode(""))`` (the BOS of a tokenizer
    that adds one). The slots are the renderings of placeholder conversations, the prefix cut off."""
    ph = "{{content}}"
    system = render([{"role": "system", "content": ph}], False)[len(prefix):]
    user_empty_system = render([{"role": "system", "content": ""}, {"role": "user", "content": ph}], True)[len(prefix):]
    user = render([{"role": "user", "content": ph}], True)[len(prefix):]
    assistant = render([{"role": "user", "content": ph}, {"role": "assistant", "content": ph}],
                       False)[len(prefix) + len(user):]
    reasoning = "<think>" in assistant
    assistant = assistant.replace("<think>", "").replace("</think>", "").lstrip("\n")
    default_system = ""
    if len(user) > len(user_empty_system):
        default_system = find_diff(user_empty_system, user)
        user = user[len(system.replace(ph, default_system, 1)):]
    return LFTemplate("parsed", (user,), (assistant,), (system,), (assistant,), (user,),
                      prefix=(prefix,) if prefix else (), default_system=default_system, reasoning=reasoning)


def fill(slots: tuple, content: str) -> list:
    """A slot's elements with ``content`` in place of the first ``{{content}}`` of each string
    (``StringFormatter.apply``); LLaMA-Factory refuses a content that is not a string."""
    if not isinstance(content, str):
        raise LFError(f"RuntimeError: Expected a string, got {str(content)[:60]}")
    return [s.replace("{{content}}", content, 1) if isinstance(s, str) else s for s in slots]


class LFError(Exception):
    """What LLaMA-Factory itself raises on a record (its message): the run stops there."""


# ------------------------------------------------------------------ tools and tool calls

#: ``DefaultToolUtils``'s system text (``tool_utils.py`` ``DEFAULT_TOOL_PROMPT``)
DEFAULT_TOOL_PROMPT = (
    "You have access to the following tools:\n{tool_text}Use the following format if using a tool:\n```\n"
    "Action: tool name (one of [{tool_names}])\nAction Input: the input to the tool, in a JSON format representing "
    "the kwargs (e.g. ```{{\"input\": \"hello world\", \"num_beams\": 5}}```)\n```\n")
#: ``QwenToolUtils``'s (``QWEN_TOOL_PROMPT``)
QWEN_TOOL_PROMPT = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
    "function signatures within <tools></tools> XML tags:\n<tools>{tool_text}\n</tools>\n\nFor each function call, "
    "return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    "{{\"name\": <function-name>, \"arguments\": <args-json-object>}}\n</tool_call>")


def _default_tool(tool: dict) -> tuple[str, str]:
    """One tool's block of the default format and its name: each parameter on a line with its type,
    ``required``, description, enum and item type."""
    fn = tool.get("function", "") if tool.get("type") == "function" else tool
    lines = []
    params = fn["parameters"]
    for name, p in params["properties"].items():
        req = ", required" if name in params.get("required", []) else ""
        enum = ", should be one of [{}]".format(", ".join(p["enum"])) if p.get("enum", None) else ""
        items = ", where each item should be {}".format(p["items"].get("type", "")) if p.get("items", None) else ""
        lines.append(f"  - {name} ({p.get('type', '')}{req}): {p.get('description', '')}{enum}{items}\n")
    return (f"> Tool Name: {fn['name']}\nTool Description: {fn.get('description', '')}\nTool Args:\n"
            f"{''.join(lines)}\n"), fn["name"]


def tool_text(tools_json: str, fmt: str) -> str:
    """The text the tool list adds to the system message (``ToolFormatter.apply``); raises
    :class:`LFError` where LLaMA-Factory raises (JSON that is not a list of tool definitions)."""
    try:
        tools = json.loads(tools_json)
    except ValueError:
        raise LFError(f"RuntimeError: Invalid JSON format in tool description: {tools_json[:60]!r}") from None
    if len(tools) == 0:
        return ""
    try:
        if fmt == "qwen":
            body = "".join("\n" + json.dumps(t if t.get("type") == "function" else {"type": "function", "function": t},
                                             ensure_ascii=False) for t in tools)
            return QWEN_TOOL_PROMPT.format(tool_text=body)
        blocks = [_default_tool(t) for t in tools]
    except (KeyError, TypeError, AttributeError) as err:
        raise LFError(f"{type(err).__name__} formatting the tool list: {str(err)[:80]}") from None
    return DEFAULT_TOOL_PROMPT.format(tool_text="".join(b for b, _ in blocks),
                                      tool_names=", ".join(n for _, n in blocks))


def _calls(json_text: str) -> list[tuple[str, str]]:
    try:
        calls = json.loads(json_text)
        calls = calls if isinstance(calls, list) else [calls]
        return [(c["name"], json.dumps(c["arguments"], ensure_ascii=False)) for c in calls]
    except ValueError:
        raise LFError(f"RuntimeError: Invalid JSON format in function message: {json_text[:60]!r}") from None
    except (KeyError, TypeError) as err:
        raise LFError(f"{type(err).__name__} reading a tool call: {str(err)[:80]}") from None


def call_text(content: str, fmt: str) -> str:
    """A ``function_call`` turn's text (``FunctionFormatter.apply``): the calls (JSON) in the tool
    format, after the text around a ``<tool_call>…</tool_call>`` span, or after the thought
    (``<think>…</think>``) that precedes the JSON."""
    span = re.search(f"{re.escape(TOOL_CALL_WORDS[0])}(.*?){re.escape(TOOL_CALL_WORDS[1])}", content, re.DOTALL)
    if span is not None:
        lead, calls = content.replace(span.group(0), ""), _calls(span.group(1))
    else:
        thought = re.search(f"{re.escape(THOUGHT_WORDS[0])}(.*?){re.escape(THOUGHT_WORDS[1])}", content, re.DOTALL)
        lead = thought.group(0) if thought else ""
        calls = _calls(content.replace(thought.group(0), "") if thought else content)
    if fmt == "qwen":
        body = "\n".join("<tool_call>\n" + json.dumps({"name": n, "arguments": json.loads(a)}, ensure_ascii=False)
                         + "\n</tool_call>" for n, a in calls)
    else:
        body = "\n".join(f"Action: {n}\nAction Input: {a}" for n, a in calls)
    return lead + body


def remove_thought(content: str) -> str:
    """``Template.remove_thought``: every ``<think>…</think>`` span dropped, leading newlines too.

    >>> remove_thought("<think>\\nhmm\\n</think>\\n\\nYes.")
    'Yes.'
    """
    pattern = f"{re.escape(THOUGHT_WORDS[0])}(.*?){re.escape(THOUGHT_WORDS[1])}"
    return re.sub(pattern, "", content, flags=re.DOTALL).lstrip("\n")


def with_eos(template: LFTemplate, **kw: Any) -> LFTemplate:
    """``template`` with fields replaced (a copy)."""
    return replace(template, **kw)
