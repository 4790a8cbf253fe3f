"""The arguments of a public function checked against its annotations, before any work.

A wrong type must not surface as a raw ``TypeError`` deep in a run (``scan(123)``), or run on a
misreading (``corpora="medical"`` iterated as the corpora ``m``, ``e``, ``d``, …), or fail after
the whole run (``extend(top=True)``). :func:`check_call` binds a call to the function's signature
and checks every argument against its annotation, so a parameter added later is checked by being
annotated. What an annotation accepts:

- ``str``: a ``str``; ``Path``: a ``str`` or any ``os.PathLike``;
- ``int``: a whole number that is not a ``bool`` (numpy integers too); ``float``: any real number
  that is not a ``bool``; ``bool``: ``True``/``False`` (numpy bools too);
- ``Sequence[X]``: a list or tuple whose items are ``X`` (an array: ``.tolist()``). One string where a list
  is expected is **refused**, never read as a list of characters nor wrapped: the fix names the
  list (``corpora=['medical']``), so ``compare("gpt2")`` cannot pass as a comparison of one;
- ``X | Y``, ``Optional``: either; ``Any``, a class the checker does not know, or a name it cannot
  resolve: anything (the function checks it).

A mismatch is one :class:`~embscope.errors.ArgumentError` line naming the parameter, what it takes
and the fix.

>>> def f(model: str, *, top: int = 200, corpora: Sequence[str] = ()): ...
>>> check_call(f, ("gpt2",), {"corpora": "medical"})
Traceback (most recent call last):
...
embscope.errors.ArgumentError: f(): corpora='medical' is one string where a list is expected; pass corpora=['medical']
>>> check_call(f, ("gpt2",), {"top": True})
Traceback (most recent call last):
...
embscope.errors.ArgumentError: f(): top=True must be a whole number (int), not a bool; pass e.g. top=200
"""

from __future__ import annotations

import functools
import inspect
import numbers
import os
import types
import typing
from collections.abc import Callable, Sequence
from pathlib import Path, PurePath
from typing import Any

from embscope.errors import ArgumentError

#: characters of a value shown in a message
SHOWN = 60


def _short(value: Any) -> str:
    if not isinstance(value, (str, bytes, int, float, list, tuple, dict, set, PurePath, type(None))):
        return f"<{type(value).__name__} object>"  # a model's repr runs to pages
    text = repr(value)
    return text if len(text) <= SHOWN else text[:SHOWN - 1] + "…"


@functools.lru_cache(maxsize=None)
def _hints(fn: Callable) -> dict[str, Any]:
    """``fn``'s resolved annotations; one that names what its module cannot resolve is left out
    (unchecked) rather than failing the call."""
    try:
        return typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - a forward reference to a TYPE_CHECKING-only name
        out = {}
        import sys

        glob = getattr(fn, "__globals__", None) or vars(sys.modules.get(fn.__module__, typing))  # a class: its module
        for name, ann in getattr(fn, "__annotations__", {}).items():
            try:
                out[name] = eval(ann, glob) if isinstance(ann, str) else ann  # noqa: S307 - our own annotations
            except Exception:  # noqa: BLE001
                pass
        return out


def _members(hint: Any) -> tuple[Any, ...]:
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        return typing.get_args(hint)
    return (hint,)


def _is_sequence_hint(hint: Any) -> bool:
    return typing.get_origin(hint) in (Sequence, list, tuple, typing.Sequence)


def _fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` is what ``hint`` accepts (module docstring)."""
    if hint is Any or hint is inspect.Parameter.empty:
        return True
    if hint is None or hint is type(None):
        return value is None
    if any(m is not hint for m in _members(hint)):
        return any(_fits(value, m) for m in _members(hint))
    if hint is bool:
        return isinstance(value, bool) or type(value).__name__ == "bool_"
    if hint is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool) and type(value).__name__ != "bool_"
    if hint is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool) and type(value).__name__ != "bool_"
    if hint is str:
        return isinstance(value, str)
    if hint in (Path, PurePath):
        return isinstance(value, (str, os.PathLike))
    if _is_sequence_hint(hint):
        if isinstance(value, (str, bytes, os.PathLike)) or not _listlike(value):
            return False
        args = typing.get_args(hint)
        item = args[0] if args else Any
        return all(_fits(v, item) for v in value)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True  # a generic the checker does not model: the function checks it


def _listlike(value: Any) -> bool:
    return isinstance(value, (list, tuple))


_NAMES = {bool: ("True or False", "bools"), int: ("a whole number (int)", "whole numbers"),
          float: ("a number", "numbers"), str: ("a string", "strings"), Path: ("a path", "paths"),
          PurePath: ("a path", "paths"), type(None): ("None", "None")}


def _describe(hint: Any, plural: bool = False) -> str:
    """``int | None`` → ``a whole number (int) or None``; ``Sequence[str | Path]`` → ``a list of
    strings or paths``."""
    names = []
    for m in _members(hint):
        if m in _NAMES:
            names.append(_NAMES[m][plural])
        elif _is_sequence_hint(m):
            args = typing.get_args(m)
            names.append("a list" + (f" of {_describe(args[0], plural=True)}" if args else ""))
        else:
            name = getattr(m, "__name__", str(m))
            names.append("DEFAULT_OUT" if name == "DefaultFolder" else name)
    seen: list[str] = []
    for n in names:
        if n not in seen:
            seen.append(n)
    return " or ".join(seen)


def _fix(name: str, value: Any, hint: Any, default: Any) -> str:
    """What to pass instead, from what was passed."""
    members = [m for m in _members(hint) if m is not type(None)]
    wants_list = any(_is_sequence_hint(m) for m in members)
    wants = set(members)
    if isinstance(value, str) and wants_list and not wants & {str, Path}:
        return f"is one string where a list is expected; pass {name}=[{value!r}]"
    if isinstance(value, PurePath) and wants_list and not wants & {Path}:
        return f"is one path where a list is expected; pass {name}=[{str(value)!r}]"
    if wants_list and hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return f"must be a list; pass {name}=ARRAY.tolist()"
    if hasattr(value, "save_pretrained") or hasattr(value, "name_or_path"):
        path = getattr(value, "name_or_path", None) or getattr(getattr(value, "config", None), "_name_or_path", None)
        how = f"pass {name}={path!r}" if isinstance(path, str) and path else \
            f"save it with .save_pretrained(FOLDER) and pass {name}='FOLDER'"
        return f"is a loaded {type(value).__name__} object, not a name; embscope reads models itself: {how}"
    if _listlike(value) and wants & {str, Path} and not wants_list:
        return f"is a list where one value is expected; pass one of them" + (
            " (to compare several tokenizers: embscope.compare([...]))" if name == "tokenizer" else "")
    example = f"; pass e.g. {name}={default!r}" if default is not inspect.Parameter.empty and default is not None \
        and _fits(default, hint) else ""
    if isinstance(value, PurePath) and str in wants:
        return f"must be a string; pass {name}={str(value)!r}"
    if isinstance(value, bytes) and wants & {str, Path}:
        return f"must be a string, not bytes; pass {name}={value.decode('utf-8', 'replace')!r}"
    if isinstance(value, bool) and wants & {int, float}:
        return f"must be {_describe(hint)}, not a bool{example}"
    if isinstance(value, float) and int in wants and float not in wants:
        return f"must be a whole number (int){example}"
    if isinstance(value, str) and wants & {int, float}:
        try:
            number = int(value) if int in wants else float(value)
            return f"is a string; pass the number itself, {name}={number!r}"
        except ValueError:
            return f"must be {_describe(hint)}, not a string{example}"
    return f"must be {_describe(hint)}, not {'None' if value is None else type(value).__name__}{example}"


def check_call(fn: Callable, args: tuple, kwargs: dict[str, Any]) -> None:
    """Check a call of ``fn`` before it runs (module docstring): a missing or surplus argument, or
    one that does not fit its annotation, is one :class:`~embscope.errors.ArgumentError` line."""
    sig = inspect.signature(fn)
    label = f"{fn.__name__}()"
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as exc:
        raise ArgumentError(f"{label}: {exc}; see help(embscope.{fn.__name__})") from None
    hints = _hints(fn)
    for name, value in bound.arguments.items():
        param = sig.parameters[name]
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or name not in hints:
            continue
        if not _fits(value, hints[name]):
            text = _fix(name, value, hints[name], param.default)
            raise ArgumentError(f"{label}: {name}={_short(value)} {text}")


def checked(fn: Callable) -> Callable:
    """``fn`` with :func:`check_call` before each call (for public functions outside
    :mod:`embscope.api`, whose decorator does the same)."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        check_call(fn, args, kwargs)
        return fn(*args, **kwargs)

    return call


def one_of(flag: str, value: Any, choices: Sequence[Any], what: str = "") -> None:
    """A one-line :class:`~embscope.errors.SpecError` when ``value`` is not one of ``choices``, with a
    "did you mean" (the option groups' checks).

    >>> one_of("--device", "tpu", ("auto", "cpu", "cuda"), "a device")
    Traceback (most recent call last):
    ...
    embscope.errors.SpecError: --device 'tpu' is not a device (did you mean 'cpu'?); choose from auto, cpu, cuda
    """
    from embscope.errors import SpecError, did_you_mean

    if value not in choices:
        raise SpecError(f"{flag} {value!r} is not {what or 'a choice'}{did_you_mean(str(value), choices)}; "
                        f"choose from {', '.join(choices)}")


def at_least(flag: str, value: "int | float | None", least: "int | float") -> None:
    """A one-line :class:`~embscope.errors.SpecError` when ``value`` (unless None) is below ``least``.

    >>> at_least("--k", 0, 1)
    Traceback (most recent call last):
    ...
    embscope.errors.SpecError: --k must be at least 1, got 0
    """
    from embscope.errors import SpecError

    if value is not None and value < least:
        raise SpecError(f"{flag} must be at least {least:g}, got {value}")
