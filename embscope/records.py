"""Typed records: what each section returns, written to ``summary.json`` and read back from it.

A record is a dataclass deriving from :class:`Record`. ``to_dict`` gives plain JSON (NaN and ±inf
become ``null``, tuples lists, ``Path`` strings, dict keys strings); ``from_dict`` checks every
field against its annotation and raises :class:`RecordError` naming the field, so a tampered or
truncated ``summary.json`` is a one-line error and never a traceback deep inside the report.

Supported annotations: ``int``, ``float``, ``str``, ``bool``, ``X | None``, ``list[X]``,
``dict[str, X]``, ``dict[int, X]`` (JSON keys are strings; they are parsed back), other
:class:`Record` subclasses, and ``Any`` (any JSON value, nesting at most :data:`MAX_DEPTH`).

The comment lines ``#: ...`` above a field are its documentation: :func:`field_docs` reads them,
and ``scripts/schema_doc.py`` turns them into ``docs/schema.md``.

>>> from dataclasses import dataclass
>>> @dataclass
... class Point(Record):
...     #: metres east of the origin
...     x: float
...     label: str | None = None
>>> Point.from_dict({"x": 1, "label": "a"})
Point(x=1.0, label='a')
>>> Point.from_dict({"x": "far"})
Traceback (most recent call last):
...
embscope.records.RecordError: x must be a number, got 'far'
"""

from __future__ import annotations

import ast
import dataclasses
import math
import types
import typing
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar, Union

from embscope.errors import OutputError

#: deepest nesting accepted for ``Any`` fields (a real summary nests 5 levels; 10^5-deep JSON is hostile)
MAX_DEPTH = 32
#: largest integer accepted (int64: every count and byte size embscope writes fits)
MAX_INT = 2**63 - 1

R = TypeVar("R", bound="Record")


class RecordError(OutputError):
    """A record that does not match its declared types (tampered, truncated or foreign JSON)."""


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


@lru_cache(maxsize=None)
def field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _check(tp: Any, v: Any, where: str, depth: int = 0, strict: bool = False) -> Any:
    """``v`` converted to ``tp``, or :class:`RecordError` (``strict``: see :meth:`Record.from_dict`)."""
    if depth > MAX_DEPTH:
        raise RecordError(f"{where} is nested too deeply")
    origin = typing.get_origin(tp)
    if tp is Any:
        return _json_value(v, where, depth)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if v is None and type(None) in args:
            return None
        last: RecordError | None = None
        for a in args:
            if a is type(None):
                continue
            try:
                return _check(a, v, where, depth, strict)
            except RecordError as err:
                last = err
        raise last or RecordError(f"{where} must not be null")
    if tp is bool:
        if isinstance(v, bool):
            return v
        raise RecordError(f"{where} must be true or false, got {_short(v)}")
    if tp is int:
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) <= MAX_INT:
            return v
        raise RecordError(f"{where} must be an integer, got {_short(v)}")
    if tp is float:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            f = float(v) if abs(v) < 1e308 else math.inf
            if math.isfinite(f):
                return f
        raise RecordError(f"{where} must be a number, got {_short(v)}")
    if tp is str:
        if isinstance(v, str):
            return v
        raise RecordError(f"{where} must be text, got {_short(v)}")
    if origin in (list, tuple):
        if not isinstance(v, list):
            raise RecordError(f"{where} must be a list, got {_short(v)}")
        (item,) = typing.get_args(tp)[:1] or (Any,)
        return [_check(item, x, f"{where}[{i}]", depth + 1, strict) for i, x in enumerate(v)]
    if origin is dict:
        if not isinstance(v, dict):
            raise RecordError(f"{where} must be an object, got {_short(v)}")
        kt, vt = typing.get_args(tp) or (str, Any)
        out = {}
        for k, x in v.items():
            key: Any = k
            if kt is int:
                try:
                    key = int(k)
                except (TypeError, ValueError):
                    raise RecordError(f"{where} keys must be integers, got {_short(k)}") from None
            out[key] = _check(vt, x, f"{where}.{k}", depth + 1, strict)
        return out
    if isinstance(tp, type) and issubclass(tp, Record):
        if isinstance(v, tp):  # a producer's own record, built field by field: taken as it is
            return v
        return tp.from_dict(v, where=where, depth=depth + 1, strict=strict)
    raise TypeError(f"records.py cannot check the annotation {tp!r} of {where}")  # a bug, not input


def _json_value(v: Any, where: str, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise RecordError(f"{where} is nested too deeply")
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        if abs(v) > MAX_INT:
            raise RecordError(f"{where} holds an integer out of range")
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, list):
        return [_json_value(x, where, depth + 1) for x in v]
    if isinstance(v, dict):
        return {str(k): _json_value(x, where, depth + 1) for k, x in v.items()}
    raise RecordError(f"{where} holds a {type(v).__name__}, which JSON does not have")


def to_json(x: Any) -> Any:
    """Plain JSON data: NaN/inf → None, numpy scalars → Python, Paths → str, keys → str.

    >>> to_json({1: float("nan"), "p": Path("a/b"), "t": (1, 2)})
    {'1': None, 'p': 'a/b', 't': [1, 2]}
    """
    if isinstance(x, Record):
        return x.to_dict()
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): to_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_json(v) for v in x]
    if isinstance(x, Path):
        return str(x)
    if hasattr(x, "item") and callable(x.item) and getattr(x, "ndim", 1) == 0:  # numpy / torch scalar
        return to_json(x.item())
    return x


#: ``field(metadata=LIVE)``: a field the object needs while it is used (a list the summary only
#: counts) but that ``summary.json`` does not hold: not written, not read back
LIVE = {"live": True}


def written_fields(cls) -> list[dataclasses.Field]:
    """The fields of a record (class or instance) that ``summary.json`` holds: all but the LIVE ones."""
    return [f for f in dataclasses.fields(cls) if not f.metadata.get("live")]


@dataclasses.dataclass
class Record:
    """Base class of every section record (see the module docstring)."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: to_json(getattr(self, f.name)) for f in written_fields(self)}

    @classmethod
    def from_dict(cls: type[R], data: Any, *, where: str = "", depth: int = 0, strict: bool = False) -> R:
        """Build the record from JSON data, checking every field's type.

        Keys the record does not declare are ignored (a newer embscope may write more), unless
        ``strict`` (used when a producer hands over its own dict, so a misspelt key is caught, in
        nested records too).
        A missing field takes its default; a missing field without one is an error. A field that
        already holds an instance of its record type (a producer's, built in code) is kept as it is.
        """
        name = where or cls.__name__
        if not isinstance(data, dict):
            raise RecordError(f"{name} must be an object, got {_short(data)}")
        hints = field_types(cls)
        fields = {f.name: f for f in written_fields(cls)}
        if strict:
            unknown = sorted(set(data) - set(fields))
            if unknown:
                raise TypeError(f"{cls.__name__} ({name}) has no field(s) {unknown}")  # a producer bug
        kwargs = {}
        for fname, f in fields.items():
            sub = f"{where}.{fname}" if where else fname
            if fname in data:
                kwargs[fname] = _check(hints[fname], data[fname], sub, depth, strict)
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise RecordError(f"{sub} is missing")
        return cls(**kwargs)


@lru_cache(maxsize=None)
def field_docs(cls: type) -> dict[str, str]:
    """``{field: doc}`` from the ``#:`` comment lines directly above each field of ``cls`` (and of
    the dataclasses it derives from)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if "__dataclass_fields__" not in vars(klass):
            continue
        found = _class_node(klass)
        if found is None:
            continue
        node, lines = found
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                i, doc = item.lineno - 2, []
                while i >= 0 and lines[i].strip().startswith("#:"):
                    doc.insert(0, lines[i].strip()[2:].strip())
                    i -= 1
                docs[item.target.id] = " ".join(doc)
    return docs


def _class_node(klass: type) -> "tuple[ast.ClassDef, list[str]] | None":
    """The class statement of ``klass`` in its module's source, and the source's lines (each
    module read and parsed once)."""
    import sys

    path = getattr(sys.modules.get(klass.__module__), "__file__", None)
    parsed = _parsed(path) if path else None
    if parsed is None:
        return None
    tree, lines = parsed
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == klass.__name__:
            return node, lines
    return None


@lru_cache(maxsize=None)
def _parsed(path: str) -> "tuple[ast.Module, list[str]] | None":
    try:
        source = Path(path).read_text(encoding="utf-8")
    except OSError:
        return None
    return ast.parse(source), source.splitlines()


def type_name(tp: Any) -> str:
    """A short, readable name for an annotation: ``list[int]``, ``float | null``, ``ContextRecord``."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return "any"
    if origin in (Union, types.UnionType):
        return " | ".join("null" if a is type(None) else type_name(a) for a in typing.get_args(tp))
    if origin in (list, tuple):
        return f"list[{type_name(typing.get_args(tp)[0])}]"
    if origin is dict:
        k, v = typing.get_args(tp)
        return f"{{{type_name(k)}: {type_name(v)}}}"
    if tp is type(None):
        return "null"
    return {int: "int", float: "float", str: "str", bool: "bool"}.get(tp, getattr(tp, "__name__", str(tp)))
