"""Forward passes at the measured precision: the bf16-body copy, and bf16 nearest-row search."""

from __future__ import annotations

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


def test_bf16_gain_is_measured_once_per_shape():
    from embscope.models import forward

    g = forward.bf16_gain(64, 128)
    assert g > 0 and forward.bf16_gain(64, 128) == g
    assert forward.fast_dtype(_tiny_llama(True)) in (torch.float32, torch.bfloat16)


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
