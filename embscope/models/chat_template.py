"""The chat template a model ships, and its rendering exactly as transformers renders it, in bounds.

Templates are untrusted text (GGUF metadata ``tokenizer.chat_template`` or the ``chat_template`` of
``tokenizer_config.json``). :func:`render` builds the environment transformers'
``apply_chat_template`` builds (``transformers/utils/chat_template_utils.py``, 5.x): Jinja's
``ImmutableSandboxedEnvironment`` with ``trim_blocks``, ``lstrip_blocks``, the ``loopcontrols``
extension, a ``tojson`` filter that does not escape HTML (``json.dumps(x, ensure_ascii=False)``),
the globals ``raise_exception``, ``strftime_now``, ``dict`` and ``namespace`` (a namespace that
refuses underscore names), and the variables ``messages``, ``tools`` and ``documents`` (None),
``add_generation_prompt`` and the tokenizer's named special tokens (``bos_token``, ``eos_token``,
``pad_token``, ``unk_token``, …, only those it defines). The ``{% generation %}`` tag of
assistant masks renders its body unchanged.

Bounds, per conversation (the sandbox limits attribute access, not work or size; a template such
as ``{{ 'ab ' * 10**7 }}`` or nested ``range(100000)`` loops would otherwise take gigabytes or hang):

==========================  ===============================================================
characters                  at most :data:`MAX_RENDER_CHARS` written in all, captured
                            ``{% set %}`` blocks and macros included, and in any one value;
                            every way of building a string is checked, before it is built
                            where its size is known (:mod:`embscope.models.template_sandbox`)
``**``                      an exponent above :data:`MAX_POWER_BITS` bits of result is refused
steps                       at most :data:`MAX_RENDER_STEPS` range steps, loop iterations,
                            attribute reads, calls and filters
wall clock                  :data:`MAX_RENDER_SECONDS`, held inside a single long call too (below)
memory                      the worker's address space, :data:`~embscope.models.render_worker.MEMORY`
==========================  ===============================================================

Where a rendering runs: first in this process, *strictly*: only filters, methods and calls whose
cost follows from arguments the budget checks (:data:`~embscope.models.template_sandbox.STRICT_FILTERS`,
``STR_METHODS``), and at most :data:`~embscope.models.template_budget.STRICT_UNITS` of memory built
(``STRICT_VALUE`` in one value);
real templates render so (SmolLM2's, Gemma's, Llama's, Qwen's). Anything else (a sort, a
regular expression over the text, an unlisted method, a RecursionError) renders the conversation
again in a worker process (:mod:`embscope.models.render_worker`), killed
:data:`~embscope.models.render_worker.GRACE` s past the deadline, its address space capped. Both
give the same text; the worker is the hard bound for what a template can do in one builtin call.

What :func:`render` raises, so that a caller can tell a template from a conversation:

- :class:`RenderRefused` (``render refused: …``, one line): the template passes a bound on a
  two-turn probe conversation too, so it cannot render any example; stop using it;
- :class:`RecordRefused`: this conversation passes a bound (a long record, a loop over its
  content) while the probe does not; the next conversation may render;
- :class:`RenderFailed` (a ``jinja2.TemplateError``, named after what the template raised:
  ``ZeroDivisionError``, ``UndefinedError``, ``raise_exception``'s ``TemplateError``): the
  template failed on this conversation. :class:`RecordRefused` is one too.

Nothing else escapes: every exception a template raises comes back as one of these.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jinja2.exceptions import TemplateError

from embscope.errors import EmbscopeError
from embscope.models.template_sandbox import RenderRefused

if TYPE_CHECKING:  # pragma: no cover
    from embscope.models.model import LoadedModel

__all__ = ["RecordRefused", "RenderFailed", "RenderRefused", "read_chat_template", "render",
           "special_token_strings"]

#: longest rendered conversation, in characters: 16 Mi is 30 times a 128k-token context of English
MAX_RENDER_CHARS = 1 << 24
#: range steps, loop iterations, attribute reads and calls one rendering may take; real templates
#: take tens per message, so 10⁷ is far above any of them
MAX_RENDER_STEPS = 10_000_000
#: seconds one rendering may take (real templates: well under a millisecond)
MAX_RENDER_SECONDS = 10.0
#: largest result of ``**``, in bits (a 64-bit integer is all a template needs)
MAX_POWER_BITS = 64
#: the named special tokens transformers passes to a template (``SPECIAL_TOKENS_ATTRIBUTES``)
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
#: the conversations a refusal is tried again on, to tell a template that refuses everything from
#: a conversation that asks too much (a template may refuse a system turn, hence two)
PROBES = ([{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there."}],
          [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"},
           {"role": "assistant", "content": "Hi there."}])
#: a refused conversation with no more characters than this is refused with the template, unprobed
PROBE_CHARS = 64
#: renderings tried in this process (``here``) and those sent on to the worker (``worker``)
PATHS: Counter = Counter()
_HERE = threading.Lock()


class RenderFailed(TemplateError):
    """The template raised on one conversation; the class is named after the exception raised
    (``ZeroDivisionError``), the message is its message."""


class RecordRefused(RenderFailed):
    """One conversation passes a render bound that the probe conversations do not (see the module
    docstring): that conversation is refused, not the template."""
def read_chat_template(model: "LoadedModel") -> str | None:
    """The chat template the base model ships, if any: GGUF metadata ``tokenizer.chat_template``;
    for a folder, ``tokenizer_config.json``'s ``chat_template`` (a named list: its ``default``),
    else ``chat_template.jinja`` (where transformers ≥ 4.43 saves it, with or without a config).
    A damaged ``tokenizer_config.json`` is an error naming the file, not "no template"."""
    path = Path(model.path)
    if path.suffix == ".gguf":
        from embscope.formats.gguf import open_gguf

        try:
            field = open_gguf(path).fields.get("tokenizer.chat_template")
        except Exception:  # noqa: BLE001 - the GGUF was read when the model loaded; a template is optional
            return None
        value = field.contents() if hasattr(field, "contents") else field
        return value if isinstance(value, str) else None
    template = None
    cfg = path / "tokenizer_config.json"
    if cfg.is_file():
        from embscope.errors import ModelFileError
        from embscope.formats.files import read_json

        data = read_json(cfg, what="tokenizer config")
        if not isinstance(data, dict):
            raise ModelFileError(f"{cfg} is not a JSON object: re-download it")
        template = data.get("chat_template")
        if isinstance(template, list):  # several named templates: transformers uses "default"
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default")
    jinja = path / "chat_template.jinja"
    if not isinstance(template, str) and jinja.is_file():
        from embscope.formats.files import read_bytes

        template = read_bytes(jinja, what="chat template", min_bytes=0).decode("utf-8", "replace")
    return template if isinstance(template, str) else None


def special_token_strings(model: "LoadedModel") -> dict[str, str]:
    """``{"bos_token": …, "eos_token": …, …}``: what transformers passes a template for the model.

    A folder's ``tokenizer_config.json`` / ``special_tokens_map.json`` name the tokens (strings, or
    ``{"content": …}``); otherwise (GGUF, a config alone) the config's ``*_token_id`` ids are looked
    up in the vocabulary. Tokens the model does not define are left out, as transformers does.
    """
    names: dict[str, str] = {}
    path = Path(model.path)
    if path.is_dir():
        from embscope.formats.files import read_json

        for fname in ("special_tokens_map.json", "tokenizer_config.json"):  # the config wins
            f = path / fname
            if not f.is_file():
                continue
            try:
                data = read_json(f, what="tokenizer config")
            except EmbscopeError:
                continue
            for key in SPECIAL_TOKEN_NAMES:
                v = data.get(key)
                v = v.get("content") if isinstance(v, dict) else v
                if isinstance(v, str):
                    names[key] = v
    if names:
        return names
    gguf: dict[str, Any] = {}
    if path.suffix == ".gguf":
        from embscope.formats.gguf import open_gguf

        fields = open_gguf(path, tensors=False).fields
        gguf = {"bos_token": fields.get("tokenizer.ggml.bos_token_id"),
                "eos_token": fields.get("tokenizer.ggml.eos_token_id"),
                "unk_token": fields.get("tokenizer.ggml.unknown_token_id"),
                "sep_token": fields.get("tokenizer.ggml.seperator_token_id"),
                "pad_token": fields.get("tokenizer.ggml.padding_token_id")}
    for key in SPECIAL_TOKEN_NAMES:
        i = gguf.get(key) if gguf.get(key) is not None else model.config.get(f"{key}_id")
        i = i[0] if isinstance(i, list) and i else i
        if isinstance(i, int) and model.vocab is not None and 0 <= i < len(model.vocab):
            s = model.vocab.display(i)
            if s:
                names[key] = s
    return names


@lru_cache(maxsize=64)
def _failed(name: str) -> type:
    """A :class:`RenderFailed` named after the exception the template raised."""
    if not re.fullmatch(r"[A-Za-z_]\w{0,63}", name):
        return RenderFailed
    return type(name, (RenderFailed,), {"__module__": __name__,
                                        "__doc__": f"{name}, raised by a chat template (a RenderFailed)."})


def _raise(error: dict[str, Any]):
    """The worker's ``failed`` answer as the exception :func:`render` raises."""
    import jinja2.exceptions

    name, message = str(error.get("type", "Exception")), str(error.get("message", ""))
    jinja_class = getattr(jinja2.exceptions, name, None)
    if isinstance(jinja_class, type) and issubclass(jinja_class, TemplateError) and name != "TemplateNotFound":
        if issubclass(jinja_class, jinja2.exceptions.TemplateSyntaxError):
            raise jinja_class(message, error.get("lineno") or 1)
        raise jinja_class(message)
    raise _failed(name)(message)


def _bounds():
    from embscope.models.template_sandbox import Bounds

    return Bounds(MAX_RENDER_CHARS, MAX_RENDER_STEPS, MAX_RENDER_SECONDS, MAX_POWER_BITS)


def _attempt(template: str, messages: list, variables: dict[str, Any], bounds) -> str:
    """One rendering: strict, in this process, when the template does only what the budget bounds
    (real templates do); in the worker process otherwise (see the module docstring)."""
    from embscope.models import render_worker
    from embscope.models.template_sandbox import NeedsWorker, render_here

    try:
        with _HERE:  # one environment per process: one rendering at a time in it
            PATHS["here"] += 1
            return render_here(template, messages, bounds=bounds, strict=True, **variables)
    except (NeedsWorker, MemoryError, RecursionError):  # the worker decides: its limits are hard
        pass
    except RenderRefused:
        raise
    except Exception as err:  # noqa: BLE001 - whatever the template raised, as the worker reports it
        _raise(render_worker.describe(err))
    PATHS["worker"] += 1
    answer = render_worker.render(template, messages, variables, bounds)
    if answer.kind == "text":
        return answer.text
    if answer.kind == "refused":
        raise RenderRefused(answer.text)
    _raise(answer.error)


@lru_cache(maxsize=32)
def _refuses_any(template: str, variables: tuple, add_generation_prompt: bool, bounds) -> bool:
    """Whether ``template`` passes a bound on the :data:`PROBES` too (a template error on a probe
    says nothing about the bounds, so the next probe is tried)."""
    names = dict(variables, tools=None, documents=None, add_generation_prompt=add_generation_prompt)
    for probe in PROBES:
        try:
            _attempt(template, [dict(m) for m in probe], names, bounds)
            return False
        except RenderRefused:
            return True
        except TemplateError:
            continue
    return False


def render(template: str, messages: list[dict[str, Any]], *, add_generation_prompt: bool = False,
           tools: list | None = None, documents: list | None = None, **variables: Any) -> str:
    """``template`` rendered on ``messages`` as ``tokenizer.apply_chat_template(messages,
    tokenize=False)`` renders it (``variables``: the special tokens, :func:`special_token_strings`).

    Messages' keys whose value is None are dropped first, as transformers does. Raises what the
    module docstring lists, and nothing else: :class:`RenderRefused` for a template that passes
    the bounds whatever the conversation, :class:`RecordRefused` for a conversation that makes it
    pass them, :class:`RenderFailed` (a ``jinja2.TemplateError``) for whatever else the template
    raised (``raise_exception(msg)`` raises a ``TemplateError`` with ``msg``).
    """
    messages = [{k: v for k, v in m.items() if v is not None} if isinstance(m, dict) else m for m in messages]
    bounds = _bounds()
    names = dict(variables, tools=tools, documents=documents, add_generation_prompt=add_generation_prompt)
    try:
        return _attempt(template, messages, names, bounds)
    except RenderRefused as err:
        if _chars(messages) <= PROBE_CHARS:  # a conversation no larger than a probe: the template's doing
            raise
        plain = tuple(sorted((k, v) for k, v in variables.items() if isinstance(v, (str, int, float, bool))))
        if _refuses_any(template, plain, add_generation_prompt, bounds):
            raise
        raise RecordRefused(str(err)) from None


def _chars(value) -> int:
    """Characters of the strings in a conversation (contents, roles, typed parts), however deep."""
    total, stack = 0, [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            total += len(v)
        elif isinstance(v, dict):
            stack += v.values()
        elif isinstance(v, (list, tuple)):
            stack += v
    return total
