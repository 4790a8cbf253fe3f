"""The trainer profiles against the trainers themselves: TRL's SFTTrainer and DPOTrainer and
transformers' DataCollatorForLanguageModeling, run on the same examples with SmolLM2's tokenizer
as transformers loads it from the demo GGUF, give the same input ids and the same label mask
(``labels != -100`` after their own collators) as ``embscope.readiness.trainer_sequences``.

The examples are the shipped chat sample (``corpora/chat/medical-chat.jsonl``, 300 conversations)
in the shapes the trainers read: ``messages``, TRL's conversational prompt-completion (the last
assistant turn as the completion), plain text, and DPO pairs (the real answer chosen, another
conversation's answer rejected). The trainers get a one-layer, 16-wide Llama built from a config:
only their data preparation and collators run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from embscope.readiness.check import MODEL_TEMPLATE
from embscope.readiness.options import CheckOptions

pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parents[1]
#: the share of examples whose ids and label mask must equal the trainer's (issue-free: all of them)
AGREEMENT = 0.999


def _records() -> list[dict]:
    lines = (ROOT / "corpora" / "chat" / "medical-chat.jsonl").read_text("utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


@pytest.fixture(scope="module")
def hf_tokenizer(smollm2_gguf_tokenizer):
    """SmolLM2's tokenizer as transformers loads it from the demo GGUF (a copy for this module)."""
    import copy

    return copy.deepcopy(smollm2_gguf_tokenizer)


def _tiny_model(tok):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=8192,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
    return LlamaForCausalLM(cfg)


def _ours(model, records, trainer, **options):
    from embscope.corpus.shapes import to_example
    from embscope.readiness import trainer_sequences

    examples = [to_example(r, i)[0] for i, r in enumerate(records)]
    built = trainer_sequences(model, examples, CheckOptions(trainer=trainer, **options))
    assert not built.failed and not built.refused
    assert len(built.dropped) == len(examples) - len({s.index for s in built.sequences})
    return built.sequences


def _agree(theirs: list[tuple[list[int], list[bool]]], ours) -> float:
    assert len(theirs) == len(ours)
    same = sum(t_ids == o.ids and t_mask == (o.loss if o.loss is not None else [True] * len(o.ids))
               for (t_ids, t_mask), o in zip(theirs, ours))
    return same / len(theirs)


def _collated(collator, rows, key="labels"):
    """(ids, mask) per example from the collator's padded batches (padding cut by the attention mask)."""
    out = []
    for a in range(0, len(rows), 8):
        batch = collator(rows[a:a + 8])
        for ids, lab, att in zip(batch["input_ids"], batch[key], batch["attention_mask"]):
            n = int(att.sum())
            mask = (lab != -100) if key == "labels" else lab.bool()
            out.append((ids[:n].tolist(), mask[:n].tolist()))
    return out


def test_trl_sft_drops_what_truncation_leaves_unlabelled(smollm2_model, hf_tokenizer, tmp_path):
    """At ``max_length`` 48 the prompt fills many prompt-completion examples: SFTTrainer drops them
    (no label left), and the check counts them as dropped, not trained."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    rows = [{"prompt": r["messages"][:-1], "completion": r["messages"][-1:]} for r in _records()]
    args = SFTConfig(output_dir=str(tmp_path / "pc"), report_to="none", use_cpu=True, dataset_num_proc=None,
                     per_device_train_batch_size=8, max_length=48)
    trainer = SFTTrainer(model=_tiny_model(hf_tokenizer), args=args, train_dataset=Dataset.from_list(rows),
                         processing_class=hf_tokenizer)
    prepared = [trainer.train_dataset[i] for i in range(len(trainer.train_dataset))]
    theirs = _collated(trainer.data_collator, [{"input_ids": p["input_ids"], "labels": p["labels"]} for p in prepared])
    ours = _ours(smollm2_model, rows, "trl", max_length=48)
    assert _agree(theirs, ours) >= AGREEMENT and 0 < len(prepared) < len(rows) - 10


def test_trl_sft_messages_prompt_completion_and_text(smollm2_model, hf_tokenizer, tmp_path):
    """SFTTrainer's own dataset preparation and collator on three shapes at once (one trainer per
    shape: TRL picks the path by the first example)."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    recs = _records()
    shapes = {
        "messages": [{"messages": r["messages"]} for r in recs],
        "prompt-completion": [{"prompt": r["messages"][:-1], "completion": r["messages"][-1:]} for r in recs],
        "text": [{"text": " ".join(m["content"] for m in r["messages"])} for r in recs[:100]],
    }
    for name, rows in shapes.items():
        args = SFTConfig(output_dir=str(tmp_path / name), report_to="none", use_cpu=True, dataset_num_proc=None,
                         per_device_train_batch_size=8)
        trainer = SFTTrainer(model=_tiny_model(hf_tokenizer), args=args, train_dataset=Dataset.from_list(rows),
                             processing_class=hf_tokenizer)
        prepared = [trainer.train_dataset[i] for i in range(len(trainer.train_dataset))]
        theirs = _collated(trainer.data_collator, [{"input_ids": p["input_ids"], "labels": p["labels"]}
                                                   for p in prepared])
        ours = _ours(smollm2_model, rows, "trl")
        share = _agree(theirs, ours)
        assert share >= AGREEMENT, (name, share)
        if name == "prompt-completion":  # the prompt is out of the loss, the completion in it
            assert all(not o.loss[0] and o.loss[-1] for o in ours)


@pytest.mark.parametrize("max_length", [1024, 96])
def test_trl_dpo_chosen_and_rejected(smollm2_model, hf_tokenizer, tmp_path, max_length):
    """DPOTrainer: both completions tokenized, the prompt out of the loss (``completion_mask``); at
    ``max_length`` 96 it drops the pairs whose prompt alone fills it, and so does the check."""
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    recs = _records()[:120]
    rows = [{"prompt": r["messages"][:-1], "chosen": r["messages"][-1:],
             "rejected": [{"role": "assistant", "content": recs[(i + 7) % len(recs)]["messages"][-1]["content"]}]}
            for i, r in enumerate(recs)]
    args = DPOConfig(output_dir=str(tmp_path / "dpo"), report_to="none", use_cpu=True, dataset_num_proc=None,
                     per_device_train_batch_size=8, max_length=max_length)
    trainer = DPOTrainer(model=_tiny_model(hf_tokenizer), ref_model=_tiny_model(hf_tokenizer), args=args,
                         train_dataset=Dataset.from_list(rows), processing_class=hf_tokenizer)
    prepared = [trainer.train_dataset[i] for i in range(len(trainer.train_dataset))]
    theirs = []
    for a in range(0, len(prepared), 8):
        chunk = prepared[a:a + 8]
        batch = trainer.data_collator([{k: p[k] for k in ("prompt_ids", "chosen_ids", "rejected_ids")} for p in chunk])
        m = len(chunk)
        for j in range(m):  # the collator stacks the chosen sequences, then the rejected ones
            for row in (j, j + m):
                n = int(batch["attention_mask"][row].sum())
                theirs.append((batch["input_ids"][row][:n].tolist(), batch["completion_mask"][row][:n].bool().tolist()))
    ours = _ours(smollm2_model, rows, "trl", max_length=max_length)
    assert [o.side for o in ours[:2]] == ["chosen", "rejected"]
    assert _agree(theirs, ours) >= AGREEMENT
    dropped = len(rows) - len(prepared)
    assert len(ours) == 2 * len(prepared) and (dropped > 10 if max_length == 96 else dropped == 0)


def test_transformers_collator_masks_the_pad_by_id(smollm2_model, hf_tokenizer):
    """``apply_chat_template(tokenize=True)`` + ``DataCollatorForLanguageModeling(mlm=False)``: the
    GGUF's PAD is its EOS, so every ``<|im_end|>`` label is masked; the profile says the same."""
    from transformers import DataCollatorForLanguageModeling

    rows = [{"messages": r["messages"]} for r in _records()]
    assert hf_tokenizer.pad_token_id == hf_tokenizer.eos_token_id == 2
    collator = DataCollatorForLanguageModeling(hf_tokenizer, mlm=False)
    feats = [{"input_ids": list(hf_tokenizer.apply_chat_template(r["messages"], tokenize=True, return_dict=False))}
             for r in rows]
    theirs = []
    for a in range(0, len(feats), 8):
        batch = collator(feats[a:a + 8])
        for ids, lab, att in zip(batch["input_ids"], batch["labels"], batch["attention_mask"]):
            n = int(att.sum())
            theirs.append((ids[:n].tolist(), (lab[:n] != -100).tolist()))
    ours = _ours(smollm2_model, rows, "transformers")
    assert _agree(theirs, ours) >= AGREEMENT
    assert all(not m for ids, mask in theirs for i, m in zip(ids, mask) if i == 2)  # no EOS is a label
    # a distinct PAD (--pad-token) puts them back
    back = _ours(smollm2_model, rows, "transformers", pad_token="<|endoftext|>")
    assert all(o.loss is None for o in back)


def _sft_prepared(model, tok, rows, tmp_path, name):
    """(ids, mask) per example after SFTTrainer's own preparation and collator."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    args = SFTConfig(output_dir=str(tmp_path / name), report_to="none", use_cpu=True, dataset_num_proc=None,
                     per_device_train_batch_size=8)
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok)
    prepared = [trainer.train_dataset[i] for i in range(len(trainer.train_dataset))]
    return _collated(trainer.data_collator, [{"input_ids": p["input_ids"], "labels": p["labels"]} for p in prepared])


def test_trl_sft_tool_conversations(smollm2_model, hf_tokenizer, tmp_path):
    """Tool-call data as TRL trains it: ShareGPT ``function_call``/``observation`` turns with a
    ``tools`` string through SmolLM2's own template (TRL keeps the roles), and OpenAI ``tool_calls``
    through a template that renders tools (``tools=`` as TRL passes them); never a false
    ``render-failed``. SmolLM2's template cannot render an OpenAI tool call (no content): TRL raises
    there too, and the check says so."""
    import copy

    from tests.test_shapes import TOOLS_TEMPLATE, shapes

    tools_template = TOOLS_TEMPLATE.read_text("utf-8")
    tok = copy.deepcopy(hf_tokenizer)
    tok.chat_template = tools_template
    cases = {"llamafactory-sharegpt-tools": (hf_tokenizer, MODEL_TEMPLATE), "openai-tools": (tok, tools_template)}
    for name, (t, template) in cases.items():
        rows = [{k: v for k, v in r.items() if k != "id"} for r in shapes()[name]]
        theirs = _sft_prepared(_tiny_model(t), t, rows, tmp_path, name)
        from embscope.corpus.shapes import to_example
        from embscope.readiness import trainer_sequences

        built = trainer_sequences(smollm2_model, [to_example(r, i)[0] for i, r in enumerate(rows)],
                                  CheckOptions(trainer="trl"), template=template)
        assert not built.failed and not built.refused, name
        assert _agree(theirs, built.sequences) >= AGREEMENT, name
    rows = [{k: v for k, v in r.items() if k != "id"} for r in shapes()["openai-tools"]]
    with pytest.raises(Exception, match="content"):  # TRL fails on SmolLM2's own template
        _sft_prepared(_tiny_model(hf_tokenizer), hf_tokenizer, rows, tmp_path, "fails")
    from embscope.corpus.shapes import to_example
    from embscope.readiness import trainer_sequences

    built = trainer_sequences(smollm2_model, [to_example(r, i)[0] for i, r in enumerate(rows)],
                              CheckOptions(trainer="trl"))
    assert len(built.failed) == len(rows) and "content" in next(iter(built.failed.values()))


def test_gguf_tokenizer_transformers_is_what_trl_tokenizes_with(smollm2_model, hf_tokenizer, tmp_path):
    """A TRL script that loads the GGUF tokenizes with transformers' GGUF conversion, which splits
    whitespace before a digit otherwise than llama.cpp (SmolLM2's ``smollm`` pre-tokenizer isolates
    digits first: ``:\\n\\n1.`` is ``\\n\\n`` + ``1`` there, ``\\n`` + ``\\n`` + ``1`` in transformers):
    ``gguf_tokenizer="transformers"`` gives TRL's ids; the default gives llama.cpp's, other on these."""
    recs = _records()[:60]
    rows = [{"messages": [*r["messages"][:-1], {"role": "assistant", "content": r["messages"][-1]["content"]
                                                  + f":\n\n1. Rest.\n2. Fluids for {k % 9 + 2} days."}]}
            for k, r in enumerate(recs)]
    theirs = _sft_prepared(_tiny_model(hf_tokenizer), hf_tokenizer, rows, tmp_path, "numbered")
    assert _agree(theirs, _ours(smollm2_model, rows, "trl", gguf_tokenizer="transformers")) >= AGREEMENT
    assert _agree(theirs, _ours(smollm2_model, rows, "trl")) == 0  # every example has "\n\n1."


#: Unsloth's own train_on_responses_only on TRL's SFTTrainer, in a process of its own (unsloth_zoo
#: sets environment variables when imported): prints the parts it reads off the template and, per
#: example kept, the ids and the label mask its collator returns. The tokenizer is transformers'
#: GGUF conversion (``hf_tokenizer``), saved by ``save_pretrained`` and read back there (the GGUF
#: is not converted a second time)
UNSLOTH = r"""
import json, os, sys
os.environ["UNSLOTH_ZOO_DISABLE_GPU_INIT"] = "1"
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from datasets import Dataset
from transformers import AutoTokenizer
from trl import SFTConfig, SFTTrainer
from unsloth_zoo.dataset_utils import get_chat_template_parts, train_on_responses_only
from tests.test_trainers import _collated, _tiny_model
tok = AutoTokenizer.from_pretrained(sys.argv[2])
out = {"parts": get_chat_template_parts(tok)}
for name, rows in json.loads(Path(sys.argv[3]).read_text()).items():
    args = SFTConfig(output_dir=sys.argv[4] + "/" + name, report_to="none", use_cpu=True, dataset_num_proc=None,
                     per_device_train_batch_size=8)
    trainer = SFTTrainer(model=_tiny_model(tok), args=args, train_dataset=Dataset.from_list(rows), processing_class=tok)
    trainer = train_on_responses_only(trainer)
    kept = [trainer.train_dataset[i] for i in range(len(trainer.train_dataset))]
    out[name] = _collated(trainer.data_collator, [{"input_ids": k["input_ids"], "labels": k["labels"]} for k in kept])
print(json.dumps(out))
"""


def test_unsloth_responses_only_is_unsloths(smollm2_model, hf_tokenizer, tmp_path):
    """``--trainer unsloth --responses-only`` against unsloth_zoo's own ``train_on_responses_only``
    on TRL's SFTTrainer: the same parts read off SmolLM2's template, the same labels (the assistant
    replies and their EOS; a prompt-completion prompt stays out), the same examples dropped (ten
    conversations with no assistant turn)."""
    import subprocess
    import sys

    if __import__("importlib.util").util.find_spec("unsloth_zoo") is None:
        pytest.skip("unsloth_zoo is not installed (scripts/install.sh --dev installs it, --no-deps)")
    from embscope.corpus.shapes import to_example
    from embscope.readiness import trainer_sequences
    from embscope.readiness.responses_only import DROP

    recs = _records()
    sets = {"messages": [{"messages": r["messages"]} for r in recs] + [{"messages": r["messages"][:1]} for r in recs[:10]],
            "prompt-completion": [{"prompt": r["messages"][:-1], "completion": r["messages"][-1:]} for r in recs]}
    (tmp_path / "sets.json").write_text(json.dumps(sets), "utf-8")
    hf_tokenizer.save_pretrained(str(tmp_path / "tokenizer"))
    run = subprocess.run([sys.executable, "-c", UNSLOTH, str(ROOT), str(tmp_path / "tokenizer"), str(tmp_path / "sets.json"),
                          str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    theirs = json.loads(run.stdout.strip().splitlines()[-1])
    assert tuple(theirs["parts"]) == ("<|im_start|>user\n", "<|im_start|>assistant\n")
    for name, rows in sets.items():
        built = trainer_sequences(smollm2_model, [to_example(r, i)[0] for i, r in enumerate(rows)],
                                  CheckOptions(trainer="unsloth", responses_only=True))
        assert _agree([tuple(t) for t in theirs[name]], built.sequences) >= AGREEMENT, name
        assert len(built.dropped) == len(rows) - len(theirs[name]) and set(built.dropped.values()) <= {DROP}
    assert len(built.dropped) == 0 and all(not s.loss[0] for s in built.sequences)
