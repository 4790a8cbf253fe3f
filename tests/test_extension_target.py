"""Language adaptation on real weights: SmolLM2-135M extended on UDHR Hindi, measured in Hindi; the
cross-lingual initialisations (focus, random, per-script norm correction) against references
computed here."""

from __future__ import annotations

import math
import unicodedata
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
HINDI = ROOT / "corpora" / "udhr" / "hin.jsonl"


@pytest.fixture(scope="module")
def hindi(smollm2_model):
    from embscope.extension import ExtensionOptions, suggest
    from embscope.extension.evaluate import Plan

    from embscope.sections.extension import target_costs

    # small samples: the figures' machinery is the point here, not their precision
    res = suggest(smollm2_model, HINDI, ExtensionOptions(top=20, min_freq=2, init=["subword-mean", "random"],
                                                      target_lang="hin"),
                  plan=Plan(corpus_bytes=2048, screen_bytes=1024, confirm=1, general_bytes=2048))
    target_costs(res, smollm2_model)  # what the extension section adds: the tokenizer costs
    return res


@pytest.fixture(scope="module")
def contexts(smollm2_model, hindi):
    from embscope.extension.extension import init_contexts, reference_mask

    return init_contexts(smollm2_model, hindi.pieces, reference_mask(smollm2_model, None), hindi.piece_counts,
                         terms=hindi.terms, new_ids=hindi.token_ids, static=hindi.static)


def _triples(c):
    return [v for v in (c.fertility_before, c.fertility_after, c.token_ratio, c.parity_before, c.parity_after) if v]


@pytest.mark.slow
def test_hindi_extension_figures_and_initialisations(hindi, contexts, smollm2_model):
    """One Hindi extension (built once: one test, so that two test processes never both
    build it), read by four checks: its figures before and after, focus's sparsemax rows, random's
    rows and the per-script norm correction."""
    check_hindi_figures_before_after(hindi, smollm2_model)
    check_focus_rows_are_sparsemax_combinations(contexts, smollm2_model, hindi)
    check_random_rows_follow_the_trained_rows(smollm2_model, contexts)
    check_norm_correction_hits_the_script_norm(smollm2_model, contexts, hindi)


def check_hindi_figures_before_after(hindi, smollm2_model):
    import json

    from embscope.languages.segment import count_words
    from embscope.models.fullmodel import load_hf_tokenizer

    t = hindi.summary.target_language
    assert t.lang == "hin" and t.lang_source == "--lang"
    assert hindi.summary.tokens_added > 0
    u = t.udhr
    # tokens counted here with the HF tokenizers, original and extended
    units = [json.loads(line)["text"] for line in HINDI.read_text(encoding="utf-8").splitlines() if line.strip()]
    old = load_hf_tokenizer(smollm2_model)
    assert u.tokens_before == sum(len(e.ids) for e in old.encode_batch(units, add_special_tokens=False))
    assert u.tokens_after == sum(len(e.ids) for e in hindi.extension.tokenizer.encode_batch(units, add_special_tokens=False))
    assert u.fertility_before[0] == pytest.approx(u.tokens_before / sum(count_words(x) for x in units), rel=1e-4)
    assert u.fertility_after[0] < u.fertility_before[0]
    assert u.token_ratio[2] < 1.0  # the whole interval below 1: the extension reliably cuts tokens
    assert u.parity_after[0] < u.parity_before[0]
    for c in (u, t.corpus):
        for p, lo, hi in _triples(c):
            assert lo <= p <= hi and lo < hi
    # the model's figures: every measured strategy, the random baseline among them
    assert "random" in t.strategies and "subword-mean" in t.strategies
    for b in t.strategies.values():
        assert math.isfinite(b.bits_per_byte) and b.bits_per_byte_se > 0
    assert t.bits_per_byte_original.bits_per_byte > 0
    # English retention: before, after with the recommended rows, and its SE
    assert t.english_strategy == hindi.summary.recommended
    assert t.english_before is not None and t.english_after is not None and t.english_se > 0
    assert t.english_retained == (abs(t.english_after - t.english_before) <= t.english_se + 1e-5)


def test_ratio_interval_against_scipy():
    from scipy.stats import bootstrap

    from embscope.languages.bootstrap import ratio_interval

    rng = np.random.default_rng(1)
    den = rng.integers(20, 80, 40).astype(float)
    num = den * rng.normal(3.0, 0.5, 40)
    p, lo, hi = ratio_interval(num, den, resamples=4000)
    ref = bootstrap((num, den), lambda a, b: a.sum() / b.sum(), paired=True, vectorized=False, n_resamples=4000,
                    method="percentile", random_state=7).confidence_interval
    assert p == pytest.approx(num.sum() / den.sum())
    width = ref.high - ref.low
    assert abs(lo - ref.low) < 0.1 * width and abs(hi - ref.high) < 0.1 * width
    assert ratio_interval(num, den, resamples=4000) == (p, lo, hi)  # seeded


def _sparsemax_bisect(z: np.ndarray) -> np.ndarray:
    """The simplex projection by bisection on τ: Σ max(z − τ, 0) = 1."""
    lo, hi = z.max() - 1.0, z.max()
    for _ in range(200):
        tau = (lo + hi) / 2
        if np.maximum(z - tau, 0).sum() > 1:
            lo = tau
        else:
            hi = tau
    return np.maximum(z - (lo + hi) / 2, 0)


def test_sparsemax_matches_bisection():
    import torch

    from embscope.extension.focus import sparsemax

    z = np.random.default_rng(0).normal(0, 0.3, (5, 300))
    got = sparsemax(torch.from_numpy(z)).numpy()
    for row, mine in zip(z, got):
        np.testing.assert_allclose(mine, _sparsemax_bisect(row), atol=1e-9)
        assert mine.sum() == pytest.approx(1.0)


def check_focus_rows_are_sparsemax_combinations(contexts, smollm2_model, hindi):
    import torch

    from embscope.extension.init import initialise

    ctx = contexts["embed"]
    rows = initialise("focus", ctx)
    assert rows.shape == (len(hindi.terms), smollm2_model.dim) and bool(torch.isfinite(rows).all())
    overlap, weights = ctx.memo["focus"]
    assert weights, "the corpus holds the new tokens: they have static vectors"
    emb = hindi.static()
    pos = {int(t): k for k, t in enumerate(emb.ids.tolist())}
    old = emb.vectors[[pos[t] for t in overlap]]
    E = smollm2_model.embed
    for k, (ids, w) in weights.items():
        assert sum(w) == pytest.approx(1.0, abs=1e-5)
        assert set(ids) <= set(overlap) and not set(ids) & set(hindi.token_ids)
        a = emb.vectors[pos[hindi.token_ids[k]]]
        ref = _sparsemax_bisect(old @ a / (np.linalg.norm(old, axis=1) * np.linalg.norm(a)))
        full = dict(zip(ids, w))
        np.testing.assert_allclose([full.get(t, 0.0) for t in overlap], ref, atol=1e-5)
        expect = sum(wi * E[i].double() for i, wi in zip(ids, w))
        torch.testing.assert_close(rows[k].double(), expect, atol=1e-4, rtol=1e-4)


def check_random_rows_follow_the_trained_rows(smollm2_model, contexts):
    import dataclasses

    import torch

    from embscope.extension.init import initialise

    ctx = dataclasses.replace(contexts["embed"], pieces=[[0]] * 3000, memo={})
    rows = initialise("random", ctx)
    assert rows.shape == (3000, smollm2_model.dim) and bool(torch.isfinite(rows).all())
    trained = smollm2_model.embed[ctx.trained].double().numpy()
    np.testing.assert_allclose(rows.double().mean(0).numpy(), trained.mean(0), atol=4 * trained.std(0).max() / 3000 ** 0.5)
    ratio = rows.double().std(0).numpy() / trained.std(0)
    assert 0.9 < float(np.median(ratio)) < 1.1


def _script_rows(texts, trained, test) -> list[int]:
    return [i for i, t in enumerate(texts) if trained[i] and t.strip() and any(c.isalpha() for c in t)
            and all(test(c) for c in t.strip() if c.isalpha())]


def check_norm_correction_hits_the_script_norm(smollm2_model, contexts, hindi):
    import dataclasses

    from embscope.extension.init import initialise
    from embscope.extension.norms import MIN_ROWS

    ctx = contexts["embed"]
    texts = ctx.token_text
    norms = smollm2_model.embed.double().norm(dim=1).numpy()
    trained = ctx.trained.numpy()
    overall = norms[trained].mean()
    deva = _script_rows(texts, trained, lambda c: "DEVANAGARI" in unicodedata.name(c, ""))
    want = norms[deva].mean() if len(deva) >= MIN_ROWS else overall
    rows = initialise("subword-mean+norm", ctx)
    assert rows.shape == (len(hindi.terms), smollm2_model.dim)
    got = rows.double().norm(dim=1).numpy()
    is_deva = [all("DEVANAGARI" in unicodedata.name(c, "") for c in t if c.isalpha()) and any(c.isalpha() for c in t)
               for t in hindi.terms]
    assert any(is_deva)
    np.testing.assert_allclose(got[is_deva], want, rtol=1e-4)
    # Latin: thousands of SmolLM2 rows, so the Latin mean is used
    latin = _script_rows(texts, trained, lambda c: unicodedata.name(c, "").startswith("LATIN"))
    assert len(latin) >= MIN_ROWS
    lctx = dataclasses.replace(ctx, pieces=[[0], [1]], terms=[" hospital", "Zebra"], memo={})
    got = initialise("random+norm", lctx).double().norm(dim=1).numpy()
    np.testing.assert_allclose(got, norms[latin].mean(), rtol=1e-4)


def test_distil_fits_the_most_frequent_rows_within_its_budget():
    """10,000 new rows, one fit context each, SmolLM2-135M's parameter count: the work planned is
    within the budget, and the rows chosen are the most frequent (sorted here)."""
    import types

    import torch

    from embscope.extension.contexts import TermContext
    from embscope.extension.distil import work, within_budget

    lm = types.SimpleNamespace(parameters=lambda: [torch.empty(134_515_008, device="meta")])
    rng = np.random.default_rng(0)
    n = 10_000
    ctxs = [TermContext(k, list(range(int(rng.integers(5, 48)))), [1, 2], [3, 4, 5]) for k in range(n)]
    counts = rng.integers(2, 5000, n)
    assert work(lm, ctxs) > 20  # the whole fit is far over the budget
    chosen = within_budget(lm, ctxs, counts, 20.0)
    assert work(lm, chosen) <= 20.0
    terms = {c.term for c in chosen}
    assert 0 < len(terms) < n
    # most frequent first: every chosen row is at least as frequent as the rows that would have fit next
    ranked = sorted(range(n), key=lambda t: -counts[t])
    first = ranked[:len(terms) - 5]
    assert set(first) <= terms


def test_lang_and_init_names_are_checked():
    from embscope.errors import SpecError
    from embscope.extension.init import expand_specs
    from embscope.sections.options import RunOptions

    assert RunOptions.build(target_lang="hin", norm_correction=True).extension.target_lang == "hin"
    with pytest.raises(SpecError, match="not a language code"):
        RunOptions.build(target_lang="Hindi")
    assert {"focus", "random"} <= set(expand_specs(["auto"]))
    with pytest.raises(SpecError, match="did you mean 'focus'"):
        expand_specs(["focsu+norm"])
