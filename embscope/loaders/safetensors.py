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

import json
import math
import struct
from pathlib import Path

from embscope.errors import ModelFileError

# Bytes per element of each safetensors dtype.
ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
            "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}
# Real headers are kilobytes to a few MB; refuse absurd sizes before reading them.
MAX_HEADER = 100 * 1024 * 1024


def read_header(path: Path) -> dict[str, dict]:
    """Parse and validate a safetensors header; returns ``{name: {dtype, shape, data_offsets}}``."""
    path = Path(path)
    size = path.stat().st_size
    bad = f"{path.name} is not a valid safetensors file"
    fix = "re-download it (the file is truncated or corrupt)"
    with path.open("rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise ModelFileError(f"{bad}: only {size} bytes; {fix}")
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER or 8 + n > size:
            raise ModelFileError(f"{bad}: header claims {n} bytes but the file has {size}; {fix}")
        try:
            header = json.loads(fh.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise ModelFileError(f"{bad}: header is not JSON; {fix}") from None
    if not isinstance(header, dict):
        raise ModelFileError(f"{bad}: header is not a JSON object; {fix}")
    data_size = size - 8 - n
    header.pop("__metadata__", None)
    for name, info in header.items():
        try:
            dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
            count = math.prod(int(s) for s in shape)
        except (KeyError, TypeError, ValueError):
            raise ModelFileError(f"{bad}: malformed entry for tensor {name!r}; {fix}") from None
        if dtype not in ITEMSIZE or any(int(s) < 0 for s in shape):
            raise ModelFileError(f"{bad}: tensor {name!r} has dtype {dtype!r} / shape {shape}; {fix}")
        if not (0 <= begin <= end <= data_size):
            raise ModelFileError(f"{bad}: tensor {name!r} claims bytes {begin}..{end} but the data "
                                 f"section has {data_size}; {fix}")
        if end - begin != count * ITEMSIZE[dtype]:
            raise ModelFileError(f"{bad}: tensor {name!r} is {end - begin} bytes but shape {shape} × "
                                 f"{dtype} needs {count * ITEMSIZE[dtype]}; {fix}")
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
    with path.open("rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
    begin, end = info["data_offsets"]
    count = math.prod(info["shape"])
    if count == 0:
        return torch.empty(info["shape"], dtype=dtype)
    flat = torch.frombuffer(mm, dtype=dtype, count=count, offset=8 + n + begin)
    return flat.view(info["shape"])


def weight_map(folder: Path) -> dict[str, str] | None:
    """``tensor → shard file`` from ``model.safetensors.index.json``, or ``None`` when unsharded."""
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        return None
    try:
        wm = json.loads(index.read_text("utf-8"))["weight_map"]
    except (json.JSONDecodeError, KeyError, UnicodeDecodeError):
        raise ModelFileError(f"{index} is not a valid safetensors index (no weight_map); re-download it") from None
    if not isinstance(wm, dict):
        raise ModelFileError(f"{index}: weight_map is not an object; re-download it")
    return wm
