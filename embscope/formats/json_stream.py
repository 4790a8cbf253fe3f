"""The records of a JSON array, read one at a time from a stream, each at most ``max_record`` long.

A ``.json`` training file is one array (``[{…}, {…}, …]``) or an object holding one
(``{"data": [...]}``). ``json.loads`` of a 240 MB array of 12 M small records builds every
record at once (about 18 times the file in memory); :func:`iter_records` keeps one window of the
text instead: the records are decoded one by one, in order, by the C scanner of :mod:`json`
(``JSONDecoder.raw_decode``) over a buffer holding at least ``max_record + 1`` characters ahead,
refilled from the stream as the records are consumed. A record longer than ``max_record`` is not
built: a scanner that tracks only string and bracket state walks past it (``[`` ``{`` ``"`` ``\\``
found by regular expressions, a window at a time) and :data:`OVERSIZED` is yielded in its place.
Peak memory: the window (``max_record`` + one chunk, a few MiB of text) and the record being built.

The top level:

- an array: its items;
- an object: the items of its first member, in file order, named one of ``keys`` whose value is an
  array; an object with no such member is itself the one record (an object longer than
  ``max_record`` then is one :data:`OVERSIZED` record);
- anything else: :class:`JSONStreamError` with ``reason="not-array"``.

Invalid JSON raises :class:`JSONStreamError` (``reason="invalid"``) where it is found, after the
records before it were yielded. Values are decoded as ``json.loads`` decodes them (``NaN`` and
``Infinity`` accepted, later duplicate keys winning).
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

#: the stand-in yielded for a record longer than ``max_record`` (not built)
OVERSIZED = object()
#: bytes read from the stream at a time
CHUNK = 1 << 20
#: members of a top-level object whose array holds the records (as HF and most exporters name it)
KEYS = ("data", "train", "examples", "records")

_WS = re.compile(r"[ \t\n\r]*")
_STRUCTURE = re.compile(r'["\[\]{}]')  # outside a string: what changes the depth or enters a string
_STRING_BODY = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*', re.DOTALL)  # inside a string: to its closing quote or a lone \
_SCALAR = re.compile(r"[^,\]}\s]*")
_BETWEEN = re.compile(r"[ \t\n\r]*(,|\])[ \t\n\r]*")  # after an item: its separator and the space around it


class JSONStreamError(ValueError):
    """The text is not JSON (``reason="invalid"``) or its top level holds no records
    (``reason="not-array"``); ``at`` is the character offset where it was found."""

    def __init__(self, message: str, reason: str, at: int):
        super().__init__(message)
        self.reason, self.at = reason, at


class _Window:
    """Decoded text of a byte stream, from ``pos`` on, refilled as it is consumed. The encoding is
    found from the first bytes as ``json.loads`` finds it (UTF-8, or UTF-16/32 by their NUL bytes)."""

    def __init__(self, read: Callable[[int], bytes], chunk: int):
        self.read, self.chunk = read, chunk
        self.buf, self.pos, self.offset, self.eof = "", 0, 0, False  # offset: characters dropped before buf
        head = read(4)
        encoding = json.detect_encoding(head) if head else "utf-8"
        self.decoder = codecs.getincrementaldecoder(encoding)("strict")
        self.buf = self.decoder.decode(head, final=not head)
        self.eof = not head

    def fill(self, ahead: int) -> None:
        """Hold at least ``ahead`` characters from ``pos`` on (fewer only at the end of the stream)."""
        while len(self.buf) - self.pos < ahead and not self.eof:
            raw = self.read(self.chunk)
            text = self.decoder.decode(raw, final=not raw)  # UnicodeDecodeError: invalid UTF-8
            self.eof = not raw
            self.offset += self.pos
            self.buf = self.buf[self.pos:] + text
            self.pos = 0

    def skip_ws(self) -> str:
        """The next character that is not white space ("" at the end)."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf) or self.eof:
                return self.buf[self.pos:self.pos + 1]
            self.fill(1)

    def here(self) -> int:
        return self.offset + self.pos


def _skip_value(w: _Window) -> int:
    """Walk past the value at ``w.pos`` without building it; returns its length in characters."""
    start = w.here()
    first = w.buf[w.pos]
    if first not in "[{\"":
        while True:
            w.pos = _SCALAR.match(w.buf, w.pos).end()
            if w.pos < len(w.buf) or w.eof:
                return w.here() - start
            w.fill(1)
    depth, in_string = 0, False
    while True:
        if in_string:
            w.pos = _STRING_BODY.match(w.buf, w.pos).end()
            if w.pos < len(w.buf) and w.buf[w.pos] == '"':
                w.pos += 1
                in_string = False
                if depth == 0:
                    return w.here() - start
                continue
        else:
            m = _STRUCTURE.search(w.buf, w.pos)
            if m is not None:
                w.pos = m.end()
                c = m.group()
                if c == '"':
                    in_string = True
                elif c in "[{":
                    depth += 1
                else:
                    depth -= 1
                    if depth == 0:
                        return w.here() - start
                continue
            w.pos = len(w.buf)
        if w.eof:
            raise JSONStreamError("the JSON text ends inside a value", "invalid", w.here())
        w.fill(len(w.buf) - w.pos + 2)  # a lone backslash at the end waits for its escaped character


def _items(w: _Window, decoder: json.JSONDecoder, max_record: int) -> Iterator[Any]:
    """The items of the array whose ``[`` was just consumed, through its ``]``."""
    c = w.skip_ws()
    if c == "]":
        w.pos += 1
        return
    decode, between = decoder.raw_decode, _BETWEEN.match
    while True:
        if not c:
            raise JSONStreamError("the JSON text ends inside an array", "invalid", w.here())
        # the fast path: a whole small item well inside the window, then "," or "]"
        if len(w.buf) - w.pos > max_record or w.eof:
            try:
                value, end = decode(w.buf, w.pos)
            except json.JSONDecodeError:
                end = None
            if end is not None and end - w.pos <= max_record // 4:
                w.pos = end
                yield value
            else:
                yield _one(w, decoder, max_record)
        else:
            yield _one(w, decoder, max_record)
        m = between(w.buf, w.pos)
        if m is not None and m.end() < len(w.buf):
            w.pos = m.end()
            if m.group(1) == "]":
                return
            c = w.buf[w.pos]
            continue
        c = w.skip_ws()
        if c == "]":
            w.pos += 1
            return
        if c != ",":
            raise JSONStreamError(f"expected ',' or ']' at character {w.here():,}", "invalid", w.here())
        w.pos += 1
        c = w.skip_ws()


def _one(w: _Window, decoder: json.JSONDecoder, max_record: int) -> Any:
    """The value at ``w.pos``, or :data:`OVERSIZED` (walked past) when it is longer than ``max_record``."""
    w.fill(max_record + 1)
    try:
        value, end = decoder.raw_decode(w.buf, w.pos)
    except json.JSONDecodeError:
        value, end = None, None
    if end is not None and (end < len(w.buf) or w.eof):  # decoded whole (a short value cannot reach the
        fits = _fits(w.buf, w.pos, end, max_record)      # end of a window of max_record + 1 unless it ends)
        w.pos = end
        return value if fits else OVERSIZED
    if end is None and w.eof:  # all that is left is in the window, and it does not decode
        raise JSONStreamError(f"invalid JSON at character {w.here():,}", "invalid", w.here())
    at = w.here()
    length = _skip_value(w)
    if length <= max_record:  # short enough, yet it did not decode: it is not JSON
        raise JSONStreamError(f"invalid JSON at character {at:,}", "invalid", at)
    return OVERSIZED


def _fits(buf: str, start: int, end: int, max_record: int) -> bool:
    """Whether ``buf[start:end]`` is at most ``max_record`` bytes of UTF-8 (counted only when its
    characters could pass it)."""
    n = end - start
    return n <= max_record // 4 or (n <= max_record and len(buf[start:end].encode("utf-8", "surrogatepass")) <= max_record)


def iter_records(read: Callable[[int], bytes], *, max_record: int, keys: tuple[str, ...] = KEYS,
                 chunk: int = CHUNK) -> Iterator[Any]:
    """The records of the JSON text that ``read(n)`` returns (see the module docstring).

    >>> import io
    >>> list(iter_records(io.BytesIO(b'{"data": [1, {"a": "b"}, "x"]}').read, max_record=100))
    [1, {'a': 'b'}, 'x']
    >>> [r is OVERSIZED for r in iter_records(io.BytesIO(b'[1, "' + b'y' * 200 + b'", 2]').read, max_record=100)]
    [False, True, False]
    """
    decoder = json.JSONDecoder()
    w = _Window(read, chunk)
    w.fill(1)
    if w.buf.startswith("\ufeff"):  # a byte-order mark, as editors on Windows write one
        w.pos = 1
    c = w.skip_ws()
    if c == "[":
        w.pos += 1
        yield from _items(w, decoder, max_record)
    elif c == "{":
        w.fill(max_record + 2)
        whole = _whole_object(w, decoder, max_record)
        if whole is not None:
            yield from _members(whole, keys)
            return
        w.pos += 1
        yield from _object_records(w, decoder, max_record, keys)
        return
    elif not c:
        raise JSONStreamError("the file holds no JSON", "invalid", w.here())
    else:
        _one(w, decoder, max_record)  # an invalid text says so; a valid scalar holds no records
        raise JSONStreamError("the top level is not an array or an object", "not-array", 0)
    if w.skip_ws():
        raise JSONStreamError(f"text after the JSON value at character {w.here():,}", "invalid", w.here())


def _whole_object(w: _Window, decoder: json.JSONDecoder, max_record: int) -> dict | None:
    """The top-level object decoded whole when it is at most ``max_record`` long and nothing but
    white space follows it (the common small file), else None."""
    try:
        value, end = decoder.raw_decode(w.buf, w.pos)
    except json.JSONDecodeError:
        return None
    if not (end < len(w.buf) or w.eof) or not _fits(w.buf, w.pos, end, max_record):
        return None
    if _WS.match(w.buf, end).end() != len(w.buf) or not w.eof:
        return None
    w.pos = len(w.buf)
    return value


def _members(obj: dict, keys: tuple[str, ...]) -> Iterator[Any]:
    """What ``json.loads`` + the key rule give for a small object: its first array named in ``keys``
    (file order), or the object itself."""
    lists = [v for k, v in obj.items() if k in keys and isinstance(v, list)]
    yield from lists[0] if lists else [obj]


def _object_records(w: _Window, decoder: json.JSONDecoder, max_record: int, keys: tuple[str, ...]) -> Iterator[Any]:
    """The members of a top-level object longer than ``max_record`` (its ``{`` consumed): the
    first array named in ``keys`` is streamed; without one, the object is one oversized record."""
    found = False
    first = True
    while True:
        c = w.skip_ws()
        if c == "}":
            w.pos += 1
            break
        if not first:
            if c != ",":
                raise JSONStreamError(f"expected ',' or '}}' at character {w.here():,}", "invalid", w.here())
            w.pos += 1
            c = w.skip_ws()
        first = False
        if c != '"':
            raise JSONStreamError(f"expected a member name at character {w.here():,}", "invalid", w.here())
        key = _one(w, decoder, max_record)
        if w.skip_ws() != ":":
            raise JSONStreamError(f"expected ':' at character {w.here():,}", "invalid", w.here())
        w.pos += 1
        c = w.skip_ws()
        if not found and key in keys and c == "[":
            found = True
            w.pos += 1
            yield from _items(w, decoder, max_record)
        elif not c:
            raise JSONStreamError("the JSON text ends inside an object", "invalid", w.here())
        else:
            _skip_value(w)
    if w.skip_ws():
        raise JSONStreamError(f"text after the JSON value at character {w.here():,}", "invalid", w.here())
    if not found:
        yield OVERSIZED


#: a lone UTF-16 surrogate, what JSON's "\ud800" escape decodes to when no partner follows
SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(value) -> bool:
    """Whether a decoded JSON value holds a lone surrogate in any string (key or value).

    >>> import json
    >>> lone_surrogate(json.loads('["ok", {"k": "\\\\ud83d\\\\ude00"}]')), lone_surrogate(json.loads('{"k": "\\\\ud800"}'))
    (False, True)
    """
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if SURROGATE.search(v):
                return True
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False
