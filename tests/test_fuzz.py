"""Fuzz suite: malformed model files, tokenizers, configs and corpora through the CLI.

Every case writes a small damaged input under ``tmp_path`` (generators: :mod:`tests.fuzz_inputs`),
runs the CLI in-process (``embscope.cli.main``) and checks the promise made to users: exit code 2,
exactly one line on stderr that starts with ``error:``, no traceback, and nothing half-written next
to ``--out``. Special files (a FIFO or a folder where a model file should be, a device, a ``/proc``
file) must be refused before anything is read, never hang. The reproductions of the issue's
broken promises (code in a model folder, pickles, missing layers, ``auto_map``) are in
``test_fuzz_repro.py``.
"""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path
from typing import Any, Callable

import pytest

from embscope.cli import main
from tests.fuzz_inputs import (
    alarm, ARR, assert_one_line_error, base_kv, CONFIG, corpus_bad_parquet, corpus_binary,
    corpus_empty, corpus_fifo, corpus_fifo_in_folder, corpus_invalid_utf8, corpus_jsonl_types,
    DATA, deep_array, DEEP_JSON, EMBED, gguf_bytes, gguf_value, good_header, HIDDEN, kv_raw,
    model_folder, ranks_file, ROWS, safetensors_bytes, sharded_folder, SPECIAL, SPM_KV, STR,
    tiktoken_text, U32,
)
from tests.fuzz_inputs import corpus, out, wide_console  # noqa: F401 (shared fixtures)


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


#: what each case's one-line error must say (the damage, named)
SAFETENSORS_EXPECTED = {
    'string offsets': "has data_offsets ['0', '512'], not two integers",
    'float shape': 'has shape [16.0, 8.0], not a list of non-negative integers',
    'fractional shape': 'has shape [15.5, 8], not a list of non-negative integers',
    'bool shape': 'has shape [True, 8], not a list of non-negative integers',
    'string shape': "has shape '88', not a list of non-negative integers",
    'negative shape': 'has shape [-16, -8], not a list of non-negative integers',
    '100k-deep JSON header': 'its header nests JSON too deeply',
    'deep JSON inside an entry': 'its header nests JSON too deeply',
    'entry is an int': "the entry for tensor 'model.embed_tokens.weight' is not an object",
    'entry is a list': "the entry for tensor 'model.embed_tokens.weight' is not an object",
    'header is a list': 'header is not a JSON object',
    'offsets past the data': 'claims bytes 0..1000000 but the data section has 512',
    'offsets reversed': 'claims bytes 512..0 but the data section has 512',
    'three offsets': 'has data_offsets [0, 256, 512], not two integers',
    'overlapping tensors': 'overlap in the data section',
    'unknown dtype': "has dtype 'Q4_K'",
    'dtype is a list': "has dtype ['F32']",
    'size does not match shape': 'is 512 bytes but shape [16, 9] × F32 needs 576',
    'huge shape': 'is 512 bytes but shape [4611686018427387904, 4611686018427387904]',
    'header length past the end': 'header claims 1,099,511,627,776 bytes, more than the 104,857,600 a safetensors header',
    'zero header length': 'its header is not valid JSON',
    'header not UTF-8': 'its header is not UTF-8 text',
    'empty file': 'only 0 bytes',
    'four bytes': 'only 4 bytes',
    'truncated data': 'claims bytes 0..512 but the data section has 100',
    'no tensors': 'holds no tensors; is this a language-model checkpoint?',
    'metadata is a list': '__metadata__ is not a map of strings',
    'binary garbage': 'header claims 506,097,522,914,230,528 bytes, more than the 104,857,600',
}


@pytest.mark.parametrize("case", list(SAFETENSORS_CASES))
def test_malformed_safetensors(case, tmp_path, out, capsys):
    folder = model_folder(tmp_path, SAFETENSORS_CASES[case])
    msg = assert_one_line_error(["audit", "--model", str(folder), "--no-scan", "--out", str(out)], capsys, out.parent)
    assert SAFETENSORS_EXPECTED[case] in msg, msg
    assert case == "no tensors" or msg.startswith("error: model.safetensors is not a valid safetensors file: ")


def test_good_safetensors_control(tmp_path, out, capsys):
    """The generator's undamaged file loads: the cases above fail for their damage, not the base."""
    folder = model_folder(tmp_path, safetensors_bytes(good_header(), DATA))
    assert main(["audit", "--model", str(folder), "--no-scan", "--out", str(out)]) == 0, capsys.readouterr().err
    assert (out / "summary.json").is_file()


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
    with alarm(20):
        assert_one_line_error(["audit", "--model", str(folder), "--no-scan", "--out", str(out)], capsys, out.parent)


@pytest.mark.parametrize("kind", ["FIFO", "device", "/proc file"])
@pytest.mark.parametrize("given", ["folder", "file"])
def test_special_file_as_gguf(kind, given, tmp_path, out, capsys):
    (tmp_path / "m").mkdir()
    SPECIAL[kind](tmp_path / "m" / "model.gguf")
    spec = tmp_path / "m" / ("model.gguf" if given == "file" else "")
    with alarm(20):
        assert_one_line_error(["scan", "--model", str(spec), "--out", str(out)], capsys, out.parent)


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
    "5,000-deep nested arrays": lambda: gguf_bytes(extra_kv=kv_raw("x.deep", ARR, deep_array(5000)), n_kv_extra=1),
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
    "unknown value type": lambda: gguf_bytes(extra_kv=kv_raw("x.odd", 77, b"\0" * 8), n_kv_extra=1),
    "string claims 2^60 bytes": lambda: gguf_bytes(extra_kv=gguf_value(STR, "x") + struct.pack("<IQ", STR, 2**60), n_kv_extra=1),
    "array claims 2^40 items": lambda: gguf_bytes(extra_kv=kv_raw("x.arr", ARR, struct.pack("<IQ", 0, 2**40)), n_kv_extra=1),
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
    # audit's automatic verification in the report's parameters: its work budget, not a time cap
    assert "auto: 50 random flagged rows within 30 × 10¹² multiply-adds of work" in \
        (out / "index.html").read_text(encoding="utf-8")


TIKTOKEN_CASES: dict[str, bytes] = {
    "duplicate rank": ranks_file([(b"he", 256), (b"ll", 256)]),
    "duplicate token": ranks_file([(b"he", 256), (b"he", 257)]),
    "missing single bytes": tiktoken_text([(b"a", 0), (b"b", 1)]),
    "bad base64": ranks_file() + b"@@@@ 300\n",
    "rank not a number": ranks_file() + base64.b64encode(b"he") + b" x\n",
    "negative rank": ranks_file([(b"he", -1)]),
    "huge rank": ranks_file([(b"he", 10**30)]),
    "three fields": ranks_file() + base64.b64encode(b"he") + b" 256 7\n",
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


TOKENIZER_FILE_CASES = ([("ranks.tiktoken", case, data) for case, data in TIKTOKEN_CASES.items()]
                        + [("tokenizer.json", case, data) for case, data in TOKENIZER_JSON_CASES.items()])


@pytest.mark.parametrize("kind", list(SPECIAL))
def test_special_file_as_tokenizer(kind, tmp_path, out, corpus, capsys):
    path = tmp_path / "ranks.tiktoken"
    SPECIAL[kind](path)
    with alarm(20):
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
    path.write_bytes(ranks_file([(b"he", 256), (b"ll", 257)]))
    assert main(["fertility", "--tokenizer", str(path), "--corpus", str(corpus), "--out", str(out)]) == 0, \
        capsys.readouterr().err


@pytest.mark.parametrize("case", ["not JSON", "model is an int", "empty unigram", "deep JSON"])
def test_malformed_tokenizer_json_in_model_folder(case, tmp_path, out, capsys):
    folder = model_folder(tmp_path, safetensors_bytes(good_header(), DATA))
    (folder / "tokenizer.json").write_bytes(TOKENIZER_JSON_CASES[case])
    assert_one_line_error(["audit", "--model", str(folder), "--no-scan", "--out", str(out)], capsys, out.parent)


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


@pytest.mark.parametrize("case", list(ROPE_CONFIG_CASES))
def test_malformed_config_rope(case, tmp_path, capsys):
    folder = model_folder(tmp_path, safetensors_bytes(good_header(), DATA), raw_config=ROPE_CONFIG_CASES[case])
    assert_one_line_error(["rope", "--model", str(folder)], capsys)


CORPUS_CASES: dict[str, Callable[[Path], Path]] = {
    "binary garbage": corpus_binary, "invalid UTF-8": corpus_invalid_utf8, "jsonl wrong types": corpus_jsonl_types,
    "empty file": corpus_empty, "FIFO": corpus_fifo, "FIFO in a folder": corpus_fifo_in_folder,
    "damaged parquet": corpus_bad_parquet,
}


@pytest.mark.parametrize("case", list(CORPUS_CASES))
def test_malformed_corpus(case, tmp_path, out, capsys):
    path = CORPUS_CASES[case](tmp_path)
    with alarm(20):
        assert_one_line_error(["fertility", "--tokenizer", "gpt2", "--corpus", str(path), "--out", str(out)],
                              capsys, out.parent)
