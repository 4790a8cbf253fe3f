"""``EmbscopeCallback`` in the training runs a user meets past the first one: a one-shot stream, a
callback reused for a second training, every row blown up, a distributed run's other processes, a
resumed run, an output it cannot write, and paths that do not exist. transformers' ``Trainer`` and
TRL's ``SFTTrainer`` on the cut SmolLM2 of ``finetune_run`` (as ``test_callback.py``)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")

from tests.test_callback import _diff_codes, _hf_trainer, _model, _same_as_diff, _sft, _texts  # noqa: E402

pytestmark = pytest.mark.slow


def test_bad_paths_raise_when_the_callback_is_made(tmp_path):
    """``tokens=``/``manifest=`` that name nothing are refused by the constructor, in one line
    naming the keyword (before, the callback switched itself off at train begin)."""
    from embscope.errors import SpecError
    from embscope.integrations.transformers import EmbscopeCallback

    with pytest.raises(SpecError, match=r"^tokens='.*nowhere.parquet' does not exist; pass the tokens.parquet"):
        EmbscopeCallback(tokens=tmp_path / "nowhere.parquet")
    with pytest.raises(SpecError, match=r"^manifest='.*' is not embscope_extension.json or a folder holding one"):
        EmbscopeCallback(manifest=tmp_path)
    (tmp_path / "t.parquet").write_bytes(b"PAR1")
    assert EmbscopeCallback(tokens=tmp_path / "t.parquet").tokens == tmp_path / "t.parquet"


def _stream_trainer(run, out, callbacks, served):
    """transformers' Trainer on a torch IterableDataset that streams each item once (a second
    ``iter()`` continues where the first stopped, as a socket or a queue does); ``served`` gets the
    index of every item handed out, in order."""
    from torch.utils.data import IterableDataset
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

    model, tok = _model(run)
    tok.pad_token = tok.eos_token
    texts = (_texts(run) * 20)[:200]
    items = [dict(tok(t, truncation=True, max_length=64)) for t in texts]

    class OneShot(IterableDataset):
        def __init__(self):
            self.next = 0

        def __iter__(self):
            while self.next < len(items):
                i, self.next = self.next, self.next + 1
                served.append(i)
                yield items[i]

    args = TrainingArguments(output_dir=str(out), max_steps=4, per_device_train_batch_size=4, learning_rate=1e-3,
                             report_to=[], save_strategy="no", logging_steps=1, use_cpu=True, seed=0, disable_tqdm=True)
    return Trainer(model=model, args=args, train_dataset=OneShot(), processing_class=tok, callbacks=callbacks,
                   data_collator=DataCollatorForLanguageModeling(tok, mlm=False))


def test_a_one_shot_stream_gives_the_trainer_every_item(finetune_run, tmp_path):
    """The trainer sees items 0, 1, 2, … with the callback as without it (same weights after 4
    steps); the check runs on the batches the trainer itself drew (16 sequences = 4 steps × 4)."""
    import torch

    from embscope.integrations.transformers import EmbscopeCallback

    served, plain_served = [], []
    cb = EmbscopeCallback(every=2, languages=None, fail_on="never", batches=4)
    trainer = _stream_trainer(finetune_run, tmp_path / "out", [cb], served)
    trainer.train()
    plain = _stream_trainer(finetune_run, tmp_path / "plain", [], plain_served)
    plain.train()
    assert served[:16] == list(range(16)) and served == plain_served
    assert torch.equal(trainer.model.get_input_embeddings().weight, plain.model.get_input_embeddings().weight)
    assert {f.code for f in cb.findings} >= {"pad-is-eos"}  # PAD = EOS, measured on the drawn batches
    assert [c.step for c in cb.checks] == [2, 4]


def test_a_reused_callback_starts_each_training_afresh(finetune_run, tmp_path):
    """One instance, two LoRA-on-attention trainings: each gets its own checks and its own
    "cannot move" warning. The second's report folder is taken by a file: the report line names
    the API keyword (``out=``), never the CLI flag.

    The first training is also the frozen-embedding case: the embedding frozen under LoRA gives
    one warning at the first check, naming the new rows and the fix, and its end report equals
    ``embscope diff`` on the saved adapter."""
    from peft import LoraConfig

    from embscope.integrations.transformers import EmbscopeCallback

    new = finetune_run["manifest"]["token_ids"]
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    cb = EmbscopeCallback(every=2, languages=None)
    one = _sft(finetune_run, tmp_path / "one", [cb], peft_config=lora)
    first = [(a.code, c) for a, c in zip(cb.alerts, [c.step for c in cb.checks])]
    assert [(a.kind, a.code) for a in cb.alerts] == [("warning", "new-rows-frozen")]
    alert = cb.alerts[0]
    assert alert.ids == new and "step 2" in alert.line and "trainable_token_indices" in alert.line
    assert cb.checks[0].matrices[0].new_frozen == len(new)
    assert ("new-row-unmoved", "error") in _diff_codes(cb.diff)
    one.save_model()
    _same_as_diff(cb, finetune_run, tmp_path / "one")
    (tmp_path / "two").mkdir()
    (tmp_path / "two" / "embscope").write_text("not a folder", "utf-8")
    trainer = _sft(finetune_run, tmp_path / "two", [cb], peft_config=lora)
    assert [c.step for c in cb.checks] == [2, 4]
    assert [a.code for a in cb.alerts] == ["new-rows-frozen"] and first[0][0] == "new-rows-frozen"
    entry = trainer.state.log_history[-1]
    assert entry["embscope/report"].startswith("not written:") and "pass another out" in entry["embscope/report"]
    assert "--out" not in entry["embscope/report"] and cb.diff is None


def test_the_stop_line_counts_every_nonfinite_row(finetune_run, tmp_path):
    """Every row of the embedding set to NaN: the stop line says how many rows (all of them) and
    how many more than it names (all but 8), not a count of a list capped at 50."""
    import torch
    from transformers import TrainerCallback

    from embscope.integrations.transformers import EmbscopeCallback
    from embscope.integrations.watch import NAMED

    class Poison(TrainerCallback):
        def on_optimizer_step(self, args, state, control, model=None, **kw):
            if state.global_step + 1 == 2:
                with torch.no_grad():
                    model.get_input_embeddings().weight[:] = float("nan")

    cb = EmbscopeCallback(every=2, languages=None, report=False)
    trainer = _sft(finetune_run, tmp_path / "out", [Poison(), cb], steps=6)
    rows = trainer.model.get_input_embeddings().weight.shape[0]
    stop = [a for a in cb.alerts if a.kind == "stop"]
    assert trainer.state.global_step == 2 and len(stop) == 1
    assert f": {rows} row(s) of the input embedding hold NaN/Inf: " in stop[0].line
    assert f"(+{rows - NAMED} more)" in stop[0].line


def test_the_report_after_a_resume_compares_with_the_base(finetune_run, tmp_path):
    """Training resumed from checkpoint-2: the end report is ``diff BASE TUNED`` with BASE the
    model's own folder (summary.json's input spec), says so, and equals ``embscope.diff``.

    The first training, which writes checkpoint-2, is a distributed run's other process
    (``state.is_world_process_zero`` False, as transformers sets it on rank 1): no check, no report
    folder, training unchanged; the main process (the resumed training) writes."""
    from embscope.integrations.transformers import EmbscopeCallback

    out = tmp_path / "out"
    model, tok = _model(finetune_run)
    rank1 = EmbscopeCallback(every=2, languages=None)
    first = _hf_trainer(finetune_run, out, [rank1], model=model, tok=tok, texts=_texts(finetune_run))
    first.args.save_strategy, first.args.save_steps = "steps", 2
    first.is_world_process_zero = lambda: False
    first.train()
    assert first.state.global_step == 4 and not first.state.is_world_process_zero
    assert rank1.checks == [] and rank1.diff is None and not (out / "embscope").exists()
    assert not [e for e in first.state.log_history if any(k.startswith("embscope/") for k in e)]
    model, tok = _model(finetune_run)
    cb = EmbscopeCallback(every=2, languages=None)
    trainer = _hf_trainer(finetune_run, out, [cb], model=model, tok=tok, texts=_texts(finetune_run))
    trainer.train(resume_from_checkpoint=str(out / "checkpoint-2"))
    base = str(finetune_run["ext"])
    assert cb.compared_with.startswith(f"the base model in {base} (training resumed at step 2)")
    assert trainer.state.log_history[-1]["embscope/compared_with"] == cb.compared_with
    summary = json.loads((cb.report_folder / "summary.json").read_text("utf-8"))
    assert summary["inputs"]["model"]["spec"] == base
    trainer.save_model()
    _same_as_diff(cb, finetune_run, out)
    assert _diff_codes(cb.diff) is not None
