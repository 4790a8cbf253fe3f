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

# GGUF value types (ggml's gguf.h): id → struct format; 8 = string, 9 = array.
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
# Sanity caps for untrusted headers: far above any real model, far below what would exhaust memory.
_MAX_COUNT = 1 << 24
_MAX_STR = 1 << 24


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

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            fh = self.path.open("rb")
        except OSError as exc:
            raise ModelFileError(f"cannot open {path}: {exc.strerror}") from None
        with fh:
            if fh.read(4) != b"GGUF":
                raise ModelFileError(f"{self.path.name} is not a GGUF file; pass a .gguf model file")
            try:
                self._buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError:
                raise ModelFileError(f"{self.path.name} is empty; re-download it") from None
        try:
            self._parse()
        except (struct.error, IndexError, UnicodeDecodeError, OverflowError) as exc:
            raise ModelFileError(f"{self.path.name} is a truncated or damaged GGUF file ({exc}); "
                                 "re-download it") from None

    # -- parsing -----------------------------------------------------------------------------
    def _take(self, fmt: str):
        (v,) = struct.unpack_from(fmt, self._buf, self._pos)
        self._pos += struct.calcsize(fmt)
        return v

    def _str(self) -> str:
        n = self._take("<Q")
        if n > _MAX_STR or self._pos + n > len(self._buf):
            raise ModelFileError(f"{self.path.name}: a string claims {n} bytes past the end of the file; re-download it")
        s = bytes(self._buf[self._pos:self._pos + n]).decode("utf-8", errors="replace")
        self._pos += n
        return s

    def _value(self, vtype: int):
        if vtype in _SCALAR:
            return self._take(_SCALAR[vtype])
        if vtype == 8:
            return self._str()
        if vtype == 9:
            etype, count = self._take("<I"), self._take("<Q")
            if count > _MAX_COUNT:
                raise ModelFileError(f"{self.path.name}: an array claims {count} items; the file is damaged")
            return [self._value(etype) for _ in range(count)]
        raise ModelFileError(f"{self.path.name}: unknown GGUF value type {vtype}; the file is damaged or too new")

    def _parse(self) -> None:
        import gguf

        self._pos = 4
        self.version = self._take("<I")
        if self.version not in (2, 3):
            raise ModelFileError(f"{self.path.name}: GGUF version {self.version} is not supported (2 or 3)")
        n_tensors, n_kv = self._take("<Q"), self._take("<Q")
        if n_tensors > _MAX_COUNT or n_kv > _MAX_COUNT:
            raise ModelFileError(f"{self.path.name}: header claims {n_tensors} tensors / {n_kv} keys; damaged file")
        self.fields: dict[str, Any] = {}
        for _ in range(n_kv):
            key = self._str()
            self.fields[key] = self._value(self._take("<I"))
        infos = []
        for _ in range(n_tensors):
            name = self._str()
            ndim = self._take("<I")
            if ndim > 8:
                raise ModelFileError(f"{self.path.name}: tensor {name!r} claims {ndim} dimensions; damaged file")
            shape = tuple(self._take("<Q") for _ in range(ndim))
            infos.append((name, shape, self._take("<I"), self._take("<Q")))
        align = int(self.fields.get("general.alignment", 32)) or 32
        data_start = (self._pos + align - 1) // align * align
        self.tensors: dict[str, TensorInfo] = {}
        for name, shape, gtype, off in infos:
            try:
                block, tsize = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(gtype)]
            except (ValueError, KeyError):
                raise ModelFileError(f"{self.path.name}: tensor {name!r} has unknown ggml type {gtype}") from None
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
        import gguf
        import numpy as np

        t = self.tensors[name]
        raw = np.frombuffer(self._buf, dtype=np.uint8, count=t.nbytes, offset=t.offset)
        rows = t.shape[-1] if len(t.shape) > 1 else 1
        arr = gguf.quants.dequantize(raw.reshape(rows, -1), gguf.GGMLQuantizationType(t.ggml_type))
        return np.ascontiguousarray(arr.reshape(rows, -1), dtype=np.float32)

    def type_name(self, name: str) -> str:
        import gguf

        return gguf.GGMLQuantizationType(self.tensors[name].ggml_type).name


def open_gguf(path: Path) -> GGUFFile:
    return GGUFFile(path)


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
