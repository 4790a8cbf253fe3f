"""Initialisation fidelity and bits per byte against a direct transformers computation, OMP on a
known case, and ``--init auto``.

The direct computation loads the ``--apply`` folder with ``AutoTokenizer``/``AutoModelForCausalLM``
and runs every sequence whole (no cache reuse, no spliced embeddings, no batching): the
figures embscope reports must equal it.
"""

from __future__ import annotations

import math
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "corpora" / "medical"
#: terms to add: a handful, so the direct computation stays a few seconds
TOP = 4
SPECS = ("subword-mean", "distil")


def test_omp_reconstructs_a_sparse_row():
    """A row that is 0.6·a + 0.4·b in both spaces is found exactly from the other rows."""
    import torch

    from embscope.extension.omp import batch_omp, omp_rows

    g = torch.Generator().manual_seed(0)
    donor = torch.randn(40, 64, generator=g)     # (N, D) donor vectors of the shared tokens
    model = torch.randn(40, 24, generator=g)     # (N, d) their trained rows
    target_donor = 0.6 * donor[3] + 0.4 * donor[17]
    idx, coeff = batch_omp(target_donor[None], donor, 2)
    assert sorted(idx[0].tolist()) == [3, 17]
    got = omp_rows(target_donor[None], donor, model, 2)[0]
    assert torch.allclose(got, 0.6 * model[3] + 0.4 * model[17], atol=1e-5)


def test_omp_picks_the_trained_row_itself_when_it_is_in_the_dictionary():
    import torch

    from embscope.extension.omp import omp_rows

    g = torch.Generator().manual_seed(1)
    donor, model = torch.randn(30, 12, generator=g), torch.randn(30, 20, generator=g)
    got = omp_rows(donor[[5, 9]], donor, model, 3)
    assert torch.allclose(got, model[[5, 9]], atol=1e-5)


def _strategy(**figures):
    from embscope.extension.diagnostics import StrategyRecord

    return StrategyRecord("s", 50.0, 1.0, 99.0, 0.5, **figures)


def _scored(corpus, general, kl_term, kl_after, kl=1e-5, score_bytes=24000):
    from embscope.extension.choose import score

    d = {"bits_per_byte_change": corpus, "general_bits_per_byte_change": general, "fidelity_kl": kl_term,
         "fidelity_kl_after": kl_after, "fidelity_after_positions": 3.0, "kl": kl, "score_bytes": score_bytes}
    return _strategy(**d, **score(d, 0.02))


def test_score_adds_three_bits_per_byte_figures():
    """score = Δbpb(corpus) + Δbpb(general) + ρ (KL_term + n KL_after) / ln 2, by hand."""
    d = _scored(-0.05, 0.001, 2.0, 1.0)
    assert d.score_reading == pytest.approx(0.02 * (2.0 + 3 * 1.0) / math.log(2), abs=1e-5)
    assert d.score == pytest.approx(-0.05 + 0.001 + d.score_reading, abs=1e-5)


def test_recommend_takes_the_lowest_score_within_the_disturbance_bound():
    from embscope.extension.choose import KL_BOUND, general_note, ordered, recommend

    figures = {"mean": _scored(0.04, 1e-5, 3.1, 1.6),
               "loud": _scored(-0.2, 0.0, 0.5, 0.2, kl=10 * KL_BOUND),
               "distil": _scored(-0.07, 4e-5, 2.2, 1.06),
               "screened": _scored(-0.3, 0.0, 0.1, 0.1, score_bytes=4000)}
    best, why = recommend(figures)
    assert best == "distil"  # loud is over the bound; screened was measured on less text
    assert why.startswith("distil: score") and "next mean" in why and "loud" in why and "screened" in why
    assert list(ordered(figures, best))[:2] == ["distil", "screened"]
    assert recommend({"mean": _strategy(kl=1e-5, fidelity_kl=3.0)})[0] == "subword-mean"
    assert general_note(figures, "UDHR") is None  # two strategies leave it as it was
    worse = {"a": _strategy(general_bits_per_byte_change=1e-5), "b": _strategy(general_bits_per_byte_change=2e-3)}
    assert general_note(worse, "UDHR") == ("every strategy makes bits per byte on general text (UDHR) worse "
                                           "than the original model: +0.00001 to +0.002 bits per byte")


def test_auto_is_the_default_and_unknown_names_still_fail():
    import inspect

    from embscope.errors import SpecError
    from embscope.extension import ExtensionOptions, apply, suggest
    from embscope.extension.init import expand_specs
    from embscope.sections.base import RunOptions

    assert inspect.signature(suggest).parameters["options"].default is None  # ExtensionOptions()
    assert ExtensionOptions().init == ["auto"]
    assert inspect.signature(apply).parameters["init"].default == "auto"
    assert RunOptions().extension.init == ["auto"]
    assert {"omp", "subword-mean-norm", "mean", "knn-pull", "distil"} <= set(expand_specs(["auto"]))
    with pytest.raises(SpecError, match="did you mean 'omp'"):
        expand_specs(["opm"])


@pytest.fixture(scope="module", autouse=True)
def _float32():
    """The direct transformers computations below run in float32; so do embscope's here."""
    import embscope.extension.fidelity as fidelity

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fidelity, "PRECISION", "float32")
        yield


@pytest.fixture(scope="module")
def result(smollm2_model):
    import embscope.extension.distil as distil
    from embscope.extension import ExtensionOptions, suggest
    from embscope.extension.evaluate import Plan

    with pytest.MonkeyPatch.context() as mp:  # fewer texts and steps: the direct check runs each alone
        mp.setattr(distil, "STEPS", 3)
        # auto's every strategy, distil among them: all measured, the direct checks below take SPECS;
        # a screening sample of 250 bytes, 2 strategies confirmed on 500
        return suggest(smollm2_model, CORPUS, ExtensionOptions(top=TOP, init=["auto"]), plan=Plan(500, 250, 2))


@pytest.fixture(scope="module")
def direct(smollm2_model, result, tmp_path_factory):
    """The two models and tokenizers as transformers loads them, outside embscope."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from embscope.extension import apply
    from embscope.models.fullmodel import load_causal_lm

    out = {}
    for spec in SPECS:
        folder = tmp_path_factory.mktemp("ext") / spec
        apply(smollm2_model, result, folder, init=spec)
        out[spec] = (AutoTokenizer.from_pretrained(str(folder)),
                     AutoModelForCausalLM.from_pretrained(str(folder)).eval())
    return load_causal_lm(smollm2_model), out


def _log_softmax(lm, ids):
    import torch

    with torch.no_grad():
        return torch.log_softmax(lm(input_ids=torch.tensor([ids])).logits[0].double(), -1)


@pytest.mark.slow
def test_held_out_contexts_come_from_held_out_texts(result, smollm2_model):
    from embscope.models.fullmodel import load_hf_tokenizer

    tok = load_hf_tokenizer(smollm2_model)
    texts = _texts()
    held = [t for t in texts if zlib.crc32(t.encode("utf-8")) % 4 == 0]
    fit = [t for t in texts if zlib.crc32(t.encode("utf-8")) % 4 != 0]
    assert result.contexts.held and result.contexts.fit
    for group, pool in ((result.contexts.held, held), (result.contexts.fit, fit)):
        for c in group:
            text = tok.decode(c.prefix[1:] + c.pieces + c.after)
            assert any(t.startswith(text) for t in pool), text
            assert tok.decode(c.pieces) == result.terms[c.term]
    assert set(result.contexts.texts) <= set(held)


def _texts():
    import json

    return [json.loads(line)["text"] for f in sorted(CORPUS.glob("*.jsonl")) for line in f.open(encoding="utf-8")]


@pytest.mark.slow
def test_fidelity_equals_a_direct_transformers_computation(result, direct):
    import torch

    base_lm, models = direct
    vocab = base_lm.get_output_embeddings().weight.shape[0]
    # the original model's distributions, the same for every strategy: computed once per context
    base = [_log_softmax(base_lm, c.prefix + c.pieces + c.after)[len(c.prefix) + len(c.pieces) - 1:]
            for c in result.contexts.held]
    for spec in SPECS:
        tok, lm = models[spec]
        kls, tops, kls_after = [], [], []
        for c, p in zip(result.contexts.held, base):
            new_id = result.token_ids[c.term]
            assert new_id == vocab + c.term
            q = torch.log_softmax(_log_softmax(lm, c.prefix + [new_id] + c.after)[len(c.prefix):, :vocab], -1)
            kl = (p.exp() * (p - q)).sum(-1)
            kls.append(float(kl[0]))
            tops.append(bool(p[0].argmax() == q[0].argmax()))
            kls_after.extend(float(v) for v in kl[1:])
        got = result.summary.strategies[spec]
        assert got.fidelity_contexts == len(kls)
        assert got.fidelity_kl == pytest.approx(sum(kls) / len(kls), rel=2e-3, abs=2e-3)
        assert got.fidelity_kl_p90 == pytest.approx(float(torch.tensor(kls).quantile(0.9)), rel=2e-3, abs=2e-3)
        assert got.fidelity_top1 == pytest.approx(sum(tops) / len(tops), abs=1e-4)
        if kls_after:
            assert got.fidelity_kl_after == pytest.approx(sum(kls_after) / len(kls_after), rel=2e-3, abs=2e-3)
    # the fitted rows read more like their pieces than their start does, on text they never saw
    figures = result.summary.strategies
    assert figures["distil"].fidelity_kl < figures["subword-mean"].fidelity_kl


@pytest.mark.slow
def test_bits_per_byte_equals_a_direct_transformers_computation(result, direct, smollm2_model):
    from transformers import PreTrainedTokenizerFast

    from embscope.models.fullmodel import load_hf_tokenizer

    from embscope.extension.contexts import spread

    base_lm, models = direct
    full = result.contexts.texts
    plan = result.summary.score_plan
    assert full and plan.screen_bytes < plan.corpus_bytes == sum(len(t.encode("utf-8")) for t in full)
    start = [smollm2_model.config["bos_token_id"]]

    def bits(lm, tok, texts):
        """(bits per text, tokens per text), every sequence run whole through transformers."""
        out = []
        for t in texts:
            ids = start + tok(t, add_special_tokens=False)["input_ids"]
            lp = _log_softmax(lm, ids)
            out.append((-float(sum(lp[i, ids[i + 1]] for i in range(len(ids) - 1))) / math.log(2), len(ids) - 1))
        return out

    known: dict[str, tuple[float, int]] = {}

    def original_bits(texts):
        """:func:`bits` of the original model: each text run once (a text's figures are the same in every sample)."""
        missing = [t for t in dict.fromkeys(texts) if t not in known]
        known.update(zip(missing, bits(base_lm, old_tok, missing)))
        return [known[t] for t in texts]

    def figures(per_text, texts):
        b = sum(len(t.encode("utf-8")) for t in texts)
        return sum(x for x, _ in per_text) / b, sum(n for _, n in per_text) / b

    old_tok = PreTrainedTokenizerFast(tokenizer_object=load_hf_tokenizer(smollm2_model))
    original = original_bits(full)
    bpb0, tpb0 = figures(original, full)
    assert result.summary.bits_per_byte_original.bits_per_byte == pytest.approx(bpb0, abs=2e-4)
    assert result.summary.bits_per_byte_original.tokens_per_byte == pytest.approx(tpb0, abs=1e-5)
    # each figure says which text it came from
    assert result.summary.bits_per_byte_original.source.startswith("held-out text of medical ")
    assert result.summary.general_bits_per_byte_original.source.startswith("UDHR English")
    # the standard error over texts (ratio estimator), recomputed by hand
    import numpy as np

    from embscope.extension.bpb import ratio_se

    y, sizes = np.array([x for x, _ in original]), np.array([len(t.encode("utf-8")) for t in full], dtype=float)
    r = y.sum() / sizes.sum()
    se = math.sqrt(len(y) / (len(y) - 1) * ((y - r * sizes) ** 2).sum()) / sizes.sum()
    assert ratio_se(y, sizes)[1] == pytest.approx(se) and result.summary.bits_per_byte_original.bits_per_byte_se == pytest.approx(se, abs=1e-4)
    for spec in SPECS:
        got = result.summary.strategies[spec]
        # confirmed strategies are measured on the whole sample, the others on its screening part
        texts = full if got.score_bytes == plan.corpus_bytes else spread(full, 250)
        assert got.score_bytes == sum(len(t.encode("utf-8")) for t in texts)
        bpb, tpb = figures(bits(*reversed(models[spec]), texts), texts)
        assert got.bits_per_byte == pytest.approx(bpb, abs=2e-4)
        assert got.tokens_per_byte == pytest.approx(tpb, abs=1e-5)
        assert got.bits_per_byte_change == pytest.approx(bpb - figures(original_bits(texts), texts)[0], abs=2e-4)
        assert got.tokens_per_byte_change <= 0  # new tokens only ever join old ones
    assert result.summary.strategies[plan.confirmed[0]].tokens_per_byte_change < 0  # used on the sample


@pytest.mark.slow
def test_auto_recommends_a_measured_strategy_and_apply_writes_it(result, smollm2_model, tmp_path):
    import json

    from embscope.extension import apply

    from embscope.extension.init import expand_specs

    figures = result.summary.strategies
    # every strategy auto names, and distil, measured on the held-out contexts and text
    assert set(figures) == set(expand_specs(["auto", *SPECS])) and len(figures) > len(SPECS)
    plan = result.summary.score_plan
    for name, got in figures.items():
        assert got.fidelity_contexts > 0 and got.fidelity_kl >= 0, name
        assert got.general_bits_per_byte_change is not None and got.kl is not None, name
        if name in plan.screened:
            assert got.bits_per_byte > 0 and got.tokens_per_byte_change <= 0, name
            assert got.score == pytest.approx(got.score_corpus + got.score_general + got.score_reading, abs=1e-4)
        else:  # over the disturbance bound: never recommended, not measured on corpus text
            assert got.score is None and name in plan.not_scored, name
    rec = result.summary.recommended
    assert rec in plan.confirmed and result.summary.recommended_why.startswith(rec)
    assert list(figures)[0] == rec
    confirmed = [figures[n].score for n in plan.confirmed]
    assert figures[rec].score == min(confirmed) and len(plan.confirmed) == 2
    manifest = apply(smollm2_model, result, tmp_path / "out", init="auto", mode="rows")
    assert manifest["init"] == rec
    assert json.loads((tmp_path / "out" / "embscope_extension.json").read_text())["init"] == rec


@pytest.mark.slow
def test_bfloat16_passes_give_the_float32_figures(result, smollm2_model):
    """The measuring passes in bfloat16 autocast (``PRECISION = "auto"`` picks it on CPUs with AMX
    or AVX512-BF16) move bits per byte and fidelity KL by little against float32, the changes
    between strategies least."""
    import embscope.extension.fidelity as fidelity
    from embscope.extension.bpb import summarize, text_losses
    from embscope.extension.contexts import start_ids
    from embscope.models.fullmodel import load_causal_lm, load_hf_tokenizer

    lm, tok = load_causal_lm(smollm2_model), load_hf_tokenizer(smollm2_model)
    rows = {s: result.rows[s] for s in SPECS}
    texts, ctxs = result.contexts.texts, result.contexts.held
    figures = {}
    for precision in ("float32", "bfloat16"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(fidelity, "PRECISION", precision)
            with fidelity.forward_precision():
                base, bpb = summarize(text_losses(lm, texts, tok, result.extension.tokenizer,
                                                  start_ids(tok, lm.config.bos_token_id), result.token_ids, rows))
                fid = fidelity.fidelity(lm, ctxs, {s: rows[s]["embed"] for s in SPECS}, result.token_ids)
        figures[precision] = (base, bpb, fid)
    (b32, p32, f32), (b16, p16, f16) = figures["float32"], figures["bfloat16"]
    assert b16["bits_per_byte"] == pytest.approx(b32["bits_per_byte"], abs=0.01)
    for s in SPECS:
        assert p16[s]["bits_per_byte_change"] == pytest.approx(p32[s]["bits_per_byte_change"], abs=0.005)
        assert f16[s]["fidelity_kl"] == pytest.approx(f32[s]["fidelity_kl"], rel=0.03)
