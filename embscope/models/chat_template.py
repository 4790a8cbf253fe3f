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

Bounds (the sandbox limits attribute access, not work or size; a template such as
``{{ 'ab ' * 10**7 }}`` or nested ``range(100000)`` loops would otherwise take gigabytes or hang):

==========================  ===============================================================
rendered text               at most :data:`MAX_RENDER_CHARS` characters per conversation
``*`` and ``+``             a string or list result longer than that is refused before it is built
``**``                      an exponent above :data:`MAX_POWER_BITS` bits of result is refused
string padding / replace    ``center``/``ljust``/``rjust``/``zfill``/``replace`` and the
                            ``center``/``indent``/``replace``/``wordwrap`` filters: same cap
``range`` and loops         at most :data:`MAX_RENDER_STEPS` range steps, attribute reads and
                            calls per conversation
wall clock                  :data:`MAX_RENDER_SECONDS` per conversation
==========================  ===============================================================

A template that reaches one raises :class:`RenderRefused` (``render refused: …``, one line);
callers report it and go on without the template.
"""

from __future__ import annotations

import json
import time
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embscope.errors import EmbscopeError

if TYPE_CHECKING:  # pragma: no cover
    from embscope.models.model import LoadedModel

#: longest rendered conversation, in characters: 16 Mi is 30 times a 128k-token context of English
MAX_RENDER_CHARS = 1 << 24
#: range steps, attribute reads and calls one rendering may take; real templates take tens per
#: message, so 10⁷ is far above any of them
MAX_RENDER_STEPS = 10_000_000
#: seconds one rendering may take (real templates: well under a millisecond)
MAX_RENDER_SECONDS = 10.0
#: largest result of ``**``, in bits (a 64-bit integer is all a template needs)
MAX_POWER_BITS = 64
#: the named special tokens transformers passes to a template (``SPECIAL_TOKENS_ATTRIBUTES``)
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class RenderRefused(EmbscopeError):
    """A chat template that needs more output, work or time than a rendering may take."""


def read_chat_template(model: "LoadedModel") -> str | None:
    """The chat template the base model ships (GGUF metadata or tokenizer_config.json), if any."""
    path = Path(model.path)
    try:
        if path.suffix == ".gguf":
            from embscope.formats.gguf import open_gguf

            field = open_gguf(path).fields.get("tokenizer.chat_template")
            value = field.contents() if hasattr(field, "contents") else field
            return value if isinstance(value, str) else None
        cfg = path / "tokenizer_config.json"
        if cfg.exists():
            from embscope.formats.files import read_json

            template = read_json(cfg, what="tokenizer config").get("chat_template")
            if isinstance(template, list):  # several named templates: transformers uses "default"
                named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
                template = named.get("default")
            if not isinstance(template, str) and (path / "chat_template.jinja").is_file():
                template = (path / "chat_template.jinja").read_text("utf-8")
            return template if isinstance(template, str) else None
    except Exception:  # a missing template is not worth failing the run
        return None
    return None


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


class _Budget:
    """Steps and a deadline for one rendering."""

    def __init__(self):
        self.steps = 0
        self.deadline = time.monotonic() + MAX_RENDER_SECONDS

    def charge(self, n: int = 1) -> None:
        self.steps += n
        if self.steps > MAX_RENDER_STEPS:
            raise RenderRefused(f"render refused: the template takes more than {MAX_RENDER_STEPS:,} steps "
                                "(loops, calls); it cannot render a training example")
        if self.steps & 0x3FF == 0 and time.monotonic() > self.deadline:
            raise RenderRefused(f"render refused: the template ran past {MAX_RENDER_SECONDS:g} s on one "
                                "conversation")


def _too_long(n: int) -> None:
    if n > MAX_RENDER_CHARS:
        raise RenderRefused(f"render refused: the template builds a value of {n:,} items, more than "
                            f"{MAX_RENDER_CHARS:,}")


def _sized(x) -> bool:
    return isinstance(x, (str, list, tuple))


@lru_cache(maxsize=8)
def _environment():
    """The sandboxed environment (one per process; its budget is set per rendering)."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment, safe_range
    from jinja2.utils import Namespace

    class Generation(jinja2.ext.Extension):
        """transformers' ``{% generation %}…{% endgeneration %}`` tag, rendering its body as is."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    class Bounded(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["*", "**", "+"])
        budget = _Budget()

        def call_binop(self, context, operator, left, right):
            self.budget.charge()
            if operator == "**":
                if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1 \
                        and right * abs(left).bit_length() > MAX_POWER_BITS:
                    raise RenderRefused(f"render refused: {left} ** {right} is larger than {MAX_POWER_BITS} bits")
            elif operator == "*":
                if _sized(left) and isinstance(right, int):
                    _too_long(len(left) * right)
                elif _sized(right) and isinstance(left, int):
                    _too_long(len(right) * left)
            elif operator == "+" and _sized(left) and _sized(right):
                _too_long(len(left) + len(right))
            return super().call_binop(context, operator, left, right)

        def getattr(self, obj, attribute):
            self.budget.charge()
            return super().getattr(obj, attribute)

        def getitem(self, obj, argument):
            self.budget.charge()
            return super().getitem(obj, argument)

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - jinja's own signature
            __self.budget.charge()
            name = getattr(__obj, "__name__", "")
            if isinstance(getattr(__obj, "__self__", None), str) and name in _PADDERS:
                _check_pad(__obj.__self__, name, args)
            return super().call(__context, __obj, *args, **kwargs)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        from datetime import datetime

        return datetime.now().strftime(format)

    class TemplateDict:
        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(Namespace):
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check(name, attrs[name])
            Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            TemplateNamespace._check(name, value)
            Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name, value):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}.")
            if _sized(value):
                _too_long(len(value))

    env = Bounded(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols])

    class BoundedRange:
        """Jinja's ``safe_range`` (at most 100,000 items, as transformers' environment has), whose
        iteration is charged to the rendering's budget."""

        def __init__(self, *args):
            self.r = safe_range(*args)

        def __iter__(self):
            for i in self.r:
                env.budget.charge()
                yield i

        def __len__(self):
            return len(self.r)

        def __getitem__(self, i):
            return self.r[i]

        def __contains__(self, x):
            return x in self.r

        def __reversed__(self):
            for i in reversed(self.r):
                env.budget.charge()
                yield i

    def guarded(name, fn):
        passed = getattr(fn, "jinja_pass_arg", None)  # filters that take the eval context first

        def filt(*args, **kwargs):
            lead, (value, *rest) = (args[:1], args[1:]) if passed is not None else ((), args)
            _check_pad(str(value), name, rest)
            return fn(*lead, value, *rest, **kwargs)
        if passed is not None:
            filt.jinja_pass_arg = passed
        return filt

    env.filters["tojson"] = tojson
    for name in ("center", "indent", "wordwrap", "replace"):
        env.filters[name] = guarded(name, env.filters[name])
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now, dict=TemplateDict(),
                       namespace=TemplateNamespace, range=BoundedRange)
    return env


#: string methods (and filters) whose output size an argument sets
_PADDERS = {"center", "ljust", "rjust", "zfill", "replace", "indent", "wordwrap", "expandtabs"}


def _check_pad(s: str, name: str, args) -> None:
    """Refuse a padding or replacement that would build more than :data:`MAX_RENDER_CHARS`."""
    if name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        hits = (len(s) + 1) if args[0] == "" else s.count(args[0])
        _too_long(len(s) + hits * max(0, len(args[1]) - len(args[0])))
    elif name == "indent":
        width = args[0] if args else 4
        n = width if isinstance(width, int) else len(width) if isinstance(width, str) else 0
        _too_long(len(s) + n * (s.count("\n") + 1))
    elif name == "expandtabs":
        n = args[0] if args and isinstance(args[0], int) else 8
        _too_long(len(s) + n * s.count("\t"))
    elif args and isinstance(args[0], int):
        _too_long(args[0])


@lru_cache(maxsize=8)
def compile_template(template: str):
    """The compiled template (cached: training data renders one template many times)."""
    return _environment().from_string(template)


def render(template: str, messages: list[dict[str, Any]], *, add_generation_prompt: bool = False,
           tools: list | None = None, documents: list | None = None, **variables: Any) -> str:
    """``template`` rendered on ``messages`` as ``tokenizer.apply_chat_template(messages,
    tokenize=False)`` renders it (``variables``: the special tokens, :func:`special_token_strings`).

    Messages' keys whose value is None are dropped first, as transformers does. A template error
    raises ``jinja2.TemplateError`` (``raise_exception(msg)`` in the template raises one too); a
    template past the bounds of the module docstring raises :class:`RenderRefused`.
    """
    env = _environment()
    compiled = compile_template(template)
    messages = [{k: v for k, v in m.items() if v is not None} if isinstance(m, dict) else m for m in messages]
    env.budget = _Budget()
    size = 0
    parts: list[str] = []
    for piece in compiled.generate(messages=messages, tools=tools, documents=documents,
                                   add_generation_prompt=add_generation_prompt, **variables):
        size += len(piece)
        if size > MAX_RENDER_CHARS:
            raise RenderRefused(f"render refused: the rendered conversation passes {MAX_RENDER_CHARS:,} characters")
        parts.append(piece)
    return "".join(parts)
