"""The bounded Jinja environment a chat template renders in: transformers' environment, plus a
size, work and time budget on every way a template builds a string.

The environment is the one transformers' ``apply_chat_template`` builds
(``transformers/utils/chat_template_utils.py``, 5.x; see :mod:`embscope.models.chat_template`).
Jinja's sandbox limits attribute access, not work or size, so each rendering gets a
:class:`Budget`, and everything that builds a value is checked against it, before the value is
built wherever its size is known from the arguments:

===============================  ===========================================================
every output                     ``{{ … }}`` and literal text, at the top level and inside
                                 ``{% set %}…{% endset %}``, macros, ``{% call %}`` and
                                 ``{% filter %}`` blocks, count together toward
                                 ``Bounds.chars`` (a captured block is counted as it is
                                 written, not when it is printed)
``*`` ``+`` ``~`` ``%``          the result's length from the operands (``%``: the widths and
                                 precisions of the format, ``'%0800000000d' % 1``)
str methods                      ``format``/``format_map`` (widths in the specs, nested width
                                 arguments), ``join``, ``center``/``ljust``/``rjust``/``zfill``,
                                 ``replace``, ``expandtabs``
filters                          ``join``, ``batch``/``slice`` (``fill_with``), ``center``,
                                 ``indent``, ``wordwrap``, ``replace``, ``format``, ``tojson``
                                 (``indent`` × items × depth), ``sum`` (lists); every filter's
                                 result is measured after it returns
``lipsum``                       ``n × max`` words, made one paragraph at a time
``**``                           at most ``Bounds.power_bits`` bits of result; ``*`` of two
                                 integers at most :data:`MAX_INT_BITS`
work                             range steps, loop iterations (any iterable), attribute reads,
                                 calls and filters: ``Bounds.steps`` in all
time                             ``Bounds.seconds``, checked every :data:`CLOCK_EVERY` steps and
                                 at every sized operation
===============================  ===========================================================

The budget and the size estimates live in :mod:`embscope.models.template_budget`. Reaching a
bound raises :class:`RenderRefused`. What a builtin does inside one call cannot be stopped
here (a C-level string operation holds the interpreter); :mod:`embscope.models.render_worker`
runs the rendering in a process it can stop, under a memory limit, so the checks above give the
fast, exact refusals and the process gives the hard stop.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from embscope.models.template_budget import (CLOCK_EVERY, Bounds, Budget, NeedsWorker, RenderRefused, check_binop,
                                             check_filter, check_method, format_size, json_size, sized)

__all__ = ["Bounds", "NeedsWorker", "RenderRefused", "compile_template", "environment", "render_here"]

#: filters a strict rendering runs: their cost follows from their arguments, which the budget
#: checks. The sorting ones (:data:`SORTS`) run on small values only; the others (``striptags``,
#: ``urlize``, ``wordwrap``, ``pprint``, ``random``: regular expressions a crafted text makes
#: quadratic, or unbounded output) send the rendering to the worker
STRICT_FILTERS = frozenset({
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "e", "escape", "filesizeformat",
    "first", "float", "forceescape", "format", "indent", "int", "items", "join", "last", "length", "list", "lower",
    "map", "reject", "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr", "slice", "string",
    "sum", "title", "tojson", "trim", "truncate", "upper", "urlencode", "wordcount", "xmlattr"})
#: filters that sort or compare their items: strict on at most :data:`SORT_ITEMS` items holding at
#: most :data:`SORT_CHARS` of text (a tool's parameters, a few messages), so that ``n log n``
#: comparisons stay milliseconds
SORTS = frozenset({"sort", "dictsort", "groupby", "unique", "min", "max"})
SORT_ITEMS, SORT_CHARS = 4096, 1 << 20
#: filters that turn their value into text: a list or dict given to one is measured first
TEXT_FILTERS = frozenset({"capitalize", "center", "e", "escape", "forceescape", "format", "indent", "join", "lower",
                          "replace", "string", "title", "trim", "truncate", "upper", "urlencode", "wordcount"})
#: str methods a strict rendering calls: linear in the string (the ones that build are checked)
STR_METHODS = frozenset({
    "capitalize", "casefold", "center", "count", "endswith", "expandtabs", "find", "format", "format_map", "index",
    "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower", "isnumeric", "isspace",
    "istitle", "isupper", "join", "ljust", "lower", "lstrip", "partition", "removeprefix", "removesuffix", "replace",
    "rfind", "rindex", "rjust", "rpartition", "rsplit", "rstrip", "split", "splitlines", "startswith", "strip",
    "swapcase", "title", "upper", "zfill"})
#: methods of dicts and sequences a strict rendering calls
DICT_METHODS, SEQ_METHODS = frozenset({"get", "items", "keys", "values"}), frozenset({"index", "count"})
#: longest ``chars`` argument of ``strip`` a strict rendering takes (the work is the text × it)
MAX_STRIP_CHARS = 256


@lru_cache(maxsize=1)
def environment():
    """The bounded sandboxed environment (one per process; :func:`render_here` sets its budget)."""
    # long: one sandbox definition: its classes subclass jinja2's (imported here, not at import time,
    # so `embscope --help` stays light) and share the environment `env` and `safe_calls` by closure
    import jinja2
    import jinja2.ext
    from jinja2 import nodes
    from jinja2.compiler import CodeGenerator
    from jinja2.runtime import LoopContext, Macro, Undefined
    from jinja2.sandbox import ImmutableSandboxedEnvironment, safe_range
    from jinja2.utils import Cycler, Joiner, Namespace, generate_lorem_ipsum

    class Generation(jinja2.ext.Extension):
        """transformers' ``{% generation %}…{% endgeneration %}`` tag, rendering its body as is."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    class Counting(CodeGenerator):
        """Jinja's code generator, with every output, ``~`` and loop going through the budget:
        ``environment.written(x)`` around each output (a captured block's too; it also turns the
        value into text, as ``str(x)``, once a list or dict has been measured),
        ``environment.concat(...)`` for ``~``, ``environment.counted(it)`` around each loop's
        iterable."""

        def _output_const_repr(self, group):
            return f"environment.written({super()._output_const_repr(group)})"

        def _output_child_pre(self, node, frame, finalize):
            self.write("environment.written(")
            if frame.eval_ctx.volatile or frame.eval_ctx.autoescape:  # never in a chat template's environment
                super()._output_child_pre(node, frame, finalize)
            elif finalize.src is not None:
                self.write(finalize.src)

        def _output_child_post(self, node, frame, finalize):
            if frame.eval_ctx.volatile or frame.eval_ctx.autoescape:
                super()._output_child_post(node, frame, finalize)
            elif finalize.src is not None:
                self.write(")")
            self.write(")")

        def visit_Concat(self, node, frame):
            self.write("environment.concat((")
            for arg in node.nodes:
                self.visit(arg, frame)
                self.write(", ")
            self.write("))")

        def visit_For(self, node, frame):
            if not node.recursive:
                node.iter = nodes.Call(nodes.EnvironmentAttribute("counted"), [node.iter], [], None, None,
                                       lineno=node.lineno)
            super().visit_For(node, frame)

    class Bounded(ImmutableSandboxedEnvironment):
        code_generator_class = Counting
        intercepted_binops = frozenset(["*", "**", "+", "%"])
        budget = Budget()

        def call_binop(self, context, operator, left, right):
            budget = self.budget
            budget.steps += 1
            if budget.steps % CLOCK_EVERY == 0 or budget.steps > budget.bounds.steps:
                budget.charge(0)
            if operator == "+" and type(left) is str and type(right) is str:  # what chat templates do most
                budget.size(len(left) + len(right))
                return left + right
            check_binop(budget, operator, left, right)
            out = self.binop_table[operator](left, right)
            if operator == "%" and sized(out):  # its arguments' text is measured after: str() of a list
                budget.size(len(out))
            return out

        def getattr(self, obj, attribute):
            self.budget.charge()
            return super().getattr(obj, attribute)

        def getitem(self, obj, argument):
            self.budget.charge()
            out = super().getitem(obj, argument)
            if self.budget.strict and isinstance(argument, slice) and sized(out):
                self.budget.size(len(out))
            return out

        def strict_call(self, target, owner, name: str, args) -> bool:
            """Whether a strict rendering may make this call (see :data:`STR_METHODS`)."""
            if isinstance(target, (Macro, LoopContext, Joiner, Undefined, TemplateDict)) or id(target) in safe_calls:
                return True
            if isinstance(owner, str):
                return name in STR_METHODS and not (name.endswith("strip") and args and isinstance(args[0], str)
                                                    and len(args[0]) > MAX_STRIP_CHARS)
            if isinstance(owner, dict):
                return name in DICT_METHODS
            if isinstance(owner, (list, tuple)):
                return name in SEQ_METHODS
            return isinstance(owner, (LoopContext, Cycler, TemplateDict)) or (owner is self and name == "counted")

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - jinja's own signature
            __self.budget.charge()
            target = getattr(__obj, "__wrapped__", __obj)  # str.format comes wrapped by the sandbox
            owner, name = getattr(target, "__self__", None), getattr(target, "__name__", "")
            if __self.budget.strict and not __self.strict_call(target, owner, name, args):
                __self.budget.unsafe(f"a call of {name or type(target).__name__}")
            if isinstance(owner, str):
                if name in ("format", "format_map"):
                    values = (args[0] if args and isinstance(args[0], dict) else {}) if name == "format_map" else kwargs
                    __self.budget.containers([*args, *values.values()])
                    __self.budget.size(format_size(owner, args if name == "format" else (), values))
                else:
                    check_method(__self.budget, owner, name, args)
            out = super().call(__context, __obj, *args, **kwargs)
            if sized(out):
                __self.budget.size(len(out))
            return out

        def text(self, value) -> str:
            """``str(value)`` (a strict budget measures a list or dict first: its text can be far
            longer than it)."""
            if isinstance(value, str):
                return value
            self.budget.containers((value,))
            return str(value)

        def written(self, value):
            s = self.text(value)
            self.budget.write(len(s))
            return s

        def concat(self, parts):
            parts = [self.text(p) for p in parts]
            self.budget.charge()
            self.budget.size(sum(map(len, parts)))
            return "".join(parts)

        def counted(self, iterable):
            if isinstance(iterable, BoundedRange):  # charged once per item, not twice
                iterable = iterable.r
            budget = self.budget
            for item in iterable:
                budget.steps += 1
                if budget.steps % CLOCK_EVERY == 0:
                    budget.charge(0)  # the step count and the clock, every CLOCK_EVERY items
                yield item

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
            if sized(value):
                env.budget.size(len(value))

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

    def lipsum(n=5, html=True, min=20, max=100):
        """Jinja's ``lipsum``, one paragraph at a time, its size checked first (``n × max`` words
        of at most 12 letters, a space or a comma and a space)."""
        if isinstance(n, int) and isinstance(max, int):
            env.budget.size(n * (max * 14 + 16))
            if n * max > 100_000:  # seconds of Python in one call: not in the caller's process
                env.budget.unsafe("a long lipsum")
        paragraphs = []
        for _ in range(n):
            env.budget.charge()
            paragraphs.append(generate_lorem_ipsum(1, html, min, max))
        return type(paragraphs[0])("\n" if html else "\n\n").join(paragraphs) if paragraphs else ""

    def guarded(name, fn):
        passed = getattr(fn, "jinja_pass_arg", None)  # filters that take the context/environment first

        def filt(*args, **kwargs):
            lead, rest = (args[:1], args[1:]) if passed is not None else ((), args)
            budget = env.budget
            budget.charge()
            if rest:
                check_filter(budget, name, rest[0], rest[1:], kwargs)
            if budget.strict:
                strict_filter(budget, name, rest, kwargs)
            out = fn(*lead, *rest, **kwargs)
            if isinstance(out, (str, list, tuple, dict)):
                budget.size(len(out))
            return out
        if passed is not None:
            filt.jinja_pass_arg = passed
        return filt

    env.filters["tojson"] = tojson
    for name in list(env.filters):
        env.filters[name] = guarded(name, env.filters[name])
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now, dict=TemplateDict(),
                       namespace=TemplateNamespace, range=BoundedRange, lipsum=lipsum)
    safe_calls = {id(f) for f in (raise_exception, strftime_now, TemplateNamespace, BoundedRange, lipsum, Cycler, Joiner)}
    return env


def strict_filter(budget: Budget, name: str, rest: tuple, kwargs: dict) -> None:
    """What a strict rendering checks before a filter (see :data:`STRICT_FILTERS`)."""
    value = rest[0] if rest else None
    if name in SORTS:
        small = isinstance(value, (list, tuple, dict)) and len(value) <= SORT_ITEMS \
            and json_size(value, None, SORT_CHARS) <= SORT_CHARS
        if not small:
            budget.unsafe(f"the {name} filter on a large value")
    elif name not in STRICT_FILTERS:
        budget.unsafe(f"the {name} filter")
    if name in TEXT_FILTERS:
        budget.containers((value, *rest[1:], *kwargs.values()))
    if name == "list" and isinstance(value, str):
        budget.objects(len(value))
    elif name == "sum" and (isinstance(kwargs.get("start", rest[2] if len(rest) > 2 else 0), (list, tuple))
                            or (isinstance(value, (list, tuple)) and value and isinstance(value[0], (list, tuple)))):
        budget.unsafe("a sum of lists (quadratic)")


@lru_cache(maxsize=8)
def compile_template(template: str):
    """The compiled template (cached: training data renders one template many times)."""
    return environment().from_string(template)


def render_here(template: str, messages: list, *, bounds: Bounds = Bounds(), strict: bool = False,
                **variables: Any) -> str:
    """``template`` rendered on ``messages`` in this process, within ``bounds`` (the checks of the
    module docstring; nothing stops a single long builtin call: see
    :mod:`embscope.models.render_worker`). ``strict``: only operations whose cost the budget
    bounds, and a memory budget; anything else raises :class:`NeedsWorker`."""
    env = environment()
    compiled = compile_template(template)
    env.budget = budget = Budget(bounds, strict)
    parts: list[str] = []
    size = 0
    for piece in compiled.generate(messages=messages, **variables):
        size += len(piece)
        if size > bounds.chars:  # the budget's count of written characters catches this first
            raise RenderRefused(f"render refused: the rendered conversation passes {bounds.chars:,} characters")
        parts.append(piece)
    budget.clock()
    return "".join(parts)

