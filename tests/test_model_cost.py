"""The model's cost per language (``fertility --model``) against transformers' own model: the GGUF
loaded by ``AutoModelForCausalLM.from_pretrained(gguf_file=...)``, its text tokenized by
transformers' own GGUF tokenizer, every unit scored alone in a plain float32 loop."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
UDHR = ROOT / "corpora" / "udhr"
#: short UDHR articles: ~570 SmolLM2 tokens in all (eng 83, rus 329, cmn_hans 161); units 1, 3 and 4
#: for the work budget's cut, 6 for a unit one language lacks
UNITS = (1, 3, 4, 6)
#: cmn_hans lacks this unit here, so its parity is over the units it shares with eng
MISSING = ("cmn_hans", 6)
#: eng, rus and cmn_hans are in the model pass's default set; fra is measured, not scored
LANGS = ("eng", "rus", "cmn_hans", "fra")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("udhr-small")
    for lang in LANGS:
        rows = [json.loads(line) for line in (UDHR / f"{lang}.jsonl").read_text("utf-8").splitlines()]
        keep = [r for r in rows if r["unit"] in UNITS and (lang, r["unit"]) != MISSING]
        (d / f"{lang}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in keep), "utf-8")
    return d


def _texts(corpus: Path, lang: str) -> dict[int, str]:
    rows = [json.loads(line) for line in (corpus / f"{lang}.jsonl").read_text("utf-8").splitlines()]
    return {r["unit"]: r["text"] for r in rows}


@pytest.fixture(scope="module")
def reference(corpus, smollm2_model, smollm2_gguf_tokenizer):
    """``{language: {unit: (bits, bytes, tokens)}}`` from transformers alone, float32, one unit at a time.

    transformers' own GGUF loaders build the tokenizer (the session's, read only here) and the
    model; the model's loader parses the file's ``gguf.GGUFReader`` once instead of twice (the
    reader is read-only once built: the state dict is the same)."""
    import torch
    from transformers import AutoModelForCausalLM

    from embscope.models.fullmodel import _memoised_gguf

    path = Path(smollm2_model.path)
    tok = smollm2_gguf_tokenizer
    with _memoised_gguf():
        lm = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    start = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    out = {}
    with torch.no_grad():
        for lang in LANGS[:3]:
            out[lang] = {}
            for unit, text in _texts(corpus, lang).items():
                ids = [start] + tok(text, add_special_tokens=False)["input_ids"]
                logits = lm(input_ids=torch.tensor([ids])).logits[0, :-1].float()
                logp = torch.log_softmax(logits, -1)
                nats = -sum(float(logp[i, t]) for i, t in enumerate(ids[1:]))
                out[lang][unit] = (nats / math.log(2), len(text.encode("utf-8")), len(ids) - 1)
    return out


@pytest.fixture(scope="module")
def ours(corpus):
    """``fertility --model`` through the API, the body in float32 (the CPU's bfloat16 would differ
    by ~0.001 bits per byte, which a tight comparison must not absorb)."""
    import embscope
    from embscope.models import likelihood

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(likelihood, "PRECISION", "float32")
        return embscope.fertility(None, corpus, model="smollm2-135m", device="cpu")


def _rows(table, tokenizer="smollm2-135m"):
    return {r["language"]: r for r in table.filter(table["tokenizer"] == tokenizer).iter_rows(named=True)}


@pytest.mark.slow  # two SmolLM2-135M loads and ~1,150 scored tokens (~1-2 min on 2 busy cores)
def test_bits_per_byte_and_information_parity_equal_transformers(ours, reference):
    rows = _rows(ours.tables["languages"])
    for lang, units in reference.items():
        bits = sum(u[0] for u in units.values())
        size = sum(u[1] for u in units.values())
        assert rows[lang]["bits_per_byte"] == pytest.approx(bits / size, rel=2e-5), lang
        assert rows[lang]["model_units"] == len(units)
        # the delta-method standard error over units, from the reference's own per-unit figures
        r = bits / size
        n = len(units)
        se = math.sqrt(n / (n - 1) * sum((u[0] - r * u[1]) ** 2 for u in units.values())) / size
        assert rows[lang]["bits_per_byte_se"] == pytest.approx(se, rel=1e-3), lang
        shared = [u for u in units if u in reference["eng"]]
        want = sum(reference["eng"][u][0] for u in shared) / sum(units[u][0] for u in shared)
        assert rows[lang]["information_parity"] == pytest.approx(want, rel=2e-5), lang
    assert rows["eng"]["information_parity"] == 1.0
    assert rows["cmn_hans"]["model_units"] == len(UNITS) - 1
    # fra is measured (tokens, parity) but not in the model pass's default set
    assert rows["fra"]["tokens"] > 0 and rows["fra"]["bits_per_byte"] is None
    record = ours.summary.sections.languages.corpora[str(next(iter(ours.summary.sections.languages.corpora)))].model
    assert record.languages == ["eng", "rus", "cmn_hans"] and record.selection == "default"
    assert record.units == len(UNITS) and not record.stopped_at_budget and record.dtype == "float32"
    assert record.start == "bos" and record.start_token == 1
    assert record.tokens == sum(u[2] for units in reference.values() for u in units.values())
    assert record.work == pytest.approx((record.tokens + record.texts) * 134_515_008 / 1e12, abs=1e-4)
    assert record.work <= record.work_budget == 20.0


@pytest.mark.slow  # one SmolLM2-135M load, ~330 scored tokens
def test_the_work_budget_cuts_the_same_units_in_every_language(corpus, reference, tmp_path, capsys):
    """``--model-work 0.05``: 0.05×10¹² multiply-adds / 134.5 M parameters = 371 tokens: units 1
    (225 tokens in the three languages, start tokens included) and 3 (102) fit, unit 4 (174) does not."""
    import polars as pl

    from embscope.cli import main

    out = tmp_path / "run"
    assert main(["fertility", "--model", "smollm2-135m", "--corpus", str(corpus), "--model-work", "0.05",
                 "--device", "cpu", "--out", str(out), "--quiet"]) == 0
    assert "The model's cost" in capsys.readouterr().out
    rows = _rows(pl.read_parquet(out / "languages.parquet"))
    for lang, units in reference.items():
        taken = [units[u] for u in (1, 3)]
        assert rows[lang]["model_units"] == 2
        # bf16 or float32, whichever this CPU runs faster: within 0.01 bits per byte of float32
        assert rows[lang]["bits_per_byte"] == pytest.approx(sum(u[0] for u in taken) / sum(u[1] for u in taken), abs=0.01)
    summary = json.loads((out / "summary.json").read_text())
    model = next(iter(summary["sections"]["languages"]["corpora"].values()))["model"]
    assert model["units"] == 2 and model["stopped_at_budget"] and model["work"] <= model["work_budget"] == 0.05
    assert summary["parameters"]["model_work"] == 0.05


def test_no_model_no_columns(corpus):
    """Without a model the columns are there, and null."""
    import embscope

    table = embscope.fertility("gpt2", corpus).tables["languages"]
    for name in ("bits_per_byte", "bits_per_byte_se", "information_parity", "model_units"):
        assert table[name].null_count() == table.height
    assert embscope.fertility("gpt2", corpus).summary.sections.languages.corpora[str(corpus)].model is None


def test_fertility_needs_a_tokenizer_or_a_model_and_a_budget_of_zero_or_more(corpus):
    import embscope
    from embscope.errors import SpecError

    with pytest.raises(SpecError, match="needs a tokenizer or a model"):
        embscope.fertility(None, corpus)
    with pytest.raises(SpecError, match="--model-work must be"):
        embscope.fertility("gpt2", corpus, model_work=-1.0)


def test_plan_takes_whole_units_in_order():
    """Units in order of first appearance, interleaved by position (deu's unit 3, its first, comes
    before eng's second), each with every language's texts of it, until the budget."""
    from embscope.languages.model_cost import plan_units

    lengths = {"eng": [(0, 10), (1, 5), (2, 5)], "fra": [(0, 20), (1, 10)], "deu": [(3, 1)]}
    assert plan_units(lengths, 10**11, None) == ([0, 3, 1, 2], pytest.approx(5.1), False)
    taken, work, stopped = plan_units(lengths, 10**11, 4.6)
    assert taken == [0, 3, 1] and work == pytest.approx(4.6) and stopped


@pytest.mark.slow  # the context and tokens sections without the scan, and ~330 scored tokens
def test_audit_scores_within_its_budget(corpus, reference):
    """``audit`` loads the whole model for the same columns (its own budget: ``model_work``)."""
    import embscope

    res = embscope.audit("smollm2-135m", languages=corpus, scan=False, verify=0, device="cpu", model_work=0.05)
    rows = _rows(res.tables["languages"])
    for lang, units in reference.items():
        taken = [units[u] for u in (1, 3)]
        assert rows[lang]["model_units"] == 2
        assert rows[lang]["bits_per_byte"] == pytest.approx(sum(u[0] for u in taken) / sum(u[1] for u in taken), abs=0.01)
    record = res.summary.sections.languages.corpora[str(corpus)].model
    assert record.work_budget == 0.05 and record.stopped_at_budget and record.units == 2
    assert res.summary.parameters.languages.model_work == 0.05
