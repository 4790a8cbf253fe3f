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

from embscope.models.template_budget import (CLOCK_EVERY, Bounds, Budget, RenderRefused, check_binop, check_filter,
                                             check_method, format_size, sized)

__all__ = ["Bounds", "RenderRefused", "compile_template", "environment", "render_here"]


@lru_cache(maxsize=1)
def environment():
    """The bounded sandboxed environment (one per process; :func:`render_here` sets its budget)."""
    import jinja2
    import jinja2.ext
    from jinja2 import nodes
    from jinja2.compiler import CodeGenerator
    from jinja2.sandbox import ImmutableSandboxedEnvironment, safe_range
    from jinja2.utils import Namespace, generate_lorem_ipsum

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
        ``environment.written(x)`` around each output (a captured block's too),
        ``environment.concat(...)`` for ``~``, ``environment.counted(it)`` around each loop's
        iterable."""

        def _output_const_repr(self, group):
            return f"environment.written({super()._output_const_repr(group)})"

        def _output_child_pre(self, node, frame, finalize):
            self.write("environment.written(")
            super()._output_child_pre(node, frame, finalize)

        def _output_child_post(self, node, frame, finalize):
            super()._output_child_post(node, frame, finalize)
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
            self.budget.charge()
            check_binop(self.budget, operator, left, right)
            return super().call_binop(context, operator, left, right)

        def getattr(self, obj, attribute):
            self.budget.charge()
            return super().getattr(obj, attribute)

        def getitem(self, obj, argument):
            self.budget.charge()
            return super().getitem(obj, argument)

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - jinja's own signature
            __self.budget.charge()
            target = getattr(__obj, "__wrapped__", __obj)  # str.format comes wrapped by the sandbox
            owner, name = getattr(target, "__self__", None), getattr(target, "__name__", "")
            if isinstance(owner, str):
                if name in ("format", "format_map"):
                    values = (args[0] if args and isinstance(args[0], dict) else {}) if name == "format_map" else kwargs
                    __self.budget.size(format_size(owner, args if name == "format" else (), values))
                else:
                    check_method(__self.budget, owner, name, args)
            out = super().call(__context, __obj, *args, **kwargs)
            if sized(out):
                __self.budget.size(len(out))
            return out

        def written(self, s):
            self.budget.write(len(s))
            return s

        def concat(self, parts):
            parts = [p if isinstance(p, str) else str(p) for p in parts]
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
        paragraphs = []
        for _ in range(n):
            env.budget.charge()
            paragraphs.append(generate_lorem_ipsum(1, html, min, max))
        return type(paragraphs[0])("\n" if html else "\n\n").join(paragraphs) if paragraphs else ""

    def guarded(name, fn):
        passed = getattr(fn, "jinja_pass_arg", None)  # filters that take the context/environment first

        def filt(*args, **kwargs):
            lead, rest = (args[:1], args[1:]) if passed is not None else ((), args)
            env.budget.charge()
            if rest:
                check_filter(env.budget, name, rest[0], rest[1:], kwargs)
            out = fn(*lead, *rest, **kwargs)
            if isinstance(out, (str, list, tuple, dict)):
                env.budget.size(len(out))
            return out
        if passed is not None:
            filt.jinja_pass_arg = passed
        return filt

    env.filters["tojson"] = tojson
    for name in list(env.filters):
        env.filters[name] = guarded(name, env.filters[name])
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now, dict=TemplateDict(),
                       namespace=TemplateNamespace, range=BoundedRange, lipsum=lipsum)
    return env


@lru_cache(maxsize=8)
def compile_template(template: str):
    """The compiled template (cached: training data renders one template many times)."""
    return environment().from_string(template)


def render_here(template: str, messages: list, *, bounds: Bounds = Bounds(), **variables: Any) -> str:
    """``template`` rendered on ``messages`` in this process, within ``bounds`` (the checks of the
    module docstring; nothing stops a single long builtin call: see
    :mod:`embscope.models.render_worker`)."""
    env = environment()
    compiled = compile_template(template)
    env.budget = budget = Budget(bounds)
    parts: list[str] = []
    size = 0
    for piece in compiled.generate(messages=messages, **variables):
        size += len(piece)
        if size > bounds.chars:  # the budget's count of written characters catches this first
            raise RenderRefused(f"render refused: the rendered conversation passes {bounds.chars:,} characters")
        parts.append(piece)
    budget.clock()
    return "".join(parts)

