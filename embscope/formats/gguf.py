"""GGUF files (llama.cpp): metadata, the tokenizer, and dequantised ``token_embd``/``output``.

GGUF stores quantised blocks (Q8_0, Q4_K, …); :func:`gguf.quants.dequantize` turns them back into
float32. The tensor shape GGUF lists is ``[d, V]`` (fastest axis first); the array is ``(V, d)``.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embscope.errors import ModelFileError
from embscope.formats.files import open_regular

# GGUF value types (ggml's gguf.h): id → struct format; 8 = string, 9 = array.
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_U64 = struct.Struct("<Q")
# Sanity caps for untrusted headers: far above any real model, far below what would exhaust memory.
_MAX_COUNT = 1 << 24
_MAX_STR = 1 << 24
# Real metadata nests arrays at most one level deep; deeper nesting would only exhaust the stack.
_MAX_DEPTH = 4
_STRUCTS: dict[str, struct.Struct] = {}
#: fewest bytes one metadata entry takes (key length u64, empty key, type u32, a u8 value) and one
#: tensor-table entry (name length u64, empty name, n_dims u32, no dims, type u32, offset u64)
_MIN_KV, _MIN_TENSOR = 13, 24
#: fewest bytes one array item of each element type takes (a string: its u64 length; an array:
#: its type and count)
_MIN_ITEM = {**{k: struct.calcsize(v) for k, v in _SCALAR.items()}, 8: 8, 9: 12}


class GGUFTruncated(ModelFileError):
    """The bytes read end before the metadata and tensor table do; ``need`` is how many bytes
    from the start of the file they take at least (what a range reader fetches next)."""

    def __init__(self, message: str, need: int):
        super().__init__(message)
        self.need = need


@dataclass
class TensorInfo:
    """Where one tensor lives: ``shape`` as GGUF lists it (fastest axis first), ggml type id,
    absolute byte offset and size in the file."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int
    nbytes: int


class GGUFFile:
    """A minimal, bounds-checked GGUF v2/v3 reader: metadata and tensor table, data memory-mapped.

    Layout: ``"GGUF"``, version u32, tensor count u64, metadata count u64, then ``key, type, value``
    entries, then ``name, n_dims, dims…, type, offset`` per tensor, padded to ``general.alignment``
    (32 by default); tensor offsets count from that data section. We parse it ourselves because the
    generic reader builds one memory view per token string (seconds for a 50k vocabulary).
    """

    def __init__(self, path: Path, *, tensors: bool = True, end: int | None = None):
        """``tensors=False`` reads the metadata only (the tokenizer needs nothing else); the tensor
        table is then empty and ``matrix`` cannot be used. ``end``: parse only the file's first
        ``end`` bytes (a sparse copy holding just them): metadata that runs past them raises
        :class:`GGUFTruncated` with the bytes it needs, before anything past them is read."""
        self.path = Path(path)
        self._want_tensors = tensors
        with open_regular(self.path, what="GGUF file", min_bytes=0) as fh:
            if fh.read(4) != b"GGUF":
                raise ModelFileError(f"{self.path.name} is not a GGUF file; pass a .gguf model file")
            try:
                self._buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError:
                raise ModelFileError(f"{self.path.name} is empty; re-download it") from None
        self._end = len(self._buf) if end is None else min(end, len(self._buf))
        try:
            self._parse()
        except (struct.error, IndexError, UnicodeDecodeError, OverflowError, RecursionError) as exc:
            raise ModelFileError(f"{self.path.name} is a truncated or damaged GGUF file ({exc}); "
                                 "re-download it") from None

    # -- parsing -----------------------------------------------------------------------------
    def _short(self, need: int) -> GGUFTruncated:
        where = "the end of the file" if self._end == len(self._buf) else f"the first {self._end:,} bytes"
        return GGUFTruncated(f"{self.path.name}: the metadata runs past {where} (it takes at least {need:,} "
                             "bytes); the file is truncated or damaged: re-download it", need)

    def _take(self, fmt: str):
        s = _STRUCTS.get(fmt) or _STRUCTS.setdefault(fmt, struct.Struct(fmt))
        if self._pos + s.size > self._end:
            raise self._short(self._pos + s.size)
        (v,) = s.unpack_from(self._buf, self._pos)
        self._pos += s.size
        return v

    def _str(self) -> str:
        n = self._take("<Q")
        if n > _MAX_STR:
            raise ModelFileError(f"{self.path.name}: a string claims {n} bytes; the file is damaged")
        if self._pos + n > self._end:
            raise self._short(self._pos + n)
        s = bytes(self._buf[self._pos:self._pos + n]).decode("utf-8", errors="replace")
        self._pos += n
        return s

    def _strings(self, count: int) -> list[str]:
        """``count`` strings in a row (the token array), as :meth:`_str` reads them, in one tight loop."""
        buf, pos, end = self._buf, self._pos, self._end
        length = _U64.unpack_from
        out: list[str] = []
        append = out.append
        for _ in range(count):
            if pos + 8 > end:
                raise self._short(pos + 8)
            (n,) = length(buf, pos)
            pos += 8
            if n > _MAX_STR:
                raise ModelFileError(f"{self.path.name}: a string claims {n} bytes; the file is damaged")
            if pos + n > end:
                raise self._short(pos + n)
            append(str(buf[pos:pos + n], "utf-8", "replace"))
            pos += n
        self._pos = pos
        return out

    def _value(self, vtype: int, depth: int = 0):
        if vtype in _SCALAR:
            return self._take(_SCALAR[vtype])
        if vtype == 8:
            return self._str()
        if vtype == 9:
            etype, count = self._take("<I"), self._take("<Q")
            if count > _MAX_COUNT:
                raise ModelFileError(f"{self.path.name}: an array claims {count} items; the file is damaged")
            if count * _MIN_ITEM.get(etype, 1) > self._end - self._pos:  # checked before any item is read
                raise self._short(self._pos + count * _MIN_ITEM.get(etype, 1))
            if etype in _SCALAR:  # one unpack for the whole array (token scores, types: 10^5 items)
                fmt = _SCALAR[etype]
                values = list(struct.unpack_from(f"<{count}{fmt[1]}", self._buf, self._pos))
                self._pos += count * struct.calcsize(fmt)
                return values
            if etype == 8:
                return self._strings(count)
            if etype == 9 and depth >= _MAX_DEPTH:
                raise ModelFileError(f"{self.path.name}: metadata arrays nested deeper than {_MAX_DEPTH}; "
                                     "the file is damaged or hostile")
            return [self._value(etype, depth + 1) for _ in range(count)]
        raise ModelFileError(f"{self.path.name}: unknown GGUF value type {vtype}; the file is damaged or too new")

    def _parse(self) -> None:
        self._pos = 4
        self.version = self._take("<I")
        if self.version not in (2, 3):
            raise ModelFileError(f"{self.path.name}: GGUF version {self.version} is not supported (2 or 3)")
        n_tensors, n_kv = self._take("<Q"), self._take("<Q")
        if n_tensors > _MAX_COUNT or n_kv > _MAX_COUNT:
            raise ModelFileError(f"{self.path.name}: header claims {n_tensors} tensors / {n_kv} keys; damaged file")
        least = self._pos + n_kv * _MIN_KV + (n_tensors * _MIN_TENSOR if self._want_tensors else 0)
        if least > self._end:
            raise self._short(least)
        self.fields: dict[str, Any] = {}
        for _ in range(n_kv):
            key = self._str()
            self.fields[key] = self._value(self._take("<I"))
        infos = []
        for _ in range(n_tensors if self._want_tensors else 0):
            name = self._str()
            ndim = self._take("<I")
            if ndim > 8:
                raise ModelFileError(f"{self.path.name}: tensor {name!r} claims {ndim} dimensions; damaged file")
            shape = tuple(self._take("<Q") for _ in range(ndim))
            infos.append((name, shape, self._take("<I"), self._take("<Q")))
        _check_fields(self.fields, self.path.name)
        #: bytes the metadata and the tensor table take: every byte the parse read lies before this
        self.header_bytes = self._pos
        align = self.fields.get("general.alignment", 32)
        data_start = (self._pos + align - 1) // align * align
        self.tensors: dict[str, TensorInfo] = {}
        if infos:
            import gguf  # ggml's block sizes; a second or so to import, so only when tensors are read
        for name, shape, gtype, off in infos:
            try:
                block, tsize = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(gtype)]
            except (ValueError, KeyError):
                raise ModelFileError(f"{self.path.name}: tensor {name!r} has unknown ggml type {gtype}") from None
            if any(d == 0 for d in shape):
                raise ModelFileError(f"{self.path.name}: tensor {name!r} has shape {list(shape)} with a zero "
                                     "dimension; the file is damaged")
            if shape and shape[0] % block:
                raise ModelFileError(f"{self.path.name}: tensor {name!r} rows of {shape[0]} values are not a "
                                     f"whole number of {gguf.GGMLQuantizationType(gtype).name} blocks "
                                     f"({block} values); the file is damaged")
            count = 1
            for d in shape:
                count *= d
            nbytes = count // block * tsize
            start = data_start + off
            if start + nbytes > len(self._buf):
                raise ModelFileError(f"{self.path.name}: tensor {name!r} runs past the end of the file "
                                     "(truncated download?); re-download it")
            self.tensors[name] = TensorInfo(name, shape, gtype, start, nbytes)

    # -- access ------------------------------------------------------------------------------
    def metadata(self) -> dict[str, Any]:
        """Metadata without the large tokenizer arrays."""
        big = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type",
               "tokenizer.ggml.scores")
        return {k: v for k, v in self.fields.items() if k not in big}

    def matrix(self, name: str):
        """Tensor ``name`` dequantised to a float32 array of shape (rows, cols) = reversed GGUF shape."""
        t = self.tensors[name]
        if len(t.shape) != 2:
            raise ModelFileError(f"{self.path.name}: tensor {name!r} has shape {list(t.shape)}; a matrix "
                                 "[hidden, rows] was expected")
        return self.tensor(name)

    def tensor(self, name: str):
        """Tensor ``name`` of any rank dequantised to a writeable float32 array of the reversed GGUF
        shape (``[d, V]`` → (V, d); a norm's ``[d]`` → (d,)), with gguf-py's dequantisers (the ones
        transformers' GGUF loader calls, so the values are the same bit for bit)."""
        import gguf
        import numpy as np

        t = self.tensors[name]
        raw = np.frombuffer(self._buf, dtype=np.uint8, count=t.nbytes, offset=t.offset)
        shape = tuple(reversed(t.shape))                     # (…, cols): the fastest axis last
        rows = 1
        for d in shape[:-1]:
            rows *= d
        qtype = gguf.GGMLQuantizationType(t.ggml_type)
        try:
            arr = gguf.quants.dequantize(raw.reshape(rows, -1), qtype)   # (rows, cols) float32
        except (NotImplementedError, ValueError) as exc:
            raise ModelFileError(f"{self.path.name}: cannot dequantise {name!r} ({qtype.name}): "
                                 f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
        arr = np.ascontiguousarray(arr, dtype=np.float32).reshape(shape)
        return arr if arr.flags.writeable else arr.copy()

    def type_name(self, name: str) -> str:
        import gguf

        return gguf.GGMLQuantizationType(self.tensors[name].ggml_type).name


#: metadata keys whose type the readers rely on: key → (check, what it must be)
_TYPED_FIELDS: dict[str, tuple[Any, str]] = {
    "general.architecture": (lambda v: isinstance(v, str) and v != "", "a non-empty string"),
    "general.alignment": (lambda v: _is_int(v) and 0 < v <= 1 << 16 and v % 8 == 0,
                          "a positive multiple of 8 (at most 65536)"),
    "tokenizer.ggml.model": (lambda v: isinstance(v, str), "a string"),
    "tokenizer.ggml.pre": (lambda v: isinstance(v, str), "a string"),
    "tokenizer.ggml.tokens": (lambda v: _list_of(v, lambda t: isinstance(t, str)), "a list of strings"),
    "tokenizer.ggml.merges": (lambda v: _list_of(v, lambda t: isinstance(t, str)), "a list of strings"),
    "tokenizer.ggml.token_type": (lambda v: _list_of(v, _is_int), "a list of integers"),
    "tokenizer.ggml.scores": (lambda v: _list_of(v, _is_num), "a list of numbers"),
    "tokenizer.chat_template": (lambda v: isinstance(v, str), "a string"),
}
#: ``<arch>.<suffix>`` keys that must be numbers (per-layer arrays of numbers allowed)
_NUMERIC_SUFFIXES = ("embedding_length", "block_count", "context_length", "feed_forward_length",
                     "attention.head_count", "attention.head_count_kv", "attention.key_length",
                     "attention.value_length", "attention.layer_norm_rms_epsilon",
                     "attention.sliding_window", "attention.kv_lora_rank", "rope.freq_base",
                     "rope.dimension_count", "rope.scaling.factor", "rope.scaling.original_context_length",
                     "vocab_size")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _list_of(value: Any, ok) -> bool:
    """A list whose items pass ``ok``. A GGUF array declares one element type for all its items,
    so checking the first item checks them all."""
    return isinstance(value, list) and (not value or ok(value[0]))


def _check_fields(fields: dict[str, Any], where: str) -> None:
    """Refuse metadata whose types the readers rely on but that lie (``general.alignment = "abc"``,
    a token list that is an integer, a head count that is a string)."""
    def bad(key: str, what: str) -> ModelFileError:
        shown = repr(fields[key])
        shown = shown if len(shown) < 40 else shown[:37] + "..."
        return ModelFileError(f"{where}: metadata {key} = {shown} must be {what}; the file is damaged")

    for key, (ok, what) in _TYPED_FIELDS.items():
        if key in fields and not ok(fields[key]):
            raise bad(key, what)
    tokens = fields.get("tokenizer.ggml.tokens")
    for key in ("tokenizer.ggml.token_type", "tokenizer.ggml.scores"):
        if tokens is not None and key in fields and len(fields[key]) != len(tokens):
            raise bad(key, f"a list as long as tokenizer.ggml.tokens ({len(tokens)})")
    for key in ("bos_token_id", "eos_token_id", "padding_token_id", "unknown_token_id"):
        full = f"tokenizer.ggml.{key}"
        if full in fields and not (_is_int(fields[full]) and fields[full] >= 0):
            raise bad(full, "a non-negative integer")
    arch = fields.get("general.architecture")
    for suffix in _NUMERIC_SUFFIXES:
        key = f"{arch}.{suffix}"
        if key in fields:
            v = fields[key]
            if not (_is_num(v) or (isinstance(v, list) and v and _list_of(v, _is_num))):
                raise bad(key, "a number (or a list of numbers per layer)")
    for key in (f"{arch}.rope.scaling.type",):
        if key in fields and not isinstance(fields[key], str):
            raise bad(key, "a string")


#: parsed files kept for reuse (:func:`open_gguf`): a run opens one model, sometimes a second
_OPENED_MAX = 2
_OPENED: "dict[tuple, GGUFFile]" = {}


def open_gguf(path: Path, *, tensors: bool = True, end: int | None = None) -> GGUFFile:
    """Open a GGUF file; ``tensors=False`` reads only its metadata, ``end`` parses only its first
    bytes (see :class:`GGUFFile`).

    One parse per file per process: a whole-file reader is kept (the last :data:`_OPENED_MAX`
    files) and returned again while the file's identity (resolved path, size, modification time,
    inode) is unchanged, so the tokenizer, the embedding load, the chat template and the
    whole-model load of one run share it. A metadata-only request is served by a kept full reader;
    a full request after a metadata-only parse reads the file again; a partial parse (``end``) is
    never kept. The reader is read-only once built.
    """
    import os

    p = Path(path)
    if end is not None:
        return GGUFFile(p, tensors=tensors, end=end)
    try:
        st = os.stat(p)
        ident = (str(p.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
    except OSError:  # missing or unreadable: GGUFFile says so in its own words
        return GGUFFile(p, tensors=tensors)
    for want in ((True,) if tensors else (True, False)):
        hit = _OPENED.get((*ident, want))
        if hit is not None:
            return hit
    reader = GGUFFile(p, tensors=tensors)
    if len(_OPENED) >= _OPENED_MAX:
        _OPENED.pop(next(iter(_OPENED)))
    _OPENED[(*ident, tensors)] = reader
    return reader


def metadata(reader: GGUFFile) -> dict[str, Any]:
    return reader.metadata()


def read_matrices(reader: GGUFFile, *, where: str):
    """Return ``(embed, output_or_None, names, dtype)`` as float32 numpy arrays of shape (V, d)."""
    if "token_embd.weight" not in reader.tensors:
        raise ModelFileError(f"{where} has no token_embd.weight tensor; it is not a language-model GGUF "
                             "(or a split file: pass the first part)")
    embed = reader.matrix("token_embd.weight")
    out = reader.matrix("output.weight") if "output.weight" in reader.tensors else None
    names = {"embed": "token_embd.weight", "output": "output.weight" if out is not None else None}
    return embed, out, names, reader.type_name("token_embd.weight")
