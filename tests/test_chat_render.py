"""Chat templates rendered as transformers renders them, id for id, and inside their bounds."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from scripts.build_corpora import chat_conversations

ROOT = Path(__file__).resolve().parents[1]
GEMMA3_TEMPLATE = ROOT / "tests" / "data" / "gemma3_chat_template.jinja"


def _conversations(n: int, parts: bool = False) -> list[list[dict]]:
    """``n`` real-format conversations from the shipped corpora; every third one's content as a
    list of typed parts when ``parts`` (templates that read parts)."""
    convs = [c["messages"] for c in chat_conversations(ROOT / "corpora", n, seed=7)]
    if parts:
        convs = [[{**m, "content": [{"type": "text", "text": m["content"]}]} if i % 3 == 0 else m for m in conv]
                 for i, conv in enumerate(convs)]
    return convs


def _hf_tokenizer(gguf: Path):
    """transformers' conversion of the GGUF's vocabulary, its parse under embscope's
    ``_memoised_gguf`` (gguf-py's reader on a plain array view of the file: the same values, no
    Python call per vocabulary string; 262k strings: ~2x faster, the same tokenizer)."""
    from transformers import AutoTokenizer

    from embscope.models.fullmodel import _memoised_gguf

    with _memoised_gguf():
        return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def _ours(model, template: str, convs):
    from embscope.models.chat_template import render, special_token_strings

    names = special_token_strings(model)
    return model.vocab.encode_batch([render(template, c, add_generation_prompt=False, **names) for c in convs])


def _theirs(tok, convs):
    return [list(tok.apply_chat_template(c, tokenize=True, return_dict=False)) for c in convs]


def test_smollm2_template_matches_transformers(smollm2_model, smollm2_gguf_tokenizer):
    """SmolLM2's own template, on the tokenizer transformers reads from the demo GGUF."""
    import copy

    from embscope.models.chat_template import read_chat_template

    convs = _conversations(120)
    assert len(convs) >= 100 and sum(c[0]["role"] == "system" for c in convs) >= 60
    assert sum(len(c) >= 5 for c in convs) >= 30  # multi-turn
    template = read_chat_template(smollm2_model)
    tok = copy.deepcopy(smollm2_gguf_tokenizer)
    assert tok.chat_template == template
    ours, theirs = _ours(smollm2_model, template, convs), _theirs(tok, convs)
    assert ours == theirs


def test_gemma3_template_matches_transformers(gemma3_model):
    """Gemma-3's published template (its system turn folded into the first user turn, a BOS
    written by the template) on the Gemma-3-270M tokenizer from its GGUF, which ships no
    template of its own; some contents as typed parts."""
    model = gemma3_model
    template = GEMMA3_TEMPLATE.read_text("utf-8")
    convs = _conversations(110, parts=True)
    tok = _hf_tokenizer(Path(model.path))
    tok.chat_template = template
    ours, theirs = _ours(model, template, convs), _theirs(tok, convs)
    assert ours[0][0] == 2 and ours == theirs  # <bos> first


def test_environment_matches_transformers_features():
    """loopcontrols, the tojson filter (no HTML escaping), namespace, strftime_now, raise_exception,
    the generation tag: rendered as transformers' render_jinja_template renders them."""
    from transformers.utils.chat_template_utils import render_jinja_template

    from embscope.models.chat_template import render

    template = ("{% set ns = namespace(n=0) %}{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}"
                "{% generation %}{{ m | tojson }}{% endgeneration %}{% set ns.n = ns.n + 1 %}{% endfor %}"
                "{{ ns.n }}{{ range(3) | list }}{{ dict(a=1) | tojson }}{{ bos_token }}{{ strftime_now('%Y')|length }}")
    msgs = [{"role": "user", "content": "<b>é</b>"}, {"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}]
    theirs, _ = render_jinja_template([msgs], chat_template=template, bos_token="<s>")
    assert render(template, msgs, bos_token="<s>") == theirs[0]
    from jinja2.exceptions import TemplateError

    with pytest.raises(TemplateError, match="roles must alternate"):
        render("{{ raise_exception('roles must alternate') }}", msgs)


@pytest.mark.parametrize("template, what", [
    ("{% set n = 10**7 %}{{ 'ab ' * n }}", "30,000,000 items"),  # the 41-character GGUF template
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "steps"),
    ("{{ 'a'.center(10**9) }}", "1,000,000,000 items"),
    ("{{ 'a' | center(10**9) }}", "1,000,000,000 items"),
    ("{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "items"),
    ("{{ 2 ** 100000000 }}", "larger than 64 bits"),
    ("{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}", "writes more than 16,777,216 characters"),
    ("{% set l = [1, 2] %}{{ (l * 100000000) | length }}", "200,000,000 items"),
    ("{{ 'ab' | replace('', 'x' * 10000000) }}", "items"),
])
def test_render_bounds(template, what):
    """Templates that would take gigabytes or hang are refused in seconds, with one line."""
    import resource

    from embscope.models.chat_template import RenderRefused, render

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    with pytest.raises(RenderRefused) as err:
        render(template, [{"role": "user", "content": "hi"}])
    assert str(err.value).startswith("render refused: ") and what in str(err.value) and "\n" not in str(err.value)
    assert time.perf_counter() - t < 30
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 512 * 1024  # KiB: under 0.5 GB more


def test_refused_template_in_scan_usage_is_reported(smollm2_model, monkeypatch):
    """The scan's template count says "render refused: …" and goes on."""
    from embscope.geometry import usage

    monkeypatch.setattr("embscope.models.chat_template.read_chat_template", lambda m: "{{ 'ab ' * 10**7 }}")
    text, status = usage.render_chat_template(smollm2_model)
    assert text is None and status.startswith("render refused: ")


def test_chat_template_jinja_is_read_without_a_tokenizer_config(tmp_path):
    """transformers saves the template as chat_template.jinja; a folder without tokenizer_config.json
    still ships it, and a config without one falls back to it."""
    from types import SimpleNamespace

    from embscope.models.chat_template import read_chat_template

    (tmp_path / "chat_template.jinja").write_text("{{ messages[0]['content'] }}", encoding="utf-8")
    model = SimpleNamespace(path=str(tmp_path))
    assert read_chat_template(model) == "{{ messages[0]['content'] }}"
    (tmp_path / "tokenizer_config.json").write_text('{"bos_token": "<s>"}', encoding="utf-8")
    assert read_chat_template(model) == "{{ messages[0]['content'] }}"
    (tmp_path / "tokenizer_config.json").write_text('{"chat_template": "{{ 1 }}"}', encoding="utf-8")
    assert read_chat_template(model) == "{{ 1 }}"  # the config's own wins


def test_damaged_tokenizer_config_is_an_error_not_no_template(tmp_path):
    from types import SimpleNamespace

    from embscope.errors import EmbscopeError
    from embscope.models.chat_template import read_chat_template

    (tmp_path / "tokenizer_config.json").write_text('{"chat_template": "{{ 1 }}"', encoding="utf-8")
    with pytest.raises(EmbscopeError, match="tokenizer_config.json"):
        read_chat_template(SimpleNamespace(path=str(tmp_path)))
    (tmp_path / "tokenizer_config.json").write_text('["not", "an", "object"]', encoding="utf-8")
    with pytest.raises(EmbscopeError, match="not a JSON object"):
        read_chat_template(SimpleNamespace(path=str(tmp_path)))
    assert read_chat_template(SimpleNamespace(path=str(tmp_path / "missing"))) is None
