"""Unicode scripts from the UCD: every scripted code point, the Japanese label, real UDHR text."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import regex

from embscope.text import script
from embscope.text.script import char_script, dominant_script, label, script_counts, script_of

UDHR = Path(__file__).parents[1] / "corpora" / "udhr"


def udhr_text(lang: str) -> str:
    return "\n".join(json.loads(line)["text"] for line in (UDHR / f"{lang}.jsonl").read_text("utf-8").splitlines())


def test_every_code_point_agrees_with_the_script_property():
    """The table gives each code point its Script value, exactly as regex's UCD tables say;
    Common/Inherited ones only get a script through a single-script (or Japanese-only) Script_Extensions."""
    table = script._table()
    text = "".join(chr(c) if not 0xD800 <= c <= 0xDFFF else "\x00" for c in range(script._LIMIT))
    seen = 0
    for name in script._NAMES[1:-1]:
        for m in regex.finditer(rf"\p{{Script={name}}}+", text):
            assert {script._NAMES[table[cp]] for cp in range(m.start(), m.end())} == {name}, name
            seen += m.end() - m.start()
    shared = regex.compile(r"[\p{Script=Common}\p{Script=Inherited}\p{Script=Unknown}]")
    extended = [cp for cp in range(script._LIMIT) if table[cp] and shared.match(text[cp])]
    assert seen + len(extended) == sum(1 for b in table if b)
    assert seen > 140_000  # Unicode 15+: about 150k code points belong to a script
    for cp in extended:  # each such mark is used by the script it was given
        name = script._NAMES[table[cp]]
        if name != script.JAPANESE:
            assert regex.match(rf"\p{{Script_Extensions={name}}}", chr(cp))


@pytest.mark.parametrize("text, expected", [
    ("\u1720\u1721", "Hanunoo"),  # the old name table said common
    ("ᜀᜁ", "Tagalog"), ("ᝀᝁ", "Buhid"),
    ("テスト", "Katakana"), ("コーヒー", "Katakana"), ("ひらがな", "Hiragana"), ("東京", "Han"),
    ("日本語のテキスト", "Japanese"), ("のテ", "Japanese"),
    ("abc東京", "mixed"), ("Привет", "Cyrillic"), ("12 %", "none"), ("Ġhello", "Latin"), ("▁東京", "Han"),
    ("ꦗꦮ", "Javanese"), ("\U00018B00", "Khitan_Small_Script"),
])
def test_script_of(text, expected):
    assert script_of(text) == expected


def test_single_script_marks_count_for_their_script():
    assert char_script("ー") == script.JAPANESE and char_script("5") == "common"
    assert char_script("、") == "common"  # ideographic comma: Bopomofo, Hangul, Han, kana and Yi use it
    assert char_script("\u1dc0") == "Greek"  # combining dotted grave: Inherited, used by Greek only


@pytest.mark.parametrize("lang, expected", [
    ("jpn", "Japanese"), ("cmn_hans", "Han"), ("kor", "Hangul"), ("tha", "Thai"), ("bod", "Tibetan"),
    ("amh", "Ethiopic"), ("rus", "Cyrillic"), ("eng", "Latin"), ("hin", "Devanagari"), ("khm", "Khmer"),
])
def test_udhr_languages(lang, expected):
    assert dominant_script(udhr_text(lang)) == expected


def test_japanese_needs_kana():
    assert label(Counter({"Han": 100, "Katakana": 2})) == "Han"  # a stray loanword in Chinese
    assert label(Counter({"Han": 60, "Hiragana": 30, "Katakana": 10})) == "Japanese"
    assert label(Counter({"Latin": 500, "Han": 10, "Hiragana": 10})) == "Latin"
    assert label(Counter()) == "none"


def test_script_counts_ignore_common():
    counts = script_counts("Tokyo 東京 — 2024! コーヒー")
    assert counts == Counter({"Latin": 5, "Han": 2, "Katakana": 2, "Japanese": 2})


def test_languages_rows_name_their_unit(tmp_path):
    """UDHR through the fertility table: each row says what its words are."""
    import shutil

    from embscope.languages.fertility import measure
    from embscope.languages.segment import count_words
    from embscope.models.vocabulary import load_vocabulary

    for lang in ("eng", "bod", "jpn", "tha", "cmn_hans"):
        shutil.copy(UDHR / f"{lang}.jsonl", tmp_path / f"{lang}.jsonl")
    table = measure([load_vocabulary("gpt2")], tmp_path).table
    rows = {r["language"]: r for r in table.iter_rows(named=True)}
    assert {k: (v["script"], v["unit"]) for k, v in rows.items()} == {
        "eng": ("Latin", "word"), "bod": ("Tibetan", "syllable"), "jpn": ("Japanese", "char"),
        "tha": ("Thai", "cluster"), "cmn_hans": ("Han", "char")}
    # Tibetan: one word per tsheg-delimited syllable
    text = udhr_text("bod")
    assert rows["bod"]["words"] == count_words(text)
    assert count_words("བོད་ཀྱི་སྐད་") == 3
