"""Fuzz suite: malformed model files, tokenizers, configs and corpora through the CLI.

Every case writes a small damaged input under ``tmp_path``, runs the CLI in-process
(``embscope.cli.main``) and checks the promise made to users: exit code 2, exactly one line on
stderr that starts with ``error:``, no traceback, and nothing half-written next to ``--out``.
The files are built byte by byte (``struct``), so each case damages exactly one thing:

- safetensors: ``u64 header length`` + JSON header + data (see :mod:`embscope.loaders.safetensors`);
- GGUF v3: magic, version, counts, ``key/type/value`` metadata, tensor table, aligned data
  (see :mod:`embscope.loaders.gguf`);
- shard indexes, ``config.json``, ``tokenizer.json``, ``.tiktoken`` rank files, corpora.

Special files (a FIFO or a directory where a model file should be, a device, a ``/proc`` file)
must be refused before anything is read, never hang.
"""

from __future__ import annotations

import base64
import json
import os
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


# --------------------------------------------------------------------------------------------
# the promise
# --------------------------------------------------------------------------------------------


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
def _wide_console(monkeypatch):
    """The step log is wrapped at the console width; a wide one keeps each step on one line."""
    monkeypatch.setenv("COLUMNS", "10000")


@pytest.fixture
def out(tmp_path) -> Path:
    parent = tmp_path / "reports"
    parent.mkdir()
    return parent / "r"


# --------------------------------------------------------------------------------------------
# safetensors
# --------------------------------------------------------------------------------------------


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
SAFETENSORS_CASES: dict[str, bytes] = {
    "string offsets": safetensors_bytes(good_header(data_offsets=["0", str(len(DATA))]), DATA),
    "float shape": safetensors_bytes(good_header(shape=[16.0, 8.0]), DATA),
    "fractional shape": safetensors_bytes(good_header(shape=[15.5, 8]), DATA),
    "bool shape": safetensors_bytes(good_header(shape=[True, 8], data_offsets=[0, 32]), DATA),
    "string shape": safetensors_bytes(good_header(shape="88", data_offsets=[0, 256]), DATA),
    "negative shape": safetensors_bytes(good_header(shape=[-16, -8]), DATA),
    "100k-deep JSON header": safetensors_bytes(None, raw_header=DEEP_JSON),
    "deep JSON inside an entry": safetensors_bytes(None, raw_header=b'{"x": ' + DEEP_JSON + b"}"),
    "entry is an int": safetensors_bytes({EMBED: 5}, DATA),
    "entry is a list": safetensors_bytes({EMBED: ["F32", [16, 8], [0, 512]]}, DATA),
    "header is a list": safetensors_bytes([1, 2, 3], DATA),
    "offsets past the data": safetensors_bytes(good_header(data_offsets=[0, 10**6]), DATA),
    "offsets reversed": safetensors_bytes(good_header(data_offsets=[512, 0]), DATA),
    "three offsets": safetensors_bytes(good_header(data_offsets=[0, 256, 512]), DATA),
    "overlapping tensors": safetensors_bytes(
        {**good_header(), "lm_head.weight": {"dtype": "F32", "shape": [ROWS, HIDDEN], "data_offsets": [4, 516]}},
        DATA + b"\0" * 4),
    "unknown dtype": safetensors_bytes(good_header(dtype="Q4_K"), DATA),
    "dtype is a list": safetensors_bytes(good_header(dtype=["F32"]), DATA),
    "size does not match shape": safetensors_bytes(good_header(shape=[ROWS, HIDDEN + 1]), DATA),
    "huge shape": safetensors_bytes(good_header(shape=[2**62, 2**62]), DATA),
    "header length past the end": struct.pack("<Q", 2**40) + b"{}",
    "zero header length": struct.pack("<Q", 0) + DATA,
    "header not UTF-8": safetensors_bytes(None, raw_header=b"\xff\xfe{}"),
    "empty file": b"",
    "four bytes": b"\x01\x02\x03\x04",
    "truncated data": safetensors_bytes(good_header(), DATA[:100]),
    "no tensors": safetensors_bytes({"__metadata__": {"format": "pt"}}),
    "metadata is a list": safetensors_bytes({"__metadata__": [1], **good_header()}, DATA),
    "binary garbage": bytes(range(256)) * 16,
}


@pytest.mark.parametrize("case", list(SAFETENSORS_CASES))
def test_malformed_safetensors(case, tmp_path, out, capsys):
    folder = model_folder(tmp_path, SAFETENSORS_CASES[case])
    msg = assert_one_line_error(["audit", "--model", str(folder), "--no-scan", "--out", str(out)], capsys, out.parent)
    assert "model.safetensors" in msg or "m" in msg


def test_good_safetensors_control(tmp_path, out, capsys):
    """The generator's undamaged file loads: the cases above fail for their damage, not the base."""
    folder = model_folder(tmp_path, safetensors_bytes(good_header(), DATA))
    assert main(["audit", "--model", str(folder), "--no-scan", "--out", str(out)]) == 0, capsys.readouterr().err
    assert (out / "summary.json").is_file()


# -- special files where a model file should be ---------------------------------------------


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


@pytest.mark.parametrize("kind", list(SPECIAL))
@pytest.mark.parametrize("name", ["model.safetensors", "config.json", "model.safetensors.index.json",
                                  "tokenizer.json"])
def test_special_file_as_model_file(kind, name, tmp_path, out, capsys):
    folder = model_folder(tmp_path, None if name == "model.safetensors" else safetensors_bytes(good_header(), DATA))
    target = folder / name
    if target.exists():
        target.unlink()
    if name == "model.safetensors.index.json":
        (folder / "model.safetensors").write_bytes(safetensors_bytes(good_header(), DATA))
    SPECIAL[kind](target)
    with _alarm(20):
        assert_one_line_error(["audit", "--model", str(folder), "--no-scan", "--out", str(out)], capsys, out.parent)


@pytest.mark.parametrize("kind", ["FIFO", "device", "/proc file"])
@pytest.mark.parametrize("given", ["folder", "file"])
def test_special_file_as_gguf(kind, given, tmp_path, out, capsys):
    (tmp_path / "m").mkdir()
    SPECIAL[kind](tmp_path / "m" / "model.gguf")
    spec = tmp_path / "m" / ("model.gguf" if given == "file" else "")
    with _alarm(20):
        assert_one_line_error(["scan", "--model", str(spec), "--out", str(out)], capsys, out.parent)


class _alarm:
    """Fail (instead of hanging forever) when a case blocks for ``seconds``."""

    def __init__(self, seconds: int):
        self.seconds = seconds

    def __enter__(self):
        import signal

        def boom(*_):
            raise TimeoutError(f"blocked for {self.seconds} s")

        self.saved = signal.signal(signal.SIGALRM, boom)
        signal.alarm(self.seconds)

    def __exit__(self, *exc):
        import signal

        signal.alarm(0)
        signal.signal(signal.SIGALRM, self.saved)


# --------------------------------------------------------------------------------------------
# shard indexes
# --------------------------------------------------------------------------------------------


def sharded_folder(root: Path, weight_map: Any, *, raw: bytes | None = None) -> Path:
    folder = model_folder(root)
    (folder / "model-00001-of-00001.safetensors").write_bytes(safetensors_bytes(good_header(), DATA))
    body = raw if raw is not None else json.dumps({"weight_map": weight_map}).encode()
    (folder / "model.safetensors.index.json").write_bytes(body)
    return folder


INDEX_CASES: dict[str, dict] = {
    "value is an int": {"weight_map": {EMBED: 5}},
    "value is null": {"weight_map": {EMBED: None}},
    "value is a list": {"weight_map": {EMBED: ["model-00001-of-00001.safetensors"]}},
    "weight_map is a list": {"weight_map": [EMBED]},
    "weight_map is empty": {"weight_map": {}},
    "no weight_map": {"metadata": {}},
    "parent path": {"weight_map": {EMBED: "../outside.safetensors"}},
    "absolute path": {"weight_map": {EMBED: "/etc/passwd"}},
    "nested parent path": {"weight_map": {EMBED: "sub/../../outside.safetensors"}},
    "empty name": {"weight_map": {EMBED: ""}},
    "shard missing": {"weight_map": {EMBED: "model-00002-of-00002.safetensors"}},
    "tensor not in shard": {"weight_map": {"model.embed_tokens.weight": "model-00001-of-00001.safetensors",
                                           "lm_head.weight": "model-00001-of-00001.safetensors"},
                            "_rename": True},
    "not JSON": {"_raw": b"{weight_map:"},
    "deep JSON": {"_raw": b'{"weight_map": ' + DEEP_JSON + b"}"},
    "not UTF-8": {"_raw": b"\xff\xfe\x00"},
}


@pytest.mark.parametrize("case", list(INDEX_CASES))
def test_malformed_shard_index(case, tmp_path, out, capsys):
    spec = dict(INDEX_CASES[case])
    raw = spec.pop("_raw", None)
    rename = spec.pop("_rename", False)
    if raw is None:
        raw = json.dumps(spec).encode()
    folder = sharded_folder(tmp_path, None, raw=raw)
    outside = tmp_path / "outside.safetensors"
    outside.write_bytes(safetensors_bytes(good_header(), DATA))
    if rename:  # the index promises lm_head in a shard that lacks it
        (folder / "model-00001-of-00001.safetensors").write_bytes(
            safetensors_bytes({"model.embed_tokens.weight": good_header()[EMBED]}, DATA))
    msg = assert_one_line_error(["audit", "--model", str(folder), "--no-scan", "--out", str(out)], capsys, out.parent)
    if "path" in case:
        assert "outside the model folder" in msg


# --------------------------------------------------------------------------------------------
# GGUF
# --------------------------------------------------------------------------------------------

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


def _deep_array(depth: int) -> bytes:
    return b"".join(struct.pack("<IQ", ARR, 1) for _ in range(depth)) + struct.pack("<IQ", 0, 0)


def _kv_raw(key: str, vtype: int, raw: bytes) -> bytes:
    return gguf_value(STR, key) + struct.pack("<I", vtype) + raw


SPM_KV = {"tokenizer.ggml.model": (STR, "llama"),
          "tokenizer.ggml.tokens": (ARR, (STR, ["<unk>", "<s>", "</s>", "\u2581a", "\u2581b", "a", "b", "\u2581"])),
          "tokenizer.ggml.scores": (ARR, (F32_T, [0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -4.0, -5.0])),
          "tokenizer.ggml.token_type": (ARR, (5, [2, 3, 3, 1, 1, 1, 1, 1])),
          "tokenizer.ggml.bos_token_id": (U32, 1), "tokenizer.ggml.eos_token_id": (U32, 2),
          "tokenizer.ggml.unknown_token_id": (U32, 0)}


GPT2_TOKENIZER = {"tokenizer.ggml.model": (STR, "gpt2"),
                  "tokenizer.ggml.merges": (ARR, (STR, ["a b"]))}
GGUF_CASES: dict[str, Callable[[], bytes]] = {
    "shape [d, 0]": lambda: gguf_bytes(tensors=[("token_embd.weight", [HIDDEN, 0], 0, b"")]),
    "shape [0, V]": lambda: gguf_bytes(tensors=[("token_embd.weight", [0, ROWS], 0, b"")]),
    "Q4_1 with 5 columns": lambda: gguf_bytes(tensors=[("token_embd.weight", [5, ROWS], 3, b"\0" * 64)]),
    "Q8_0 with 40 columns": lambda: gguf_bytes(tensors=[("token_embd.weight", [40, ROWS], 8, b"\0" * 34 * 20)]),
    "1-D token_embd": lambda: gguf_bytes(tensors=[("token_embd.weight", [HIDDEN * ROWS], 0, DATA)]),
    "9 dimensions": lambda: gguf_bytes(tensors=[("token_embd.weight", [1] * 9, 0, b"\0" * 4)]),
    "unknown ggml type": lambda: gguf_bytes(tensors=[("token_embd.weight", [HIDDEN, ROWS], 999, DATA)]),
    "tensor past the end": lambda: gguf_bytes(tensors=[("token_embd.weight", [HIDDEN, ROWS], 0, DATA[:64])]),
    "5,000-deep nested arrays": lambda: gguf_bytes(extra_kv=_kv_raw("x.deep", ARR, _deep_array(5000)), n_kv_extra=1),
    "general.alignment = 'abc'": lambda: gguf_bytes(base_kv(**{"general.alignment": (STR, "abc")})),
    "general.alignment = 0": lambda: gguf_bytes(base_kv(**{"general.alignment": (U32, 0)})),
    "general.alignment = 7": lambda: gguf_bytes(base_kv(**{"general.alignment": (U32, 7)})),
    "token list is an int": lambda: gguf_bytes(base_kv(**GPT2_TOKENIZER, **{"tokenizer.ggml.tokens": (U32, 5)})),
    "token list of ints": lambda: gguf_bytes(base_kv(**GPT2_TOKENIZER, **{"tokenizer.ggml.tokens": (ARR, (U32, [1, 2]))})),
    "merges is a string": lambda: gguf_bytes(base_kv(**{"tokenizer.ggml.model": (STR, "gpt2"),
                                                        "tokenizer.ggml.merges": (STR, "a b"),
                                                        "tokenizer.ggml.tokens": (ARR, (STR, ["a", "b"]))})),
    "merge without a space": lambda: gguf_bytes(base_kv(**{"tokenizer.ggml.model": (STR, "gpt2"),
                                                           "tokenizer.ggml.merges": (ARR, (STR, ["ab"])),
                                                           "tokenizer.ggml.tokens": (ARR, (STR, ["a", "b", "ab"]))})),
    "merge of unknown tokens": lambda: gguf_bytes(base_kv(**{"tokenizer.ggml.model": (STR, "gpt2"),
                                                             "tokenizer.ggml.merges": (ARR, (STR, ["x y"])),
                                                             "tokenizer.ggml.tokens": (ARR, (STR, ["a", "b"]))})),
    "token_type shorter than tokens": lambda: gguf_bytes(base_kv(**{"tokenizer.ggml.model": (STR, "gpt2"),
                                                                    "tokenizer.ggml.merges": (ARR, (STR, [])),
                                                                    "tokenizer.ggml.tokens": (ARR, (STR, ["a", "b"])),
                                                                    "tokenizer.ggml.token_type": (ARR, (5, [1]))})),
    "SentencePiece tokens without scores": lambda: gguf_bytes(base_kv(**{**SPM_KV, "tokenizer.ggml.scores": (None, None)})),
    "tokenizer model is an int": lambda: gguf_bytes(base_kv(**{"tokenizer.ggml.model": (U32, 3)})),
    "embedding_length = 'abc'": lambda: gguf_bytes(base_kv(**{"llama.embedding_length": (STR, "abc")})),
    "key_length = 'x'": lambda: gguf_bytes(base_kv(**{"llama.attention.key_length": (STR, "x")})),
    "head_count is a string": lambda: gguf_bytes(base_kv(**{"llama.attention.head_count": (STR, "two")})),
    "rope factor 'abc'": lambda: gguf_bytes(base_kv(**{"llama.rope.scaling.type": (STR, "linear"),
                                                       "llama.rope.scaling.factor": (STR, "abc")})),
    "bos id 'x'": lambda: gguf_bytes(base_kv(**{"tokenizer.ggml.bos_token_id": (STR, "x")})),
    "architecture is an int": lambda: gguf_bytes(base_kv(**{"general.architecture": (U32, 7)})),
    "no architecture": lambda: gguf_bytes(base_kv(**{"general.architecture": (None, None)})),
    "version 99": lambda: gguf_bytes(version=99),
    "unknown value type": lambda: gguf_bytes(extra_kv=_kv_raw("x.odd", 77, b"\0" * 8), n_kv_extra=1),
    "string claims 2^60 bytes": lambda: gguf_bytes(extra_kv=gguf_value(STR, "x") + struct.pack("<IQ", STR, 2**60), n_kv_extra=1),
    "array claims 2^40 items": lambda: gguf_bytes(extra_kv=_kv_raw("x.arr", ARR, struct.pack("<IQ", 0, 2**40)), n_kv_extra=1),
    "10^6 keys claimed": lambda: gguf_bytes(n_kv_extra=10**6),
    "truncated in the metadata": lambda: gguf_bytes()[:60],
    "truncated in the data": lambda: gguf_bytes()[:-200],
    "magic only": lambda: b"GGUF",
    "empty file": lambda: b"",
    "wrong magic": lambda: b"GGML" + gguf_bytes()[4:],
}


@pytest.mark.parametrize("case", list(GGUF_CASES))
def test_malformed_gguf(case, tmp_path, out, capsys):
    path = tmp_path / "model.gguf"
    path.write_bytes(GGUF_CASES[case]())
    assert_one_line_error(["audit", "--model", str(path), "--no-scan", "--out", str(out)], capsys, out.parent)


@pytest.mark.parametrize("case", ["general.alignment = 'abc'", "rope factor 'abc'", "key_length = 'x'",
                                  "5,000-deep nested arrays", "truncated in the metadata"])
def test_malformed_gguf_rope(case, tmp_path, capsys):
    path = tmp_path / "model.gguf"
    path.write_bytes(GGUF_CASES[case]())
    assert_one_line_error(["rope", "--model", str(path)], capsys)


def test_good_gguf_control(tmp_path, out, capsys):
    path = tmp_path / "model.gguf"
    path.write_bytes(gguf_bytes())
    assert main(["audit", "--model", str(path), "--no-scan", "--out", str(out)]) == 0, capsys.readouterr().err
    assert (out / "summary.json").is_file()


# --------------------------------------------------------------------------------------------
# tokenizers
# --------------------------------------------------------------------------------------------

_ALL_BYTES = [bytes([b]) for b in range(256)]


def tiktoken_text(pairs: list[tuple[bytes, int]]) -> bytes:
    return b"".join(base64.b64encode(t) + b" " + str(r).encode() + b"\n" for t, r in pairs)


def _ranks(extra: list[tuple[bytes, Any]] = ()) -> bytes:
    base = [(t, i) for i, t in enumerate(_ALL_BYTES)]
    return tiktoken_text(base) + b"".join(base64.b64encode(t) + b" " + str(r).encode() + b"\n" for t, r in extra)


TIKTOKEN_CASES: dict[str, bytes] = {
    "duplicate rank": _ranks([(b"he", 256), (b"ll", 256)]),
    "duplicate token": _ranks([(b"he", 256), (b"he", 257)]),
    "missing single bytes": tiktoken_text([(b"a", 0), (b"b", 1)]),
    "bad base64": _ranks() + b"@@@@ 300\n",
    "rank not a number": _ranks() + base64.b64encode(b"he") + b" x\n",
    "negative rank": _ranks([(b"he", -1)]),
    "huge rank": _ranks([(b"he", 10**30)]),
    "three fields": _ranks() + base64.b64encode(b"he") + b" 256 7\n",
    "empty file": b"",
    "binary garbage": bytes(range(256)) * 8,
}
TOKENIZER_JSON_CASES: dict[str, bytes] = {
    "not JSON": b"{model",
    "a list": b"[]",
    "model is an int": json.dumps({"version": "1.0", "model": 5}).encode(),
    "vocab values are strings": json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []}}).encode(),
    "merge out of vocabulary": json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}}).encode(),
    "added token id is a string": json.dumps({"version": "1.0", "added_tokens": [{"id": "x"}],
                                              "model": {"type": "WordLevel", "vocab": {"a": 0}, "unk_token": "a"}}).encode(),
    "empty unigram": json.dumps({"version": "1.0", "model": {"type": "Unigram", "vocab": []}}).encode(),
    "deep JSON": b'{"version": "1.0", "x": ' + DEEP_JSON + b"}",
    "not UTF-8": b"\xff\xfe\xfd",
    "empty file": b"",
}


@pytest.fixture
def corpus(tmp_path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text("hello world, the patient has hypertension\n" * 3)
    return path


TOKENIZER_FILE_CASES = ([("ranks.tiktoken", case, data) for case, data in TIKTOKEN_CASES.items()]
                        + [("tokenizer.json", case, data) for case, data in TOKENIZER_JSON_CASES.items()])


@pytest.mark.parametrize("kind", list(SPECIAL))
def test_special_file_as_tokenizer(kind, tmp_path, out, corpus, capsys):
    path = tmp_path / "ranks.tiktoken"
    SPECIAL[kind](path)
    with _alarm(20):
        assert_one_line_error(["fertility", "--tokenizer", str(path), "--corpus", str(corpus), "--out", str(out)],
                              capsys, out.parent)


@pytest.mark.parametrize("fname, case, data", TOKENIZER_FILE_CASES,
                         ids=[f"{f}: {c}" for f, c, _ in TOKENIZER_FILE_CASES])
def test_malformed_tokenizer_file(fname, case, data, tmp_path, out, corpus, capsys):
    path = tmp_path / fname
    path.write_bytes(data)
    assert_one_line_error(["fertility", "--tokenizer", str(path), "--corpus", str(corpus), "--out", str(out)],
                          capsys, out.parent)


def test_good_tiktoken_control(tmp_path, out, corpus, capsys):
    path = tmp_path / "ranks.tiktoken"
    path.write_bytes(_ranks([(b"he", 256), (b"ll", 257)]))
    assert main(["fertility", "--tokenizer", str(path), "--corpus", str(corpus), "--out", str(out)]) == 0, \
        capsys.readouterr().err


@pytest.mark.parametrize("case", ["not JSON", "model is an int", "empty unigram", "deep JSON"])
def test_malformed_tokenizer_json_in_model_folder(case, tmp_path, out, capsys):
    folder = model_folder(tmp_path, safetensors_bytes(good_header(), DATA))
    (folder / "tokenizer.json").write_bytes(TOKENIZER_JSON_CASES[case])
    assert_one_line_error(["audit", "--model", str(folder), "--no-scan", "--out", str(out)], capsys, out.parent)


# --------------------------------------------------------------------------------------------
# configs on the load path
# --------------------------------------------------------------------------------------------

CONFIG_CASES: dict[str, Any] = {
    "hidden_size 'x'": {**CONFIG, "hidden_size": "x"},
    "hidden_size -1": {**CONFIG, "hidden_size": -1},
    "hidden_size true": {**CONFIG, "hidden_size": True},
    "hidden_size 8.5": {**CONFIG, "hidden_size": 8.5},
    "hidden_size does not match": {**CONFIG, "hidden_size": 32},
    "no hidden_size": {k: v for k, v in CONFIG.items() if k != "hidden_size"},
    "config is a list": [CONFIG],
    "config is a string": "qwen2",
    "text_config hidden_size 'x'": {**CONFIG, "text_config": {"hidden_size": "x"}},
}
RAW_CONFIG_CASES: dict[str, str] = {
    "not JSON": "{hidden_size: 8",
    "deep JSON": "[" * 100_000 + "]" * 100_000,
    "NaN hidden_size": json.dumps(CONFIG).replace('"hidden_size": 8', '"hidden_size": NaN'),
    "empty": "",
}


@pytest.mark.parametrize("case", list(CONFIG_CASES) + [f"raw: {k}" for k in RAW_CONFIG_CASES])
def test_malformed_config_on_load_path(case, tmp_path, out, capsys):
    raw = RAW_CONFIG_CASES.get(case.removeprefix("raw: ")) if case.startswith("raw: ") else None
    folder = model_folder(tmp_path, safetensors_bytes(good_header(), DATA),
                          config=CONFIG_CASES.get(case), raw_config=raw)
    assert_one_line_error(["scan", "--model", str(folder), "--out", str(out)], capsys, out.parent)


ROPE_CONFIG_CASES: dict[str, str] = {
    "rope_theta 'x'": json.dumps({**CONFIG, "rope_theta": "x"}),
    "max_position_embeddings Infinity": json.dumps(CONFIG).replace('"max_position_embeddings": 128',
                                                                   '"max_position_embeddings": Infinity'),
    "rope_scaling [1, 2]": json.dumps({**CONFIG, "rope_scaling": [1, 2]}),
    "rope factor 'abc'": json.dumps({**CONFIG, "rope_scaling": {"rope_type": "linear", "factor": "abc"}}),
    "rope factor 0": json.dumps({**CONFIG, "rope_scaling": {"rope_type": "linear", "factor": 0}}),
    "num_hidden_layers 'x'": json.dumps({**CONFIG, "num_hidden_layers": "x"}),
    "vocab_size -1": json.dumps({**CONFIG, "vocab_size": -1}),
    "deep JSON": "[" * 100_000 + "]" * 100_000,
}


#: cases the RoPE/config validation (another branch) fixes; drop a mark once its case passes
_ROPE_OWNER = pytest.mark.xfail(reason="rope config validation (context owner)", strict=False)
_ROPE_PENDING = {"rope_theta 'x'", "max_position_embeddings Infinity", "rope_scaling [1, 2]", "rope factor 'abc'",
                 "rope factor 0"}


@pytest.mark.parametrize("case", [pytest.param(c, marks=_ROPE_OWNER) if c in _ROPE_PENDING else c
                                  for c in ROPE_CONFIG_CASES])
def test_malformed_config_rope(case, tmp_path, capsys):
    folder = model_folder(tmp_path, safetensors_bytes(good_header(), DATA), raw_config=ROPE_CONFIG_CASES[case])
    assert_one_line_error(["rope", "--model", str(folder)], capsys)


# --------------------------------------------------------------------------------------------
# corpora
# --------------------------------------------------------------------------------------------


def _corpus_binary(p: Path) -> Path:
    p = p / "c.txt"
    p.write_bytes(b"\0\1\2" * 1000)
    return p


def _corpus_invalid_utf8(p: Path) -> Path:
    p = p / "c.txt"
    p.write_bytes(b"\xff\xfe\xfd\n" * 100)
    return p


def _corpus_jsonl_types(p: Path) -> Path:
    p = p / "c.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in [{"text": 5}, {"text": None}, {"text": ["a"]}, [1], "x", {"lang": 3}]))
    return p


def _corpus_empty(p: Path) -> Path:
    p = p / "c.txt"
    p.write_bytes(b"")
    return p


def _corpus_fifo(p: Path) -> Path:
    p = p / "c.txt"
    os.mkfifo(p)
    return p


def _corpus_fifo_in_folder(p: Path) -> Path:
    (p / "corpus").mkdir()
    os.mkfifo(p / "corpus" / "eng.txt")
    return p / "corpus"


def _corpus_bad_parquet(p: Path) -> Path:
    p = p / "c.parquet"
    p.write_bytes(b"PAR1" + b"\0" * 100)
    return p


CORPUS_CASES: dict[str, Callable[[Path], Path]] = {
    "binary garbage": _corpus_binary, "invalid UTF-8": _corpus_invalid_utf8, "jsonl wrong types": _corpus_jsonl_types,
    "empty file": _corpus_empty, "FIFO": _corpus_fifo, "FIFO in a folder": _corpus_fifo_in_folder,
    "damaged parquet": _corpus_bad_parquet,
}


@pytest.mark.parametrize("case", list(CORPUS_CASES))
def test_malformed_corpus(case, tmp_path, out, capsys):
    path = CORPUS_CASES[case](tmp_path)
    with _alarm(20):
        assert_one_line_error(["fertility", "--tokenizer", "gpt2", "--corpus", str(path), "--out", str(out)],
                              capsys, out.parent)


# --------------------------------------------------------------------------------------------
# reproductions: code in a model folder, pickles, missing layers, auto_map
# --------------------------------------------------------------------------------------------

EVIL = """import pathlib
pathlib.Path(__file__).with_name("PWNED").write_text("ran")
from transformers import LlamaTokenizerFast as EvilTokenizer
"""


def _evil_folder(folder: Path, *, config_extra: dict | None = None) -> None:
    """``evil.py`` plus configs whose ``auto_map`` points at it: loading it would run the file."""
    (folder / "evil.py").write_text(EVIL)
    auto_map = {"AutoTokenizer": ["evil.EvilTokenizer", "evil.EvilTokenizer"], "AutoConfig": "evil.EvilConfig",
                "AutoModelForCausalLM": "evil.EvilModel"}
    (folder / "tokenizer_config.json").write_text(json.dumps({"auto_map": auto_map, "tokenizer_class": "EvilTokenizer"}))
    if config_extra is not None:
        cfg = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**cfg, **config_extra, "auto_map": auto_map}))


def _answer_yes(monkeypatch) -> list:
    """Answer "y" to any question on stdin (what a hurried user does) and record that it was asked."""
    asked: list = []
    monkeypatch.setattr("builtins.input", lambda *a: asked.append(a) or "y")
    return asked


def test_gguf_tokenizer_never_runs_folder_code(tmp_path, out, corpus, capsys, monkeypatch):
    """A SentencePiece GGUF next to tokenizer_config.json with auto_map and evil.py: before the fix
    transformers asked on stdin, and "y" ran evil.py. Now nothing is asked and nothing runs."""
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.gguf").write_bytes(gguf_bytes(base_kv(**SPM_KV)))
    _evil_folder(folder)
    asked = _answer_yes(monkeypatch)
    msg = assert_one_line_error(["fertility", "--tokenizer", str(folder / "model.gguf"), "--corpus", str(corpus),
                                 "--out", str(out)], capsys, out.parent)
    assert "custom code" in msg
    assert not asked and not (folder / "PWNED").exists()


def _bin_folder(root: Path) -> Path:
    import torch

    folder = root / "bin"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIG))
    torch.save({EMBED: torch.zeros(ROWS, HIDDEN)}, folder / "pytorch_model.bin")
    return folder


@pytest.mark.parametrize("command", ["scan", "extend"])
def test_pickle_refusal_names_no_flag_the_command_lacks(command, tmp_path, out, corpus, capsys):
    argv = [command, "--model", str(_bin_folder(tmp_path)), "--out", str(out)]
    msg = assert_one_line_error(argv + (["--corpus", str(corpus)] if command == "extend" else []), capsys, out.parent)
    assert "convert them to safetensors" in msg and "--trust-pickle" not in msg


def test_fifo_model_safetensors_scan_does_not_hang(tmp_path, out, capsys):
    folder = model_folder(tmp_path)
    os.mkfifo(folder / "model.safetensors")
    with _alarm(20):
        msg = assert_one_line_error(["scan", "--model", str(folder), "--out", str(out)], capsys, out.parent)
    assert "FIFO" in msg


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


def _extend(folder: Path, tmp_path: Path, capsys) -> dict:
    """``extend --apply`` on ``folder``; returns the written manifest."""
    (tmp_path / "corpus.txt").write_text(EXTEND_CORPUS)
    applied = tmp_path / "applied"
    code = main(["extend", "--model", str(folder), "--corpus", str(tmp_path / "corpus.txt"), "--top", "3",
                 "--min-freq", "2", "--no-diagnostics", "--apply", str(applied), "--out", str(tmp_path / "cand")])
    assert code == 0, capsys.readouterr().err
    return json.loads((applied / "embscope_extension.json").read_text())


def test_apply_on_shapes_only_checkpoint_writes_rows_not_random_layers(tmp_path, capsys):
    """Before the fix, --apply built the full model and transformers filled the missing layers with
    random values (only a warning). Now the full path is refused with the reason in the manifest
    (auto mode: rows only), and ``mode="full"`` is a one-line error."""
    from embscope.errors import SpecError
    from embscope.extend import apply, suggest
    from embscope.load import load_model
    from tests.conftest import write_checkpoint

    rows = tiny_tokenizer(tmp_path / "tok.json")
    write_checkpoint(tmp_path / "m", rows=rows, hidden=8, tokenizer_json=tmp_path / "tok.json", untied=False)
    manifest = _extend(tmp_path / "m", tmp_path, capsys)
    assert manifest["format"] == "rows" and manifest["n_added"] > 0
    assert "lacks" in manifest["note"] and "random values" in manifest["note"]
    assert (tmp_path / "applied" / "new_rows.safetensors").is_file()
    assert not (tmp_path / "applied" / "model.safetensors").exists()

    model = load_model(str(tmp_path / "m"), device="cpu")
    result = suggest(model, tmp_path / "corpus.txt", top=3, min_freq=2, diagnostics=False)
    with pytest.raises(SpecError, match="lacks .* weights"):
        apply(model, result, tmp_path / "full", mode="full")
    assert not (tmp_path / "full").exists()


@pytest.mark.parametrize("bad", [{"num_hidden_layers": "x"}, {"intermediate_size": -1}, {"text_config": "x"},
                                 {"model_type": 5}])
def test_apply_with_nonsense_config_falls_back_to_rows(bad, tmp_path, capsys):
    from tests.conftest import write_checkpoint

    rows = tiny_tokenizer(tmp_path / "tok.json")
    write_checkpoint(tmp_path / "m", rows=rows, hidden=8, tokenizer_json=tmp_path / "tok.json", config_extra=bad)
    manifest = _extend(tmp_path / "m", tmp_path, capsys)
    assert manifest["format"] == "rows" and manifest["note"]


def test_apply_drops_auto_map_and_runs_no_folder_code(tmp_path, capsys, monkeypatch):
    """A complete tiny Qwen2 whose config and tokenizer_config carry auto_map → evil.py: the full
    model is written, nothing from the folder runs, and no written JSON keeps auto_map."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    folder = tmp_path / "m"
    folder.mkdir()
    rows = tiny_tokenizer(folder / "tokenizer.json")
    cfg = Qwen2Config(vocab_size=rows, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(str(folder))
    _evil_folder(folder, config_extra={})
    asked = _answer_yes(monkeypatch)
    manifest = _extend(folder, tmp_path, capsys)
    assert manifest["format"] == "transformers", manifest["note"]
    assert not asked and not (folder / "PWNED").exists()
    written = list((tmp_path / "applied").glob("*.json"))
    assert {"config.json", "tokenizer_config.json"} <= {p.name for p in written}
    assert not [p.name for p in written if "auto_map" in json.loads(p.read_text())]
    assert not list((tmp_path / "applied").glob("*.py"))
