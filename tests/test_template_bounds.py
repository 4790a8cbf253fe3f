"""Hostile chat templates: every way of building a string is refused in seconds and without
gigabytes, the deadline holds inside one long builtin call, whatever a template raises is a
``render-failed`` finding, and a refused conversation refuses that conversation, not the template.

Each case of the templates list built 0.8-2.4 GB, or ran 44-48 s, before the refusal or without
one; ``{{ 1/0 }}`` and a MemoryError ended ``check`` in a traceback with exit 1.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import VOCABS, needs_vocabs
from tests.test_check import build_folder, smol, train_data  # noqa: F401 - fixtures

CAP = "16,777,216"  # MAX_RENDER_CHARS, as the messages print it

BUILDERS = [
    # output captured by a block set: 100,000 × 9,600 = 960 M characters
    ("{% set x %}{% for i in range(100000) %}{{ 'x' * 9600 }}{% endfor %}{% endset %}ok",
     f"writes more than {CAP} characters"),
    # the same through a macro's output, never printed
    ("{% macro m() %}{% for i in range(100000) %}{{ 'x' * 9600 }}{% endfor %}{% endmacro %}"
     "{% set x = m() %}ok", f"writes more than {CAP} characters"),
    ("{% set x = '%0800000000d' % 1 %}ok", "800,000,"),
    ("{% set x = '%*d' % (800000000, 1) %}ok", "800,000,"),
    ("{% set x = '%.800000000f'|format(1.5) %}ok", "800,000,"),
    ("{% set x = '{:0800000000d}'.format(1) %}ok", "800,000,"),
    ("{% set x = '{:>{w}}'.format('a', w=800000000) %}ok", "800,000,"),
    ("{% set x = (['ab' * 8000000] * 100)|join %}ok", "1,600,000,"),
    ("{% set x = '-'.join(['ab' * 8000000] * 100) %}ok", "1,600,000,"),
    ("{% set x = ['x']|batch(1000000000, 'y')|list %}ok", "1,000,000,000 items"),
    ("{% set x = {'a': [1, 2, 3]}|tojson(indent=800000000) %}ok", "800,000,"),
    ("{% set x = lipsum(200000) %}ok", "items"),
    ("{% macro f(s, n) %}{% if n %}{{ f(s ~ s, n - 1) }}{% else %}{{ s|length }}{% endif %}{% endmacro %}"
     "{{ f('ab', 40) }}", "33,554,432 items"),
    ("{% set l = range(100000)|list %}{% set x = ([l] * 200)|sum(start=[]) %}ok", "20,000,000 items"),
]


@pytest.mark.parametrize("template, what", BUILDERS)
def test_every_way_of_building_a_string_is_counted(template, what):
    from embscope.models.chat_template import RenderRefused, render

    t = time.perf_counter()
    with pytest.raises(RenderRefused) as err:
        render(template, [{"role": "user", "content": "hi"}])
    msg = str(err.value)
    assert msg.startswith("render refused: ") and what in msg and "\n" not in msg, msg
    assert time.perf_counter() - t < 10


def test_real_templates_render_in_process_and_the_rest_in_the_worker(smol):
    """SmolLM2's and Gemma-3's templates on real conversations never need the worker; a sort (not
    bounded by its arguments) renders there, with the same text."""
    from embscope.models import chat_template as ct
    from tests.test_chat_render import GEMMA3_TEMPLATE, _conversations

    before = dict(ct.PATHS)
    names = ct.special_token_strings(smol)
    for template, parts in ((ct.read_chat_template(smol), False), (GEMMA3_TEMPLATE.read_text("utf-8"), True)):
        for c in _conversations(60, parts=parts):
            ct.render(template, c, **names)
    convs = _conversations(1)
    assert ct.PATHS["worker"] == before.get("worker", 0) and ct.PATHS["here"] >= before.get("here", 0) + 120
    sorted_roles = ct.render("{{ messages|map(attribute='role')|sort|join(',') }}", convs[0])
    assert ct.PATHS["worker"] == before.get("worker", 0) + 1
    assert sorted_roles == ",".join(sorted(m["role"] for m in convs[0]))


@needs_vocabs
@pytest.mark.parametrize("family", ["command-r", "gemma-4", "phi-3", "qwen2"])
def test_published_templates_render_as_transformers_in_process(family):
    """The templates llama.cpp's vocab files carry (Gemma-4's with tools and a dictsort) give what
    transformers' ``render_jinja_template`` gives, on real conversations, without the worker."""
    from transformers.utils.chat_template_utils import render_jinja_template

    from embscope.formats.gguf import open_gguf
    from embscope.models import chat_template as ct
    from tests.test_chat_render import _conversations

    template = open_gguf(VOCABS / f"ggml-vocab-{family}.gguf", tensors=False).fields["tokenizer.chat_template"]
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "the weather in a city",
                                               "parameters": {"type": "object", "required": ["city"],
                                                              "properties": {"city": {"type": "string"}}}}}]
    before = ct.PATHS["worker"]
    for i, conv in enumerate(_conversations(30)):
        kw = {"tools": tools if i % 2 else None, "bos_token": "<s>", "eos_token": "</s>"}
        assert ct.render(template, conv, **kw) == render_jinja_template([conv], chat_template=template, **kw)[0][0]
    assert ct.PATHS["worker"] == before


def test_the_deadline_holds_inside_one_long_call(monkeypatch):
    """Sorting 16 M strings is one C call of many seconds: the rendering process is stopped."""
    from embscope.models import chat_template

    monkeypatch.setattr(chat_template, "MAX_RENDER_SECONDS", 1.0)
    template = "{% set l = (range(100000)|map('string')|list) * 160 %}{{ (l|sort)|length }}"
    t = time.perf_counter()
    with pytest.raises(chat_template.RenderRefused, match="ran past 1 s on one conversation"):
        chat_template.render(template, [{"role": "user", "content": "hi"}])
    assert time.perf_counter() - t < 1 + 5  # the deadline, the grace second, a new worker
    assert chat_template.render("{{ messages[0].content }}", [{"role": "user", "content": "again"}]) == "again"


def test_a_template_past_the_memory_limit_is_refused():
    """``str()`` of 70 references to a 16 M-character string needs 1.1 GB: the worker's address
    space stops it, not the machine's."""
    from embscope.models.chat_template import RenderRefused, render

    with pytest.raises(RenderRefused, match="needs more than 1,024 MiB of memory"):
        render("{% set s = 'ab' * 8000000 %}{{ ([s] * 70)|string|length }}", [{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("template, name", [
    ("{{ 1/0 }}", "ZeroDivisionError"),
    ("{{ 'x' + 1 }}", "TypeError"),
    ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "RecursionError"),
    ("{{ messages[5].content }}", "UndefinedError"),
    ("{{ raise_exception('no system turn') }}", "TemplateError"),
])
def test_whatever_a_template_raises_is_a_template_error(template, name):
    from jinja2.exceptions import TemplateError

    from embscope.models.chat_template import render

    with pytest.raises(TemplateError) as err:
        render(template, [{"role": "user", "content": "hi"}])
    assert type(err.value).__name__ == name


def test_check_reports_a_failing_template_as_a_finding(tmp_path, smol, train_data, capsys):
    """Before: a traceback and exit 1. Now: a finding in the report, exit 1 for the finding."""
    import polars as pl

    from embscope.cli import main

    folder = build_folder(tmp_path / "m", smol, template_prefix="{{ 1/0 }}")
    out = tmp_path / "report"
    code = main(["check", "--model", str(folder), "--data", str(train_data), "--no-scan", "-q", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    found = pl.read_parquet(out / "findings.parquet").filter(pl.col("code") == "render-failed")
    assert found["message"][0] == "the chat template fails on 137 conversation(s): ZeroDivisionError: division by zero"


def test_a_refused_conversation_does_not_refuse_the_template(tmp_path, smol, train_data):
    """A first conversation that the template makes 17 M characters long is refused alone; the
    other 137 are rendered and tokenized (before: the template was refused for all of them)."""
    import embscope

    folder = build_folder(tmp_path / "m", smol,
                          template_prefix="{% for m in messages %}{% set _ = m['content'] * 19 %}{% endfor %}")
    big = {"messages": [{"role": "user", "content": "a" * 900_000}, {"role": "assistant", "content": "ok"}]}
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps(big) + "\n" + train_data.read_text("utf-8"), "utf-8")
    record = embscope.check(str(folder), str(data), device="cpu", scan=False).summary.sections.readiness
    assert record.template == "rendered 137 of 138 (1 failed or refused)"
    codes = {f.code: f for f in record.findings}
    assert "render-failed" not in codes
    refused = codes["render-refused"]  # that conversation alone: the other 137 are rendered
    assert refused.count == 1 and refused.examples == [0] and "render refused: " in refused.message
    assert record.conversations == 138 and record.examples == 138
