"""Corpus reading, segmentation and script detection: real UDHR files, hostile inputs."""

from __future__ import annotations

import json
import warnings
import tracemalloc
from pathlib import Path

import pytest

from embscope.corpus.stream import (MAX_LINE_BYTES, CorpusRead, CorpusWarning, ReadOptions,
                                       iter_corpus)
from embscope.errors import CorpusError
from embscope.text.script import dominant_script, script_of
from embscope.languages.segment import count_words, words

ROOT = Path(__file__).resolve().parent.parent
UDHR = ROOT / "corpora" / "udhr"


def read_all(path, **kw):
    report = CorpusRead()
    batches = list(iter_corpus(path, report=report, **kw))
    return batches, report


# ------------------------------------------------------------------ segmentation and scripts


def test_chinese_one_word_per_character():
    assert count_words("人人生而自由，在尊严和权利上一律平等。") == 17  # 19 chars minus ， and 。
    assert [w for w, _ in words("人人生而自由")] == list("人人生而自由")


def test_thai_characters_with_marks_stay_together():
    # ที่ = base + two combining marks: one word; ไทย = 3 letters (vowel ไ is a letter, Lo)
    assert [w for w, _ in words("ที่ไทย")] == ["ที่", "ไ", "ท", "ย"]
    assert count_words("ภาษาไทย ดี") == 8  # ดี = ด + vowel mark ี


def test_amharic_wordspace_separates_words():
    text = "የሰው፡ልጅ፡ሁሉ፡ሲወለድ፡ነጻና፡በክብርና፡በመብትም፡እኩልነት፡ያለው፡ነው።"
    assert count_words(text) == 10
    assert words("ሰው፡ልጅ ሁሉ")[:3] == [("ሰው", True), ("ልጅ", False), ("ሁሉ", True)]


def test_punctuation_only_chunks_are_not_words():
    assert count_words("Hello , world — (1) don't !!") == 4
    assert count_words("") == 0


def test_script_of():
    assert script_of("Ġhello") == "Latin"
    assert script_of("Привет") == "Cyrillic"
    assert script_of("東京") == "Han"
    assert script_of("ሰው") == "Ethiopic"
    assert script_of("12 %") == "none"
    assert script_of("abc東京") == "mixed"
    assert dominant_script(json.loads((UDHR / "tha.jsonl").read_text().splitlines()[1])["text"]) == "Thai"


# ------------------------------------------------------------------ reading


def test_udhr_language_is_read_with_alignment():
    batches, report = read_all(UDHR / "eng.jsonl")
    assert {b.lang for b in batches} == {"eng"}
    units = [u for b in batches for u in b.units]
    assert units == list(range(31))
    assert report.texts == 31 and report.files_read == 1 and not report.skipped
    assert "Article" not in batches[0].texts[1]  # headings are not part of the text
    assert batches[0].texts[1].startswith("All human beings are born free")


def test_udhr_folder_has_required_languages():
    meta = json.loads((UDHR / "languages.json").read_text())["languages"]
    codes = {m["code"] for m in meta}
    need = ("eng fra deu spa por ita nld pol rus ukr ell tur arb pes heb hin ben urd tam tel mar guj "
            "tha lao khm mya vie ind cmn_hans jpn kor swh yor ibo hau zul amh tir kat hye sin npi pan "
            "fin hun ces ron bul srp kaz").split()
    assert set(need) <= codes and len(codes) >= 50
    for m in meta:
        lines = (UDHR / f"{m['code']}.jsonl").read_text(encoding="utf-8").splitlines()
        assert len(lines) == m["units"] >= 30


def test_language_from_folder_file_name_and_script(tmp_path):
    (tmp_path / "fra").mkdir()
    (tmp_path / "fra" / "notes.txt").write_text("Bonjour le monde\n", encoding="utf-8")
    (tmp_path / "deu.md").write_text("Hallo Welt\n\n", encoding="utf-8")
    (tmp_path / "misc.txt").write_text("Привет мир\n", encoding="utf-8")
    (tmp_path / "mixed.jsonl").write_text(
        json.dumps({"text": "hola", "lang": "spa", "unit": 3}) + "\n", encoding="utf-8")
    (tmp_path / "languages.json").write_text("{}", encoding="utf-8")  # ignored extension
    batches, report = read_all(tmp_path)
    got = {b.lang: b.texts for b in batches}
    assert got == {"deu": ["Hallo Welt"], "fra": ["Bonjour le monde"], "und_cyrl": ["Привет мир"],
                   "spa": ["hola"]}
    assert report.lang_source["und_cyrl"] == "script guess"
    assert report.lang_source["fra"] == "folder name"
    assert report.ignored_files == 1


def test_parquet_is_read(tmp_path):
    import polars as pl

    pl.DataFrame({"text": ["one two", "три"], "lang": ["eng", "rus"]}).write_parquet(tmp_path / "c.parquet")
    batches, _ = read_all(tmp_path / "c.parquet")
    assert [(b.lang, b.texts) for b in batches] == [("eng", ["one two"]), ("rus", ["три"])]


def test_sample_bytes_caps_each_language():
    batches, report = read_all(UDHR, sample_bytes=2000)
    per: dict[str, int] = {}
    for b in batches:
        per[b.lang] = per.get(b.lang, 0) + sum(len(t.encode()) for t in b.texts)
    assert max(per.values()) <= 2000
    assert "eng" in report.capped_languages


def test_bad_inputs_warn_with_counts_and_keep_good_text(tmp_path):
    (tmp_path / "good.txt").write_text("fine text here\n", encoding="utf-8")
    (tmp_path / "blob.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "latin1.txt").write_bytes("ok line\ncaf\xe9 au lait\n".encode("latin-1"))
    (tmp_path / "broken.jsonl").write_text('{"text": "ok"}\nnot json\n{"no_text": 1}\n[1]\n'
                                           '{"text": 5}\n{"text": "  "}\n', encoding="utf-8")
    with pytest.warns(CorpusWarning) as rec:
        batches, report = read_all(tmp_path)
    texts = sorted(t for b in batches for t in b.texts)
    assert texts == ["fine text here", "ok", "ok line"]
    assert report.skipped == {"binary_files": 1, "empty_files": 1, "invalid_utf8_lines": 1,
                              "invalid_json_lines": 1, "missing_text_records": 1,
                              "wrong_type_records": 2, "empty_text_records": 1}
    per_file = report.record().per_file
    assert per_file[str(tmp_path / "broken.jsonl")] == {
        "empty_text_records": 1, "invalid_json_lines": 1, "missing_text_records": 1, "wrong_type_records": 2}
    assert per_file[str(tmp_path / "latin1.txt")] == {"invalid_utf8_lines": 1}
    msg = str(rec[0].message)
    assert "1 binary files" in msg and "1 invalid utf8 lines" in msg and "broken.jsonl: 5" in msg


@pytest.mark.slow
def test_100mb_single_line_is_split_in_bounded_memory(tmp_path):
    path = tmp_path / "huge.txt"
    piece = ("word " * 200_000).encode()  # 1 MB
    with path.open("wb") as f:
        for _ in range(100):
            f.write(piece)
        f.write("終わり\n".encode())
    tracemalloc.start()
    n_texts = n_bytes = 0
    with pytest.warns(CorpusWarning, match="long line pieces split"):
        report = CorpusRead()
        for batch in iter_corpus(path, report=report):
            n_texts += len(batch.texts)
            n_bytes += sum(len(t.encode()) for t in batch.texts)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert n_bytes == path.stat().st_size - 1  # every byte kept except the newline
    pieces = path.stat().st_size // MAX_LINE_BYTES  # 100 MB / 1 MiB reads → 95 full pieces
    assert report.skipped["long_line_pieces_split"] == pieces == 95
    assert n_texts == pieces + 1
    assert peak < 40 << 20, f"peak {peak / 2**20:.0f} MiB"


def test_huge_jsonl_record_is_skipped(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"text": "x" * (3 << 20)}) + "\n" + json.dumps({"text": "small"}) + "\n")
    with pytest.warns(CorpusWarning):
        batches, report = read_all(path)
    assert [t for b in batches for t in b.texts] == ["small"]
    assert report.skipped["jsonl_records_over_1MiB"] == 1


def test_nothing_usable_raises(tmp_path):
    with pytest.raises(CorpusError, match="does not exist"):
        list(iter_corpus(tmp_path / "nope"))
    (tmp_path / "a.bin.txt").write_bytes(b"\x00\x01\x02")
    (tmp_path / "b.txt").write_bytes(b"")
    (tmp_path / "c.json").write_text("{}")
    with warnings.catch_warnings(record=True) as seen, pytest.raises(CorpusError, match=r"no usable text \(skipped: "):
        warnings.simplefilter("always")
        list(iter_corpus(tmp_path))
    assert not [w for w in seen if issubclass(w.category, CorpusWarning)]  # the error says it once


# ------------------------------------------------------------------ compressed, HF, globs, fields


def texts_units(batches):
    return [(b.lang, t, u) for b in batches for t, u in zip(b.texts, b.units)]


def udhr_subset(folder: Path, langs=("amh", "arb", "cmn_hans", "eng", "fra", "hin", "jpn", "rus", "tha", "vie")) -> Path:
    """A copy of some of the shipped UDHR's files: sharding all 512 would only cost time."""
    folder.mkdir(parents=True)
    for lang in langs:
        (folder / f"{lang}.jsonl").write_bytes((UDHR / f"{lang}.jsonl").read_bytes())
    return folder


def test_compressed_parquet_and_hf_shards_read_the_same_records(tmp_path):
    from tests.corpus_copies import sharded_copy

    copy = sharded_copy(udhr_subset(tmp_path / "src"), tmp_path / "copy", parts=5)  # gz, zst, bz2, parquet, hf per language
    want, _ = read_all(UDHR / "fra.jsonl")
    got, report = read_all(copy / "fra")
    assert texts_units(got) == texts_units(want) and not report.skipped
    assert report.files_read == 5
    assert report.lang_source["fra"] == "lang field"
    kinds = sorted(p.name for p in (copy / "fra").iterdir())
    assert kinds[:3] == ["00.jsonl.gz", "01.jsonl.zst", "02.jsonl.bz2"] and "03.parquet" in kinds
    assert (copy / "fra" / "04" / "cache-123.arrow").exists()  # present, and not read twice


def test_hf_dataset_dict_folder_with_fields(tmp_path):
    from tests.corpus_copies import write_hf_dataset

    root = tmp_path / "ds"
    write_hf_dataset(root / "train", [{"abstract": "Aspirin lowers fever.", "language": "eng"},
                                      {"abstract": "Le paracétamol aussi.", "language": "fra"}])
    write_hf_dataset(root / "test", [{"abstract": "Ibuprofen too.", "language": "eng"}])
    (root / "dataset_dict.json").write_text('{"splits": ["train", "test"]}')
    opts = ReadOptions(text_field="abstract", lang_field="language")
    report = CorpusRead()
    got = [(b.lang, b.texts) for b in iter_corpus(root, options=opts, report=report)]
    assert got == [("eng", ["Ibuprofen too."]), ("eng", ["Aspirin lowers fever."]),
                   ("fra", ["Le paracétamol aussi."])]  # splits in sorted order: test, train
    assert report.files_read == 2 and report.ignored_files == 0
    with pytest.raises(CorpusError, match=r"no usable text \(skipped: 2 files without text field"):
        list(iter_corpus(root))  # no column "text": counted per file, then a one-line error


def test_globs_and_several_paths(tmp_path):
    got, _ = read_all(str(UDHR / "[ef]*.jsonl"))
    assert sorted({b.lang for b in got}) == sorted(p.stem for p in UDHR.glob("[ef]*.jsonl"))
    assert {"ell", "eng", "eus", "fin", "fra"} <= {b.lang for b in got}
    both, _ = read_all([UDHR / "eng.jsonl", str(UDHR / "fra*.jsonl")])
    assert [b.lang for b in both][0] == "eng" and {b.lang for b in both} == {"eng", "fra", "fra_068"}
    with pytest.raises(CorpusError, match="matches no file"):
        list(iter_corpus(str(tmp_path / "*.jsonl")))


def test_corrupt_compressed_file_keeps_what_was_read(tmp_path):
    import gzip

    data = gzip.compress("".join(f"line {i}\n" for i in range(20000)).encode())
    (tmp_path / "eng.txt.gz").write_bytes(data[: len(data) // 2])
    import zstandard

    (tmp_path / "deu.txt.zst").write_bytes(b"\x28\xb5\x2f\xfd" + b"garbage" * 10)
    with pytest.warns(CorpusWarning, match="corrupt compressed files"):
        got, report = read_all(tmp_path)
    n = sum(len(b.texts) for b in got if b.lang == "eng")
    assert 0 < n < 20000
    assert report.skipped["corrupt_compressed_files"] == 2
    assert zstandard  # the dependency is installed


def test_sampling_is_deterministic_per_language(tmp_path):
    from tests.corpus_copies import sharded_copy

    src = udhr_subset(tmp_path / "src")
    a, _ = read_all(src, sample_bytes=5000)
    b, _ = read_all(src, sample_bytes=5000)
    assert texts_units(a) == texts_units(b)
    copy = sharded_copy(src, tmp_path / "copy", parts=3, kinds=("gz", "zst"))
    c, _ = read_all(copy, sample_bytes=5000)
    assert texts_units(c) == texts_units(a)  # same records in the same order: the same sample


def test_jsonl_text_and_lang_fields(tmp_path):
    import gzip

    rows = [{"body": "Aspirin lowers fever.", "language": "eng", "lang": "xxx"},
            {"body": "Le paracétamol aussi.", "language": "fra"}, {"text": "no body here"}]
    (tmp_path / "notes.jsonl.gz").write_bytes(gzip.compress(
        "".join(json.dumps(r) + "\n" for r in rows).encode()))
    with pytest.warns(CorpusWarning, match="1 missing text records"):
        got, _ = read_all(tmp_path, options=ReadOptions(text_field="body", lang_field="language"))
    assert [(b.lang, b.texts) for b in got] == [("eng", ["Aspirin lowers fever."]),
                                                ("fra", ["Le paracétamol aussi."])]
    with pytest.warns(CorpusWarning):
        got, report = read_all(tmp_path, options=ReadOptions(text_field="body", lang_field=None))
    assert {b.lang for b in got} == {"und_latn"} and report.lang_source == {"und_latn": "script guess"}
