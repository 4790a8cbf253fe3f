"""Under-trained rows on real weights: Magikarp's recipe, reference discovery, an untied fixture built
from MiniLM's rows, verification by prompting, corpus usage and repair."""

from __future__ import annotations

import json
import os
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from embscope.geometry.indicators import compute_indicators, magikarp_similarity
from embscope.geometry.knn import knn_graph
from embscope.geometry.reference import discover_reference, unused_byte_ids

from tests.conftest import VOCABS, needs_vocabs  # noqa: E402

LLAMACPP = str(VOCABS)
WORD = re.compile(r"(##)?[a-z]{3,}")


@pytest.fixture(scope="module")
def minilm(minilm_model):
    return minilm_model


@pytest.fixture(scope="module")
def minilm_graph(minilm):
    # the session's kNN cache (tests/conftest.py): the same graph the MiniLM scans build
    return knn_graph(minilm.embed, 10, cache_dir=session_knn_cache(), progress=False)


def session_knn_cache():
    """The session's kNN cache folder, shared with the other tests that read the demo models' graphs."""
    from pathlib import Path

    return Path(os.environ["EMBSCOPE_CACHE"]) / "knn"


@pytest.fixture(scope="module")
def smollm2(smollm2_model):
    return smollm2_model


def test_magikarp_sim_is_the_published_recipe(minilm):
    """Same numbers as Magikarp's own steps: sklearn PCA (centred) on the whole matrix, first
    component removed from the uncentred rows, cosine to the mean of the known-unused rows."""
    from sklearn.decomposition import PCA

    m = minilm.embed[:6000].double().numpy()
    ref = [i for i, s in enumerate(minilm.token_strings()[:6000]) if s.startswith("[unused")]
    c = PCA(n_components=1).fit(m).components_[0]
    w = m - np.outer(m @ c, c)
    r = w[ref].mean(0)
    expected = w @ r / (np.linalg.norm(w, axis=1) * np.linalg.norm(r))
    got = magikarp_similarity(torch.from_numpy(m), ref)
    np.testing.assert_allclose(got, expected, atol=1e-6)
    # the uncentred top direction would be a different indicator
    top = np.linalg.svd(m, full_matrices=False)[2][0]
    assert abs(float(top @ c)) < 0.99


@needs_vocabs
def test_reference_finds_unused_utf8_bytes_in_gpt2():
    from embscope.models.vocabulary import load_vocabulary

    v = load_vocabulary(f"{LLAMACPP}/ggml-vocab-gpt-2.gguf")
    unused, dup = unused_byte_ids(v, len(v))
    # Magikarp's GPT-2 list (bytes 0xF5–0xFF are ids 177–187) plus the overlong leads 0xC0, 0xC1
    assert unused == [124, 125, *range(177, 188)]
    assert dup == []
    ref = discover_reference(["normal"] * len(v), [v.display(i) for i in range(len(v))],
                             np.zeros(len(v), bool), v)
    assert ref.source == "unused-utf8-bytes" and ref.by_source == {"unused-utf8-bytes": 13}


@pytest.mark.slow
@needs_vocabs
def test_reference_finds_duplicate_byte_fallback_in_llama_spm():
    from embscope.models.vocabulary import load_vocabulary

    v = load_vocabulary(f"{LLAMACPP}/ggml-vocab-llama-spm.gguf")
    unused, dup = unused_byte_ids(v, len(v))
    assert unused == [195, 196, *range(248, 259)]  # <0xC0>, <0xC1>, <0xF5>…<0xFF>
    # Magikarp's Llama-2 list is <0x37>…<0x7F> (ids 58–130); every one with an ordinary twin is found
    assert set(range(58, 130)) <= set(dup) and 130 not in dup
    assert all(v.display(i).startswith("<0x") or len(v.token_bytes(i)) == 1 for i in dup)


def test_minilm_unused_auc_held_out(minilm, minilm_graph):
    from sklearn.metrics import roc_auc_score

    strings = minilm.token_strings()
    unused = np.array([bool(re.fullmatch(r"\[unused\d+\]", s)) for s in strings])
    uid = np.flatnonzero(unused)
    cats = np.array(minilm.categories)
    for ref in (uid[::2].tolist(), []):  # half the [unusedN] rows as reference, or none at all
        ind = compute_indicators(minilm.embed, None, minilm.categories, strings, minilm_graph.sims,
                                 vocab=minilm.vocab, unused_ids=ref)
        ev = (cats == "normal") & ~np.isin(np.arange(len(cats)), ref)
        auc = roc_auc_score(unused[ev], ind.undertrained_score[ev])
        assert auc >= 0.95, (len(ref), auc)
        assert ind.flagged[uid[1::2]].mean() >= 0.95
        assert ("magikarp" in ind.z) == bool(ref)
    # The note states this run's figures: the share it quotes is the share flagged (no reference
    # in the last run, so every normal row is a trained row).
    fit = cats == "normal"
    share = ind.flagged[fit].mean()
    assert f"({100 * share:.2f} %" in ind.note and f"of {fit.sum():,} trained rows" in ind.note


def _untied_fixture(minilm, n_plant=150, seed=0):
    """MiniLM's real rows as the input, a rotated copy as the head; 3 × n_plant ordinary word rows
    planted: weak input only (×0.05), head only (collapsed onto the unused direction), both."""
    g = torch.Generator().manual_seed(seed)
    emb = minilm.embed.float().clone()
    q, _ = torch.linalg.qr(torch.randn(emb.shape[1], emb.shape[1], generator=g, dtype=torch.float64))
    out = (emb.double() @ q).float()
    strings = minilm.token_strings()
    cats = np.array(minilm.categories)
    words = np.flatnonzero(np.array([bool(WORD.fullmatch(s)) for s in strings]) & (cats == "normal"))
    pick = np.random.default_rng(seed).choice(words, 3 * n_plant, replace=False)
    inp, head, both = pick[:n_plant], pick[n_plant:2 * n_plant], pick[2 * n_plant:]
    unused = [i for i, s in enumerate(strings) if s.startswith("[unused")]
    centre = out[unused].mean(0)
    for ids in (inp, both):
        emb[ids] *= 0.05
    for ids in (head, both):
        noise = torch.randn(len(ids), emb.shape[1], generator=g) * 0.1 * centre.norm() / emb.shape[1] ** 0.5
        out[ids] = centre + noise
    return emb, out, {"input": inp, "head": head, "both": both}, words


def test_untied_fixture_each_kind_is_found(minilm, minilm_graph):
    emb, out, planted, words = _untied_fixture(minilm)
    # the kNN graph is a cosine graph: scaling rows does not change it, so MiniLM's graph is reused
    ind = compute_indicators(emb, out, minilm.categories, minilm.token_strings(), minilm_graph.sims,
                             vocab=minilm.vocab)
    assert ind.reference.source == "unused-names"
    for kind, ids in planted.items():
        recall = ind.flagged[ids].mean()
        print(f"\n{kind}: recall {recall:.3f}")
        assert recall >= 0.9, (kind, recall)
    assert all("in_norm" in ind.flag_reason[i] for i in planted["input"] if ind.flagged[i])
    assert all({"magikarp", "out_norm"} & set(ind.flag_reason[i].split("+")) for i in planted["head"]
               if ind.flagged[i])
    ordinary = np.setdiff1d(words, np.concatenate(list(planted.values())))
    fp = ind.flagged[ordinary].mean()
    print(f"ordinary word rows flagged: {fp:.4f}")
    assert fp <= 0.01, fp


# The Qwen2-7B-shaped checkpoint with each kind of under-trained row planted: its scan's findings
# are asserted in tests/test_audit.py::test_mission_command_offline_on_qwen2_shaped_cache (one
# audit of that checkpoint reads them; a second scan here cost ~30-50 s).


def test_verify_notes_a_model_that_cannot_load(minilm):
    from embscope.geometry.verify import verify_rows

    ind = SimpleNamespace(undertrained_score=np.zeros(minilm.n_rows), flagged=np.zeros(minilm.n_rows, bool),
                          reference=SimpleNamespace(ids=[]))
    v = verify_rows(minilm, ind, 5)
    assert v.record.n_checked is None and "not verified" in v.record.note and "causal" in v.record.note
    assert v.column(3) == [None] * 3
    json.dumps(v.record.to_dict())


@pytest.mark.slow
def test_verify_smollm2_flagged_rows_and_controls(smollm2):
    """Code-artifact merges the scan flags on SmolLM2 cannot be repeated; trained controls can."""
    from embscope.geometry.verify import verify_rows

    strings = smollm2.token_strings()
    bad = [strings.index(t) for t in ("MetaInfoClass", "swigfaiss", "kinesisfirehose", " InstancePreprocess")]
    score = np.zeros(smollm2.n_rows)
    score[bad] = 10.0
    ind = SimpleNamespace(undertrained_score=score, flagged=score > 0, reference=SimpleNamespace(ids=[]),
                          flag_reason=["knot" if s > 0 else None for s in score])
    v = verify_rows(smollm2, ind, 4, device="cpu")
    rec = v.record
    print(rec.to_dict())
    assert rec.n_checked == 4 and rec.controls_checked == 4
    assert rec.n_verified_undertrained >= 3 and rec.controls_failed <= 1
    col = v.column(smollm2.n_rows)
    assert all(col[i] is not None and col[i] < 0.01 for i in bad[:3])


@pytest.mark.slow
def test_verify_batched_with_shared_prefix_equals_one_row_at_a_time(smollm2):
    """The batched prompting (rows of a batch together, each prompt's shared prefix run once and its
    cache repeated) gives every row the verdict, and to float rounding the value, that running each
    prompt whole for one row at a time gives, on the real model."""
    from embscope.geometry.token_probs import MAX_PROB_CUT, max_probs
    from embscope.geometry.verify import build_prompts, placeholder_token
    from embscope.models.fullmodel import load_causal_lm

    strings = smollm2.token_strings()
    # three flagged rows (max prob ~1e-4) and three trained ones (~0.9): both verdicts, one row at a
    # time being the costly reference (~0.8 CPU-s a row and cut)
    rows = [strings.index(t) for t in ("MetaInfoClass", "swigfaiss", "kinesisfirehose", " the", " patient", " hospital")]
    lm = load_causal_lm(smollm2)
    prompts = build_prompts(smollm2, placeholder_token(smollm2.vocab, smollm2.categories))
    assert [len(p[1]) for p in prompts] and all(p[2][0] > 0 for p in prompts)  # each has a prefix to share
    for cut in (MAX_PROB_CUT, None):  # early exit on, and every prompt and step for every row
        batched = max_probs(lm, prompts, rows, "cpu", cut=cut)
        one = {}
        for r in rows:
            one.update(max_probs(lm, prompts, [r], "cpu", cut=cut, batch=1, share_prefix=False))
        assert [batched[r] < MAX_PROB_CUT for r in rows] == [one[r] < MAX_PROB_CUT for r in rows]
        assert max(abs(batched[r] - one[r]) for r in rows) < 1e-4
    assert sum(one[r] < MAX_PROB_CUT for r in rows) >= 3 and sum(one[r] >= MAX_PROB_CUT for r in rows) >= 3


@pytest.mark.slow  # every prompt and step in float32 and in bf16 for ~30 rows (~15 CPU-s)
def test_verify_bf16_body_keeps_every_decision(smollm2, smollm2_audit):
    """The bf16-body copy (float32 head) gives every row of the scan's verification pool — all
    flagged rows, the family rows and random trained rows — the float32 model's verdict once the
    rows near the cut are re-checked in float32, and its values stay well inside the re-check band."""
    import math

    import polars as pl
    import torch

    from embscope.geometry.token_probs import MAX_PROB_CUT, RECHECK_FACTOR, max_probs, prompt_probs
    from embscope.geometry.verify import build_prompts, placeholder_token
    from embscope.models.forward import fast_dtype, low_precision_copy
    from embscope.models.fullmodel import load_causal_lm

    lm = load_causal_lm(smollm2)
    if fast_dtype(lm) == torch.float32:
        pytest.skip("this CPU multiplies bf16 no faster than float32: the verification runs in float32 here")
    tokens = pl.read_parquet(smollm2_audit / "tokens.parquet")
    flagged = tokens.filter(pl.col("flagged") & (pl.col("category") == "normal"))["token_id"].to_list()
    family = tokens.filter(pl.col("flag_reason").str.contains("family|drift") & ~pl.col("flagged"))
    trained = tokens.filter(~pl.col("flagged") & (pl.col("category") == "normal") & pl.col("flag_reason").is_null())
    rows = sorted(set(flagged) | set(family["token_id"].head(6).to_list())
                  | set(trained.sample(8, seed=0)["token_id"].to_list()))
    prompts = build_prompts(smollm2, placeholder_token(smollm2.vocab, smollm2.categories))
    low = low_precision_copy(lm, torch.bfloat16)
    exact = max_probs(lm, prompts, rows, "cpu", cut=None)
    mixed = max_probs(low, prompts, rows, "cpu", cut=None)
    worst = max(abs(math.log(max(mixed[r], 1e-30)) - math.log(max(exact[r], 1e-30))) for r in rows)
    assert worst < math.log(RECHECK_FACTOR) / 2, worst
    fast, _ = prompt_probs(lm, low, prompts, rows, "cpu")
    assert [fast[r] < MAX_PROB_CUT for r in rows] == [exact[r] < MAX_PROB_CUT for r in rows]
    assert sum(exact[r] < MAX_PROB_CUT for r in rows) >= 10 and sum(exact[r] >= MAX_PROB_CUT for r in rows) >= 8


def test_usage_counts_corpus_and_chat_template(smollm2):
    from embscope.geometry.usage import flagged_usage

    strings = smollm2.token_strings()
    im_start, im_end = strings.index("<|im_start|>"), strings.index("<|im_end|>")
    texts = ["The patient had hypertension.", "No hypertension today."]
    ids = smollm2.vocab.encode_batch(texts)
    rare = ids[0][-2]  # a piece of " hypertension."
    u = flagged_usage(smollm2, [im_start, im_end, rare], texts)
    assert u.record.template == "rendered"
    assert u.in_template[im_start] == 4 and u.in_template[im_end] == 3  # system, user, assistant + prompt
    assert u.corpus[rare] == sum(x.count(rare) for x in ids) and im_start not in u.corpus
    d = u.record.to_dict()
    assert d["flagged_used"] == 3 and d["occurrences"] == u.corpus[rare]
    cols = u.columns(smollm2.n_rows)
    assert cols["template_count"][im_start] == 4 and cols["corpus_count"][0] is None


def test_repair_rows_file_on_an_encoder(minilm, tmp_path):
    from safetensors.torch import load_file

    from embscope.extension.repair import other_pieces, repair

    strings = minilm.token_strings()
    rows = [strings.index(t) for t in ("endelle", "lucivar", "[unused5]")]
    man = repair(minilm, rows, tmp_path / "rep", init="subword-mean")
    assert man["format"] == "rows" and man["diagnostics"]["kl"] is None and "causal" in man["kl_note"]
    t = load_file(str(tmp_path / "rep" / "repaired_rows.safetensors"))
    assert t["token_ids"].tolist() == sorted(rows)
    pieces = other_pieces(minilm.vocab, rows[0])
    assert pieces and rows[0] not in pieces
    expect = minilm.embed[pieces].double().mean(0).float()
    k = sorted(rows).index(rows[0])
    torch.testing.assert_close(t["embed"][k], expect, atol=1e-5, rtol=1e-5)
    assert json.loads((tmp_path / "rep" / "embscope_repair.json").read_text())["n_repaired"] == 3


@pytest.mark.slow
def test_repair_full_folder_smollm2(smollm2, tmp_path):
    from transformers import AutoModelForCausalLM

    from embscope.extension.repair import repair

    strings = smollm2.token_strings()
    rows = [strings.index("MetaInfoClass"), strings.index("swigfaiss")]
    man = repair(smollm2, rows, tmp_path / "rep", init="mean")
    assert man["format"] == "transformers"
    d = man["diagnostics"]
    assert d["kl"] is not None and d["kl"] < 0.05 and d["new_token_mass_max"] < 0.01
    lm = AutoModelForCausalLM.from_pretrained(str(tmp_path / "rep"), trust_remote_code=False)
    w = lm.get_input_embeddings().weight.detach()
    torch.testing.assert_close(w[rows[0]], w[rows[1]])  # both got the trained mean
    assert not torch.allclose(w[rows[0]], smollm2.embed[rows[0]].float())


@pytest.mark.slow
def test_scan_repair_is_a_section_recorded_in_the_summary(tmp_path, smollm2_graph):
    """``scan --corpus C --repair OUT``: the flagged rows C uses are re-initialised, OUT is a folder
    transformers loads, and summary.json records what was written (the repair section's record)."""
    from embscope.cli import main
    from embscope.summary import read_summary

    data = tmp_path / "data.txt"
    data.write_text("MetaInfoClass\nswigfaiss\n" * 5, "utf-8")  # each line encodes as one flagged token
    out, rep = tmp_path / "scan", tmp_path / "repaired"
    assert main(["scan", "--model", "smollm2-135m", "--corpus", str(data), "--no-map", "--repair-init", "mean",
                 "--out", str(out), "--repair", str(rep)]) == 0
    summary = read_summary(json.loads((out / "summary.json").read_text()))
    record = summary.sections.repair
    manifest = json.loads((rep / "embscope_repair.json").read_text())
    assert record is not None and record.folder == str(rep) and record.format == "transformers"
    assert record.token_ids == manifest["token_ids"] and {"MetaInfoClass", "swigfaiss"} <= set(record.tokens)
    assert summary.parameters.repair.repair_to == str(rep) and "repair" not in summary.skipped


def test_repair_rows_are_the_used_flagged_rows_without_specials():
    from embscope.geometry.scan import ScanResult
    from embscope.geometry.records import UsageRecord
    from embscope.geometry.usage import Usage

    rec = UsageRecord(texts=2, corpus_tokens=10, template="rendered", flagged_checked=4, flagged_used=3,
                      flagged_in_template=1, occurrences=4)
    u = Usage(rec, corpus={5: 3, 7: 1}, in_template={1: 4}, flagged_ids=[1, 5, 7, 9])
    cats = ["normal"] * 10
    cats[1] = "special"
    r = ScanResult(columns={}, summary={}, usage=u)
    assert r.repair_rows(cats) == [5, 7]
    assert r.repair_rows(cats, include_special=True) == [5, 7, 1]
    assert u.columns(10)["corpus_count"][9] == 0 and u.columns(10)["corpus_count"][0] is None


def _fake_indicators(n, flagged, score, ref=()):
    return SimpleNamespace(undertrained_score=np.asarray(score, float), flagged=np.asarray(flagged, bool),
                           reference=SimpleNamespace(ids=list(ref)), flag_reason=["knot" if f else None for f in flagged])


def test_verify_picks_top_or_a_seeded_random_sample():
    from embscope.geometry.verify import pick_rows

    n = 400
    flagged = np.zeros(n, bool)
    flagged[:200] = True
    score = np.arange(n)[::-1].astype(float)  # row 0 scores highest
    cats = ["normal"] * n
    cats[5] = "special"
    ind = _fake_indicators(n, flagged, score, ref=[7])
    top, ctrl, pool = pick_rows(ind, cats, 20, n, sample="top")
    assert pool == 198 and top == [i for i in range(22) if i not in (5, 7)][:20]
    assert len(ctrl) == 20 and not flagged[ctrl].any()
    r1, c1, _ = pick_rows(ind, cats, 20, n, sample="random", seed=3)
    r2, c2, _ = pick_rows(ind, cats, 20, n, sample="random", seed=3)
    r3, _, _ = pick_rows(ind, cats, 20, n, sample="random", seed=4)
    assert r1 == r2 and c1 == c2 and r1 != r3 and len(set(r1)) == 20
    assert all(flagged[i] and cats[i] == "normal" and i != 7 for i in r1)
    assert max(r1) > 22  # not the top rows
    _, ctrl, _ = pick_rows(ind, cats, 1000, n, sample="top")
    assert len(ctrl) == 100  # MAX_CONTROLS


def test_verify_cap_and_sample_are_refused_in_one_line():
    from embscope.errors import SpecError
    from embscope.sections.base import RunOptions

    with pytest.raises(SpecError) as e:
        RunOptions.build(verify=10**9)
    msg = str(e.value)
    assert "--verify" in msg and "2000" in msg and "min" in msg and "\n" not in msg
    with pytest.raises(SpecError, match="--verify-sample"):
        RunOptions.build(verify=5, verify_sample="best")
    RunOptions.build(verify=2000, verify_sample="random")
    RunOptions.build(verify=None)  # audit's automatic default


def test_wilson_interval():
    from embscope.geometry.verify import wilson

    lo, hi = wilson(45, 100)
    assert abs(lo - 0.3561) < 1e-3 and abs(hi - 0.5476) < 1e-3
    assert wilson(100, 100)[1] == 1.0 and wilson(0, 0) is None


def test_two_lists_apart_in_column_and_summary():
    from embscope.geometry.scan import status_column, verdict_lists
    from embscope.geometry.records import VerificationRecord
    from embscope.geometry.verify import Verification

    flagged = np.array([True, True, True, True, False, False])
    v = Verification(VerificationRecord(n_checked=2), max_prob={0: 1e-4, 1: 0.5, 4: 0.9, 5: 0.002}, control_ids=[4])
    status = status_column(flagged, v)
    # row 5 is an unflagged special checked in context and confirmed
    assert status == ["verified", "cleared", "candidate", "candidate", "control", "verified"]
    ind = _fake_indicators(6, flagged, [9, 8, 7, 6, 0, 0])
    lists = verdict_lists(status, [f"t{i}" for i in range(6)], ind, v)
    assert lists["verified_undertrained"].count == 2 and lists["verified_undertrained"].rows[0].max_prob == 1e-4
    assert [r.id for r in lists["candidates"].rows] == [2, 3] and lists["cleared"].count == 1
    assert status_column(flagged, None)[:4] == ["candidate"] * 4
    assert verdict_lists(status_column(flagged, None), ["t"] * 6, ind, None)["verified_undertrained"] is None


@pytest.mark.slow
def test_smollm2_special_tokens_are_checked_in_the_template(smollm2):
    """<|im_start|> and <|im_end|> cannot be checked by repetition; in the rendered template the
    Instruct model predicts both (trained), where a never-used special is not asked about."""
    from embscope.geometry.token_probs import MAX_PROB_CUT, in_context_probs
    from embscope.geometry.verify import context_texts
    from embscope.models.fullmodel import load_causal_lm

    strings = smollm2.token_strings()
    im_start, im_end = strings.index("<|im_start|>"), strings.index("<|im_end|>")
    special = {i for i, c in enumerate(smollm2.categories) if c == "special"}
    ids, source = context_texts(smollm2, special, ["no special token here"])
    assert source == "template" and len(ids) == 1
    probs = in_context_probs(load_causal_lm(smollm2), ids, special, "cpu")
    assert set(probs) == {im_start, im_end}  # the only specials the template uses
    assert probs[im_start] > MAX_PROB_CUT and probs[im_end] > MAX_PROB_CUT


@pytest.mark.slow
def test_smollm2_knot_flags_only_the_collapse(smollm2, smollm2_graph, tmp_path):
    """On SmolLM2 (no reference set: the knot is the only indicator that fires) the flags are the
    collapsed code-artifact merges, which prompting confirms; the runs of spaces and newlines
    and the quote-punctuation pieces, trained near-synonyms, are a ``family``, not flagged."""
    from embscope.geometry.indicators import COLLAPSE_SPREAD
    from embscope.geometry.options import ScanOptions
    from embscope.geometry.scan import scan

    res = scan(smollm2, ScanOptions(map=False, cache_dir=session_knn_cache()))  # the session's graph (smollm2_graph)
    strings = smollm2.token_strings()
    cols = res.columns
    flagged = np.asarray(cols["flagged"])
    cats = np.asarray(smollm2.categories)
    normal_flags = [strings[i] for i in np.flatnonzero(flagged & (cats == "normal"))]
    for t in ("MetaInfoClass", "swigfaiss", " InstancePreprocess", "kinesisfirehose"):
        assert t in normal_flags
    for t in ("LEGATO", " iprot", "|'.'", "\n" + " " * 46):
        i = strings.index(t)
        assert not flagged[i] and cols["flag_reason"][i] == "family", t
    spread = np.asarray(cols["neighbor_spread"])
    assert (spread[flagged & (cats == "normal")] <= COLLAPSE_SPREAD).all()
    assert res.summary.flagged.family > 50 and len(normal_flags) < 30


def test_fastest_threads_sets_and_restores_the_measured_count(monkeypatch):
    """Inside the block torch runs on the count the probe measured fastest now; the count before
    is restored after."""
    import torch

    from embscope import machine
    from embscope.models import fullmodel

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        monkeypatch.setattr(machine, "best_threads", lambda d, dtype="float32", **kind: 1)
        with fullmodel.fastest_threads(576, "bfloat16"):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
