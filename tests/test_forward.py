"""Forward passes at the measured precision: the bf16-body copy, and bf16 nearest-row search."""

from __future__ import annotations

import time

import pytest
import torch


def _tiny_llama(tied: bool):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=300, tie_word_embeddings=tied)
    return LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("tied", [True, False])
def test_low_precision_copy_keeps_a_float32_head_and_the_original(tied):
    from embscope.models.forward import low_precision_copy

    lm = _tiny_llama(tied)
    before = {k: v.clone() for k, v in lm.state_dict().items()}
    low = low_precision_copy(lm, torch.bfloat16)
    head = low.get_output_embeddings()
    assert head.weight.dtype == torch.float32
    assert head.weight.data_ptr() == lm.get_output_embeddings().weight.data_ptr()  # shared, not copied
    body = [p for n, p in low.named_parameters() if not n.startswith("lm_head")]
    assert body and all(p.dtype == torch.bfloat16 for p in body)
    assert low.model.rotary_emb.inv_freq.dtype == torch.float32  # buffers keep their dtype
    ids = torch.arange(1, 33)[None]
    with torch.no_grad():
        a, b = lm(input_ids=ids).logits, low(input_ids=ids).logits
    assert b.dtype == torch.float32
    assert torch.allclose(torch.softmax(a, -1), torch.softmax(b, -1), atol=2e-3)
    after = lm.state_dict()
    assert all(after[k].dtype == before[k].dtype and torch.equal(after[k], before[k]) for k in before)


def test_the_forward_dtype_is_the_probes_and_decided_once(monkeypatch):
    """bf16 where the GEMM-rate probe measures it 1.5× float32's rate, else float32; once decided
    for a width, a later probe that measures otherwise (a busy moment) does not change it."""
    from embscope import machine
    from embscope.models import forward

    monkeypatch.setattr(machine, "_CACHE", {})
    monkeypatch.setattr(machine, "_DTYPE", {})
    rates = {torch.float32: 100.0, torch.bfloat16: 450.0}  # an AVX512-BF16 CPU's ratio
    monkeypatch.setattr(machine, "_time_product", lambda dtype, d, t: rates[dtype] * t)
    lm = _tiny_llama(True)
    assert forward.fast_dtype(lm) == torch.bfloat16
    rates[torch.bfloat16] = 20.0  # emulated bf16 (AVX2) ...
    assert forward.fast_dtype(lm) == torch.bfloat16  # ... measured later: the decision stands
    monkeypatch.setattr(machine, "_DTYPE", {})
    monkeypatch.setattr(machine, "_CACHE", {})
    assert forward.fast_dtype(lm) == torch.float32 and machine.fast_dtype(64) == "float32"


def test_a_busy_probe_does_not_pin_the_run_to_one_thread(monkeypatch):
    """A probe that ran while another process held a core says one thread; a step that starts
    REPROBE_SECONDS later measures again and gets every thread back. One slow run of the
    many-thread count (a blip) does not decide, since the best of the runs counts."""
    from embscope import machine

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    clock = [1000.0]
    monkeypatch.setattr(machine.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(machine, "_CACHE", {})
    monkeypatch.setattr(machine, "_THREADS", {})
    monkeypatch.setattr(machine, "others_running", lambda: 0)
    busy = [True]

    def product(dtype, d, t):  # GFLOPS: two threads gain 1.9× on a quiet machine, lose when busy
        return 100.0 * (0.8 if busy[0] else 1.9) if t > 1 else 100.0

    try:
        monkeypatch.setattr(machine, "_time_product", product)
        assert machine.best_threads(576) == 1
        busy[0] = False
        clock[0] += machine.REPROBE_SECONDS / 2
        assert machine.best_threads(576) == 1  # within the verdict's lifetime
        clock[0] += machine.REPROBE_SECONDS
        assert machine.best_threads(576) == 2  # measured again: the core is free
        assert torch.get_num_threads() == 2  # the probe restores the count
        runs = iter([5.0, 30.0, 100.0, 190.0, 100.0, 190.0, 100.0])  # warm-up, then many, one, ...: one blip
        monkeypatch.setattr(machine, "_time_product", lambda dtype, d, t: next(runs))
        clock[0] += 2 * machine.REPROBE_SECONDS
        assert machine.best_threads(576) == 2
        # a forward pass's threads come from its own probe (short ops), measured per step too
        ops = {"many": 0.9}
        monkeypatch.setattr(machine, "_time_ops", lambda dtype, d, t: 100.0 * (ops["many"] if t > 1 else 1.0))
        assert machine.best_threads(576, kind="forward") == 1
        ops["many"] = 1.8
        clock[0] += 2 * machine.REPROBE_SECONDS
        assert machine.best_threads(576, kind="forward") == 2
        # another process's runnable thread takes a core: one thread, whatever a timing says
        monkeypatch.setattr(machine, "others_running", lambda: 1)
        monkeypatch.setattr(machine, "_cores", lambda: 2)
        clock[0] += 2 * machine.REPROBE_SECONDS
        assert machine.best_threads(576, kind="forward") == 1
    finally:
        torch.set_num_threads(before)


def test_a_stale_one_thread_verdict_is_measured_again_in_the_chosen_dtype_only(monkeypatch):
    """On a CPU that emulates bf16, the re-measurement of a one-thread verdict times float32 alone
    (an emulated bf16 product at a 7B width costs ~0.6 s a run) and keeps bf16's earlier rates."""
    from embscope import machine

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    clock, timed = [1000.0], []
    monkeypatch.setattr(machine.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(machine, "_CACHE", {})
    busy = [True]

    def product(dtype, d, t):  # AVX2: bf16 a fifth of float32; two threads lose while a core is busy
        timed.append(dtype)
        rate = 100.0 if t == 1 else (80.0 if busy[0] else 190.0)
        return rate / 5 if dtype == torch.bfloat16 else rate

    monkeypatch.setattr(machine, "_time_product", product)
    try:
        first = machine.gemm_rates(3584)
        assert first.threads["float32"] == 1 and torch.bfloat16 in timed
        timed.clear()
        busy[0] = False
        clock[0] += 2 * machine.REPROBE_SECONDS
        again = machine.gemm_rates(3584)
        assert again.threads["float32"] == 2 and set(timed) == {torch.float32}
        assert again.gflops["bfloat16@1"] == first.gflops["bfloat16@1"]
    finally:
        torch.set_num_threads(before)


def test_nearest_rows_in_bf16_equals_float32_inside_a_collapsed_cluster(smollm2_model):
    """The bf16 screen with its survivors scored in float32 gives the float32 search's neighbours,
    also for queries inside a planted cluster of near-identical rows (where bf16 cannot tell the
    rows apart, so every row of the cluster is scored in float32)."""
    from embscope.extension.nearest import nearest_rows

    m = smollm2_model.embed.float().clone()
    g = torch.Generator().manual_seed(0)
    centre = m[1000]
    m[2000:2300] = centre + 1e-4 * torch.randn(300, m.shape[1], generator=g)   # collapsed: cosines 0.9999+
    trained = torch.ones(m.shape[0], dtype=torch.bool)
    trained[::11] = False
    picks = torch.randint(0, m.shape[0], (120,), generator=g)
    queries = torch.cat([m[picks] + 0.05 * torch.randn(120, m.shape[1], generator=g),
                         centre + 1e-4 * torch.randn(8, m.shape[1], generator=g)])
    ref_s, ref_i = nearest_rows(m, trained, queries, 5, dtype=torch.float32)
    s, i = nearest_rows(m, trained, queries, 5, dtype=torch.bfloat16)
    assert torch.allclose(s, ref_s, atol=1e-5), float((s - ref_s).abs().max())
    assert not (~trained[i.flatten()]).any()

    def exact(ids):  # float64 cosines of each query with the rows returned
        rows = m.double()[ids]                                        # (n, k, d)
        q = torch.nn.functional.normalize(queries.double(), dim=1)
        return torch.einsum("nd,nkd->nk", q, rows) / rows.norm(dim=2)

    # the same neighbours up to ties (SmolLM2 holds duplicate rows): the k best cosines agree
    assert torch.allclose(exact(i).sort(1).values, exact(ref_i).sort(1).values, atol=1e-6)
    assert (i == ref_i).all(1).float().mean() > 0.9


def test_own_busy_threads_are_not_counted_as_another_process():
    """A thread of this process busy in a product is runnable (state R): it is one of this
    process's own running threads, which others_running subtracts from the machine's count."""
    import threading

    import numpy as np

    from embscope import machine

    stop = threading.Event()
    a = np.random.default_rng(0).standard_normal((400, 400))

    def busy():
        while not stop.is_set():
            a @ a  # releases the GIL: runnable beside the reader

    t = threading.Thread(target=busy)
    t.start()
    try:
        time.sleep(0.05)
        assert max(machine._own_running() for _ in range(20)) >= 2
    finally:
        stop.set()
        t.join()
    assert machine._own_running() >= 1
