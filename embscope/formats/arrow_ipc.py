"""How many bytes an Arrow IPC file's record batches decompress to, before any is decompressed.

An Arrow IPC file (stream format, or file format: ``ARROW1`` + 2 bytes + the stream + a footer) is
a sequence of messages, each a FlatBuffers ``Message`` (metadata) and a body. A ``RecordBatch``
(or ``DictionaryBatch``) message lists its buffers as ``(offset, length)`` in the body; when the
batch carries ``BodyCompression``, each buffer starts with its uncompressed length (little-endian
int64, ``-1`` when that buffer was left uncompressed) — see the Arrow columnar format,
"Compression". So a 10 KB file whose zstd buffers hold a gigabyte is found by reading the metadata
only, and refused before pyarrow allocates anything.

>>> import pyarrow as pa
>>> sink = pa.BufferOutputStream()
>>> with pa.ipc.new_stream(sink, pa.schema([("text", pa.string())])) as w:
...     w.write_batch(pa.record_batch([pa.array(["ab"] * 4)], names=["text"]))
>>> [(kind, size) for kind, size in batch_sizes(pa.BufferReader(sink.getvalue()))]
[('record batch', 32)]
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

#: Message.header_type values (Arrow's Message.fbs)
_DICTIONARY_BATCH, _RECORD_BATCH = 2, 3


class IpcError(ValueError):
    """Metadata that is not a valid Arrow IPC message (tampered, truncated, foreign)."""


def _u(fmt: str, buf: bytes, pos: int):
    if pos < 0 or pos + struct.calcsize(fmt) > len(buf):
        raise IpcError("offset outside the message metadata")
    return struct.unpack_from(fmt, buf, pos)[0]


def _field(buf: bytes, table: int, index: int) -> int | None:
    """Absolute position of field ``index`` of the FlatBuffers table at ``table``, or None."""
    vtable = table - _u("<i", buf, table)
    vsize = _u("<H", buf, vtable)
    slot = 4 + 2 * index
    if slot + 2 > vsize:
        return None
    off = _u("<H", buf, vtable + slot)
    return table + off if off else None


def _ref(buf: bytes, pos: int) -> int:
    """Follow a FlatBuffers uoffset stored at ``pos``."""
    return pos + _u("<I", buf, pos)


def _record_batch_size(meta: bytes, rb: int, body) -> int:
    """Bytes the record batch at table ``rb`` decompresses to (its body size when uncompressed)."""
    buffers = _field(meta, rb, 2)
    compressed = _field(meta, rb, 3) is not None
    if not compressed:
        return body.size if body is not None else 0
    if buffers is None:
        return 0
    vec = _ref(meta, buffers)
    n = _u("<I", meta, vec)
    if n > len(meta):
        raise IpcError("buffer count past the metadata")
    total = 0
    raw = memoryview(body) if body is not None else memoryview(b"")
    for i in range(n):
        offset = _u("<q", meta, vec + 4 + 16 * i)
        length = _u("<q", meta, vec + 4 + 16 * i + 8)
        if length == 0:
            continue
        if offset < 0 or length < 8 or offset + length > len(raw):
            raise IpcError("buffer outside the message body")
        size = struct.unpack_from("<q", raw, offset)[0]
        total += length - 8 if size == -1 else size
        if size < -1:
            raise IpcError("negative uncompressed length")
    return total


def batch_sizes(source) -> Iterator[tuple[str, int]]:
    """``(kind, decompressed bytes)`` per record or dictionary batch of an IPC stream or file.

    ``source`` is a pyarrow readable file (``pa.OSFile``, ``pa.BufferReader``) at its start.
    Raises :class:`IpcError` (or ``pyarrow.ArrowInvalid``) for metadata that does not parse.
    """
    import pyarrow as pa

    head = source.read(8)
    if head[:6] != b"ARROW1":
        source.seek(0)
    reader = pa.ipc.MessageReader.open_stream(source)
    while True:
        try:
            msg = reader.read_next_message()
        except StopIteration:
            return
        if msg is None:
            return
        if msg.type not in ("record batch", "dictionary"):
            continue
        meta = msg.metadata.to_pybytes()
        root = _ref(meta, 0)
        kind = _u("<B", meta, _field(meta, root, 1) or _bad())
        header = _ref(meta, _field(meta, root, 2) or _bad())
        if kind == _DICTIONARY_BATCH:
            data = _field(meta, header, 1)
            header = _ref(meta, data) if data is not None else _bad()
        elif kind != _RECORD_BATCH:
            continue
        yield msg.type, _record_batch_size(meta, header, msg.body)


def _bad() -> int:
    raise IpcError("a batch message without its header")
