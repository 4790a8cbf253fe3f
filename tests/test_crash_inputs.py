"""Inputs that used to crash `diff`, `check` and `extend` (a traceback and exit 1, the code for
findings) or pass as green: each gets its exit code and one line naming the field now.

BASE is the cut SmolLM2 of ``finetune_run`` (its real tokenizer and rows, one decoder layer); the
adapters are PEFT's own, saved by ``save_pretrained`` and then edited the way the red team did.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

pytestmark = pytest.mark.slow


def _cli(capsys, *argv) -> tuple[int, str, str]:
    from embscope.cli import main

    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _last(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


@pytest.fixture(scope="module")
def adapters(finetune_run, tmp_path_factory):
    """Two PEFT adapters on BASE: LoRA on the embedding (factors off their zero start) and
    trainable tokens on ids 5, 6, 7."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("adapters")
    for name, cfg in (("lora", dict(target_modules=["embed_tokens", "q_proj"], init_lora_weights=False)),
                      ("tti", dict(target_modules=["q_proj"], trainable_token_indices=[5, 6, 7]))):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(str(finetune_run["base"]), dtype=torch.float32)
        get_peft_model(model, LoraConfig(r=4, lora_alpha=8, **cfg)).save_pretrained(str(root / name))
    return root


def _edited(adapters, tmp_path, src: str, config: dict | None = None, tensors=None):
    from safetensors.torch import load_file, save_file

    out = tmp_path / f"{src}-edited"
    shutil.copytree(adapters / src, out)
    if config:
        cfg = json.loads((out / "adapter_config.json").read_text("utf-8"))
        (out / "adapter_config.json").write_text(json.dumps({**cfg, **config}), "utf-8")
    if tensors:
        t = load_file(str(out / "adapter_model.safetensors"))
        tensors(t)
        save_file(t, str(out / "adapter_model.safetensors"))
    return out


def _rank0(t):
    for k in list(t):
        if k.endswith("lora_embedding_A"):
            t[k] = t[k][:0].contiguous()
        if k.endswith("lora_embedding_B"):
            t[k] = t[k][:, :0].contiguous()


def _flat(t):
    for k in list(t):
        if k.endswith("lora_embedding_A"):
            t[k] = t[k].flatten().contiguous()


def _huge_rank(t):
    import torch

    for k in list(t):
        if k.endswith("lora_embedding_A"):
            t[k] = torch.zeros(700, t[k].shape[1])
        if k.endswith("lora_embedding_B"):
            t[k] = torch.zeros(t[k].shape[0], 700)


ADAPTER_CASES = [
    ("lora", None, _rank0, "no common rank ≥ 1"),
    ("lora", None, _flat, "not a matrix"),
    ("lora", None, _huge_rank, "LoRA of rank 700 on rows 576 wide"),
    ("lora", {"lora_alpha": "sixteen"}, None, "lora_alpha must be a number, got 'sixteen'"),
    ("lora", {"lora_alpha": [16]}, None, "lora_alpha must be a number, got [16]"),
    ("lora", {"alpha_pattern": [1, 2]}, None, "alpha_pattern must be an object of {module pattern: a number}"),
    ("lora", {"alpha_pattern": {"(": 4}}, None, "alpha_pattern key '(' is not a regular expression"),
    ("tti", {"trainable_token_indices": [2**70, 6, 7]}, None, "trainable_token_indices must be a list of token ids"),
    ("tti", {"trainable_token_indices": {"(": [5, 6, 7]}}, None,
     "trainable_token_indices key '(' is not a regular expression"),
    ("tti", {"trainable_token_indices": [True, False, 7]}, None, "got [True, False, 7]"),
]


@pytest.mark.parametrize("src, config, tensors, message", ADAPTER_CASES)
def test_bad_adapters_are_one_line_exit_2(finetune_run, adapters, tmp_path, capsys, src, config, tensors, message):
    folder = _edited(adapters, tmp_path, src, config, tensors)
    code, _, err = _cli(capsys, "diff", finetune_run["base"], folder, "--languages", "none")
    assert code == 2 and "Traceback" not in err
    assert _last(err).startswith("error: ") and message in _last(err)


def test_the_untouched_adapters_still_read(finetune_run, adapters, capsys):
    """The same adapters unedited: read and merged (LoRA off its zero start moves every row; trainable
    tokens start at the rows they replace, so nothing moved), exit 0 or 1 (findings), never 2."""
    for name, moved in (("lora", 49152), ("tti", 0)):
        code, out, err = _cli(capsys, "diff", finetune_run["base"], adapters / name, "--languages", "none", "--json")
        assert code in (0, 1), err
        assert json.loads(out)["data"]["matrices"]["input"]["moved"] == moved


def _surrogate_jsonl(path):
    path.write_text('{"text": "bad \\ud800 text"}\n' + "".join(json.dumps({"text": f"good line {i}"}) + "\n"
                                                                for i in range(20)), "utf-8")
    return path


def test_lone_surrogates_are_skipped_and_counted(finetune_run, tmp_path, capsys):
    data = _surrogate_jsonl(tmp_path / "sur.jsonl")
    code, out, err = _cli(capsys, "check", "--model", finetune_run["base"], "--data", data, "--no-scan", "--json")
    assert code == 0 and "Traceback" not in err
    finding = next(f for f in json.loads(out)["findings"] if f["code"] == "unreadable-records")
    assert "1 lone_surrogate_records" in finding["message"]
    code, _, err = _cli(capsys, "diff", finetune_run["base"], finetune_run["tuned"], "--data", data, "--languages",
                        "none", "--no-scan")
    assert code in (0, 1) and "Traceback" not in err
    code, out, err = _cli(capsys, "extend", "--model", finetune_run["base"], "--corpus", data, "--no-diagnostics",
                          "--min-freq", "2", "--out", tmp_path / "ext")
    assert code in (0, 2) and "Traceback" not in err and "UnicodeEncodeError" not in err


def test_lone_surrogates_in_json_records(tmp_path):
    from embscope.corpus.conversations import DataRead, iter_examples

    f = tmp_path / "conv.json"
    f.write_text(json.dumps([{"messages": [{"role": "user", "content": "hi \ud800"}]},
                             {"messages": [{"role": "user", "content": "fine"}]}]), "utf-8")
    report = DataRead()
    assert len(list(iter_examples([f], report=report))) == 1
    assert report.issues.totals["lone_surrogate_records"] == 1


@pytest.mark.parametrize("meta", ["dataset_dict.json", "train/state.json"])
def test_deep_split_metadata_is_one_line(finetune_run, tmp_path, capsys, meta):
    d = tmp_path / "ds"
    (d / "train").mkdir(parents=True)
    (d / "train" / "data.jsonl").write_text('{"text": "hello there"}\n', "utf-8")
    key = "splits" if meta == "dataset_dict.json" else "_data_files"
    (d / meta).write_text('{"%s": %s%s}' % (key, "[" * 200_000, "]" * 200_000), "utf-8")
    code, _, err = _cli(capsys, "check", "--model", finetune_run["base"], "--data", d, "--no-scan")
    assert code == 2 and "Traceback" not in err
    assert _last(err) == f"error: {d / meta} nests JSON too deeply to be a real file; fix or remove it"


def test_a_sparse_split_list_is_refused_before_it_is_read(finetune_run, tmp_path, capsys):
    d = tmp_path / "ds"
    (d / "train").mkdir(parents=True)
    (d / "train" / "data.jsonl").write_text('{"text": "hello there"}\n', "utf-8")
    with open(d / "dataset_dict.json", "wb") as f:
        f.truncate(3 << 30)  # 3 GiB of holes: nothing on disk
    code, _, err = _cli(capsys, "check", "--model", finetune_run["base"], "--data", d, "--no-scan")
    assert code == 2 and _last(err).startswith("error: ") and "dataset_dict.json" in _last(err)


def _variant(finetune_run, out, how: str, n: int = 100):
    """BASE with ``n`` added tokens whose rows are ``how`` (``zeros``, ``normal``), or a tokenizer
    past the rows (``past``), or rows cut below the tokenizer (``fewer``)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(finetune_run["base"]))
    model = AutoModelForCausalLM.from_pretrained(str(finetune_run["base"]), dtype=torch.float32)
    if how in ("zeros", "normal", "past"):
        tok.add_tokens([f"tok{i}xyz" for i in range(n)])
    if how in ("zeros", "normal"):
        model.resize_token_embeddings(len(tok), mean_resizing=False)
        torch.manual_seed(0)
        with torch.no_grad():
            w = model.get_input_embeddings().weight
            w[-n:] = torch.zeros(n, w.shape[1]) if how == "zeros" else torch.randn(n, w.shape[1]) * 0.02
    if how == "fewer":
        model.resize_token_embeddings(49_000)
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    return out


@pytest.mark.parametrize("how, code, finding", [("zeros", 1, ("new-row-unmoved", "error")),
                                                  ("normal", 1, ("new-row-unmoved", "error")),
                                                  ("past", 1, ("vocab-mismatch", "error")),
                                                  ("fewer", 1, ("vocab-mismatch", "error"))])
def test_no_false_green_without_a_manifest(finetune_run, tmp_path, capsys, how, code, finding):
    tuned = _variant(finetune_run, tmp_path / how, how)
    got, out, err = _cli(capsys, "diff", finetune_run["base"], tuned, "--languages", "none", "--json")
    assert got == code, err
    assert finding in {(f["code"], f["severity"]) for f in json.loads(out)["findings"]}


def test_a_manifest_whose_rows_were_replaced_is_refused(finetune_run, tmp_path, capsys):
    """A rows-only manifest (right ids and terms) whose new_rows.safetensors holds other rows (the
    extension of the medical corpus's first 200 kB: any rows-only manifest will do)."""
    import torch
    from safetensors.torch import load_file, save_file

    import embscope

    ext = tmp_path / "rows"
    embscope.extend(str(finetune_run["base"]), "medical", top=5, apply_to=ext, rows_only=True, diagnostics=False,
                    apply_init="subword-mean", init=["subword-mean"], sample_bytes=200_000)
    doc = json.loads((ext / "embscope_extension.json").read_text("utf-8"))
    assert doc["format"] == "rows" and doc["rows_digest"]
    rows = load_file(str(ext / "new_rows.safetensors"))
    rows["embed"] = torch.randn_like(rows["embed"]) * 0.02
    save_file(rows, str(ext / "new_rows.safetensors"))
    code, _, err = _cli(capsys, "diff", finetune_run["base"], finetune_run["tuned"], "--manifest", ext,
                        "--languages", "none")
    assert code == 2 and "rows_digest differs" in _last(err)


def test_an_adapter_on_another_base_is_named(finetune_run, adapters, tmp_path):
    import embscope

    folder = _edited(adapters, tmp_path, "tti", {"base_model_name_or_path": "Qwen/Qwen2-7B"})
    res = embscope.diff(str(finetune_run["base"]), str(folder), languages="none")
    assert any("'Qwen/Qwen2-7B'" in w for w in res.summary.warnings)
    res = embscope.diff(str(finetune_run["base"]), str(adapters / "tti"), languages="none")
    assert not any("adapter says it was trained on" in w for w in res.summary.warnings)


def test_usage_errors_are_one_line(capsys):
    code, _, err = _cli(capsys, "extend", "--model", "x", "--corpus", "y", "--top", "0")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith("error: Invalid value for '--top': Input should be greater than or equal to 1 (see '")
    assert lines[0].endswith(" extend --help')")
    code, _, err = _cli(capsys, "check", "--model", "x", "--data", "y", "--trainer", "x")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "'x' is not one of 'trl'" in err


def test_an_unexpected_exception_exits_2_with_one_line(monkeypatch, capsys):
    def boom(*a, **k):
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr("embscope.models.load.load_model", boom)
    for extra in ([], ["--verbose"]):
        code, _, err = _cli(capsys, "scan", "--model", "smollm2-135m", "--no-map", "--out", "/nonexistent/x", *extra)
        assert code == 2 and _last(err).startswith("error: unexpected ZeroDivisionError: float division by zero")
        assert ("Traceback (most recent call last)" in err) == bool(extra)


def test_a_batch_is_tokenized_when_it_holds_the_render_cap(smollm2_model, monkeypatch):
    """The batch bound changes when texts are tokenized, never what they tokenize to."""
    from embscope.corpus.shapes import to_example
    from embscope.readiness import sequences, trainer_sequences
    from embscope.readiness.options import CheckOptions

    records = [json.loads(line) for line in (pytest.importorskip("pathlib").Path(__file__).parents[1] / "corpora" /
                                             "chat" / "medical-chat.jsonl").read_text("utf-8").splitlines()[:40]]
    examples = [to_example(r, i)[0] for i, r in enumerate(records)]
    axolotl = CheckOptions(trainer="axolotl")
    whole = [(s.ids, s.loss) for s in trainer_sequences(smollm2_model, examples, axolotl).sequences]
    calls = []
    real = sequences._Batch.run

    def counted(self):
        calls.append(len(self.texts))
        return real(self)

    monkeypatch.setattr(sequences, "BATCH_CHARS", 2000)
    monkeypatch.setattr(sequences._Batch, "run", counted)
    cut = [(s.ids, s.loss) for s in trainer_sequences(smollm2_model, examples, axolotl).sequences]
    assert cut == whole and len(calls) > 5


def test_a_term_of_many_pieces_is_left_out(smollm2_model):
    from embscope.tokenizer.extend import MAX_TERM_PIECES, extend_tokenizer

    tok = smollm2_model.vocab.tok
    word = " " + "qzxv" * 12
    ids = tok.encode(word, add_special_tokens=False).ids
    assert len(ids) > MAX_TERM_PIECES
    ext = extend_tokenizer(tok, [word, " unspecified"], [ids, tok.encode(" unspecified", add_special_tokens=False).ids])
    assert word in ext.skipped and f"{len(ids)} pieces" in ext.skipped[word]
    assert [t.text for t in ext.tokens if t.kind == "term"] == [" unspecified"]
    assert all(t.id >= smollm2_model.n_rows for t in ext.tokens)


def test_a_huge_sparse_lora_is_refused_from_its_header(finetune_run, adapters, tmp_path, capsys):
    """A rank-40,000 LoRA on the embedding in a sparse 7.9 GB file: refused from the declared shapes,
    nothing read (before, the factors were loaded whole: 13.2 GB RSS, killed)."""
    import resource
    import struct

    folder = tmp_path / "huge"
    shutil.copytree(adapters / "lora", folder)
    rows, width, rank = 49152, 576, 40_000
    a_bytes, b_bytes = rank * rows * 4, width * rank * 4
    key = "base_model.model.model.embed_tokens."
    header = {key + "lora_embedding_A": {"dtype": "F32", "shape": [rank, rows], "data_offsets": [0, a_bytes]},
              key + "lora_embedding_B": {"dtype": "F32", "shape": [width, rank],
                                         "data_offsets": [a_bytes, a_bytes + b_bytes]}}
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(folder / "adapter_model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + a_bytes + b_bytes)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    code, _, err = _cli(capsys, "diff", finetune_run["base"], folder, "--languages", "none")
    assert code == 2 and "LoRA of rank 40000 on rows 576 wide" in _last(err)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 1 << 20  # KiB: under 1 GiB more


def test_extend_top_2_with_two_10kb_words_adds_no_rows(finetune_run, tmp_path, capsys):
    """`--top 2` whose two best terms are 10 kB "words": before, 11,920 new rows and a 123 MB
    tokenizer.json; now both are left out (each would add a row per piece) and --apply writes
    nothing, with one line saying why."""
    import random

    rng = random.Random(0)
    words = ["".join(rng.choice(letters) for _ in range(10_000)) for letters in ("abcdefghij", "klmnopqrst")]
    corpus = tmp_path / "long.txt"
    corpus.write_text("\n".join(words * 4 + ["the patient has a fracture of the left femur"] * 400) + "\n", "utf-8")
    code, _, err = _cli(capsys, "extend", "--model", finetune_run["base"], "--corpus", corpus, "--top", 2,
                        "--min-freq", 2, "--no-diagnostics", "--apply", tmp_path / "ext", "--out", tmp_path / "rep")
    assert code == 2 and "no term was added" in _last(err) and not (tmp_path / "ext").exists()
    skipped = json.loads((tmp_path / "rep" / "summary.json").read_text("utf-8"))["sections"]["extension"]["terms_skipped"] \
        if (tmp_path / "rep" / "summary.json").exists() else None
    assert skipped is None or all("pieces" in why for why in skipped.values())
