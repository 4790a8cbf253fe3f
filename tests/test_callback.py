"""``EmbscopeCallback`` in real training runs: TRL's own ``SFTTrainer`` (and transformers' ``Trainer``
where TRL cannot run the case) on the cut SmolLM2 of ``finetune_run`` (SmolLM2-135M's real tokenizer
and embedding rows, one decoder layer), after ``extend --apply``, a few CPU steps each.

The end report is checked against ``embscope.diff(BASE, output_dir)`` on the saved result, the
callback's row reads against PEFT's own forward, and a run with the callback against the same run
without it (the callback reads batches before the first step: the trainer must see the same ones).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("trl")

pytestmark = pytest.mark.slow

#: the watched checks run every this many steps in these short runs
EVERY = 2


def _texts(run) -> list[str]:
    return [json.loads(line)["text"] for line in run["data"].read_text("utf-8").splitlines() if line.strip()]


def _model(run):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    return (AutoModelForCausalLM.from_pretrained(str(run["ext"]), dtype=torch.float32),
            AutoTokenizer.from_pretrained(str(run["ext"])))


def _sft(run, out, callbacks, *, steps=4, peft_config=None):
    """TRL's SFTTrainer on the training texts; returns the trainer after ``train()``."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    model, tok = _model(run)
    args = SFTConfig(output_dir=str(out), max_steps=steps, per_device_train_batch_size=8, learning_rate=1e-3,
                     max_length=64, report_to=[], save_strategy="no", logging_steps=1, use_cpu=True, seed=0,
                     disable_tqdm=True)
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_dict({"text": _texts(run)}),
                         processing_class=tok, peft_config=peft_config, callbacks=callbacks)
    trainer.train()
    return trainer


def _hf_trainer(run, out, callbacks, *, model, tok, texts, steps=4):
    """transformers' Trainer with DataCollatorForLanguageModeling (labels masked by the pad id)."""
    from datasets import Dataset
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    ds = Dataset.from_dict(dict(tok(texts, truncation=True, max_length=64)))
    args = TrainingArguments(output_dir=str(out), max_steps=steps, per_device_train_batch_size=8, learning_rate=1e-3,
                             report_to=[], save_strategy="no", logging_steps=1, use_cpu=True, seed=0, disable_tqdm=True)
    return Trainer(model=model, args=args, train_dataset=ds, data_collator=DataCollatorForLanguageModeling(tok, mlm=False),
                   processing_class=tok, callbacks=callbacks)


def _diff_codes(record) -> set[tuple[str, str]]:
    return {(f.code, f.severity) for f in record.findings}


def _same_as_diff(cb, run, out):
    """The callback's end report against ``embscope.diff(BASE, out)`` on what the trainer saved."""
    import embscope

    theirs = embscope.diff(str(run["ext"]), str(out), languages="none").summary.sections.diff
    ours = cb.diff
    assert ours is not None and (cb.report_folder / "summary.json").is_file()
    assert _diff_codes(ours) == _diff_codes(theirs)
    for name in theirs.matrices:
        a, b = ours.matrices[name], theirs.matrices[name]
        assert (a.moved, a.new_moved, a.nonfinite, a.exploded) == (b.moved, b.new_moved, b.nonfinite, b.exploded)
    return ours


def test_healthy_run_after_extend(finetune_run, tmp_path):
    """Embedding trainable: no warning, every new row moves at every check, the end report lists them
    as moved and equals `embscope diff`; the same run without the callback trains the same weights."""
    import torch

    from embscope.integrations.transformers import EmbscopeCallback

    new = finetune_run["manifest"]["token_ids"]
    cb = EmbscopeCallback(every=EVERY, languages=None)
    trainer = _sft(finetune_run, tmp_path / "out", [cb])
    assert not cb.alerts
    assert not [f for f in cb.findings if f.severity in ("error", "warning")], cb.findings
    assert [c.step for c in cb.checks] == [2, 4]
    assert all(c.matrices[0].new_moved == len(new) and c.matrices[0].nonfinite_rows == 0 for c in cb.checks)
    logged = [e for e in trainer.state.log_history if "embscope/new_rows_moved" in e]
    assert [e["step"] for e in logged] == [2, 4] and logged[-1]["embscope/new_rows_moved"] == len(new)
    assert cb.diff.matrices["input"].new_moved == len(new)
    assert not cb.diff.findings
    trainer.save_model()
    _same_as_diff(cb, finetune_run, tmp_path / "out")

    plain = _sft(finetune_run, tmp_path / "plain", [])
    assert torch.equal(plain.model.get_input_embeddings().weight, trainer.model.get_input_embeddings().weight)


def test_nan_row_stops_at_the_next_check(finetune_run, tmp_path):
    """A row set to NaN right after step 3's optimizer step: the check of step 3 stops the run there."""
    import torch
    from transformers import TrainerCallback

    from embscope.integrations.transformers import EmbscopeCallback

    row = 1234

    class Poison(TrainerCallback):
        def on_optimizer_step(self, args, state, control, model=None, **kw):
            if state.global_step + 1 == 3:  # global_step counts the step after this hook
                with torch.no_grad():
                    model.get_input_embeddings().weight[row] = float("nan")

    cb = EmbscopeCallback(every=3, languages=None)
    trainer = _sft(finetune_run, tmp_path / "out", [Poison(), cb], steps=8)
    assert trainer.state.global_step == 3
    stops = [a for a in cb.alerts if a.kind == "stop"]
    assert [(a.code, a.ids) for a in stops] == [("nonfinite-rows", [row])]
    assert "stopped at step 3" in stops[0].line and f"{row} " in stops[0].line
    assert ("row-exploded", "error") in _diff_codes(cb.diff)


def test_trainable_token_indices_moves_exactly_the_new_rows(finetune_run, tmp_path):
    """LoRA with trainable_token_indices = the new ids: the end report's moved rows are exactly those.

    transformers' Trainer: TRL 1.16's SFTTrainer computes the loss from ``lm_head.weight`` directly
    (its fused LM head), which fails on the head PEFT wraps for a tied model (no ``bias``)."""
    import polars as pl
    from peft import LoraConfig, get_peft_model

    from embscope.integrations.transformers import EmbscopeCallback

    new = finetune_run["manifest"]["token_ids"]
    model, tok = _model(finetune_run)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0,
                                             trainable_token_indices=new))
    cb = EmbscopeCallback(every=EVERY, languages=None)
    trainer = _hf_trainer(finetune_run, tmp_path / "out", [cb], model=model, tok=tok, texts=_texts(finetune_run))
    trainer.train()
    assert not cb.alerts
    frame = pl.read_parquet(cb.report_folder / "diff.parquet")
    assert np.flatnonzero(frame["in_moved"].to_numpy()).tolist() == new
    trainer.save_model()
    _same_as_diff(cb, finetune_run, tmp_path / "out")


def test_fail_on_stops_before_the_first_step(finetune_run, tmp_path):
    """transformers' collator with PAD = EOS and texts that end in the EOS: it masks every EOS label
    (measured on the real batches), an error, so training stops before its first step."""
    from embscope.integrations.transformers import EmbscopeCallback, TrainingHazard

    model, tok = _model(finetune_run)
    tok.pad_token = tok.eos_token
    texts = [t + tok.eos_token for t in _texts(finetune_run)]
    trainer = _hf_trainer(finetune_run, tmp_path / "out", [EmbscopeCallback(languages=None)], model=model, tok=tok,
                          texts=texts)
    with pytest.raises(TrainingHazard, match=r"^pad-is-eos \(error\).*masks labels by id"):
        trainer.train()
    assert trainer.state.global_step == 0


@pytest.mark.parametrize("how", ["lora-embedding", "trainable-tokens", "modules-to-save"])
def test_rows_are_the_forward_pass_rows(finetune_run, how):
    """``live.rows`` and ``live.row_norms`` against PEFT's own forward of the wrapped embedding, with
    the adapters moved off their identity initialisation."""
    import torch
    from peft import LoraConfig, get_peft_model

    from embscope.integrations import live

    model, _ = _model(finetune_run)
    new = finetune_run["manifest"]["token_ids"]
    cfg = {"lora-embedding": dict(target_modules=["embed_tokens"], init_lora_weights=False),
           "trainable-tokens": dict(target_modules=["q_proj"], trainable_token_indices=new),
           "modules-to-save": dict(target_modules=["q_proj"], modules_to_save=["embed_tokens"])}[how]
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, **cfg))
    emb = peft_model.get_input_embeddings()
    torch.manual_seed(1)
    with torch.no_grad():
        for p in emb.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.05)
    ids = torch.tensor([0, 5, *new, 49151])
    with torch.no_grad():
        want = emb(ids).float()
        every = emb(torch.arange(live.base_weight(emb).shape[0])).float()
    assert torch.allclose(live.rows(emb, ids), want, atol=1e-6)
    assert torch.allclose(live.row_norms(emb), torch.linalg.vector_norm(every, dim=1), rtol=1e-5)
    assert live.trainable_rows(emb, ids.numpy()).all() == (how != "trainable-tokens")
    assert live.trainable_rows(emb, np.asarray(new)).all()


def test_bad_arguments_are_one_line():
    from embscope.errors import SpecError
    from embscope.integrations.transformers import EmbscopeCallback

    with pytest.raises(SpecError, match=r"fail_on='eror' is not a severity \(did you mean 'error'\?\)"):
        EmbscopeCallback(fail_on="eror")
    with pytest.raises(SpecError, match="every=0 must be a whole number"):
        EmbscopeCallback(every=0)
    with pytest.raises(SpecError, match="new_ids must be token ids"):
        EmbscopeCallback(new_ids=[True])


def test_import_embscope_does_not_import_the_callback():
    code = "import sys, embscope; print('embscope.integrations' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_dpo_trainer_batches_are_read_by_their_completion_mask(finetune_run, tmp_path):
    """TRL's DPOTrainer: its collator gives chosen and rejected rows with a ``completion_mask`` (no
    labels); the callback counts the completions as the loss, checks every step, writes the report."""
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    from embscope.integrations.transformers import EmbscopeCallback

    texts = _texts(finetune_run)
    rows = [{"prompt": t[:20], "chosen": t[20:], "rejected": texts[(i + 1) % len(texts)][20:]}
            for i, t in enumerate(texts)]
    model, tok = _model(finetune_run)
    args = DPOConfig(output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=4, learning_rate=1e-4,
                     max_length=64, report_to=[], save_strategy="no", logging_steps=1, use_cpu=True, seed=0,
                     disable_tqdm=True)
    cb = EmbscopeCallback(every=1, languages=None, batches=2)
    DPOTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok,
               callbacks=[cb]).train()
    assert [c.step for c in cb.checks] == [1, 2] and not cb.alerts
    assert not [f for f in cb.findings if f.severity in ("error", "warning")], cb.findings
    assert all(c.matrices[0].new_moved == len(finetune_run["manifest"]["token_ids"]) for c in cb.checks)
    assert (cb.report_folder / "diff.parquet").is_file()


def test_completion_mask_is_the_loss():
    from embscope.integrations.batches import encode

    b = {"input_ids": np.array([[7, 8, 9, 2], [7, 8, 5, 0]]), "attention_mask": np.array([[1, 1, 1, 1], [1, 1, 1, 0]]),
         "completion_mask": np.array([[0, 0, 1, 1], [0, 0, 1, 0]])}
    enc = encode([b], pad_id=0, n_rows=10)
    assert enc.sequences == 2 and enc.lengths == [4, 3] and enc.loss_tokens == [2, 1]
    assert enc.label_counts.tolist() == [0, 0, 1, 0, 0, 1, 0, 0, 0, 1]
