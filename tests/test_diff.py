"""``embscope diff``: a real fine-tune on a cut SmolLM2 (its real tokenizer and embedding rows, one
decoder layer), extended with the medical candidates by ``extend --apply`` and trained a handful of
steps with the embedding trainable, or frozen (LoRA on attention only, through PEFT); PEFT adapter
formats read against PEFT's own ``merge_and_unload``; the noise floor across a GGUF → safetensors
conversion; each finding code; the CLI's exit codes and the report section."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import finetune as ft  # noqa: E402


@pytest.fixture(scope="module")
def run(finetune_run):
    """The cut SmolLM2, its extension and two fine-tunes (``tests/conftest.py``'s ``finetune_run``)."""
    return finetune_run


@pytest.fixture(scope="module")
def trained(run):
    """The trainable fine-tune against BASE, with the manifest and the data: (record, diff.parquet)."""
    import embscope

    res = embscope.diff(str(run["base"]), str(run["tuned"]), manifest=str(run["ext"]), data=str(run["data"]),
                        scan=False, languages="none")
    return res.summary.sections.diff, res.outputs["diff"].result.frame


@pytest.fixture(scope="module")
def frozen(run):
    """The LoRA-on-attention adapter against the extended folder, with the data."""
    return _diff(run["ext"], run["lora"], data=run["data"], scan=False)


def _diff(base, tuned, **kw):
    import embscope

    kw.setdefault("languages", "none")
    return embscope.diff(str(base), str(tuned), **kw).summary.sections.diff


def _codes(record):
    return {(f.code, f.severity) for f in record.findings}


def test_trainable_embedding_moves_every_new_row(run, trained):
    r, _ = trained
    new_ids = run["manifest"]["token_ids"]
    assert r.new_rows == len(new_ids) and r.new_reference == "manifest"
    m = r.matrices["input"]
    assert m.new_moved == len(new_ids)
    assert not any(f.code in ("new-row-unmoved", "used-row-frozen") for f in r.findings)
    # the data produces every new token the corpus ever tokenizes to (extend also adds ▁/space twins
    # such as " Fracture" that the corpus never writes; on a tied model the softmax moves them too)
    assert 0 < r.data.new_used <= len(new_ids)
    assert r.data.used_unmoved == 0
    # the floor of two float32 checkpoints is exact
    assert m.floor.base_format == m.floor.tuned_format == "F32" and m.floor.floor == 0.0


def test_changes_match_torch_on_the_checkpoints(run, trained):
    """‖Δ‖/‖r‖ and the cosine of a few rows, recomputed from the safetensors files with torch."""
    import torch
    from safetensors import safe_open

    frame = trained[1]

    def weight(folder):
        with safe_open(str(Path(folder) / "model.safetensors"), "pt") as f:
            return f.get_tensor("model.embed_tokens.weight").float()

    b, e, t = weight(run["base"]), weight(run["ext"]), weight(run["tuned"])
    new = run["manifest"]["token_ids"][0]
    for i, ref in ((5, b[5]), (1000, b[1000]), (new, e[new])):  # a new row against its initial row
        want = float((t[i] - ref).norm() / ref.norm())
        cos = float(torch.nn.functional.cosine_similarity(t[i], ref, dim=0))
        row = frame.row(i, named=True)
        assert row["in_change"] == pytest.approx(want, rel=1e-4)
        assert row["in_cos"] == pytest.approx(cos, abs=1e-5)
        assert row["data_count"] >= 0


def test_frozen_embedding_every_used_row_is_frozen(run, frozen, tmp_path):
    """LoRA on attention only: the adapter leaves the embedding as it was; BASE is the extended
    folder, whose manifest is found without --manifest. The CLI exits 1 and writes the report."""
    from embscope.cli import main

    r = frozen
    assert r.tuned.kind == "peft" and r.tuned.adapter.embed == []
    assert r.new_reference == "base" and r.manifest.endswith("embscope_extension.json")
    assert r.matrices["input"].moved == 0
    frozen_f = [f for f in r.findings if f.code == "used-row-frozen"]
    old_used = r.data.used_rows - r.data.new_used
    assert [(f.severity, f.count) for f in frozen_f] == [("error", old_used)]
    unmoved = {f.severity: f for f in r.findings if f.code == "new-row-unmoved"}
    assert unmoved["error"].count == r.data.new_used
    assert unmoved.get("warning") is None or unmoved["warning"].count == r.new_rows - r.data.new_used
    assert unmoved["error"].examples  # training records that hold the new tokens
    out = tmp_path / "rep"
    rc = main(["diff", str(run["ext"]), str(run["lora"]), "--data", str(run["data"]), "--no-scan",
               "--languages", "none", "--out", str(out), "-q"])
    assert rc == 1
    html = (out / "index.html").read_text("utf-8")
    assert 'id="diff"' in html and "What training changed" in html and "used-row-frozen" in html
    assert '"diff":{"map"' in html  # the token map's points


def test_untrained_still_from_a_tokens_table(run, frozen, tmp_path):
    """Rows the base's scan flags, used by the data and left where they were."""
    import polars as pl

    r0 = frozen
    used = [i for i in next(f for f in r0.findings if f.code == "used-row-frozen").ids if i > 10][:3]  # not special
    n = r0.base.rows
    flagged = np.zeros(n, dtype=bool)
    flagged[used] = True
    table = tmp_path / "tokens.parquet"
    pl.DataFrame({"token_id": np.arange(n, dtype=np.int32), "flagged": flagged}).write_parquet(table)
    r = _diff(run["ext"], run["lora"], data=run["data"], tokens=table)
    still = next(f for f in r.findings if f.code == "untrained-still")
    assert still.severity == "error" and sorted(still.ids) == sorted(used)


def test_gguf_to_safetensors_keeps_unchanged_rows_unmoved(run, tmp_path):
    """SmolLM2's Q8_0 GGUF against its bf16 conversion, both ways: the measured floor (bf16
    rounding of the dequantised rows) keeps every row unmoved."""
    import embscope

    bf16 = ft.bf16_copy(run["base"], tmp_path / "bf16")
    for base, tuned in (("smollm2-135m", bf16), (bf16, "smollm2-135m")):
        r = _diff(base, tuned)
        m = r.matrices["input"]
        assert m.moved == 0, (base, tuned, m.floor)
        assert {m.floor.base_format, m.floor.tuned_format} == {"Q8_0", "BF16"}
        assert m.floor.lineage != "independent" and m.floor.exact_share == 1.0
        assert 0.001 < m.floor.floor < 0.004  # bf16 has 8 mantissa bits: ~0.17 % per row
        assert [f.code for f in r.findings] == ["nothing-moved"]
    # the float32 conversion is exact: floor 0
    r = _diff("smollm2-135m", run["base"])
    assert r.matrices["input"].floor.floor == 0.0 and r.matrices["input"].moved == 0


PEFT_VARIANTS = {
    "modules_to_save": dict(target_modules=["q_proj"], modules_to_save=["embed_tokens", "lm_head"]),
    "modules_to_save_embed": dict(target_modules=["q_proj"], modules_to_save=["embed_tokens"]),
    "lora_embedding": dict(target_modules=["embed_tokens", "q_proj"], init_lora_weights=False),
    "lora_head": dict(target_modules=["lm_head"], init_lora_weights=False),
    "trainable_tokens": dict(target_modules=["q_proj"], trainable_token_indices=[3, 500, 900]),
    "trainable_tokens_by_module": dict(target_modules=["q_proj"],
                                       trainable_token_indices={"embed_tokens": [3, 5], "lm_head": [5, 9]}),
}


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_peft_adapters_read_as_peft_merges_them(tmp_path, tied):
    """Each adapter format, read without merging, equals PEFT's own ``merge_and_unload`` (a small
    Llama: the format, not the model, is under test; the fine-tunes above use SmolLM2's rows)."""
    import torch
    from peft import LoraConfig, TrainableTokensConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    import embscope
    from embscope.changes.tuned import load_tuned

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied)
    folder = tmp_path / "base"
    LlamaForCausalLM(cfg).save_pretrained(str(folder))
    base = embscope.load_model(str(folder), device="cpu")
    assert base.tied == tied
    variants = {**PEFT_VARIANTS, "TRAINABLE_TOKENS": None}
    if tied:  # a head LoRA or head token list on a tied model is not one PEFT merges on its own
        variants = {k: v for k, v in variants.items() if k not in ("lora_head", "trainable_tokens_by_module")}
    for name, kw in variants.items():
        lm = LlamaForCausalLM.from_pretrained(str(folder))
        cfg_p = (TrainableTokensConfig(target_modules=["embed_tokens"], token_indices=[7, 8, 990], init_weights=False)
                 if kw is None else LoraConfig(r=4, lora_alpha=8, **kw))
        pm = get_peft_model(lm, cfg_p)
        torch.manual_seed(1)
        with torch.no_grad():  # what training would have done to the trainable embedding parts
            for n, p in pm.named_parameters():
                if p.requires_grad and ("embed" in n or "lm_head" in n):
                    p.add_(torch.randn_like(p) * 0.05)
        pm.save_pretrained(str(tmp_path / name))
        merged = pm.merge_and_unload()
        want_e = merged.get_input_embeddings().weight.detach()
        want_h = merged.get_output_embeddings().weight.detach()
        t = load_tuned(tmp_path / name, base)
        got_e = t.embed.block(0, t.embed.n)
        got_h = t.output.block(0, t.output.n) if t.output is not None else got_e
        assert torch.allclose(got_e, want_e, atol=1e-6), name
        assert torch.allclose(got_h, want_h, atol=1e-6), name
        assert (t.output is None) == (want_e.data_ptr() == want_h.data_ptr() or torch.equal(want_e, want_h)), name


def test_tie_broken_and_exploded_rows(run, tmp_path):
    """A modules_to_save copy of a tied embedding leaves the head behind (tie-broken); a NaN row and a
    row scaled ×50 are row-exploded."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained(str(run["base"]))
    pm = get_peft_model(lm, LoraConfig(r=4, target_modules=["q_proj"], modules_to_save=["embed_tokens"]))
    with torch.no_grad():
        w = pm.base_model.model.model.embed_tokens.modules_to_save["default"].weight
        w[100] = float("nan")
        w[200] *= 50
        w[300] += 0.5
    pm.save_pretrained(str(tmp_path / "a"))
    r = _diff(run["base"], tmp_path / "a")
    codes = _codes(r)
    assert ("tie-broken", "warning") in codes
    boom = next(f for f in r.findings if f.code == "row-exploded")
    assert set(boom.ids) == {100, 200}
    assert r.matrices["input"].moved == 3 and r.matrices["output"].moved == 0
    assert r.tuned.tied is False and "output" in r.matrices


def test_vocab_mismatch(run, tmp_path):
    """TUNED's tokenizer with two tokens swapped: the rows compared are not the same tokens."""
    import shutil

    folder = tmp_path / "swapped"
    shutil.copytree(run["base"], folder)
    tj = json.loads((folder / "tokenizer.json").read_text("utf-8"))
    vocab = tj["model"]["vocab"]
    a, b = next(k for k, v in vocab.items() if v == 1000), next(k for k, v in vocab.items() if v == 1001)
    vocab[a], vocab[b] = 1001, 1000
    (folder / "tokenizer.json").write_text(json.dumps(tj), "utf-8")
    r = _diff(run["base"], folder)
    f = next(f for f in r.findings if f.code == "vocab-mismatch")
    assert f.severity == "error" and set(f.ids) == {1000, 1001}


def test_languages_drift_follows_the_trained_rows(run, tmp_path):
    """trainable_token_indices on the ids English medical text uses: English rows move, Thai's not."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    import embscope

    base = embscope.load_model(str(run["base"]), device="cpu")
    ids = sorted({i for row in base.vocab.encode_batch(["the right of everyone to freedom and equal dignity"]) for i in row})
    lm = AutoModelForCausalLM.from_pretrained(str(run["base"]))
    pm = get_peft_model(lm, LoraConfig(r=4, target_modules=["q_proj"], trainable_token_indices=ids))
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "trainable_tokens_delta" in n:
                p.add_(0.05)
    pm.save_pretrained(str(tmp_path / "tt"))
    r = embscope.diff(str(run["base"]), str(tmp_path / "tt"), languages="udhr").summary.sections.diff
    by = {row.language: row for row in r.languages}
    assert r.matrices["input"].moved == len(ids)
    assert by["eng"].moved_share > 0.1 and by["tha"].moved_share == 0.0
    assert by["eng"].moved_share > max(row.moved_share for row in r.languages if row.script != "Latin")
    assert r.languages[0].moved_share >= r.languages[-1].moved_share


def test_noise_round_trips_on_real_rows(smollm2_model):
    """Q8_0 is gguf-py's own quantiser (idempotent on SmolLM2's Q8_0 rows); the K-quant proxies get
    coarser with fewer bits; a bf16 cast errs about 2^-9 per row."""
    from embscope.changes.noise import canonical, measure, round_trip

    x = smollm2_model.embed[::97].float().numpy()
    assert (round_trip(x, "Q8_0") == x).all()
    err = {f: float(np.median(np.linalg.norm(round_trip(x, f) - x, axis=1) / np.linalg.norm(x, axis=1)))
           for f in ("BF16", "F16", "Q6_K", "Q4_K", "Q2_K")}
    assert err["F16"] < err["BF16"] < err["Q6_K"] < err["Q4_K"] < err["Q2_K"]
    assert 2 ** -10 < err["BF16"] < 2 ** -8
    fl = measure(x, round_trip(x, "Q4_0"), "BF16", "Q4_0")
    assert fl.lineage == "tuned descends from base" and fl.method == "exact"
    assert canonical("bfloat16") == "BF16" and canonical("float32") == "F32"


def test_bad_input_is_one_line(run, tmp_path, capsys):
    from embscope.cli import main

    assert main(["diff", str(run["base"]), "minilm-l6", "-q"]) == 2
    assert "error: TUNED's rows are 384 wide" in capsys.readouterr().err
    bad = tmp_path / "m.json"
    bad.write_text('{"token_ids": [1, 2], "terms": ["a"]}', "utf-8")
    assert main(["diff", str(run["base"]), str(run["tuned"]), "--manifest", str(bad), "-q"]) == 2
    assert "has no token_ids/terms lists of equal length" in capsys.readouterr().err
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}", "utf-8")
    assert main(["diff", str(run["base"]), str(adapter), "-q"]) == 2
    assert "no adapter_model.safetensors" in capsys.readouterr().err


def test_new_rows_line_says_what_they_are_compared_with():
    """The terminal line names the reference of the new rows in words, and has no parenthesis
    when there are none (no '(against —)')."""
    from types import SimpleNamespace

    from embscope.commands.diff import new_rows_text

    assert new_rows_text(SimpleNamespace(new_rows=0, new_reference=None)) == "0 new rows"
    assert new_rows_text(SimpleNamespace(new_rows=12, new_reference="mean")) == \
        "12 new rows (against BASE's mean row: no extension manifest given)"
    assert "extension manifest wrote" in new_rows_text(SimpleNamespace(new_rows=3, new_reference="manifest"))


def test_untouched_extension_folder_is_never_green(run, tmp_path):
    """TUNED is the `extend --apply` folder itself, never trained: its own manifest is read (TUNED's
    folder), its rows are the initial rows, and every new row is `new-row-unmoved` (one finding,
    which says no row moved at all: no `nothing-moved` beside it). A trained folder that carries a
    copy of the manifest alone is not mistaken for one: its rows no longer match the manifest's
    `rows_digest`, so the manifest beside it (the `extend --apply` folder) is the one read."""
    import shutil

    from embscope.changes.manifest import MANIFEST, untouched

    n_new = len(run["manifest"]["token_ids"])
    assert untouched(run["ext"] / MANIFEST) is True
    rec = _diff(run["base"], run["ext"])
    assert rec.manifest == str(run["ext"] / MANIFEST) and rec.new_reference == "manifest"
    assert _codes(rec) == {("new-row-unmoved", "error")}
    unmoved = rec.findings[0]
    assert unmoved.count == unmoved.rows == n_new and "no row moved at all" in unmoved.message
    assert rec.matrices["input"].new_moved == 0 and rec.new_rows == n_new

    trained = tmp_path / "trained"
    shutil.copytree(run["tuned"], trained)
    shutil.copy(run["ext"] / MANIFEST, trained / MANIFEST)
    assert untouched(trained / MANIFEST) is False
    rec = _diff(run["base"], trained)
    assert rec.manifest == str(run["ext"] / MANIFEST) and ("new-row-unmoved", "error") not in _codes(rec)
    assert rec.matrices["input"].new_moved == n_new


def test_the_manifest_is_found_and_read_after_training(run, tmp_path):
    """The unread manifest: TUNED is the training run's own folder beside the `extend --apply`
    folder (no manifest in it), and an `extend --apply` folder trained in place (its rows no longer
    the initial ones, half of the new rows untouched). Both are measured against the rows
    `extend --apply` wrote: the one beside TUNED, and the initial rows kept in the folder
    (`embscope_extension/initial_rows.safetensors`). Before, neither manifest was read, the new rows
    were compared with BASE's mean row, and the untouched ones passed as moved."""
    import shutil

    from safetensors.torch import load_file, save_file

    from embscope.changes.manifest import MANIFEST
    from embscope.extension.apply import INITIAL_ROWS

    ids = run["manifest"]["token_ids"]
    rec = _diff(run["base"], run["tuned"])
    assert rec.manifest == str(run["ext"] / MANIFEST) and rec.new_reference == "manifest"
    assert rec.matrices["input"].new_moved == len(ids) and "new-row-unmoved" not in {f.code for f in rec.findings}

    inplace = tmp_path / "ext-trained-in-place"
    shutil.copytree(run["ext"], inplace)
    assert (inplace / INITIAL_ROWS).is_file()
    key = "model.embed_tokens.weight"
    rows = load_file(str(run["tuned"] / "model.safetensors"))
    first = load_file(str(run["ext"] / "model.safetensors"))[key]
    kept = ids[: len(ids) // 2]
    rows[key][kept] = first[kept]  # training left these new rows where extend --apply put them
    save_file(rows, str(inplace / "model.safetensors"), metadata={"format": "pt"})
    rec = _diff(run["base"], inplace)
    assert rec.manifest == str(inplace / MANIFEST) and rec.new_reference == "manifest"
    unmoved = next(f for f in rec.findings if f.code == "new-row-unmoved")
    assert unmoved.severity == "error" and sorted(unmoved.ids) == sorted(kept) and unmoved.count == len(kept)
    assert rec.matrices["input"].new_moved == len(ids) - len(kept)


def test_untrained_still_follows_the_rows_verification(run, frozen, tmp_path):
    """One state per row: a flagged row prompting cleared is never `untrained-still` (so `diff` never
    recommends re-initialising it); an unverified special row is a warning that says to verify
    first; a verified one stays an error. Every count is a number of rows."""
    import polars as pl

    r0 = frozen
    used = [i for i in next(f for f in r0.findings if f.code == "used-row-frozen").ids if i > 10][:3]
    eos = 2  # SmolLM2's <|im_end|>: special, and the trainer appends it to every text
    n = r0.base.rows
    flagged = np.zeros(n, dtype=bool)
    flagged[[*used, eos]] = True
    status = [None] * n
    status[used[0]] = "cleared"
    table = tmp_path / "tokens.parquet"
    pl.DataFrame({"token_id": np.arange(n, dtype=np.int32), "flagged": flagged,
                  "undertrained_status": pl.Series(status, dtype=pl.Utf8)}).write_parquet(table)
    r = _diff(run["ext"], run["lora"], data=run["data"], tokens=table)
    still = {f.severity: f for f in r.findings if f.code == "untrained-still"}
    assert sorted(still["error"].ids) == sorted(used[1:]) and still["error"].count == 2
    assert still["warning"].ids == [eos] and still["warning"].count == 1 and "--repair" not in still["warning"].fix
    status[eos] = "verified"
    pl.DataFrame({"token_id": np.arange(n, dtype=np.int32), "flagged": flagged,
                  "undertrained_status": pl.Series(status, dtype=pl.Utf8)}).write_parquet(table)
    r = _diff(run["ext"], run["lora"], data=run["data"], tokens=table)
    still = {f.severity: f for f in r.findings if f.code == "untrained-still"}
    assert set(still) == {"error"} and sorted(still["error"].ids) == sorted([*used[1:], eos])
