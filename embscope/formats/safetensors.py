"""Read single tensors from (sharded) safetensors checkpoints, checking each header first.

A safetensors file is ``u64 little-endian header length N`` + ``N bytes of JSON`` + raw data; the
JSON maps each tensor name to ``{dtype, shape, data_offsets: [begin, end]}`` relative to the data
section. Model files are untrusted: before any tensor is read we check that the header fits the
file, that every tensor's byte range lies inside the data section, and that its size equals
``prod(shape) × itemsize`` — so a truncated download or a lying header is a clear error, not a crash.

Sharded checkpoints list ``weight_map: tensor name → shard file`` in
``model.safetensors.index.json``; we open only the shards that hold the tensors asked for.
"""

from __future__ import annotations

import math
import os
import struct
from pathlib import Path

from embscope.errors import ModelFileError
from embscope.formats.files import inside, open_regular, parse_json, read_json

# Bytes per element of each safetensors dtype.
ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
            "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}
#: largest header read (docs/limits.md): real headers are kilobytes to a few MB; an absurd size is
#: refused before it is read (or, from the hub, downloaded)
MAX_HEADER = 100 * 1024 * 1024


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def read_header(path: Path) -> dict[str, dict]:
    """Parse and validate a safetensors header; returns ``{name: {dtype, shape, data_offsets}}``.

    Checked, per tensor: ``dtype`` a known name; ``shape`` a list of non-negative integers;
    ``data_offsets`` two integers ``0 <= begin <= end <= data size`` with ``end - begin =
    prod(shape) × itemsize``; and no two tensors' byte ranges overlap.
    """
    path = Path(path)
    bad = f"{path.name} is not a valid safetensors file"
    fix = "re-download it (the file is truncated or corrupt)"
    with open_regular(path, what="safetensors file", min_bytes=0) as fh:
        size = os.fstat(fh.fileno()).st_size
        head = fh.read(8)
        if len(head) < 8:
            raise ModelFileError(f"{bad}: only {size} bytes; {fix}")
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER:
            raise ModelFileError(f"{bad}: its header claims {n:,} bytes, more than the {MAX_HEADER:,} a safetensors "
                                 f"header may take; {fix}")
        if 8 + n > size:
            raise ModelFileError(f"{bad}: its header claims {n:,} bytes but the file has {size:,}; {fix}")
        raw = fh.read(n)
    if len(raw) != n:
        raise ModelFileError(f"{bad}: the header was cut short; {fix}")
    header = parse_json(raw, where=f"{bad}: its header", fix=fix)
    if not isinstance(header, dict):
        raise ModelFileError(f"{bad}: header is not a JSON object; {fix}")
    data_size = size - 8 - n
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise ModelFileError(f"{bad}: __metadata__ is not a map of strings; {fix}")
    spans = []
    for name, info in header.items():
        if not isinstance(info, dict):
            raise ModelFileError(f"{bad}: the entry for tensor {name!r} is not an object; {fix}")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if not isinstance(dtype, str) or dtype not in ITEMSIZE:
            raise ModelFileError(f"{bad}: tensor {name!r} has dtype {dtype!r}; {fix}")
        if not isinstance(shape, list) or len(shape) > 8 or not all(_is_int(d) and d >= 0 for d in shape):
            raise ModelFileError(f"{bad}: tensor {name!r} has shape {shape!r}, not a list of "
                                 f"non-negative integers; {fix}")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) for o in offsets)):
            raise ModelFileError(f"{bad}: tensor {name!r} has data_offsets {offsets!r}, not two integers; {fix}")
        begin, end = offsets
        if not (0 <= begin <= end <= data_size):
            raise ModelFileError(f"{bad}: tensor {name!r} claims bytes {begin}..{end} but the data "
                                 f"section has {data_size}; {fix}")
        need = math.prod(shape) * ITEMSIZE[dtype]
        if end - begin != need:
            raise ModelFileError(f"{bad}: tensor {name!r} is {end - begin} bytes but shape {shape} × "
                                 f"{dtype} needs {need}; {fix}")
        if end > begin:
            spans.append((begin, end, name))
    spans.sort()
    for (_, end_a, a), (begin_b, _, b) in zip(spans, spans[1:]):
        if begin_b < end_a:
            raise ModelFileError(f"{bad}: tensors {a!r} and {b!r} overlap in the data section; {fix}")
    return header


_TORCH_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
                 "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
                 "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


def read_tensor(path: Path, name: str, header: dict[str, dict] | None = None):
    """One tensor as a ``torch.Tensor`` in its stored dtype, memory-mapped (zero-copy).

    The file is mapped copy-on-write: nothing is read until rows are touched, the page cache is
    shared with other readers, and writes (never made) would stay private. ``header`` is the
    validated header from :func:`read_header`.
    """
    import mmap

    import torch

    path = Path(path)
    header = header if header is not None else read_header(path)
    info = header[name]
    dtype = getattr(torch, _TORCH_DTYPES.get(info["dtype"], ""), None)
    if dtype is None:
        raise ModelFileError(f"{name!r} in {path.name} has dtype {info['dtype']}, which torch cannot hold")
    with open_regular(path, what="safetensors file", min_bytes=8) as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
    if len(mm) < 8 + n + info["data_offsets"][1]:
        raise ModelFileError(f"{path.name} shrank after its header was read; re-download it")
    begin, end = info["data_offsets"]
    count = math.prod(info["shape"])
    if count == 0:
        return torch.empty(info["shape"], dtype=dtype)
    flat = torch.frombuffer(mm, dtype=dtype, count=count, offset=8 + n + begin)
    return flat.view(info["shape"])


def weight_map(folder: Path) -> dict[str, str] | None:
    """``tensor → shard file`` from ``model.safetensors.index.json``, or ``None`` when unsharded.

    Each shard must be a plain file name inside ``folder`` (no absolute path, no ``..``).
    """
    index = Path(folder) / "model.safetensors.index.json"
    if not os.path.lexists(index):
        return None
    fix = "re-download the index"
    doc = read_json(index, what="safetensors index", fix=fix)
    wm = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(wm, dict):
        raise ModelFileError(f"{index} has no weight_map object; {fix}")
    if not wm:
        raise ModelFileError(f"{index}: weight_map is empty; {fix}")
    for name, shard in wm.items():
        inside(folder, shard, where=f"{index.name} (tensor {name!r})")
    return wm
