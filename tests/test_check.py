"""``embscope check``: training-data readers, and every planted hazard found on real rows.

The model folders are built here from SmolLM2's real (dequantised) rows and its real tokenizer,
cut to its first :data:`ROWS` tokens (the BPE merges that build only those tokens kept) so that a
scan of each folder takes seconds; each folder plants one hazard into an otherwise clean copy.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts.build_corpora import chat_conversations

ROOT = Path(__file__).resolve().parents[1]
#: tokens (and real rows) kept of SmolLM2's 49152
ROWS = 8192
SMOL_TEMPLATE = None  # filled from the GGUF on first use


#: the cut tokenizers made in this process, by (model file, n): every planted folder starts from one
_CUT: dict[tuple[str, int], dict] = {}


def _tokenizer_json(model, n: int) -> dict:
    """SmolLM2's tokenizer cut to ids below ``n`` (merges whose parts and result survive); a copy
    of the cut made once per model and ``n``."""
    import copy

    key = (str(model.path), n)
    if key not in _CUT:
        _CUT[key] = _cut_tokenizer_json(model, n)
    return copy.deepcopy(_CUT[key])


def _cut_tokenizer_json(model, n: int) -> dict:
    spec = json.loads(model.vocab.tok.to_str())
    vocab = {p: i for p, i in spec["model"]["vocab"].items() if i < n}
    merges = []
    for m in spec["model"]["merges"]:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    spec["model"]["vocab"] = vocab
    spec["model"]["merges"] = merges
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["id"] < n]
    return spec


def build_folder(folder: Path, model, *, rows: int = ROWS, extra_rows: int = 0, extra_rows_init: str = "random",
                 zero_ids=(), tokenizer_config: dict | None = None, config: dict | None = None,
                 added: list[tuple[int, str]] = (), post_bos: bool = False, template_prefix: str = "") -> Path:
    """A Llama-architecture HF folder with SmolLM2's first ``rows`` real rows (tied), plus
    ``extra_rows`` never-trained rows (random N(0, 0.02²) or zeros, as a resize leaves them)."""
    import torch
    from safetensors.torch import save_file

    from embscope.models.chat_template import read_chat_template

    folder.mkdir(parents=True)
    embed = model.embed[:rows].float().clone()
    if extra_rows:
        g = torch.Generator().manual_seed(0)
        pad = torch.randn(extra_rows, embed.shape[1], generator=g) * 0.02 if extra_rows_init == "random" \
            else torch.zeros(extra_rows, embed.shape[1])
        embed = torch.cat([embed, pad])
    for i in zero_ids:
        embed[i] = 0
    save_file({"model.embed_tokens.weight": embed.contiguous()}, str(folder / "model.safetensors"))
    tok = _tokenizer_json(model, rows)
    for i, content in added:
        tok["added_tokens"].append({"id": i, "content": content, "single_word": False, "lstrip": False,
                                    "rstrip": False, "normalized": False, "special": True})
    if post_bos:
        tok["post_processor"] = {"type": "TemplateProcessing",
                                 "single": [{"SpecialToken": {"id": "<|im_start|>", "type_id": 0}},
                                            {"Sequence": {"id": "A", "type_id": 0}}],
                                 "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                                 "special_tokens": {"<|im_start|>": {"id": "<|im_start|>", "ids": [1],
                                                                     "tokens": ["<|im_start|>"]}}}
    (folder / "tokenizer.json").write_text(json.dumps(tok), "utf-8")
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": int(embed.shape[1]),
           "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "intermediate_size": 1536,
           "vocab_size": int(embed.shape[0]), "tie_word_embeddings": True, "rope_theta": 100000.0,
           "max_position_embeddings": 8192, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
           "torch_dtype": "float32"}
    cfg.update(config or {})
    (folder / "config.json").write_text(json.dumps(cfg))
    tc = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
          "unk_token": "<|endoftext|>", "chat_template": template_prefix + read_chat_template(model)}
    tc.update(tokenizer_config or {})
    (folder / "tokenizer_config.json").write_text(json.dumps(tc))
    return folder


@pytest.fixture(scope="module")
def train_data(tmp_path_factory) -> Path:
    """137 real-format conversations (system turns, multi-turn) from the shipped medical corpus
    (English: the cut vocabulary spells other scripts byte by byte, whose rows the cut model's
    scan flags)."""
    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    convs = chat_conversations(ROOT / "corpora", 150, seed=3, languages=False)
    path.write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in convs), "utf-8")
    return path


#: the folder tests' flag threshold: on the cut vocabulary the knot indicator flags word stems
#: (" traum", " obst") at 4-8 robust sigmas, which the cut makes frequent (the full vocabulary has
#: " trauma"); the special and zeroed rows score 10 and more
THRESHOLD = 10.0


def _check(folder: Path, data, **kw):
    import embscope

    res = embscope.check(str(folder), [str(d) for d in data] if isinstance(data, list) else str(data),
                         device="cpu", threshold=kw.pop("threshold", THRESHOLD), **kw)
    return res.summary.sections.readiness


def _codes(record, severity=None):
    return {f.code for f in record.findings if severity is None or f.severity == severity}


# ------------------------------------------------------------------------------------------------
# readers


def test_every_format_is_read_and_bad_records_counted(tmp_path):
    from embscope.corpus.conversations import DataRead, iter_examples

    recs = [
        {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                      {"role": "assistant", "content": "yo"}]},
        {"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"}], "system": "sys"},
        {"instruction": "Translate", "input": "chat", "output": "cat"},
        {"prompt": "2+2=", "completion": "4"},
        {"prompt": [{"role": "user", "content": "q"}], "completion": [{"role": "assistant", "content": "a"}]},
        {"text": "plain"},
        {"foo": 1},
        {"conversations": [{"from": "alien", "value": "x"}]},
        {"messages": "nope"},
        [1, 2],
    ]
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n{not json\n")
    (tmp_path / "b.json").write_text(json.dumps([{"text": "in a json array"}]))
    import polars as pl

    pl.DataFrame({"messages": [[{"role": "user", "content": "from parquet"}]]}).write_parquet(tmp_path / "c.parquet")
    report = DataRead()
    exs = list(iter_examples([tmp_path], report=report))
    fmts = [e.format for e in exs]
    assert fmts == ["messages", "sharegpt", "alpaca", "prompt-completion", "prompt-completion", "text", "text",
                    "messages"]
    assert exs[1].messages == [{"role": "system", "content": "sys"}, {"role": "user", "content": "a"},
                               {"role": "assistant", "content": "b"}]
    assert exs[2].messages[0] == {"role": "user", "content": "Translate\nchat"}
    assert (exs[3].prompt, exs[3].completion) == ("2+2=", "4") and exs[4].completion[0]["role"] == "assistant"
    assert report.records == 12 and sum(report.rejected.values()) == 4
    assert report.rejected["conversations: unknown ShareGPT role 'alien'"] == 1
    assert any(r.startswith("no known fields") for r in report.rejected)
    assert report.issues.totals["invalid_json_lines"] == 1
    forced = DataRead()
    assert [e.format for e in iter_examples([tmp_path / "a.jsonl"], fmt="alpaca", report=forced)] == ["alpaca"]
    assert sum(forced.rejected.values()) == 9


# ------------------------------------------------------------------------------------------------
# the demo model and the clean folder


def test_smollm2_findings_are_what_the_model_has(train_data, capsys):
    """The real SmolLM2: its GGUF declares padding_token_id 2 = eos_token_id 2. Under TRL (the
    default) that is harmless (the collator pads labels by position: info) and the run exits 0;
    under transformers' collator, which masks the pad id in the labels, it is an error (exit 1).
    The scan flags the <|im_start|>/<|im_end|> rows (warnings); nothing else."""
    from embscope.cli import main

    assert main(["check", "--model", "smollm2-135m", "--data", str(train_data), "--json", "-q"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert set(body) >= {"findings", "data"} and body["data"]["examples"] == 137
    assert body["data"]["trainer"]["name"] == "trl" and body["data"]["pad"]["id"] == 2
    assert "llama.cpp's 'smollm' pre-tokenizer" in body["data"]["reference"]
    by = {f["code"]: f for f in body["findings"]}
    assert by["pad-is-eos"]["severity"] == "info" and by["pad-is-eos"]["ids"] == [2]
    assert not [f for f in body["findings"] if f["severity"] == "error"]
    assert set(by) <= {"pad-is-eos", "special-row-untrained", "untrained-used"}
    assert main(["check", "--model", "smollm2-135m", "--data", str(train_data), "--trainer", "transformers",
                 "--no-scan", "--json", "-q"]) == 1
    body = json.loads(capsys.readouterr().out)
    by = {f["code"]: f for f in body["findings"]}
    assert {f["code"] for f in body["findings"] if f["severity"] == "error"} == {"pad-is-eos"}
    assert by["pad-is-eos"]["ids"] == [2] and by["pad-is-eos"]["tokens"] == ["<|im_end|>"]
    assert by["pad-is-eos"]["count"] > 300  # every turn's <|im_end|> label, masked
    for f in body["findings"]:
        assert set(f) >= {"code", "severity", "ids", "tokens", "count", "examples", "fix"} and f["fix"]
    assert main(["check", "--model", "smollm2-135m", "--data", str(train_data), "--trainer", "transformers",
                 "--fail-on", "never", "--no-scan", "-q"]) == 0
    # the pad the user will set: a distinct one clears it
    assert main(["check", "--model", "smollm2-135m", "--data", str(train_data), "--trainer", "transformers",
                 "--pad-token", "<|endoftext|>", "--no-scan", "-q"]) == 0
    capsys.readouterr()
    assert main(["check", "--model", "smollm2-135m", "--data", str(train_data), "--pad-token", "<nope>", "--no-scan",
                 "-q"]) == 2
    assert "--pad-token '<nope>' is not a token" in capsys.readouterr().err


@pytest.fixture(scope="module")
def smol(smollm2_model):
    return smollm2_model


def test_clean_folder_raises_none(tmp_path, smol, train_data):
    folder = build_folder(tmp_path / "clean", smol)
    record = _check(folder, train_data)
    assert record.template == "rendered" and record.examples == 137
    assert record.specials.sources["tokenizer_config.json"] == {"bos": [1], "eos": [2], "pad": [0], "unk": [0]}
    assert not _codes(record, "error"), [f.message for f in record.findings]
    assert _codes(record) <= {"special-row-untrained"}  # the template's <|im_start|>/<|im_end|>, if flagged


# ------------------------------------------------------------------------------------------------
# one planted hazard per folder


def test_untrained_row_used(tmp_path, smol, train_data):
    """A row the data uses, zeroed (as a row that training never reached)."""
    fever = smol.vocab.encode(" stands")  # every abbreviation answer: "X stands for Y."
    assert len(fever) == 1 and fever[0] < ROWS
    record = _check(build_folder(tmp_path / "m", smol, zero_ids=fever), train_data)
    f = next(f for f in record.findings if f.code == "untrained-used")
    assert f.severity == "error" and f.ids == fever and f.tokens == [" stands"] and f.count > 0 and f.examples


def test_eos_row_zeroed(tmp_path, smol, train_data):
    record = _check(build_folder(tmp_path / "m", smol, zero_ids=[2]), train_data)
    f = next(f for f in record.findings if f.code == "special-row-untrained" and f.severity == "error")
    assert f.ids == [2] and f.tokens == ["<|im_end|>"] and f.count > 150 and f.examples


def test_pad_is_eos(tmp_path, smol, train_data):
    folder = build_folder(tmp_path / "m", smol, tokenizer_config={"pad_token": "<|im_end|>"})
    record = _check(folder, train_data, trainer="transformers")
    f = next(f for f in record.findings if f.code == "pad-is-eos")
    assert f.severity == "error" and f.ids == [2] and "tokenizer_config.json" in f.message
    # TRL, Axolotl and LLaMA-Factory pad the labels by position: the same PAD is harmless there
    for trainer in ("trl", "axolotl", "llamafactory"):
        g = next(f for f in _check(folder, train_data, trainer=trainer, scan=False).findings if f.code == "pad-is-eos")
        assert g.severity == "info", trainer
    # Unsloth's fix_pad_token picks a reserved token of its own: <|endoftext|> (id 0) here
    unsloth = _check(folder, train_data, trainer="unsloth", scan=False)
    assert unsloth.pad.id == 0 and "fix_pad_token" in unsloth.pad.how
    assert "pad-is-eos" not in _codes(unsloth)


def test_template_bos_under_a_tokenizer_that_adds_one(tmp_path, smol, train_data):
    folder = build_folder(tmp_path / "m", smol, post_bos=True, template_prefix="{{ bos_token }}")
    text = tmp_path / "text.jsonl"
    text.write_text(json.dumps({"text": "<|im_start|>already has one"}) + "\n" + json.dumps({"text": "plain"}) + "\n")
    record = _check(folder, [train_data, text], trainer="transformers")
    chat = next(f for f in record.findings if f.code == "double-bos" and f.severity == "warning")
    plain = next(f for f in record.findings if f.code == "double-bos" and f.severity == "error")
    assert chat.count == 137 and chat.ids == [1] and plain.count == 1 and plain.examples == [record.data.records - 2]
    assert record.specials.prefix == [1]


def test_added_token_in_a_padding_row(tmp_path, smol, train_data):
    new = ROWS  # rows ROWS.. are a resize's never-trained padding (tokenizers numbers added tokens on)
    folder = build_folder(tmp_path / "m", smol, extra_rows=64, extra_rows_init="zeros", added=[(new, "<|tool|>")])
    data = tmp_path / "tool.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "call <|tool|> now"},
                                             {"role": "assistant", "content": "done"}]}) + "\n")
    record = _check(folder, [train_data, data])
    f = next(f for f in record.findings if f.code == "added-in-padding")
    assert f.severity == "error" and f.ids == [new] and f.tokens == ["<|tool|>"] and f.examples == [record.data.records - 1]


def test_id_past_the_matrix(tmp_path, smol, train_data):
    """A token added to the tokenizer without resizing the matrix, and a declared PAD past it."""
    folder = build_folder(tmp_path / "m", smol, rows=ROWS, added=[(ROWS, "<|new|>")],
                          config={"pad_token_id": ROWS + 7}, tokenizer_config={"pad_token": "<|endoftext|>"})
    data = tmp_path / "new.jsonl"
    data.write_text(json.dumps({"text": "a <|new|> token"}) + "\n")
    record = _check(folder, [train_data, data])
    f = next(f for f in record.findings if f.code == "id-beyond-matrix")
    assert f.severity == "error" and f.ids[:1] == [ROWS] and ROWS + 7 in f.ids and f.examples == [record.data.records - 1]


def test_over_long_examples(tmp_path, smol, train_data):
    record = _check(build_folder(tmp_path / "m", smol, config={"max_position_embeddings": 96}), train_data,
                    trainer="transformers")
    f = next(f for f in record.findings if f.code == "exceeds-context")
    assert f.severity == "warning" and 0 < f.count < 137 and "96" in f.message
    assert record.lengths.max > 96
    capped = _check(build_folder(tmp_path / "m2", smol), train_data, max_length=48, scan=False)
    g = next(f for f in capped.findings if f.code == "exceeds-context")
    assert "--max-length" in g.message and g.count > f.count


def test_no_chat_template(tmp_path, smol, train_data):
    folder = build_folder(tmp_path / "m", smol)
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    del cfg["chat_template"]
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    record = _check(folder, train_data)
    f = next(f for f in record.findings if f.code == "no-chat-template")
    assert f.severity == "error" and f.count == 137


def test_a_refused_template_is_a_finding(tmp_path, smol, train_data):
    folder = build_folder(tmp_path / "m", smol, template_prefix="{% set n = 10**7 %}{{ 'ab ' * n }}")
    record = _check(folder, train_data)
    f = next(f for f in record.findings if f.code == "render-refused")
    assert f.severity == "error" and "render refused: " in f.message and f.count == 137
    assert record.template.startswith("render refused: ")


def test_out_folder_and_exit_codes(tmp_path, smol, train_data, capsys):
    import polars as pl

    from embscope.cli import main

    folder = build_folder(tmp_path / "m", smol, tokenizer_config={"pad_token": "<|im_end|>"})
    out = tmp_path / "report"
    assert main(["check", "--model", str(folder), "--data", str(train_data), "--out", str(out), "--trainer",
                 "transformers", "-q"]) == 1
    frame = pl.read_parquet(out / "findings.parquet")
    assert "pad-is-eos" in frame["code"].to_list()
    html = (out / "index.html").read_text("utf-8")
    assert "Ready to fine-tune?" in html and "pad-is-eos" in html
    assert main(["check", "--model", str(folder), "--data", str(tmp_path / "missing.jsonl"), "-q"]) == 2
    assert "error:" in capsys.readouterr().err
    # a folder written before schema version 8 held the record under ``finetune``: still read
    import json

    from embscope.summary import read_summary

    new = json.loads((out / "summary.json").read_text())
    old = dict(new, schema_version=7, sections={("finetune" if k == "readiness" else k): v
                                                for k, v in new["sections"].items()})
    old["bottom_line"] = dict(new["bottom_line"])
    old["bottom_line"]["verdicts"] = [dict(v, section="finetune", source=v["source"].replace("readiness", "finetune"))
                                      if v["section"] == "readiness" else v for v in new["bottom_line"]["verdicts"]]
    assert "readiness" not in old["sections"] and read_summary(old) == read_summary(new)
    (out / "summary.json").write_text(json.dumps(old))
    (out / "index.html").unlink()
    assert main(["report", str(out)]) == 0
    assert "pad-is-eos" in (out / "index.html").read_text("utf-8")


def test_repair_fixes_used_zero_rows(tmp_path, smol, train_data):
    """--repair re-initialises what the findings point at: a zeroed row the data uses and the
    zeroed EOS row (a rows file: the folder holds only the embedding)."""
    from safetensors.torch import load_file

    import embscope

    stands = smol.vocab.encode(" stands")
    folder = build_folder(tmp_path / "m", smol, zero_ids=[2, *stands])
    res = embscope.check(str(folder), str(train_data), device="cpu", threshold=THRESHOLD,
                         repair_to=str(tmp_path / "fixed"))
    assert res.repair is not None and res.repair["token_ids"] == sorted([2, *stands])
    rows = load_file(str(tmp_path / "fixed" / "repaired_rows.safetensors"))
    assert rows["token_ids"].tolist() == sorted([2, *stands]) and float(rows["embed"].abs().min(dim=1).values.max()) > 0


def test_byte_fallback_share_on_gemma3(tmp_path, gemma3_model):
    """Gemma-3's SentencePiece vocabulary spells scripts it lacks byte by byte: an info finding
    (no scan needed). (``gemma3_model``: ``check`` then finds the model already read in the process.)"""
    import embscope

    data = tmp_path / "rare.jsonl"
    data.write_text(json.dumps({"text": "𐀀𐀁𐀂𐀃𐀄𐀅 𓀀𓀁𓀂𓀃 𒀀𒀁𒀂"}, ensure_ascii=False) + "\n"
                    + json.dumps({"text": "plain english text here"}) + "\n", "utf-8")
    res = embscope.check("gemma3-270m", str(data), scan=False, device="cpu")
    record = res.summary.sections.readiness
    f = next(f for f in record.findings if f.code == "unknown-tokens")
    assert f.severity == "info" and f.count > 0.5 * record.tokens and f.ids and len(f.tokens) == len(f.ids)
    assert any("no geometry scan" in w for w in res.warnings)


def test_audit_with_data_has_the_section(tmp_path, smol, train_data):
    """``audit --data`` adds the "Ready to fine-tune?" section to the whole review, under the trainer
    ``--trainer`` names (transformers' collator masks the PAD = EOS by id: an error there)."""
    from embscope.cli import main

    folder = build_folder(tmp_path / "m", smol, tokenizer_config={"pad_token": "<|im_end|>"})
    out = tmp_path / "audit"
    assert main(["audit", "--model", str(folder), "--languages", "none", "--no-map", "--data", str(train_data),
                 "--threshold", str(THRESHOLD), "--trainer", "transformers", "--out", str(out), "-q"]) == 0
    summary = json.loads((out / "summary.json").read_text("utf-8"))
    finetune = summary["sections"]["readiness"]
    assert finetune["trainer"]["name"] == "transformers" and summary["parameters"]["trainer"] == "transformers"
    assert {(f["code"], f["severity"]) for f in finetune["findings"]} >= {("pad-is-eos", "error")}
    assert (out / "findings.parquet").is_file() and "Ready to fine-tune?" in (out / "index.html").read_text("utf-8")
