"""Every record shape trainers read, built from the shipped chat sample in the formats the trainers
document (TRL's dataset formats: preference with an explicit or implicit prompt, strings or
messages, unpaired KTO; LLaMA-Factory ``data/README.md``: ShareGPT with ``function_call`` /
``observation`` turns and a ``tools`` string, its preference and KTO columns, and the v1
``messages`` of typed parts; OpenAI ``tool_calls`` and ``tool`` turns), read as the trainer reads
it or refused with one line; tools reach the template as transformers passes them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from embscope.readiness.check import MODEL_TEMPLATE

ROOT = Path(__file__).resolve().parents[1]
TOOLS_TEMPLATE = ROOT / "tests" / "data" / "chatml_tools.jinja"
TOOL = {"type": "function", "function": {"name": "icd_lookup", "description": "Look up an ICD-10-CM code",
                                         "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}


def _recs(n: int = 30) -> list[dict]:
    lines = (ROOT / "corpora" / "chat" / "medical-chat.jsonl").read_text("utf-8").splitlines()[:n]
    return [json.loads(line) for line in lines]


def _user(r):
    return next(m["content"] for m in r["messages"] if m["role"] == "user")


def _answer(r):
    return r["messages"][-1]["content"]


def shapes() -> dict[str, list[dict]]:
    """Name → records, each shape as its trainer documents it."""
    rs = _recs()
    other = [rs[i - 1] for i in range(len(rs))]
    conv = [[{"role": "user", "content": _user(r)}] for r in rs]
    return {
        "trl-preference-explicit-messages": [
            {"prompt": c, "chosen": [{"role": "assistant", "content": _answer(r)}],
             "rejected": [{"role": "assistant", "content": _answer(o)}]} for c, r, o in zip(conv, rs, other)],
        "trl-preference-implicit-messages": [
            {"chosen": c + [{"role": "assistant", "content": _answer(r)}],
             "rejected": c + [{"role": "assistant", "content": _answer(o)}]} for c, r, o in zip(conv, rs, other)],
        "trl-preference-explicit-strings": [
            {"prompt": _user(r), "chosen": " " + _answer(r), "rejected": " " + _answer(o)} for r, o in zip(rs, other)],
        "trl-preference-implicit-strings": [
            {"chosen": _user(r) + " " + _answer(r), "rejected": _user(r) + " " + _answer(o)} for r, o in zip(rs, other)],
        "trl-kto": [{"prompt": c, "completion": [{"role": "assistant", "content": _answer(r if i % 3 else o)}],
                     "label": bool(i % 3)} for i, (c, r, o) in enumerate(zip(conv, rs, other))],
        "llamafactory-sharegpt-tools": [
            {"conversations": [{"from": "human", "value": _user(r)},
                               {"from": "function_call", "value": json.dumps({"name": "icd_lookup",
                                                                               "arguments": {"q": _user(r)[:40]}})},
                               {"from": "observation", "value": json.dumps({"description": _answer(r)[:200]})},
                               {"from": "gpt", "value": _answer(r)}],
             "tools": json.dumps([TOOL["function"]])} for r in rs],
        "llamafactory-preference": [
            {"conversations": [{"from": "human", "value": _user(r)}], "chosen": {"from": "gpt", "value": _answer(r)},
             "rejected": {"from": "gpt", "value": _answer(o)}} for r, o in zip(rs, other)],
        "llamafactory-kto": [
            {"conversations": [{"from": "human", "value": _user(r)}, {"from": "gpt", "value": _answer(r)}],
             "kto_tag": bool(i % 2)} for i, r in enumerate(rs)],
        "llamafactory-v1": [
            {"messages": [{"role": "user", "content": [{"type": "text", "value": _user(r)}], "loss_weight": 0.0},
                          {"role": "assistant", "content": [{"type": "reasoning", "value": "From the index."},
                                                            {"type": "text", "value": _answer(r)}],
                           "loss_weight": 1.0}]} for r in rs],
        "llamafactory-v1-preference": [
            {"chosen_messages": [{"role": "user", "content": [{"type": "text", "value": _user(r)}]},
                                 {"role": "assistant", "content": [{"type": "text", "value": _answer(r)}]}],
             "rejected_messages": [{"role": "user", "content": [{"type": "text", "value": _user(r)}]},
                                   {"role": "assistant", "content": [{"type": "text", "value": _answer(o)}]}]}
            for r, o in zip(rs, other)],
        "openai-tools": [
            {"messages": [{"role": "user", "content": _user(r)},
                          {"role": "assistant", "content": None, "tool_calls": [
                              {"id": "c1", "type": "function",
                               "function": {"name": "icd_lookup", "arguments": json.dumps({"q": _user(r)[:40]})}}]},
                          {"role": "tool", "tool_call_id": "c1", "content": _answer(r)[:200]},
                          {"role": "assistant", "content": _answer(r), "reasoning_content": "The tool agrees."}],
             "tools": [TOOL], "id": i} for i, r in enumerate(rs)],
    }


def _write(folder: Path, name: str, rows) -> Path:
    path = folder / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    return path


def _check(model, path, template=MODEL_TEMPLATE, **options):
    """``template``: the chat template's text (default: the model's own); ``options``: CheckOptions fields."""
    from embscope.readiness import check_data
    from embscope.readiness.options import CheckOptions

    return check_data(model, [str(path)], CheckOptions(**options), template=template)


EXPECT = {  # shape → (format, sequences per example)
    "trl-preference-explicit-messages": ("preference", 2), "trl-preference-implicit-messages": ("preference", 2),
    "trl-preference-explicit-strings": ("preference", 2), "trl-preference-implicit-strings": ("preference", 2),
    "trl-kto": ("kto", 1), "llamafactory-sharegpt-tools": ("sharegpt", 1),
    "llamafactory-preference": ("preference", 2), "llamafactory-kto": ("kto", 1),
    "llamafactory-v1": ("messages", 1), "llamafactory-v1-preference": ("preference", 2),
    "openai-tools": ("messages", 1),
}


@pytest.mark.parametrize("name", list(EXPECT))
def test_every_shape_is_read_and_tokenized(name, smollm2_model, tmp_path):
    """Each shape reads whole (no record rejected), renders with a template that knows tools, and
    trains on the sequences its trainer makes: DPO's chosen and rejected both, KTO's labels counted."""
    rows = shapes()[name]
    record = _check(smollm2_model, _write(tmp_path, name, rows), template=TOOLS_TEMPLATE.read_text("utf-8"),
                    trainer="llamafactory" if name.startswith("llamafactory") else "trl")
    fmt, per = EXPECT[name]
    assert record.data.formats == {fmt: len(rows)} and not record.data.rejected, record.data
    assert record.sequences == per * len(rows) and record.template in ("rendered", "not needed")
    assert 0 < record.label_tokens < record.tokens  # the prompts are out of the loss
    assert not [f for f in record.findings if f.code in ("render-failed", "render-refused", "unreadable-records")]
    if fmt == "kto":
        assert sum(record.data.labels.values()) == len(rows) and set(record.data.labels) == {"desirable",
                                                                                                   "undesirable"}
    if name == "openai-tools":  # the extra "id" field is named, not dropped silently
        f = next(f for f in record.findings if f.code == "ignored-fields")
        assert f.severity == "info" and "'id' (30)" in f.message


def test_tools_and_tool_turns_render_as_transformers_renders_them(smollm2_model):
    """The ``tools`` field and the converted tool turns (OpenAI's, LLaMA-Factory's function_call /
    observation, v1 reasoning parts) give the text ``apply_chat_template(conv, tools=…)`` gives."""
    from transformers.utils.chat_template_utils import render_jinja_template

    from embscope.corpus.shapes import to_example
    from embscope.models.chat_template import render, special_token_strings

    template = TOOLS_TEMPLATE.read_text("utf-8")
    names = special_token_strings(smollm2_model)
    for name in ("openai-tools", "llamafactory-sharegpt-tools", "llamafactory-v1"):
        for i, rec in enumerate(shapes()[name][:10]):
            ex, _ = to_example(rec, i)
            ours = render(template, ex.messages, tools=ex.tools, **names)
            theirs, _ = render_jinja_template([ex.messages], chat_template=template, tools=ex.tools, **names)
            assert ours == theirs[0]
            if ex.tools:
                assert "icd_lookup" in ours.split("<|im_end|>")[0]  # the tool block the template wrote
            if name != "llamafactory-v1":
                assert "<tool_call>" in ours and "<tool_response>" in ours
            else:
                assert "<think>\nFrom the index.\n</think>" in ours


def test_implicit_prompt_is_trls():
    """The implicit prompt is TRL's ``extract_prompt`` on both kinds of completion."""
    from trl.data_utils import extract_prompt

    from embscope.corpus.shapes import to_example

    for name in ("trl-preference-implicit-messages", "trl-preference-implicit-strings"):
        for i, rec in enumerate(shapes()[name][:10]):
            ex, _ = to_example(rec, i)
            theirs = extract_prompt(rec)
            assert (ex.prompt, ex.chosen, ex.rejected) == (theirs["prompt"], theirs["chosen"], theirs["rejected"])


@pytest.mark.parametrize("rec, reason", [
    ({"prompt": "q", "chosen": [{"role": "assistant", "content": "a"}], "rejected": "b"}, "strings or both lists"),
    ({"chosen": "abc", "rejected": "xyz"}, "share no start"),
    ({"prompt": "q", "completion": "a", "label": "yes"}, None),  # not a bool: read as prompt-completion
    ({"conversations": [{"from": "human", "value": "q"}], "kto_tag": "yes"}, "kto_tag is not true or false"),
    ({"conversations": [{"from": "function_call", "value": "not json"}]}, "a tool call that is not JSON"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "value": "x.png"}]}]}, "images, video and audio"),
    ({"messages": [{"role": "user", "content": "q"}], "tools": "{nope"}, "tools is a string but not JSON"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": "x"}]}, "tool_calls is not a list"),
    ({"instruction": "q", "output": "a", "history": [["a", "b"]]}, "history field"),
])
def test_bad_shapes_are_refused_with_their_reason(rec, reason):
    from embscope.corpus.shapes import Reject, to_example

    if reason is None:
        assert to_example(rec, 0)[0].format == "prompt-completion"
        return
    with pytest.raises(Reject, match=reason):
        to_example(rec, 0)


def test_all_bad_data_is_one_line_exit_2(tmp_path, capsys):
    from embscope.cli import main

    path = _write(tmp_path, "bad", [{"chosen": "abc", "rejected": "xyz"}, {"foo": 1}])
    assert main(["check", "--model", "smollm2-135m", "--data", str(path), "--no-scan", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "share no start" in err[0]


def test_dataset_dict_splits_are_checked_apart(smollm2_model, tmp_path):
    """A DatasetDict saved by ``datasets`` (train + test): each split counted and checked on its
    own, a finding that depends on the data tagged with its split; ``split`` keeps one."""
    datasets = pytest.importorskip("datasets")

    rs = _recs(40)
    test = [{"messages": r["messages"]} for r in rs[:10]]
    test[0] = {"messages": [{"role": "user", "content": "x " * 2000}, {"role": "assistant", "content": "y"}]}
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_list([{"messages": r["messages"]} for r in rs[10:]]),
                               "test": datasets.Dataset.from_list(test)})
    dd.save_to_disk(str(tmp_path / "dd"))
    record = _check(smollm2_model, tmp_path / "dd")
    assert record.data.splits == {"train": 30, "test": 10} and set(record.splits) == {"train", "test"}
    assert record.splits["train"].examples == 30 and record.splits["test"].examples == 10
    long = next(f for f in record.findings if f.code == "exceeds-context")
    assert long.split == "test" and long.count == 1
    pad = next(f for f in record.findings if f.code == "pad-is-eos")
    assert pad.split is None  # a fact of the model: once, for every split
    only = _check(smollm2_model, tmp_path / "dd", split="train")
    assert only.examples == 30 and set(only.splits) == {"train"}
    assert "exceeds-context" not in {f.code for f in only.findings}
    from embscope.errors import SpecError

    with pytest.raises(SpecError, match="--split 'dev' is not in the data"):
        _check(smollm2_model, tmp_path / "dd", split="dev")


def test_template_status_agrees_with_the_renders(smollm2_model, tmp_path):
    """SmolLM2's own template cannot render a tool call without content: every such record is a
    render-failed finding, and the status says so instead of "rendered" or "not needed"."""
    rows = shapes()["openai-tools"][:5] + [{"messages": r["messages"]} for r in _recs(5)]
    record = _check(smollm2_model, _write(tmp_path, "mixed", rows))
    failed = next(f for f in record.findings if f.code == "render-failed")
    assert failed.count == 5 and failed.severity == "error"
    assert record.template == "rendered 5 of 10 (5 failed or refused)"
    only = _check(smollm2_model, _write(tmp_path, "tools", rows[:5]))
    assert only.template == "render failed on all 5 conversations"


@pytest.mark.parametrize("trainer", ["trl", "transformers", "unsloth", "axolotl", "llamafactory"])
def test_tool_calls_never_a_false_red(trainer, smollm2_model, tmp_path):
    """ShareGPT tool conversations (``function_call``/``observation`` turns, a ``tools`` string)
    through SmolLM2's own template, which knows no tools: each trainer takes them (TRL and Unsloth
    keep the roles, Axolotl and transformers map the usual ones, LLaMA-Factory formats tools and
    calls itself), so none is ``render-failed``; where the roles reach the template unmapped, the
    check says so."""
    rows = shapes()["llamafactory-sharegpt-tools"]
    record = _check(smollm2_model, _write(tmp_path, "tools", rows), trainer=trainer)
    codes = {f.code for f in record.findings}
    assert record.template == "rendered" and record.sequences == len(rows), record.template
    assert not codes & {"render-failed", "render-refused", "trainer-drops"}, codes
    assert ("unmapped-roles" in codes) == (trainer != "llamafactory")
