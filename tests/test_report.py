"""The HTML report: escaping, sampling, missing sections, atomic writes, the CLI.

A fake-but-plausible output folder is built with polars, with a hostile vocabulary placed where it
shows in every view: the top of the under-trained table, the map (flagged, so never sampled away),
the neighbour lists, the extension candidates (term and pieces) and the language table.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from embscope.errors import OutputError
from embscope.report import display_token, render, script_json
from embscope.report.data import MAP_MAX_POINTS, TOP_N

# Each would set window.__pwned if the page ever ran it.
HOSTILE = [
    "<script>window.__pwned=1;alert(1)</script>",
    '"><img src=x onerror="window.__pwned=1;alert(1)">',
    "</script><script>window.__pwned=1</script>",
    "\u202eevil\u202c",
    "nul\x00byte",
    "<!--",
    "line\u2028sep",
]
N_HOSTILE = len(HOSTILE)


def build_fake_output(out: Path, n_tokens: int = 5000, *, seed: int = 0, tied: bool = False) -> Path:
    """Write summary.json, tokens/languages/candidates.parquet for a made-up model into ``out``.

    Ids 0..len(HOSTILE)-1 are the hostile tokens: flagged, with the highest scores, and listed
    as neighbours of every other flagged token.
    """
    import numpy as np
    import polars as pl

    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    words = ["the", "ing", "tion", " der", "的", "ение", "über", "ς", "123", " {", "π"]
    tokens = HOSTILE + [f"{words[i % len(words)]}{i}" for i in range(N_HOSTILE, n_tokens)]
    # Hostile strings in normal rows too: the default (normal-only) views must show them inert.
    cats = ["special", "normal", "normal", "normal", "unreachable", "undecodable", "normal"]
    cats += ["byte" if i < 300 else ("padding" if i >= n_tokens - 20 else "normal")
             for i in range(N_HOSTILE, n_tokens)]
    score = rng.beta(2, 8, n_tokens)
    score[:N_HOSTILE] = 5.0 + np.arange(N_HOSTILE)[::-1]  # hostile ones on top
    flagged = score > 0.55
    flagged[:N_HOSTILE] = True
    hostile_ids = list(range(N_HOSTILE))
    neighbors = rng.integers(0, n_tokens, (n_tokens, 5))  # (V, 5)
    neighbors[flagged] = hostile_ids[:5]
    in_norm = rng.normal(1.0, 0.15, n_tokens)
    in_norm[flagged] *= 0.4
    df = pl.DataFrame({
        "token_id": np.arange(n_tokens, dtype=np.int64),
        "token": tokens,
        "token_bytes": [t.encode("utf-8") for t in tokens],
        "category": cats,
        "in_norm": in_norm.astype(np.float32),
        "out_norm": None if tied else rng.normal(1.2, 0.2, n_tokens).astype(np.float32),
        "zero_row": np.zeros(n_tokens, dtype=bool),
        "ref_sim": rng.uniform(0, 1, n_tokens).astype(np.float32),
        "isolation": rng.uniform(0, 1, n_tokens).astype(np.float32),
        "knn_sim_k": rng.uniform(0, 1, n_tokens).astype(np.float32),
        "script": rng.choice(["Latin", "Han", "Cyrillic", "Greek", "Common", "Arabic"], n_tokens),
        "undertrained_score": score.astype(np.float32),
        "flagged": flagged,
        "neighbors": pl.Series(neighbors).cast(pl.List(pl.Int64)),
        "neighbor_sims": pl.Series(-np.sort(-rng.uniform(0.2, 1, (n_tokens, 5)), axis=1).astype(np.float32))
        .cast(pl.List(pl.Float32)),
        "x": rng.normal(0, 3, n_tokens).astype(np.float32),
        "y": rng.normal(0, 3, n_tokens).astype(np.float32),
    })
    if tied:
        df = df.with_columns(pl.lit(None, dtype=pl.Float32).alias("out_norm"))
    df.write_parquet(out / "tokens.parquet")

    lang_rows = []
    for tok in ["gpt2", "cl100k_base", "qwen2", HOSTILE[0]]:
        for lang, base in [("en", 1.3), ("de", 1.9), ("ru", 3.1), ("zh", 1.1), ("hi", 5.2)]:
            fert = base * (0.8 if tok == "qwen2" else 1.0)
            lang_rows.append({"tokenizer": tok, "language": lang, "script": "Latin", "words": 1000,
                              "chars": 6000, "bytes": 6500, "tokens": int(fert * 1000),
                              "fertility": fert, "tokens_per_char": fert / 6, "bytes_per_token": 6.5 / fert,
                              "continued_word_rate": 0.3, "single_token_word_rate": 0.7,
                              "parity": fert / 1.3, "unk_rate": 0.0, "byte_fallback_rate": 0.0,
                              "roundtrip": True, "vocab_utilisation": 0.2}
                             | ({"mean_in_norm": 1.1 - fert / 10, "mean_isolation": 0.4, "flagged_share": fert / 100,
                                 "mean_within_sim": 0.2} if tok == "gpt2" else {}))
    pl.DataFrame(lang_rows).write_parquet(out / "languages.parquet")

    terms = HOSTILE[:3] + ["myocardial", "hypertension", "pneumothorax", "tachycardia"]
    pl.DataFrame({
        "term": terms,
        "frequency": [50, 40, 30, 900, 800, 120, 300],
        "pieces": [[t[:4], t[4:]] for t in terms],
        "n_pieces": [2] * len(terms),
        "savings_tokens": [50, 40, 30, 900 * 3, 800 * 2, 120 * 3, 300 * 2],
        "mean_kl": [0.01] * len(terms),
    }).write_parquet(out / "candidates.parquet")

    wl = [float(2 * np.pi * 1e5 ** (2 * i / 64)) for i in range(32)]
    summary = {
        "embscope": {"version": "0.1.0", "git": "abc1234"},
        "model": {"spec": "fake-135m", "name": "fake-135m", "source": "folder", "path": str(out),
                  "arch": "llama", "rows": n_tokens, "dim": 64, "n_tokens": n_tokens - 20, "tied": tied,
                  "dtype": "bfloat16", "device": "cpu", "tensor_names": {"embed": "model.embed_tokens.weight"},
                  "files_read": ["model.safetensors"]},
        "parameters": {"k": 10, "sample": MAP_MAX_POINTS, "note": HOSTILE[1]},
        "timings": {"load": 1.23, "scan": 4.5, "report": 0.2},
        "categories": {c: cats.count(c) for c in sorted(set(cats))},
        "context": {"rope_type": "default", "theta": 1e5, "factor": None, "original_max_positions": 8192,
                    "max_positions": 8192, "extension_ratio": 1.0, "risk_band": "low", "wavelengths": wl,
                    "pairs_full_turn": sum(w <= 8192 for w in wl),
                    "kv_bytes_per_token": {"bf16": 46080, "fp8": 23040},
                    "kv_bytes_at": {str(n): {"bf16": 46080 * n, "fp8": 23040 * n} for n in (4096, 8192, 32768, 131072)}
                    | {"max": {"bf16": 46080 * 8192, "fp8": 23040 * 8192}},
                    "embedding_bytes": n_tokens * 64 * 2, "output_bytes": 0 if tied else n_tokens * 64 * 2,
                    "embedding_share": 0.2, "params_estimate": 135_000_000, "notes": ["fake model"]},
        # The shapes embscope.geometry.scan and embscope.audit write (see docs/schema.md).
        "geometry": _fake_geometry(tokens, cats, score, flagged, in_norm),
        "languages": {"corpora/flores-mini": {
            "tokenizers": [{"name": t, "backend": "tokenizers"} for t in ("gpt2", "cl100k_base", "qwen2")],
            "reference": "en", "reference_present": True, "languages": 5, "segmentation": "words = …",
            "corpus": {"files_read": 5, "texts": 100, "bytes": 32500, "skipped": {}, "capped_languages": []}}},
        "extension": {"top_n": 5, "space_twins_added": 2, "tokens_added": 7, "candidates": 7,
                      "tokens_saved": 5000, "corpus_tokens": 100000, "corpus_tokens_after": 95000,
                      "saved_fraction": 0.05, "estimated_savings": 5400, "min_freq": 5, "corpus_texts": 40,
                      "strategies": {"mean": {"name": "mean", "kl": 2.4257e-06, "new_token_mass": 0.02,
                                              "norm_percentile_median": 0.97,
                                              "examples": {HOSTILE[0]: [[HOSTILE[1], 0.9], [" the", 0.5]]}},
                                     "random": {"name": "random", "kl": 0.9, "new_token_mass": 0.4,
                                                "norm_percentile_median": 57.5}},
                      "kl_note": "held-out general English text, 230 tokens"},
        "skipped": {},
    }
    (out / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return out


def _fake_geometry(tokens, cats, score, flagged, in_norm) -> dict:
    """``summary["geometry"]`` as :func:`embscope.geometry.scan.scan` writes it."""
    from collections import Counter

    import numpy as np


    cats_a = np.asarray(cats)
    normal = cats_a == "normal"
    counts = Counter(cats)
    order = [int(i) for i in np.argsort(-score) if normal[i]][:30]
    return {
        "rows": len(cats), "categories": dict(counts),
        "flagged": {"normal": int(flagged[normal].sum()), "normal_share": round(float(flagged[normal].mean()), 5),
                    "by_category": {c: int(flagged[cats_a == c].sum()) for c in counts}, "zero_rows": 0},
        "threshold": 2.5, "threshold_note": "score ≥ 2.5: 2.5 sigmas above the typical normal row",
        # the producer stores these pre-escaped for HTML; the page must show the raw text
        "top_undertrained": [{"id": i, "token": tokens[i], "score": round(float(score[i]), 3)}
                             for i in order],
        "per_script": {"Latin": {"rows": 4000, "flagged": 40, "flagged_share": 0.01, "mean_norm": 1.0},
                       "Han": {"rows": 600, "flagged": 30, "flagged_share": 0.05, "mean_norm": 0.9}},
        "knn": {"method": "exact", "k": 10, "recall_at_k": 1.0, "recall_rows": 1000, "seconds": 0.5,
                "cached": False, "device": "cpu", "tile_dtype": "bfloat16"},
        "reference": {"size": 0, "source": "none", "note": "no known-unused rows: ref_sim is empty"},
        "tied": False,
    }


class _Counter(HTMLParser):
    """Counts elements and collects text outside <script>/<style>, plus every attribute."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: dict[str, int] = {}
        self.attrs: list[tuple[str, str | None]] = []
        self.text: list[str] = []
        self.scripts: list[tuple[dict, str]] = []
        self._in: str | None = None
        self._script_attrs: dict = {}

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        self.attrs.extend(attrs)
        if tag in ("script", "style"):
            self._in = tag
            self._script_attrs = dict(attrs)
            self._buf: list[str] = []

    def handle_endtag(self, tag):
        if tag == self._in:
            if tag == "script":
                self.scripts.append((self._script_attrs, "".join(self._buf)))
            self._in = None

    def handle_data(self, data):
        if self._in:
            self._buf.append(data)
        else:
            self.text.append(data)


@pytest.fixture(scope="module")
def fake_out(tmp_path_factory) -> Path:
    out = build_fake_output(tmp_path_factory.mktemp("report") / "fake-135m")
    render(out)
    return out


def _parse(path: Path) -> _Counter:
    p = _Counter()
    p.feed(path.read_text(encoding="utf-8"))
    p.close()
    return p


def test_display_token_makes_invisible_characters_visible():
    assert display_token("\u202eevil") == "\\u202eevil"
    assert display_token("a\x00b") == "a\\x00b"
    assert display_token("x\ny\tz\r") == "x\\ny\\tz\\r"
    assert display_token("\x1b[31m") == "\\x1b[31m"
    assert display_token("\u200bzw\ufeff") == "\\u200bzw\\ufeff"
    assert display_token("\U000e0041tag") == "\\U000e0041tag"  # Cf outside the BMP
    assert display_token("\ud800") == "\\ud800"  # lone surrogate
    assert display_token("<b>&amp;</b> Ġthe 中文") == "<b>&amp;</b> Ġthe 中文"  # HTML is the template's job
    assert display_token(None) == ""


def test_script_json_cannot_close_the_block():
    s = script_json({"t": "</script><!-- \u2028 & >", "nan": float("nan"), "lone": "\ud800"})
    assert "<" not in s and ">" not in s and "&" not in s and "\u2028" not in s
    assert s.isascii()
    back = json.loads(s)
    assert back["t"] == "</script><!-- \u2028 & >" and back["nan"] is None and back["lone"] == "\ud800"


def test_hostile_tokens_stay_inert(fake_out):
    html_path = fake_out / "index.html"
    p = _parse(html_path)
    # Exactly our two scripts: the JSON data block and the drawing code. No <img>, no handlers.
    assert p.tags.get("script") == 2, p.tags
    assert [a.get("type") for a, _ in p.scripts] == ["application/json", None]
    assert p.tags.get("img", 0) == 0
    assert p.tags.get("iframe", 0) == 0 and p.tags.get("object", 0) == 0
    assert not [k for k, _ in p.attrs if k.startswith("on")]
    # The JSON block round-trips to the exact hostile strings.
    data = json.loads(p.scripts[0][1])
    top_tokens = [r["token"] for r in data["tokens"]["top"]["rows"][:N_HOSTILE]]
    assert top_tokens == HOSTILE
    assert set(HOSTILE) <= set(data["tokens"]["map"]["tok"])
    assert {nb[1] for nb in data["tokens"]["top"]["rows"][0]["neighbors"]} == set(HOSTILE[:5])
    raw = html_path.read_text(encoding="utf-8")
    # No raw markup, bidi override, NUL or line separator anywhere in the file.
    for bad in ("<script>window", "<img", "\u202e", "\x00", "\u2028", "onerror=\""):
        assert bad not in raw, bad
    # Server-rendered tables show the tokens as visible text (candidates: term and pieces;
    # language table: a hostile tokenizer name).
    text = "".join(p.text)
    assert HOSTILE[0] in text  # the parser decoded &lt;script&gt; back to text: it was escaped
    assert '"><img src=x onerror="window.__pwned=1;alert(1)">' in text
    assert "<scri" in text and "pt>window.__pwned=1;alert(1)</script>" in text  # a split piece


def test_display_rule_reaches_server_tables(tmp_path):
    out = build_fake_output(tmp_path / "m", 400)
    import polars as pl

    pl.DataFrame({"term": ["\u202eevil", "nul\x00"], "frequency": [5, 4], "pieces": [["\u202e", "evil"], ["nul", "\x00"]],
                  "n_pieces": [2, 2], "savings_tokens": [5, 4]}).write_parquet(out / "candidates.parquet")
    p = _parse(render(out))
    text = "".join(p.text)
    assert "\\u202eevil" in text and "nul\\x00" in text


def test_sections_and_map_sample(tmp_path):
    out = build_fake_output(tmp_path / "big", MAP_MAX_POINTS + 12_000, seed=1)
    p = _parse(render(out))
    data = json.loads(p.scripts[0][1])
    m = data["tokens"]["map"]
    import polars as pl

    flagged_ids = set(pl.read_parquet(out / "tokens.parquet", columns=["token_id", "flagged"])
                      .filter(pl.col("flagged"))["token_id"].to_list())
    assert m["n_total"] == MAP_MAX_POINTS + 12_000
    assert m["n_shown"] == len(m["x"]) == MAP_MAX_POINTS
    assert flagged_ids <= set(m["id"])  # every flagged token kept
    assert len(set(m["id"])) == len(m["id"])
    top = data["tokens"]["top"]
    # TOP_N normal tokens, and apart from them the TOP_N highest of the other categories
    assert sum(r["category"] == "normal" for r in top["rows"]) == TOP_N
    assert 0 < sum(r["category"] != "normal" for r in top["rows"]) <= TOP_N
    assert top["default"] == "normal" and top["categories"][0] == "normal"
    scores = [r["undertrained_score"] for r in top["rows"]]
    assert scores == sorted(scores, reverse=True)
    html = (out / "index.html").read_text(encoding="utf-8")
    for sid in ("overview", "tokens", "languages", "extension", "context"):
        assert f'id="{sid}"' in html
    assert "no data:" not in "".join(p.text)
    assert (out / "index.html").stat().st_size < 6_000_000


def test_missing_sections_say_why(tmp_path):
    out = tmp_path / "bare"
    out.mkdir()
    (out / "summary.json").write_text(json.dumps({
        "model": {"name": "bare", "rows": 10, "dim": 4},
        "skipped": {"languages": "no corpus given", "extension": "no domain corpus given"}}))
    p = _parse(render(out))
    text = " ".join(" ".join(p.text).split())
    assert "no data: no corpus given" in text
    assert "no data: no domain corpus given" in text
    assert "no data: tokens.parquet not found" in text
    assert "no data: the model config gives no RoPE or attention shape" in text


def test_atomic_write_leaves_no_tmp(tmp_path, monkeypatch):
    out = build_fake_output(tmp_path / "a", 300)
    (out / "index.html").write_text("old page")
    import os

    calls = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (calls.append((Path(a).name, Path(b).name)), real(a, b)))
    target = render(out)
    assert calls == [("index.html.tmp", "index.html")]
    assert not (out / "index.html.tmp").exists()
    assert target.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_errors_are_one_line(tmp_path):
    with pytest.raises(OutputError, match="is not a folder"):
        render(tmp_path / "nope")
    with pytest.raises(OutputError, match="has no summary.json"):
        render(tmp_path)
    (tmp_path / "summary.json").write_text("{not json")
    with pytest.raises(OutputError, match="not readable JSON") as err:
        render(tmp_path)
    assert "\n" not in str(err.value)


def test_page_is_offline(fake_out):
    p = _parse(fake_out / "index.html")
    # Nothing that fetches: no src/href/srcset/action attributes, no <link>, no CSS imports or urls.
    assert not [k for k, _ in p.attrs if k in ("src", "href", "srcset", "action", "poster", "data")
                and not (k == "href" and _ and _.startswith("#"))]
    assert p.tags.get("link", 0) == 0
    raw = (fake_out / "index.html").read_text(encoding="utf-8")
    style = raw[raw.index("<style>"):raw.index("</style>")]
    assert "@import" not in style and "url(" not in style
    code = p.scripts[1][1]
    for call in ("fetch(", "XMLHttpRequest", "import(", "WebSocket", "innerHTML", "outerHTML",
                 "insertAdjacentHTML", "document.write", "eval("):
        assert call not in code, call
    # The policy forbids every fetch and allows only the page's own script (by hash).
    assert "default-src 'none'" in raw and "script-src 'sha256-" in raw


def test_tied_model_has_no_output_histogram(tmp_path):
    out = build_fake_output(tmp_path / "t", 300, tied=True)
    p = _parse(render(out))
    data = json.loads(p.scripts[0][1])
    assert "out_norm" not in data["tokens"]["hist"] and "in_norm" in data["tokens"]["hist"]


def test_cli_report(tmp_path, capsys):
    from embscope.cli import main

    out = build_fake_output(tmp_path / "c", 300)
    assert main(["report", str(out)]) == 0
    assert capsys.readouterr().out.strip().endswith("index.html")
    assert main(["report", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "is not a folder" in err and "\n" not in err


def _text(path: Path) -> str:
    return " ".join(" ".join(_parse(path).text).split())


def test_geometry_views_read_the_scan_summary(fake_out):
    text = _text(fake_out / "index.html")
    g = json.loads((fake_out / "summary.json").read_text())["geometry"]
    f = g["flagged"]
    share = f"{100 * f['normal_share']:.2f} %"
    assert f"{f['normal']:,} normal rows ({share})" in text
    assert "normal_share=" not in text and "by_category" not in text  # no raw dict
    # special and other rows apart, with their totals
    assert f"special {f['by_category']['special']} of 1" in text
    assert "score ≥ 2.5" in text and "2.5 sigmas above the typical normal row" in text
    # kNN record and the reference note
    assert "recall@k 1 on 1,000 rows" in text and "bfloat16 tiles" in text
    assert "no known-unused rows: ref_sim is empty" in text
    html = (fake_out / "index.html").read_text(encoding="utf-8")
    table = html[html.index('id="script-table"'):]
    table = table[:table.index("</table>")]
    assert table.count("<tr>") == 3 and "Latin" in table and "1.00 %" in table and "5.00 %" in table
    # The 30 most under-trained normal tokens, raw text (not the summary's pre-escaped copy), inert
    chips = html[html.index('id="top-undertrained"'):]
    chips = chips[:chips.index("</div>")]
    assert chips.count('class="chip"') == 30
    assert "&amp;lt;" not in chips and "&amp;gt;" not in chips  # not double-escaped
    assert "\\u202eevil\\u202c" in chips  # bidi override shown as code points
    assert "&#34;&gt;&lt;img src=x" in chips or "&quot;&gt;&lt;img src=x" in chips


def test_numbers_have_fixed_precision_and_no_negative_zero():
    from embscope.report.data import _num
    from embscope.report.render import fmt, pct

    assert fmt(3.0e-4) == "0.0003" and fmt(-0.0) == "0" and fmt(-1e-12 * 0) == "0"
    assert fmt(-4e-5) == "-4.00e-5" and fmt(2.4257e-06) == "2.43e-6"
    assert fmt(3.29441) == "3.294" and fmt(12.3456) == "12.35" and fmt(2424.39) == "2,424"
    assert pct(0.00035) == "0.035 %" and pct(0.08946) == "8.95 %" and pct(0) == "0 %"
    assert _num(-1e-9) == -1e-9 and str(_num(-0.0)) == "0.0" and _num(float("nan")) is None


def test_cost_table_lists_every_language_most_expensive_first(fake_out):
    data = json.loads(_parse(fake_out / "index.html").scripts[0][1])
    cost = data["languages"]["cost"]
    assert len(cost["rows"]) == 20
    parity = [r["parity"] for r in cost["rows"]]
    assert parity == sorted(parity, reverse=True)
    assert cost["n_double"] == sum(p >= 2 for p in parity) > 0
    assert cost["columns"][:2] == ["tokenizer", "language"]
    for col in ("parity", "fertility", "mean_in_norm", "mean_isolation", "flagged_share", "mean_within_sim"):
        assert col in cost["columns"], col
    text = _text(fake_out / "index.html")
    assert f"{cost['n_double']} of 20 pay double or more" in text
    assert "Tokenizers: gpt2, cl100k_base, qwen2" in text
    assert "5 languages, 100 texts" in text


def test_extension_cards_use_the_real_keys(fake_out):
    text = _text(fake_out / "index.html")
    assert "Tokens added 7 top 5 terms by savings + 2 space twins" in text
    assert "5.00 % of 100,000 corpus tokens" in text and "(estimate 5,400)" in text
    assert "2.43e-6" in text and "KL measured on: held-out general English text" in text


def test_older_geometry_spelling_still_renders(tmp_path):
    out = build_fake_output(tmp_path / "old", 400)
    s = json.loads((out / "summary.json").read_text())
    s["geometry"] = {"flagged": 12, "flagged_share": 0.03,
                     "per_script": [{"script": "Latin", "n": 100, "flagged_share": 0.1, "mean_norm": 1.0}]}
    (out / "summary.json").write_text(json.dumps(s))
    text = _text(render(out))
    assert "12 normal rows (3.00 %)" in text and "10.00 %" in text
