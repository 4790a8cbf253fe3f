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


def test_recommend_prefers_fidelity_within_the_disturbance_bound():
    from embscope.extension.choose import KL_BOUND, ordered, recommend

    figures = {"mean": {"fidelity_kl": 3.0, "fidelity_top1": 0.2, "kl": 1e-5},
               "loud": {"fidelity_kl": 0.5, "fidelity_top1": 0.6, "kl": 10 * KL_BOUND},
               "distil": {"fidelity_kl": 1.5, "fidelity_top1": 0.4, "kl": 2e-5}}
    best, why = recommend(figures)
    assert best == "distil"
    assert "2.00× higher" in why and "loud" in why
    assert list(ordered(figures, best)) == ["distil", "loud", "mean"]
    assert recommend({"mean": {"kl": 1e-5}})[0] == "subword-mean"


def test_auto_is_the_default_and_unknown_names_still_fail():
    import inspect

    from embscope.errors import SpecError
    from embscope.extension import apply, suggest
    from embscope.extension.init import expand_specs
    from embscope.sections.base import RunOptions

    assert inspect.signature(suggest).parameters["init"].default == ("auto",)
    assert inspect.signature(apply).parameters["init"].default == "auto"
    assert RunOptions().init == ["auto"]
    assert {"omp", "subword-mean-norm", "mean", "knn-pull"} <= set(expand_specs(["auto"]))
    assert "distil" not in expand_specs(["auto"]) and "distil" in expand_specs(["auto", "distil"])
    with pytest.raises(SpecError, match="did you mean 'omp'"):
        expand_specs(["opm"])


@pytest.fixture(scope="module")
def result(smollm2_model):
    import embscope.extension.contexts as contexts
    import embscope.extension.distil as distil
    from embscope.extension import suggest

    with pytest.MonkeyPatch.context() as mp:  # fewer texts and steps: the direct check runs each alone
        mp.setattr(contexts, "BPB_BYTES", 400)
        mp.setattr(distil, "STEPS", 3)
        # auto's every strategy, and distil: all measured, the direct checks below take SPECS
        return suggest(smollm2_model, CORPUS, top=TOP, init=("auto", *SPECS))


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
            new_id = tok.convert_tokens_to_ids(result.terms[c.term])
            assert new_id == vocab + c.term
            q = torch.log_softmax(_log_softmax(lm, c.prefix + [new_id] + c.after)[len(c.prefix):, :vocab], -1)
            kl = (p.exp() * (p - q)).sum(-1)
            kls.append(float(kl[0]))
            tops.append(bool(p[0].argmax() == q[0].argmax()))
            kls_after.extend(float(v) for v in kl[1:])
        got = result.summary["strategies"][spec]
        assert got["fidelity_contexts"] == len(kls)
        assert got["fidelity_kl"] == pytest.approx(sum(kls) / len(kls), rel=2e-3, abs=2e-3)
        assert got["fidelity_kl_p90"] == pytest.approx(float(torch.tensor(kls).quantile(0.9)), rel=2e-3, abs=2e-3)
        assert got["fidelity_top1"] == pytest.approx(sum(tops) / len(tops), abs=1e-4)
        if kls_after:
            assert got["fidelity_kl_after"] == pytest.approx(sum(kls_after) / len(kls_after), rel=2e-3, abs=2e-3)
    # the fitted rows read more like their pieces than their start does, on text they never saw
    figures = result.summary["strategies"]
    assert figures["distil"]["fidelity_kl"] < figures["subword-mean"]["fidelity_kl"]


@pytest.mark.slow
def test_bits_per_byte_equals_a_direct_transformers_computation(result, direct, smollm2_model):
    from transformers import PreTrainedTokenizerFast

    from embscope.models.fullmodel import load_hf_tokenizer

    base_lm, models = direct
    texts = result.contexts.texts
    assert texts
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    start = [smollm2_model.config["bos_token_id"]]

    def bits(lm, tok):
        nats, n = 0.0, 0
        for t in texts:
            ids = start + tok(t, add_special_tokens=False)["input_ids"]
            lp = _log_softmax(lm, ids)
            nats -= float(sum(lp[i, ids[i + 1]] for i in range(len(ids) - 1)))
            n += len(ids) - 1
        return nats / math.log(2) / n_bytes, n / n_bytes

    old_tok = PreTrainedTokenizerFast(tokenizer_object=load_hf_tokenizer(smollm2_model))
    bpb0, tpb0 = bits(base_lm, old_tok)
    assert result.summary["bits_per_byte_original"]["bits_per_byte"] == pytest.approx(bpb0, abs=2e-4)
    assert result.summary["bits_per_byte_original"]["tokens_per_byte"] == pytest.approx(tpb0, abs=1e-5)
    for spec in SPECS:
        bpb, tpb = bits(*reversed(models[spec]))
        got = result.summary["strategies"][spec]
        assert got["bits_per_byte"] == pytest.approx(bpb, abs=2e-4)
        assert got["tokens_per_byte"] == pytest.approx(tpb, abs=1e-5)
        assert got["tokens_per_byte_change"] < 0  # the new tokens are used on held-out text


@pytest.mark.slow
def test_auto_recommends_a_measured_strategy_and_apply_writes_it(result, smollm2_model, tmp_path):
    import json

    from embscope.extension import apply

    from embscope.extension.init import expand_specs

    figures = result.summary["strategies"]
    # every strategy auto names, and distil, measured on the held-out contexts and text
    assert set(figures) == set(expand_specs(["auto", *SPECS])) and len(figures) > len(SPECS)
    for name, got in figures.items():
        assert got["fidelity_contexts"] > 0 and got["fidelity_kl"] >= 0, name
        assert got["bits_per_byte"] > 0 and got["tokens_per_byte_change"] < 0, name
    rec = result.summary["recommended"]
    assert rec in figures and result.summary["recommended_why"].startswith(rec)
    assert list(figures)[0] == rec
    manifest = apply(smollm2_model, result, tmp_path / "out", init="auto", mode="rows")
    assert manifest["init"] == rec
    assert json.loads((tmp_path / "out" / "embscope_extension.json").read_text())["init"] == rec
