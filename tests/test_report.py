"""The HTML report: escaping, sampling, missing sections, atomic writes, tampered folders, the CLI.

Every folder here is written by the real producers (:func:`embscope.runner.run`): a small model
whose vocabulary holds hostile strings where they show in every view (the top of the under-trained
table, the map, the neighbour lists, the language table, the page title), and the shared real
audit of the demo model. Tampered folders are real folders edited afterwards.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from embscope.errors import OutputError
from embscope.report import display_token, render, script_json
from embscope.report.data import MAP_MAX_POINTS, TOP_N
from embscope.sections.base import RunOptions

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


def build_hostile_run(root: Path, *, scan: bool = True, languages: bool = True) -> Path:
    """A real run (every section through the real producers) of a small model whose vocabulary and
    corpus carry hostile strings: the tokens are added tokens of a BPE tokenizer trained here, their
    rows are tiny and point the same way (so they top the under-trained table and are each other's
    neighbours), and one corpus language is named by a hostile string."""
    import numpy as np
    import torch
    from safetensors.torch import save_file
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    from embscope.runner import Given, run

    corpus = root / "corpus"
    corpus.mkdir(parents=True)
    medical = ("The patient has myocardial infarction and hypertension. Pneumothorax with tachycardia "
               "was treated. Hypertension and tachycardia recur after myocardial injury. ")
    texts = [medical * 3 for _ in range(40)]
    (corpus / "eng.txt").write_text("\n".join(texts), encoding="utf-8")
    with open(corpus / "hostile.jsonl", "w", encoding="utf-8") as fh:
        for t in texts[:10]:
            fh.write(json.dumps({"text": t.lower(), "lang": HOSTILE[0]}) + "\n")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>"], show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.add_tokens([AddedToken(h, normalized=False) for h in HOSTILE])
    model = root / HOSTILE[1].replace("/", "")  # the model's name is hostile too
    model.mkdir()
    tok.save(str(model / "tokenizer.json"))
    v = tok.get_vocab_size(with_added_tokens=True)
    rng = np.random.default_rng(0)
    emb = rng.normal(0, 1, (v, 32)).astype(np.float32)
    hostile_ids = [tok.token_to_id(h) for h in HOSTILE]
    direction = rng.normal(0, 1, 32)
    for j, i in enumerate(hostile_ids):  # tiny rows, nearly parallel: under-trained and clustered
        emb[i] = 0.01 * (direction + 0.01 * rng.normal(0, 1, 32)) * (1 + 0.01 * j)
    save_file({"model.embed_tokens.weight": torch.from_numpy(emb)}, str(model / "model.safetensors"))
    (model / "config.json").write_text(json.dumps({
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 32,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 64, "vocab_size": v, "tie_word_embeddings": True, "rope_theta": 1e5,
        "max_position_embeddings": 8192, "torch_dtype": "float32"}))
    out = root / "report"
    run(str(model), given=Given(languages=[corpus] if languages else [], domain=corpus / "eng.txt" if languages else None),
        out=out, scan=scan, options=RunOptions.build(map=scan, top=5, diagnostics=False))
    return out


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


@pytest.fixture
def fake_out(hostile_run) -> Path:
    """The shared hostile run (tests/conftest.py's ``hostile_run``): read here, copied before any change."""
    return hostile_run


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
    assert sorted(top_tokens) == sorted(HOSTILE)
    assert set(HOSTILE) <= set(data["tokens"]["map"]["tok"])
    assert {nb[1] for nb in data["tokens"]["top"]["rows"][0]["neighbors"]} <= set(HOSTILE)
    raw = html_path.read_text(encoding="utf-8")
    # No raw markup, bidi override, NUL or line separator anywhere in the file.
    for bad in ("<script>window", "<img", "\u202e", "\x00", "\u2028", "onerror=\""):
        assert bad not in raw, bad
    # Server-rendered text shows them as visible text: the model name and the language table.
    text = "".join(p.text)
    assert HOSTILE[1].replace("/", "") in text  # the model's name; the parser decoded the entities back
    assert HOSTILE[0] in text  # the hostile language name


def test_tampered_tables_stay_inert(fake_out, tmp_path):
    """Hand-edited Parquet content goes through the same display rule as real tokens."""
    import shutil

    import polars as pl

    out = tmp_path / "copy"
    shutil.copytree(fake_out, out)
    (out / "candidates.parquet").unlink()
    pl.DataFrame({"term": ["\u202eevil", "nul\x00", HOSTILE[0]], "frequency": [5, 4, 3],
                  "pieces": [["\u202e", "evil"], ["nul", "\x00"], ["<scri", "pt>"]],
                  "n_pieces": [2, 2, 2], "savings_tokens": [5, 4, 3]}).write_parquet(out / "candidates.parquet")
    p = _parse(render(out))
    text = "".join(p.text)
    assert "\\u202eevil" in text and "nul\\x00" in text and HOSTILE[0] in text
    assert p.tags.get("script") == 2 and p.tags.get("img", 0) == 0


@pytest.mark.slow
def test_sections_and_map_sample(smollm2_audit):
    """The real demo audit (49,152 rows): the map keeps every flagged row within MAP_MAX_POINTS."""
    import polars as pl

    out = smollm2_audit
    p = _parse(out / "index.html")
    data = json.loads(p.scripts[0][1])
    m = data["tokens"]["map"]
    flagged_ids = set(pl.read_parquet(out / "tokens.parquet", columns=["token_id", "flagged"])
                      .filter(pl.col("flagged"))["token_id"].to_list())
    assert m["n_total"] == 49152
    assert m["n_shown"] == len(m["x"]) == MAP_MAX_POINTS
    assert flagged_ids <= set(m["id"])  # every flagged token kept
    assert len(set(m["id"])) == len(m["id"])
    top = data["tokens"]["top"]
    # TOP_N normal tokens, and apart from them the highest of the other categories
    assert sum(r["category"] == "normal" for r in top["rows"]) == TOP_N
    assert 0 < sum(r["category"] != "normal" for r in top["rows"]) <= TOP_N
    assert top["default"] == "normal" and top["categories"][0] == "normal"
    scores = [r["undertrained_score"] for r in top["rows"]]
    assert scores == sorted(scores, reverse=True)
    html = (out / "index.html").read_text(encoding="utf-8")
    for sid in ("overview", "tokens", "languages", "extension", "context"):
        assert f'id="{sid}"' in html
    assert "no data:" not in "".join(p.text)
    assert (out / "index.html").stat().st_size < 8_000_000


def test_missing_sections_say_why(hostile_bare_run):
    out = hostile_bare_run  # build_hostile_run(scan=False, languages=False), shared with test_browser
    text = " ".join(" ".join(_parse(out / "index.html").text).split())
    assert "no data: no corpus given" in text
    assert "no data: no single-language (domain) corpus given" in text


def test_render_replaces_the_page_atomically(fake_out, tmp_path):
    import os
    import shutil

    out = tmp_path / "a"
    shutil.copytree(fake_out, out)
    before = set(os.listdir(out))
    target = render(out)
    assert set(os.listdir(out)) == before  # no temporary left behind
    assert target.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_render_never_writes_through_a_symlink(fake_out, tmp_path):
    """A planted link at index.html (or at an old temporary name) is replaced, never followed."""
    import shutil

    out = tmp_path / "a"
    shutil.copytree(fake_out, out)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    (out / "index.html").unlink()
    (out / "index.html").symlink_to(victim)
    (out / "index.html.tmp").symlink_to(victim)
    render(out)
    assert victim.read_text() == "keep"
    assert not (out / "index.html").is_symlink()


def test_render_refuses_a_folder_embscope_did_not_make(fake_out, tmp_path):
    import shutil

    out = tmp_path / "a"
    shutil.copytree(fake_out, out)
    (out / ".embscope").unlink()
    (out / "index.html").write_text("the user's own page")
    with pytest.raises(OutputError, match="not an embscope output folder"):
        render(out)
    assert (out / "index.html").read_text() == "the user's own page"


def test_errors_are_one_line(tmp_path):
    with pytest.raises(OutputError, match="is not a folder"):
        render(tmp_path / "nope")
    with pytest.raises(OutputError, match="has no summary.json"):
        render(tmp_path)
    (tmp_path / "summary.json").write_text("{not json")
    with pytest.raises(OutputError, match="not readable JSON") as err:
        render(tmp_path)
    assert "\n" not in str(err.value)


def _tamper(summary: dict, path: list, value) -> dict:
    d = summary
    for key in path[:-1]:
        d = d[key]
    d[path[-1]] = value
    return summary


@pytest.mark.parametrize("path, value, expected", [
    (["schema_version"], None, "schema version None"),
    (["schema_version"], 1, "schema version 1"),
    (["model", "rows"], "many", "model.rows must be an integer"),
    (["model", "rows"], 10**400, "model.rows must be an integer"),
    (["sections", "context", "rope", "theta"], "x", "sections.context.rope.theta"),
    (["sections", "tokens", "categories"], [1, 2], "sections.tokens.categories must be an object"),
    (["sections", "tokens", "geometry", "threshold"], True, "threshold must be a number"),
    (["sections", "extension", "tokens_saved"], 1.5, "tokens_saved must be an integer"),
    (["timings", "load"], "fast", "timings.load must be a number"),
    (["parameters", "k"], -1.5, "parameters.k must be an integer"),
    (["warnings"], {"a": 1}, "warnings must be a list"),
    (["sections", "languages", "corpora"], "deep", "sections.languages.corpora must be an object"),
])
def test_tampered_summary_is_one_line_error(fake_out, tmp_path, capsys, path, value, expected):
    import shutil

    from embscope.cli import main

    out = tmp_path / "t"
    shutil.copytree(fake_out, out)
    s = json.loads((out / "summary.json").read_text())
    (out / "summary.json").write_text(json.dumps(_tamper(s, path, value)))
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and expected in err and "\n" not in err and "Traceback" not in err


def test_deeply_nested_summary_is_one_line_error(fake_out, tmp_path, capsys):
    import shutil

    from embscope.cli import main

    out = tmp_path / "t"
    shutil.copytree(fake_out, out)
    s = json.loads((out / "summary.json").read_text())
    s["sections"]["languages"]["corpora"]["x"] = json.loads("[" * 100 + "]" * 100)
    (out / "summary.json").write_text(json.dumps(s))
    assert main(["report", str(out)]) == 2
    (out / "summary.json").write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("error:") for e in err)


def test_tables_with_wrong_column_types_are_one_line_errors(fake_out, tmp_path, capsys):
    import shutil

    import polars as pl

    from embscope.cli import main

    out = tmp_path / "t"
    shutil.copytree(fake_out, out)
    t = pl.read_parquet(out / "tokens.parquet").with_columns(pl.col("in_norm").cast(pl.String),
                                                              pl.col("flagged").cast(pl.String))
    (out / "tokens.parquet").unlink()
    t.write_parquet(out / "tokens.parquet")
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "tokens.parquet" in err and "\n" not in err


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


def test_tied_model_has_no_output_histogram(fake_out):
    data = json.loads(_parse(fake_out / "index.html").scripts[0][1])
    assert "out_norm" not in data["tokens"]["hist"] and "in_norm" in data["tokens"]["hist"]


def test_cli_report(fake_out, tmp_path, capsys):
    import shutil

    from embscope.cli import main

    out = tmp_path / "c"
    shutil.copytree(fake_out, out)
    assert main(["report", str(out)]) == 0
    assert capsys.readouterr().out.strip().endswith("index.html")
    assert main(["report", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "is not a folder" in err and "\n" not in err


def _text(path: Path) -> str:
    return " ".join(" ".join(_parse(path).text).split())


def test_geometry_views_read_the_scan_summary(fake_out):
    from embscope.summary import read_summary

    text = _text(fake_out / "index.html")
    s = read_summary(json.loads((fake_out / "summary.json").read_text()))
    g = s.sections.tokens.geometry
    f = g.flagged
    share = f"{100 * f.normal_share:.2f} %"
    assert f"{f.normal:,} normal rows ({share})" in text
    assert "normal_share=" not in text and "by_category" not in text  # no raw dict
    assert f"score ≥ {g.threshold:g}" in text
    # kNN record and the reference note
    assert f"recall@k {g.knn.recall_at_k:g}" in text
    html = (fake_out / "index.html").read_text(encoding="utf-8")
    table = html[html.index('id="script-table"'):]
    table = table[:table.index("</table>")]
    assert table.count("<tr>") == len(g.per_script) + 1
    # The most under-trained normal tokens, raw text, inert
    chips = html[html.index('id="top-undertrained"'):]
    chips = chips[:chips.index("</div>")]
    assert chips.count('class="chip"') == len(g.top_undertrained)
    assert "&amp;lt;" not in chips and "&amp;gt;" not in chips  # not double-escaped
    assert "\\u202eevil\\u202c" in chips  # bidi override shown as code points


def test_numbers_have_fixed_precision_and_no_negative_zero():
    from embscope.report.data import _num
    from embscope.report.render import fmt, pct

    assert fmt(3.0e-4) == "0.0003" and fmt(-0.0) == "0" and fmt(-1e-12 * 0) == "0"
    assert fmt(-4e-5) == "-0.00004" and fmt(2.4257e-06) == "0.0000024"  # plain decimals, never 2.43e-6
    assert fmt(3.29441) == "3.294" and fmt(12.3456) == "12.35" and fmt(2424.39) == "2,424"
    assert pct(0.00035) == "0.035 %" and pct(0.08946) == "8.95 %" and pct(0) == "0 %"
    assert _num(-1e-9) == -1e-9 and str(_num(-0.0)) == "0.0" and _num(float("nan")) is None


@pytest.mark.slow
def test_cost_table_lists_every_language_most_expensive_first(smollm2_audit):
    import polars as pl

    data = json.loads(_parse(smollm2_audit / "index.html").scripts[0][1])
    cost = data["languages"]["cost"]
    rows = pl.read_parquet(smollm2_audit / "languages.parquet").height
    assert len(cost["rows"]) == rows
    parity = [r["parity"] if r["parity"] is not None else -1 for r in cost["rows"]]
    assert parity == sorted(parity, reverse=True)
    assert cost["n_double"] == sum(p >= 2 for p in parity) > 0
    for col in ("parity", "fertility", "mean_in_norm", "flagged_share", "mean_within_sim"):
        assert col in cost["columns"], col
    text = _text(smollm2_audit / "index.html")
    corpora = pl.read_parquet(smollm2_audit / "languages.parquet")["corpus"].n_unique()
    assert cost["pairs"] == ("language × corpus pairs" if corpora > 1 else "languages")  # what a row is
    assert f"{cost['n_double']} of {rows} {cost['pairs']} pay double or more" in text


@pytest.mark.slow
def test_extension_cards_use_the_real_keys(smollm2_audit):
    from embscope.summary import read_summary

    ext = read_summary(json.loads((smollm2_audit / "summary.json").read_text())).sections.extension
    text = _text(smollm2_audit / "index.html")
    check = ext.tokenization_check.corpus
    assert (f"Tokens added {ext.tokens_added} top {ext.top_n} terms by savings + {ext.intermediates} intermediate "
            f"tokens of their merge chains; written as merges; {check.cut} of {check.new_tokens:,} new-token "
            "occurrences in the corpus cut an old token") in text
    assert ext.form == "merges" and check.cut == 0 and ext.intermediates > 0
    assert f"of {ext.corpus_tokens:,} corpus tokens" in text and f"estimated before re-tokenizing: {ext.estimated_savings:,}" in text
    assert "KL measured on:" in text


def test_strategy_table_leads_with_the_score_and_the_recommended(fake_out, tmp_path):
    """The score --init auto ranks by and its parts come first, then fidelity, bits per byte and
    disturbance; the recommended row is first and marked."""
    import shutil

    from embscope.cli import main

    out = tmp_path / "s"
    shutil.copytree(fake_out, out)
    raw = json.loads((out / "summary.json").read_text())
    ext = raw["sections"]["extension"]
    base = {"name": "", "norm_percentile_median": 40.0, "norm_percentile_min": 1.0, "norm_percentile_max": 90.0,
            "nearest_cosine_median": 0.5, "kl": 1e-5, "kl_max": 1e-4, "new_token_mass": 1e-5,
            "new_token_mass_max": 1e-4, "examples": {}}
    ext["strategies"] = {
        "omp": {**base, "fidelity_kl": 1.25, "fidelity_kl_p90": 2.5, "fidelity_top1": 0.5,
                "bits_per_byte": 2.4, "bits_per_byte_change": -0.1, "tokens_per_byte_change": -0.05,
                "score": 0.01, "score_corpus": -0.1, "score_general": 1e-5, "score_reading": 0.11},
        "mean": {**base, "fidelity_kl": 3.5, "fidelity_kl_p90": 6.0, "fidelity_top1": 0.25,
                 "bits_per_byte": 2.6, "bits_per_byte_change": 0.1, "tokens_per_byte_change": -0.05,
                 "score": 0.4, "score_corpus": 0.1, "score_general": 1e-5, "score_reading": 0.3}}
    ext["recommended"], ext["recommended_why"] = "omp", "omp: fidelity KL 1.25 nats at the term"
    ext["bits_per_byte_original"] = {"bits_per_byte": 2.5, "tokens_per_byte": 0.25, "bytes": 100, "texts": 3}
    (out / "summary.json").write_text(json.dumps(raw))
    assert main(["report", str(out)]) == 0
    html = (out / "index.html").read_text(encoding="utf-8")
    table = html[html.index('id="strategy-table"'):]
    heads = re.findall(r'<th class="n" data-col="([^"]+)" title="([^"]*)"', table[:table.index("Score (bits per byte, lower is better) =")])
    assert all(len(tip) > 10 for _, tip in heads)  # every figure's header says what it is
    heads = [k for k, _ in heads]  # the strategy tables, in page order
    table = table[:table.index("</table>")]
    assert heads[:4] == ["score", "score_corpus", "score_general", "score_reading"]
    assert heads.index("score_reading") < heads.index("fidelity_kl") < heads.index("bits_per_byte_change")
    assert heads.index("bits_per_byte_change") < heads.index("kl") < heads.index("norm_percentile_median")
    rows = re.findall(r"<tr[^>]*><td><b>([^<]+)</b>", table)
    assert rows == ["omp", "mean"] and 'class="recommended"' in table
    text = _text(out / "index.html")
    assert "Recommended initialisation omp omp: fidelity KL 1.25 nats at the term" in text
