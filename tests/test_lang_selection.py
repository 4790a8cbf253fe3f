"""``--lang``: a code, ``script:``, ``family:`` and ``set:audit`` select languages of the shipped UDHR,
checked against its languages.json and the Unicode tables; a typo is one line with "did you mean",
before any work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
UDHR = ROOT / "corpora" / "udhr"
LANGS = json.loads((UDHR / "languages.json").read_text("utf-8"))["languages"]


def measured(**kw) -> set[str]:
    import embscope

    return set(embscope.fertility("cl100k_base", "udhr", **kw).tables["languages"]["language"])


def test_code_selects_the_language_and_its_varieties():
    assert measured(lang=["hin"]) == {"eng", "hin"}  # the reference is always measured
    por = {m["code"] for m in LANGS if m["iso639_3"] == "por"}
    assert por == {"por", "por_br"} and measured(lang=["por"]) == por | {"eng"}
    assert measured(lang=["por_br"]) == {"eng", "por_br"}


def test_script_selects_every_language_written_in_it():
    """``script:Deva``: the files whose letters are mostly Devanagari by the ``regex`` module's tables."""
    import regex

    deva = set()
    for m in LANGS:
        text = "".join(json.loads(line)["text"] for line in (UDHR / f"{m['code']}.jsonl").read_text("utf-8").splitlines())
        letters = len(regex.findall(r"\p{L}", text))
        if len(regex.findall(r"(?=\p{L})\p{sc=Devanagari}", text)) > letters / 2:  # Devanagari letters
            deva.add(m["code"])
    assert len(deva) >= 5 and {"hin", "mar", "npi"} <= deva
    assert measured(lang=["script:deva"]) == deva | {"eng"}


def test_family_selects_every_member_and_subgroup():
    dravidian = {m["code"] for m in LANGS if m["family"] == "Dravidian"}
    assert {"tam", "tel", "kan", "mal"} <= dravidian
    assert measured(lang=["family:Dravidian"]) == dravidian | {"eng"}
    indo_aryan = {m["code"] for m in LANGS if "Indo-Aryan" in m["lineage"]}
    assert {"hin", "ben", "urd"} <= indo_aryan and not indo_aryan & dravidian
    assert measured(lang=["family:indo-aryan", "tam"]) == indo_aryan | {"eng", "tam", "tam_lk"}


@pytest.mark.parametrize("spec, message", [
    ("hinn", "--lang 'hinn' is not a language of the corpus (did you mean 'hin'?)"),
    ("script:Devx", "--lang 'script:Devx': no language of the corpus has that script (did you mean 'Deva'?)"),
    ("family:Dravidain", "--lang 'family:Dravidain': no language of the corpus has that family (did you mean 'Dravidian'?)"),
    ("scrpt:Deva", "--lang 'scrpt:Deva': 'scrpt' is not a group (did you mean 'script'?)"),
])
def test_typo_is_one_line_before_any_work(spec, message, tmp_path, capsys):
    import embscope
    from embscope.cli import main
    from embscope.errors import SpecError

    with pytest.raises(SpecError) as err:
        embscope.fertility("cl100k_base", "udhr", lang=[spec], out=str(tmp_path / "lib"))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
    assert not (tmp_path / "lib").exists()  # refused before the folder was claimed
    assert main(["compare", "-t", "gpt2", "-t", "cl100k_base", "--lang", spec, "--out", str(tmp_path / "cli")]) == 2
    err_out = capsys.readouterr().err
    assert message in " ".join(err_out.split()) and "Traceback" not in err_out
    assert not (tmp_path / "cli").exists()


def test_fertility_measures_every_language_and_audit_a_named_set():
    """By default fertility measures all 512 varieties (none folded into ``other``); ``set:audit``
    (audit's and diff's default on the shipped UDHR) is the 68 of the first build, and the run says so."""
    import embscope
    from embscope.api import _audit_lang
    from embscope.languages.selection import AUDIT_LANGUAGES, AUDIT_SET

    res = embscope.fertility("cl100k_base", "udhr")
    rec = res.summary.sections.languages.corpora
    (measure,) = rec.values()
    assert res.tables["languages"].height == len(LANGS) == measure.languages and measure.languages_folded == 0
    assert measure.selected is None and measure.selection is None
    assert _audit_lang((), "udhr") == [AUDIT_SET] == _audit_lang((), UDHR) and _audit_lang((), "my/corpus") == [] \
        and _audit_lang(["hin"], "udhr") == ["hin"] and _audit_lang((), None) == []
    res = embscope.fertility("cl100k_base", "udhr", lang=[AUDIT_SET])
    (measure,) = res.summary.sections.languages.corpora.values()
    assert set(res.tables["languages"]["language"]) == set(AUDIT_LANGUAGES)
    assert measure.selection == [AUDIT_SET] and measure.selected == sorted(AUDIT_LANGUAGES)
    assert measure.available == len(LANGS)
    assert any(f"measured 68 of its {len(LANGS)} languages (the audit set" in w for w in res.warnings)
    assert res.summary.parameters.languages.lang == [AUDIT_SET]


@pytest.mark.parametrize("argv", [["audit", "--no-scan", "--lang", "hinn"],
                                  ["diff", "smollm2-135m", "smollm2-135m", "--lang", "hinn"]])
def test_audit_and_diff_take_lang_and_refuse_a_typo_before_the_model_loads(argv, monkeypatch, capsys):
    import embscope.runner as runner
    from embscope.cli import main

    def no_load(*a, **k):
        raise AssertionError("the model was loaded before --lang was checked")

    monkeypatch.setattr(runner, "_resolve", no_load)
    assert main(argv) == 2
    assert "--lang 'hinn' is not a language of the corpus (did you mean 'hin'?)" in " ".join(capsys.readouterr().err.split())


def test_codes_in_records_are_taken_as_given_and_a_missing_one_is_named(tmp_path):
    """A corpus whose languages are only inside its records: ``--lang`` codes select, a script cannot,
    and a code that never appears is named after the pass."""
    import embscope
    from embscope.errors import SpecError

    rows = [{"text": t, "lang": lang, "unit": i} for i, (lang, t) in enumerate(
        [("eng", "All human beings are born free."), ("fra", "Tous les êtres humains naissent libres."),
         ("deu", "Alle Menschen sind frei geboren.")])]
    (tmp_path / "mixed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    res = embscope.fertility("cl100k_base", str(tmp_path), lang=["fra", "ita"])
    assert set(res.tables["languages"]["language"]) == {"eng", "fra"}
    assert any("--lang ita: no such language in its records" in w for w in res.warnings)
    with pytest.raises(SpecError, match="names no languages before it is read"):
        embscope.fertility("cl100k_base", str(tmp_path), lang=["script:Latn"])
