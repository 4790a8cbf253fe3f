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


def read_tensor(path: Path, name: str):
    """Load one tensor (a ``torch.Tensor`` in its stored dtype) from a validated file."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return f.get_tensor(name)
    except Exception as exc:  # safetensors' own checks, after ours
        raise ModelFileError(f"cannot read {name!r} from {Path(path).name}: {exc}; re-download the file") from None


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
