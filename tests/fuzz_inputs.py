"""Generators for the fuzz suite: damaged model files, tokenizers, configs and corpora, built
byte by byte so that each case damages exactly one thing, plus the check every case shares.

- safetensors: ``u64 header length`` + JSON header + data (see :mod:`embscope.formats.safetensors`);
- GGUF v3: ``"GGUF"``, version u32, tensor and key counts u64, ``key / type u32 / value`` metadata,
  a tensor table (``name, n_dims, dims (fastest first), ggml type, offset``) and data aligned to
  ``general.alignment`` (see :mod:`embscope.formats.gguf`);
- ``.tiktoken``: ``base64(token) rank`` per line;
- special files: a FIFO, a folder, a device, a ``/proc`` file or a dangling link in a file's place.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import struct
from pathlib import Path
from typing import Any, Callable

import pytest

from embscope.cli import main

CONFIG = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 8,
          "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
          "intermediate_size": 32, "vocab_size": 16, "tie_word_embeddings": True,
          "rope_theta": 10000.0, "max_position_embeddings": 128}


EMBED = "model.embed_tokens.weight"


ROWS, HIDDEN = 16, 8


STEP_MARKS = ("→ ", "✓ ", "– ")


def assert_one_line_error(argv: list[str], capsys, out_parent: Path | None = None) -> str:
    """Run the CLI; exit 2, one ``error:`` line, no traceback, nothing left in ``out_parent``."""
    before = sorted(os.listdir(out_parent)) if out_parent is not None else None
    code = main(argv)
    err = capsys.readouterr().err
    # audit prints its step log (``→ load …``, ``✓ load``) on stderr; everything else is error output
    lines = [line for line in err.strip().splitlines() if line.strip() and not line.startswith(STEP_MARKS)]
    assert code == 2, f"exit {code}: {err[-2000:]}"
    assert "Traceback" not in err, err[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error:"), err[-2000:]
    if out_parent is not None:
        assert sorted(os.listdir(out_parent)) == before, "something was left next to --out"
    return lines[0]


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    """The step log is wrapped at the console width; a wide one keeps each step on one line."""
    monkeypatch.setenv("COLUMNS", "10000")


@pytest.fixture
def out(tmp_path) -> Path:
    parent = tmp_path / "reports"
    parent.mkdir()
    return parent / "r"


def safetensors_bytes(header: Any, data: bytes = b"", *, raw_header: bytes | None = None) -> bytes:
    body = raw_header if raw_header is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(body)) + body + data


def good_header(**changes) -> dict:
    info = {"dtype": "F32", "shape": [ROWS, HIDDEN], "data_offsets": [0, ROWS * HIDDEN * 4]}
    info.update(changes)
    return {EMBED: info}


def model_folder(root: Path, st: bytes | None = None, *, config: Any = CONFIG, raw_config: str | None = None) -> Path:
    folder = root / "m"
    folder.mkdir()
    (folder / "config.json").write_text(raw_config if raw_config is not None else json.dumps(config))
    if st is not None:
        (folder / "model.safetensors").write_bytes(st)
    return folder


DATA = b"\0" * (ROWS * HIDDEN * 4)


DEEP_JSON = b"[" * 100_000 + b"]" * 100_000


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _directory(path: Path) -> None:
    path.mkdir()
    (path / "x").write_text("x")


def _device(path: Path) -> None:
    path.symlink_to("/dev/zero")


def _proc(path: Path) -> None:
    path.symlink_to("/proc/self/status")


def _dangling(path: Path) -> None:
    path.symlink_to(path.parent / "nowhere")


SPECIAL: dict[str, Callable[[Path], None]] = {"FIFO": _fifo, "directory": _directory, "device": _device,
                                              "/proc file": _proc, "dangling symlink": _dangling}


@contextlib.contextmanager
def alarm(seconds: int):
    """Fail (instead of hanging forever) when a case blocks for ``seconds``."""
    def boom(*_):
        raise TimeoutError(f"blocked for {seconds} s")

    saved = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, saved)


def sharded_folder(root: Path, weight_map: Any, *, raw: bytes | None = None) -> Path:
    folder = model_folder(root)
    (folder / "model-00001-of-00001.safetensors").write_bytes(safetensors_bytes(good_header(), DATA))
    body = raw if raw is not None else json.dumps({"weight_map": weight_map}).encode()
    (folder / "model.safetensors.index.json").write_bytes(body)
    return folder


_GGUF_FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


U32, STR, ARR, F32_T = 4, 8, 9, 6


def gguf_value(vtype: int, value: Any) -> bytes:
    if vtype == STR:
        raw = value.encode() if isinstance(value, str) else value
        return struct.pack("<Q", len(raw)) + raw
    if vtype == ARR:
        etype, items = value
        return struct.pack("<IQ", etype, len(items)) + b"".join(gguf_value(etype, v) for v in items)
    return struct.pack(_GGUF_FMT[vtype], value)


def gguf_bytes(kv: list[tuple[str, int, Any]] | None = None, tensors: list[tuple] | None = None, *,
               alignment: int = 32, extra_kv: bytes = b"", n_kv_extra: int = 0, version: int = 3) -> bytes:
    """A GGUF file: ``kv`` as ``(key, type, value)``; ``tensors`` as ``(name, shape, ggml_type, data)``
    with ``shape`` fastest axis first; ``extra_kv`` appended raw (counted by ``n_kv_extra``)."""
    kv = kv if kv is not None else base_kv()
    tensors = tensors if tensors is not None else [("token_embd.weight", [HIDDEN, ROWS], 0, DATA)]
    body = b"".join(gguf_value(STR, k) + struct.pack("<I", t) + gguf_value(t, v) for k, t, v in kv) + extra_kv
    table, blobs, offset = b"", b"", 0
    for name, shape, gtype, data in tensors:
        table += gguf_value(STR, name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in shape)
        table += struct.pack("<IQ", gtype, offset)
        pad = (-len(data)) % 32
        blobs += data + b"\0" * pad
        offset += len(data) + pad
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kv) + n_kv_extra) + body + table
    return head + b"\0" * ((-len(head)) % alignment) + blobs


def base_kv(**over) -> list[tuple[str, int, Any]]:
    kv = {"general.architecture": (STR, "llama"), "llama.embedding_length": (U32, HIDDEN),
          "llama.block_count": (U32, 1), "llama.attention.head_count": (U32, 2),
          "llama.context_length": (U32, 128), "llama.rope.freq_base": (F32_T, 10000.0)}
    kv.update(over)
    return [(k, t, v) for k, (t, v) in kv.items() if t is not None]


def deep_array(depth: int) -> bytes:
    return b"".join(struct.pack("<IQ", ARR, 1) for _ in range(depth)) + struct.pack("<IQ", 0, 0)


def kv_raw(key: str, vtype: int, raw: bytes) -> bytes:
    return gguf_value(STR, key) + struct.pack("<I", vtype) + raw


SPM_KV = {"tokenizer.ggml.model": (STR, "llama"),
          "tokenizer.ggml.tokens": (ARR, (STR, ["<unk>", "<s>", "</s>", "\u2581a", "\u2581b", "a", "b", "\u2581"])),
          "tokenizer.ggml.scores": (ARR, (F32_T, [0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -4.0, -5.0])),
          "tokenizer.ggml.token_type": (ARR, (5, [2, 3, 3, 1, 1, 1, 1, 1])),
          "tokenizer.ggml.bos_token_id": (U32, 1), "tokenizer.ggml.eos_token_id": (U32, 2),
          "tokenizer.ggml.unknown_token_id": (U32, 0)}


_ALL_BYTES = [bytes([b]) for b in range(256)]


def tiktoken_text(pairs: list[tuple[bytes, int]]) -> bytes:
    return b"".join(base64.b64encode(t) + b" " + str(r).encode() + b"\n" for t, r in pairs)


def ranks_file(extra: list[tuple[bytes, Any]] = ()) -> bytes:
    base = [(t, i) for i, t in enumerate(_ALL_BYTES)]
    return tiktoken_text(base) + b"".join(base64.b64encode(t) + b" " + str(r).encode() + b"\n" for t, r in extra)


@pytest.fixture
def corpus(tmp_path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text("hello world, the patient has hypertension\n" * 3)
    return path


def corpus_binary(p: Path) -> Path:
    p = p / "c.txt"
    p.write_bytes(b"\0\1\2" * 1000)
    return p


def corpus_invalid_utf8(p: Path) -> Path:
    p = p / "c.txt"
    p.write_bytes(b"\xff\xfe\xfd\n" * 100)
    return p


def corpus_jsonl_types(p: Path) -> Path:
    p = p / "c.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in [{"text": 5}, {"text": None}, {"text": ["a"]}, [1], "x", {"lang": 3}]))
    return p


def corpus_empty(p: Path) -> Path:
    p = p / "c.txt"
    p.write_bytes(b"")
    return p


def corpus_fifo(p: Path) -> Path:
    p = p / "c.txt"
    os.mkfifo(p)
    return p


def corpus_fifo_in_folder(p: Path) -> Path:
    (p / "corpus").mkdir()
    os.mkfifo(p / "corpus" / "eng.txt")
    return p / "corpus"


def corpus_bad_parquet(p: Path) -> Path:
    p = p / "c.parquet"
    p.write_bytes(b"PAR1" + b"\0" * 100)
    return p


EVIL = """import pathlib
pathlib.Path(__file__).with_name("PWNED").write_text("ran")
from transformers import LlamaTokenizerFast as EvilTokenizer
"""


def evil_folder(folder: Path, *, config_extra: dict | None = None) -> None:
    """``evil.py`` plus configs whose ``auto_map`` points at it: loading it would run the file."""
    (folder / "evil.py").write_text(EVIL)
    auto_map = {"AutoTokenizer": ["evil.EvilTokenizer", "evil.EvilTokenizer"], "AutoConfig": "evil.EvilConfig",
                "AutoModelForCausalLM": "evil.EvilModel"}
    (folder / "tokenizer_config.json").write_text(json.dumps({"auto_map": auto_map, "tokenizer_class": "EvilTokenizer"}))
    if config_extra is not None:
        cfg = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**cfg, **config_extra, "auto_map": auto_map}))


def answer_yes(monkeypatch) -> list:
    """Answer "y" to any question on stdin (what a hurried user does) and record that it was asked."""
    asked: list = []
    monkeypatch.setattr("builtins.input", lambda *a: asked.append(a) or "y")
    return asked


def bin_folder(root: Path) -> Path:
    import torch

    folder = root / "bin"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIG))
    torch.save({EMBED: torch.zeros(ROWS, HIDDEN)}, folder / "pytorch_model.bin")
    return folder


EXTEND_CORPUS = "the patient has hypertension and cardiomyopathy with tachycardia\n" * 12


def tiny_tokenizer(path: Path) -> int:
    """A byte-level BPE of 280 entries trained on the corpus (medical words stay multi-piece)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(EXTEND_CORPUS.splitlines() + ["a quick brown fox jumps over the lazy dog"],
                            trainers.BpeTrainer(vocab_size=280, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                special_tokens=["<|endoftext|>"]))
    tok.save(str(path))
    return tok.get_vocab_size()


def extend_applied(folder: Path, tmp_path: Path, capsys) -> dict:
    """``extend --apply`` on ``folder``; returns the written manifest."""
    (tmp_path / "corpus.txt").write_text(EXTEND_CORPUS)
    applied = tmp_path / "applied"
    code = main(["extend", "--model", str(folder), "--corpus", str(tmp_path / "corpus.txt"), "--top", "3",
                 "--min-freq", "2", "--no-diagnostics", "--apply", str(applied), "--out", str(tmp_path / "cand")])
    assert code == 0, capsys.readouterr().err
    return json.loads((applied / "embscope_extension.json").read_text())


# ---------------------------------------------------------------- bombs and bounds (bounded by design)
#
# Each generator writes a small file that costs far more once read. The tests use sizes past the
# reader's RATIO_FLOOR (4 MiB) and scale the figures down where only the ratio matters;
# bench-style full-size versions are in the closing note's measurements.

MIB = 1 << 20


def parquet_long_rows(p: Path, rows: int = 64, row_bytes: int = MIB, *, dictionary: bool = False) -> Path:
    """``rows`` copies of a ``row_bytes`` text in one zstd row group (a few KB on disk). Built
    from one value: the generator itself holds ``rows × row_bytes`` once, as Arrow does."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    value = pa.array(["a" * row_bytes])
    col = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), value) if dictionary \
        else value.take(pa.array([0] * rows))
    path = p / ("dict.parquet" if dictionary else "rows.parquet")
    pq.write_table(pa.table({"text": col}), path, compression="zstd", use_dictionary=dictionary,
                   row_group_size=rows)
    return path


def arrow_compressed(p: Path, rows: int = 32, row_bytes: int = MIB, *, stream: bool = False) -> Path:
    """An Arrow IPC file with zstd-compressed buffers: ``rows × row_bytes`` in a few KB."""
    import pyarrow as pa

    table = pa.table({"text": pa.array(["x" * row_bytes]).take(pa.array([0] * rows))})
    path = p / "bomb.arrow"
    opts = pa.ipc.IpcWriteOptions(compression="zstd")
    with (pa.ipc.new_stream if stream else pa.ipc.new_file)(str(path), table.schema, options=opts) as w:
        w.write_table(table)
    return path


def zst_text(p: Path, data_bytes: int, line: bytes = b"\n", name: str = "c.txt.zst") -> Path:
    """``data_bytes`` of ``line`` repeated, zstd-compressed as a stream (written in 1 MiB pieces)."""
    import zstandard

    path = p / name
    chunk = line * (MIB // len(line))
    with open(path, "wb") as fh, zstandard.ZstdCompressor(level=19).stream_writer(fh) as w:
        for _ in range(data_bytes // len(chunk)):
            w.write(chunk)
    return path


def arrow_tampered(p: Path, how: str) -> Path:
    """An uncompressed Arrow IPC stream of three strings whose offsets buffer is damaged: ``past``
    (an offset far past the data), ``negative``, or ``small`` (a few bytes past the data)."""
    import pyarrow as pa

    table = pa.table({"text": ["alpha", "beta", "gamma"]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    raw = bytearray(sink.getvalue().to_pybytes())
    # the offsets buffer is [0, 5, 9, 14] as int32: find it and change its last entry
    needle = struct.pack("<4i", 0, 5, 9, 14)
    at = raw.index(needle)
    value = {"past": 1 << 30, "negative": -8, "small": 20}[how]
    raw[at + 12:at + 16] = struct.pack("<i", value)
    path = p / f"tampered-{how}.arrow"
    path.write_bytes(bytes(raw))
    return path


def parquet_invalid_utf8(p: Path) -> Path:
    """A Parquet string column holding one valid text and one with invalid UTF-8 bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = b"hello world\xff\xfe bad"
    offsets = pa.py_buffer(struct.pack("<3i", 0, 11, len(data)))
    col = pa.Array.from_buffers(pa.string(), 2, [None, offsets, pa.py_buffer(data)])
    path = p / "utf8.parquet"
    pq.write_table(pa.table({"text": col}), path)
    return path


def jsonl_lines(p: Path, records: list, name: str = "c.jsonl", raw: list[bytes] = ()) -> Path:
    path = p / name
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in records) + b"".join(raw))
    return path


def corpus_summary(out: Path) -> dict:
    """The corpus report of the first corpus of a fertility run's summary.json."""
    summary = json.loads((out / "summary.json").read_text())
    return next(iter(summary["sections"]["languages"]["corpora"].values()))
