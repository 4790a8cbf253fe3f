"""What one chat-template rendering may take, and the size of a value before it is built.

:class:`Budget` counts a rendering's steps and written characters against its :class:`Bounds` and
keeps its deadline; the ``check_*`` functions refuse an operation whose result would pass them,
from its arguments alone (the widths of a ``%`` format, the items of a ``join``, the indent of a
``tojson``), so nothing large is allocated before the refusal. :mod:`embscope.models.template_sandbox`
calls them from the Jinja environment; every estimate is an upper bound of the real length.

A *strict* budget is the one of a rendering in the caller's own process, where nothing can stop a
long builtin call or give back memory: it also counts what every value built costs in memory
(:data:`STRICT_UNITS`, about bytes: 8 per character or item, 64 per object), and an operation
whose cost its arguments do not bound (a sort, a regular expression over the text, a method
outside the lists of :mod:`~embscope.models.template_sandbox`) raises :class:`NeedsWorker`: the
rendering is then done again in the worker process, whose limits are hard.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from embscope.errors import EmbscopeError

#: the largest product of two integers a template may build, in bits (no chat template multiplies
#: numbers of more than a few digits)
MAX_INT_BITS = 1 << 16
#: steps between two looks at the clock (a look costs ~50 ns; a step at least ~300 ns)
CLOCK_EVERY = 64
#: memory units (about bytes: 8 per character or item, 64 per object) a strict rendering may build
#: in all, and the longest value it builds: real templates build a few copies of a record (at most
#: 1 MiB), so 64 Mi and 4 Mi leave room; past them the worker renders
STRICT_UNITS, STRICT_VALUE = 64 << 20, 4 << 20


class RenderRefused(EmbscopeError):
    """A chat template that needs more output, work or time than a rendering may take."""


class NeedsWorker(Exception):
    """A strict rendering met an operation whose cost it cannot bound: render in the worker."""


@dataclass(frozen=True)
class Bounds:
    """What one rendering may take (the defaults are :mod:`embscope.models.chat_template`'s)."""

    #: characters written in all (every output, captured blocks included) and the longest value
    chars: int = 1 << 24
    #: range steps, loop iterations, attribute reads, calls and filters
    steps: int = 10_000_000
    #: wall-clock seconds
    seconds: float = 10.0
    #: bits of the result of ``**``
    power_bits: int = 64


class Budget:
    """Steps, written characters and a deadline for one rendering (``strict``: also the memory
    built, see the module docstring)."""

    def __init__(self, bounds: Bounds = Bounds(), strict: bool = False):
        self.bounds = bounds
        self.strict = strict
        self.steps = 0
        self.written = 0
        self.built = 0
        self.deadline = time.monotonic() + bounds.seconds

    def unsafe(self, why: str) -> None:
        """An operation whose cost the arguments do not bound: refused to a strict rendering."""
        if self.strict:
            raise NeedsWorker(why)

    def containers(self, values) -> None:
        """Before lists or dicts are turned into text by a strict rendering: one whose text could
        pass the bounds (:func:`json_size`, an upper bound) is left to the worker, which builds it
        and measures it (an estimate never refuses a rendering)."""
        if self.strict:
            for v in values:
                if isinstance(v, (list, tuple, dict)) and json_size(v, None, self.bounds.chars) > self.bounds.chars:
                    raise NeedsWorker("the text of a large list or dict")

    def objects(self, n: int, per: int = 64) -> None:
        """``n`` new objects (a split's pieces, a list's items) built by a strict rendering."""
        if self.strict:
            self.built += per * n
            if self.built > STRICT_UNITS or n > STRICT_VALUE:
                raise NeedsWorker("the rendering builds more than a strict rendering may hold")

    def charge(self, n: int = 1) -> None:
        self.steps += n
        if self.steps > self.bounds.steps:
            raise RenderRefused(f"render refused: the template takes more than {self.bounds.steps:,} steps "
                                "(loops, calls); it cannot render a training example")
        if self.steps % CLOCK_EVERY == 0:
            self.clock()

    def clock(self) -> None:
        if time.monotonic() > self.deadline:
            raise RenderRefused(f"render refused: the template ran past {self.bounds.seconds:g} s on one "
                                "conversation")

    def size(self, n: int) -> None:
        """Refuse a value of ``n`` characters (or items) before it is built."""
        if n > self.bounds.chars:
            raise RenderRefused(f"render refused: the template builds a value of {n:,} items, more than "
                                f"{self.bounds.chars:,}")
        if self.strict:
            self.built += 8 * n + 64
            if self.built > STRICT_UNITS or n > STRICT_VALUE:
                raise NeedsWorker("the rendering builds more than a strict rendering may hold")
        if n > 1 << 16:  # building it takes long enough to look at the clock (small ones: every CLOCK_EVERY steps)
            self.clock()

    def write(self, n: int) -> None:
        self.written += n
        if self.written > self.bounds.chars:
            raise RenderRefused(f"render refused: the template writes more than {self.bounds.chars:,} characters "
                                "(the rendered conversation and the blocks it captures)")


def sized(x) -> bool:
    """A value whose length is its size: a string, list, tuple or bytes."""
    return isinstance(x, (str, list, tuple, bytes))


def _length(x) -> int:
    """The length of a value that is about to be turned into text: its own for a string, a guess
    of 32 characters for anything else (numbers; a list or dict is measured after it is built, or,
    by a strict budget, before: :meth:`Budget.containers`)."""
    return len(x) if isinstance(x, str) else 32


# ``%`` conversions: ``%(name)-08.3f``; the width and precision are what can make them large
_PRINTF = re.compile(r"%(?:\([^)]*\))?[#0 +\-]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?([diouxXeEfFgGcrsa%])")
_DIGITS = re.compile(r"\d+")


def printf_size(fmt: str, args) -> int:
    """An upper bound on the length of ``fmt % args`` (widths, precisions, the arguments' lengths).

    >>> printf_size("%0800000000d", 1) > 800_000_000
    True
    """
    values = list(args.values()) if isinstance(args, dict) else list(args) if isinstance(args, tuple) else [args]
    ints = iter([v for v in values if isinstance(v, int)])
    n = len(fmt)
    for m in _PRINTF.finditer(fmt):
        width, prec, conv = m.group(1), m.group(2), m.group(3)
        w = next(ints, 0) if width == "*" else int(width or 0)
        p = next(ints, 0) if prec == "*" else int(prec or 0)
        n += abs(w) + abs(p) + 32
    return n + sum(_length(v) for v in values)


def format_size(fmt: str, args, kwargs) -> int:
    """An upper bound on the length of ``fmt.format(*args, **kwargs)``: the digits of every spec
    (``{:0800000000d}``), the integer arguments when a spec nests a field (``{:{w}}``), and the
    arguments' lengths."""
    import string

    values = [*args, *kwargs.values()]
    n = len(fmt) + sum(_length(v) for v in values)
    try:
        fields = list(string.Formatter().parse(fmt))
    except ValueError:
        return n  # str.format raises the same error
    for _, name, spec, _ in fields:
        if name is None:
            continue
        spec = spec or ""
        n += max((int(d) for d in _DIGITS.findall(spec)), default=0) + 32
        if "{" in spec:
            n += max((abs(v) for v in values if isinstance(v, int) and not isinstance(v, bool)), default=0)
    return n


def json_size(value, indent, limit: int, upper: bool = True) -> int:
    """A bound on the length of ``json.dumps(value, indent=indent)`` (or of ``str(value)``),
    the walk stopping as soon as it passes ``limit``. ``upper``: at least the real length (every
    string's characters × 6, as ``\\uXXXX``; 32 per item besides the indent × its depth), to tell
    whether building it is safe; otherwise at most the real length (a string's characters and its
    quotes, 1 per item besides the indent × its depth), to refuse it before it is built.

    >>> json_size({"a": [1, 2]}, 10**8, 1 << 24, upper=False) > 1 << 24
    True
    >>> json_size("x" * 3_000_000, None, 1 << 24, upper=False) < 1 << 24 < json_size("x" * 3_000_000, None, 1 << 24)
    True
    """
    step = len(indent) if isinstance(indent, str) else max(0, indent) if isinstance(indent, int) else 0
    per_item, per_char, quotes = (32, 6, 0) if upper else (1, 1, 2)
    total = 0
    stack = [(iter((value,)), 1)]  # iterators, not items: memory grows with the depth only
    while stack:
        it, depth = stack[-1]
        v = next(it, _END)
        if v is _END:
            stack.pop()
            continue
        total += per_item + step * depth
        if total > limit:
            return total
        if isinstance(v, str):
            total += per_char * len(v) + quotes
        elif isinstance(v, dict):
            stack.append((iter([*v.keys(), *v.values()]) if len(v) < 4096 else _dict_items(v), depth + 1))
        elif isinstance(v, (list, tuple)):
            stack.append((iter(v), depth + 1))
    return total


_END = object()


def _dict_items(d: dict):
    for k, v in d.items():
        yield k
        yield v


def _arg(args, kwargs, i: int, name: str, default=None):
    return args[i] if len(args) > i else kwargs.get(name, default)


def _str_items(value) -> int | None:
    """Total length of a list or tuple of strings (None for anything else)."""
    if isinstance(value, (list, tuple)) and all(isinstance(x, str) for x in value):
        return sum(map(len, value))
    return None


def check_filter(budget: Budget, name: str, value, args, kwargs) -> None:
    """Refuse a filter call whose result would pass the bounds, from its arguments."""
    if name == "join":
        total = _str_items(value)
        sep = _arg(args, kwargs, 0, "d", "")
        if total is not None and isinstance(sep, str):
            budget.size(total + len(sep) * max(0, len(value) - 1))
    elif name in ("batch", "slice"):
        count = _arg(args, kwargs, 0, "linecount" if name == "batch" else "slices")
        if isinstance(count, int) and (name == "slice" or _arg(args, kwargs, 1, "fill_with") is not None):
            budget.size(count)
    elif name == "center":
        width = _arg(args, kwargs, 0, "width", 80)
        if isinstance(width, int):
            budget.size(width)
    elif name == "indent":
        width = _arg(args, kwargs, 0, "width", 4)
        n = width if isinstance(width, int) else len(width) if isinstance(width, str) else 0
        s = str(value)
        budget.size(len(s) + n * (s.count("\n") + 1))
    elif name == "wordwrap":
        s, wrap = str(value), _arg(args, kwargs, 3, "wrapstring") or "\n"
        width = _arg(args, kwargs, 0, "width", 79)
        if isinstance(width, int):
            budget.size(width)
        budget.size(len(s) + (len(s) + 1) * len(str(wrap)))
    elif name == "replace":
        check_method(budget, str(value), "replace", args)
    elif name == "format":
        budget.size(printf_size(str(value), dict(kwargs) if kwargs else tuple(args)))
    elif name == "tojson":
        budget.size(json_size(value, _arg(args, kwargs, 1, "indent"), budget.bounds.chars, upper=False))
    elif name == "sum":
        start = _arg(args, kwargs, 1, "start", 0)
        if isinstance(value, (list, tuple)) and (sized(start) or any(sized(x) for x in value[:1])):
            budget.size((len(start) if sized(start) else 0) + sum(len(x) for x in value if sized(x)))


def check_method(budget: Budget, s, name: str, args) -> None:
    """Refuse a str method call whose result would pass the bounds (``'a'.center(10**9)``)."""
    if not isinstance(s, str):
        return
    if name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        hits = (len(s) + 1) if args[0] == "" else s.count(args[0])
        budget.size(len(s) + hits * max(0, len(args[1]) - len(args[0])))
    elif name == "expandtabs":
        n = args[0] if args and isinstance(args[0], int) else 8
        budget.size(len(s) + n * s.count("\t"))
    elif name == "join" and args:
        total = _str_items(args[0])
        if total is not None:
            budget.size(total + len(s) * max(0, len(args[0]) - 1))
        else:
            budget.unsafe("a join of items that are not strings")
    elif name in ("split", "rsplit", "splitlines"):
        sep = args[0] if args and name != "splitlines" else None
        budget.objects(s.count(sep) + 1 if isinstance(sep, str) and sep else len(s) // 2 + 1)
    elif name in ("center", "ljust", "rjust", "zfill") and args and isinstance(args[0], int):
        budget.size(args[0])


def check_binop(budget: Budget, operator: str, left, right) -> None:
    """Refuse ``*``, ``+``, ``%`` and ``**`` results past the bounds, from the operands."""
    if operator == "**":
        if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1 \
                and right * abs(left).bit_length() > budget.bounds.power_bits:
            raise RenderRefused(f"render refused: {left} ** {right} is larger than {budget.bounds.power_bits} bits")
    elif operator == "*":
        if sized(left) and isinstance(right, int):
            budget.size(len(left) * right)
        elif sized(right) and isinstance(left, int):
            budget.size(len(right) * left)
        elif isinstance(left, int) and isinstance(right, int) \
                and left.bit_length() + right.bit_length() > MAX_INT_BITS:
            raise RenderRefused(f"render refused: the template multiplies integers past {MAX_INT_BITS:,} bits")
    elif operator == "+" and sized(left) and sized(right):
        budget.size(len(left) + len(right))
    elif operator == "%" and isinstance(left, str):
        budget.containers(right.values() if isinstance(right, dict) else right if isinstance(right, tuple) else [right])
        budget.size(printf_size(left, right))
