"""The report in a real browser: headless Chromium opens index.html over file://.

Checks: no severe console errors, every section drawn, the hostile tokens never ran (they would set
``window.__pwned`` or call ``alert``), invisible characters shown as code points. A screenshot is
kept under tmp_path, and copied to ``reports/test-artifacts/`` when ``EMBSCOPE_ARTIFACTS`` is set.

Needs Debian's ``chromium`` and ``chromium-driver`` plus ``pip install selenium``; skipped with a
message otherwise.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest


pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1400,1000", "--hide-scrollbars"]
# Runs before any page script: records alert/confirm/prompt instead of blocking on them.
TRAP = """
window.__alerts = [];
window.alert = function (m) { window.__alerts.push(String(m)); };
window.confirm = window.alert; window.prompt = window.alert;
"""


def _binary(names: list[str]) -> str | None:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed: pip install selenium")
    chrome = _binary(["chromium", "chromium-browser", "google-chrome"])
    driver_bin = _binary(["chromedriver", "chromium-driver"])
    if not chrome or not driver_bin:
        pytest.skip("headless Chromium not found: apt-get install -y chromium chromium-driver")
    os.environ.setdefault("SE_OFFLINE", "true")  # never let selenium fetch a driver
    opts = webdriver.ChromeOptions()
    opts.binary_location = chrome
    for flag in FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chrome-profile')}")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    from selenium.webdriver.chrome.service import Service

    try:
        drv = webdriver.Chrome(service=Service(executable_path=driver_bin), options=opts)
    except Exception as err:  # a broken install: say so instead of erroring the suite
        pytest.skip(f"headless Chromium did not start: {str(err).splitlines()[0]}")
    drv.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": TRAP})
    yield drv
    drv.quit()


def open_report(drv, html: Path) -> list[dict]:
    """Load the page, wait until the script finished drawing; return the console log."""
    drv.get(html.resolve().as_uri())
    deadline = time.time() + 20
    while time.time() < deadline:
        if drv.execute_script("return document.documentElement.getAttribute('data-rendered')") == "1":
            break
        time.sleep(0.1)
    return drv.get_log("browser")


def screenshot(drv, name: str, tmp_path: Path) -> Path:
    """Full-page PNG under tmp_path (and reports/test-artifacts/ when EMBSCOPE_ARTIFACTS is set)."""
    height = drv.execute_script("return document.documentElement.scrollHeight")
    drv.set_window_size(1400, min(int(height) + 40, 12000))
    path = tmp_path / f"{name}.png"
    drv.save_screenshot(str(path))
    drv.set_window_size(1400, 1000)
    if os.environ.get("EMBSCOPE_ARTIFACTS"):
        dest = ROOT / "reports" / "test-artifacts"
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, dest / path.name)
    return path


def check_page(drv, html: Path, tmp_path: Path, name: str) -> dict:
    log = open_report(drv, html)
    severe = [e for e in log if e.get("level") == "SEVERE"]
    assert not severe, severe
    assert drv.execute_script("return document.documentElement.getAttribute('data-rendered')") == "1"
    assert drv.execute_script("return window.__pwned") is None
    assert drv.execute_script("return window.__alerts") == []
    shot = screenshot(drv, name, tmp_path)
    assert shot.stat().st_size > 10_000
    return {"log": log, "shot": shot}


@pytest.fixture
def hostile_report(hostile_run) -> Path:
    """The page of the shared hostile run (tests/conftest.py's ``hostile_run``), opened, never changed."""
    return hostile_run / "index.html"


def test_hostile_report_in_browser(browser, tmp_path, hostile_report):
    import json

    import polars as pl

    from tests.test_report import HOSTILE

    html = hostile_report
    out = html.parent
    check_page(browser, html, tmp_path, "report-hostile")
    js = browser.execute_script
    for sid in ("overview", "tokens", "languages", "extension", "context"):
        assert js(f"return !!document.getElementById('{sid}')"), sid
    tokens = pl.read_parquet(out / "tokens.parquet")
    n_normal = tokens.filter(pl.col("category") == "normal").height
    visible = "return Array.from(document.querySelectorAll('#top-table tbody tr')).filter(r => !r.hidden).length"
    assert js(visible) == min(n_normal, 25)  # the first rows, no inner scroll box: a button shows the rest
    js("document.getElementById('top-more').click()")
    assert js(visible) == min(n_normal, 300)
    js("document.getElementById('top-more').click()")
    assert js("return document.getElementById('top-category').value") == "=normal"
    assert js("return document.querySelectorAll('#hist-in_norm svg rect').length") > 10
    assert js("return document.querySelectorAll('#wavelength-chart svg circle').length") == 4  # head_dim 8
    assert js("return document.querySelectorAll('#kv-chart svg rect').length") >= 4
    assert js("return document.getElementById('map-canvas').width") > 0
    assert "Showing" not in js("return document.getElementById('map-note').textContent")
    card = js("return document.getElementById('flagged-card').innerText")
    assert "normal rows (" in card
    # Hostile tokens appear as visible text, not markup: exactly our two <script> elements.
    assert js("return document.scripts.length") == 2
    assert js("return document.images.length") == 0
    cells = js("return Array.from(document.querySelectorAll('#top-table .tok')).slice(0, 7).map(e => e.textContent)")
    from embscope.report import display_token

    assert sorted(cells) == sorted(display_token(h) for h in HOSTILE)
    probe = ["a\u202eb", "\x00\x1b", "x\ny", "\ud800", "\U000e0041", "<b>", "\u2066i\u2069"]
    # Sent as ASCII JSON: the WebDriver wire cannot carry a lone surrogate as such.
    got = js("return JSON.parse(arguments[0]).map(window.embscopeDisplayToken)", json.dumps(probe))
    assert got == [display_token(s) for s in probe]
    # Search filters the table.
    box = browser.find_element("id", "top-search")
    box.send_keys("img")
    assert js("return Array.from(document.querySelectorAll('#top-table tbody tr')).filter(r => !r.hidden).length") == 1
    js("var b = document.getElementById('top-search'); b.value = ''; b.dispatchEvent(new Event('input'));")
    # Hovering the map shows a token (a small vocabulary leaves gaps: sweep until one is hit).
    js("""const c = document.getElementById('map-canvas'); c.scrollIntoView();
          const r = c.getBoundingClientRect();
          for (let y = 3; y < r.height; y += 5) for (let x = 3; x < r.width; x += 5) {
            c.dispatchEvent(new MouseEvent('mousemove', {clientX: r.left + x, clientY: r.top + y, bubbles: true}));
            if (!document.getElementById('map-tip').hidden) return; }""")
    assert not js("return document.getElementById('map-tip').hidden")
    assert js("return window.__pwned") is None and js("return window.__alerts") == []


def test_bare_report_says_why(browser, tmp_path, hostile_bare_run):
    html = hostile_bare_run / "index.html"  # build_hostile_run(scan=False, languages=False), shared with test_report
    check_page(browser, html, tmp_path, "report-bare")
    text = browser.execute_script("return document.body.innerText")
    assert "no data: no corpus given" in text


@pytest.mark.slow
def test_real_demo_audit(browser, tmp_path, smollm2_audit):
    """The SmolLM2-135M demo audit (medical + UDHR, map on), opened in the browser."""
    import json

    from embscope.summary import read_summary

    html = smollm2_audit / "index.html"
    geo = read_summary(json.loads((smollm2_audit / "summary.json").read_text())).sections.tokens.geometry
    t = time.perf_counter()
    check_page(browser, html, tmp_path, "report-smollm2-135m")
    open_s = time.perf_counter() - t
    js = browser.execute_script
    text = js("return document.body.innerText")
    assert "smollm2-135m" in text and "49,152 × 576" in text
    assert js("return document.querySelectorAll('#hist-in_norm svg rect').length") > 10
    assert js("return document.querySelectorAll('#wavelength-chart svg circle').length") == 32
    assert "no data: the output matrix is tied to the input embedding" in text
    f = geo.flagged
    card = js("return document.getElementById('flagged-card').innerText")
    assert f"{f.normal:,} normal rows (" in card and "normal_share" not in card
    assert js("return document.querySelectorAll('#script-table tbody tr').length") == len(geo.per_script) > 5
    if geo.verified_undertrained is not None:  # verified: the two lists apart, not the plain top list
        assert js("return document.querySelectorAll('#verified-undertrained .chip').length") == \
            len(geo.verified_undertrained.rows)
        assert js("return document.querySelectorAll('#candidates .chip').length") == \
            (len(geo.candidates.rows) if geo.candidates is not None else 0)
        assert js("return document.querySelectorAll('#top-undertrained').length") == 0
    else:
        assert js("return document.querySelectorAll('#top-undertrained .chip').length") == len(geo.top_undertrained)
    shown = js("return Array.from(document.querySelectorAll('#top-table tbody tr')).filter(r => !r.hidden).map(r => r.cells[3].textContent)")
    assert shown and set(shown) == {"normal"}
    knn = js("return document.getElementById('knn-card').innerText")
    assert "recall@k" in knn and ("exact search" in knn if geo.knn.method == "exact" else "decisions are exact" in knn)
    # words for people: every figure's header says what it holds, the report's own words explained
    assert js("return Array.from(document.querySelectorAll('#top-table th, #double-table th, #cand-table th'))"
              ".filter(th => th.innerText.trim()).every(th => th.title.length > 5)")
    assert js("return document.querySelectorAll('#glossary dt').length") >= 10
    assert "what these words mean" in js("return document.getElementById('flagged-card').innerText")
    # pairs named as what they are: one tokenizer, two corpora
    assert "language × corpus pairs pay double" in js("return document.getElementById('double-note').innerText")
    assert "Vietnamese (vie)" in text and "Thai (tha) · udhr *" in text
    # the KV table stops one row past SmolLM2's 8,192, marked
    rows = js("return Array.from(document.querySelectorAll('#kv-table tbody tr')).map(r => r.className)")
    assert rows == ["", "", "past"]
    # one saving column: measured for the added terms, ≈ estimates for the others
    heads = js("return Array.from(document.querySelectorAll('#cand-table th')).map(th => th.innerText)")
    assert heads.count("tokens saved") == 1 and "savings_tokens" not in heads
    # the map finds a token, zooms, resets
    box = browser.find_element("id", "map-search")
    box.send_keys("Protection")
    assert js("return document.getElementById('map-found').innerText").split(" ")[0] not in ("", "no")
    assert no_inner_scroll(js) == []
    # The cost table: every language, most expensive first; the map is sampled.
    assert js("return document.querySelectorAll('#double-table tbody tr').length") >= 50
    note = js("return document.getElementById('map-note').textContent")
    assert note.startswith("Showing 30,000 of 49,152 tokens")
    assert html.stat().st_size < 8_000_000 and open_s < 20


# ------------------------------------------------------------------------------------------------
# Every command's report: the bottom line on the first screen, its own section first, the sections
# it did not run absent, and every count the same on each card, caption and list.


def _summary(folder: Path) -> dict:
    import json

    return json.loads((folder / "summary.json").read_text("utf-8"))


def check_bottom_line(drv, folder: Path, tmp_path: Path, name: str, order: list[str]) -> dict:
    """Open ``folder``'s report: the bottom line is the page's first section, on the first screen,
    with summary.json's verdicts word for word; then exactly ``order``'s sections, in that order
    (the nav too)."""
    s = _summary(folder)
    check_page(drv, folder / "index.html", tmp_path, name)
    js = drv.execute_script
    assert js("return document.querySelector('main > section').id") == "bottom-line"
    assert js("return document.getElementById('bottom-line').getBoundingClientRect().top") < 400
    shown = js("return Array.from(document.querySelectorAll('#bottom-line li.verdict')).map(li => "
               "[li.querySelector('.text').textContent, (li.querySelector('.next code') || {}).textContent || null])")
    want = [[v["text"], v["next"]] for v in s["bottom_line"]["verdicts"]]
    assert shown == want and want
    assert js("return Array.from(document.querySelectorAll('main > section')).map(e => e.id)") == ["bottom-line", *order]
    assert js("return Array.from(document.querySelectorAll('header nav a')).map(a => a.getAttribute('href'))") == \
        ["#bottom-line", *(f"#{o}" for o in order), "#glossary"]  # the words the report uses, last
    return s


def check_token_counts(drv, s: dict) -> None:
    """The scan's counts on the overview cards, the flagged card, the verification card, the lists,
    the map caption and the per-script table: the record's numbers, adding up."""
    js = drv.execute_script
    geo = s["sections"]["tokens"]["geometry"]
    f = geo["flagged"]
    assert f["total"] == f["verified"] + f["cleared"] + f["candidates"]

    def text(sel):
        return js(f"return document.querySelector({sel!r}).textContent")

    assert text("#overview-flagged .v") == f"{f['total']:,}"  # the bottom line's count, not the normal rows'
    assert text("#overview-flagged .h").startswith(f"flagged rows in all: {f['normal']:,} normal tokens")
    states = text("#flag-states")
    assert states.startswith(f"{f['total']:,} flagged rows in all: {f['verified']:,} verified under-trained · "
                             f"{f['cleared']:,} cleared by prompting · {f['candidates']:,} not checked")
    pills = js("return Array.from(document.querySelectorAll('#fired-on .pill')).map(p => p.textContent)")
    fired = {k: int(v.replace(",", "")) for k, v in (p.rsplit(" ", 1) for p in pills)}
    assert fired == f["by_reason"] and max(fired.values()) <= f["normal"]
    assert sum(int(r) for r in js("return Array.from(document.querySelectorAll('#script-table tbody tr'))"
                                  ".map(r => r.cells[2].textContent.replace(/,/g, ''))")) == f["normal"]
    vf = geo["verification"]
    if vf and vf["n_checked"]:
        assert text("#overview-verified .v") == f"{f['verified']:,}"
        kinds = [(vf["n_verified_undertrained"], vf["n_checked"]), (vf["family_verified"], vf["family_checked"]),
                 ((vf["specials"] or {}).get("verified"), (vf["specials"] or {}).get("checked"))]
        got, of = sum(g or 0 for g, o in kinds if o), sum(o for _, o in kinds if o)
        assert got == f["verified"] and text("#verify-card .v") == f"{got:,} of {of:,} checked"
        assert js("return document.querySelectorAll('#verified-undertrained .chip').length") == \
            min(geo["verified_undertrained"]["count"], 500) == f["verified"]
    assert js("return document.querySelectorAll('#candidates .chip, #top-undertrained .chip').length") == \
        min(f["candidates"], 30) or geo["verification"] is None
    note = text("#map-note") if js("return !!document.getElementById('map-note')") else ""
    if "Showing" in note:
        assert f"every flagged row ({f['total']:,})" in note


#: the UDHR languages (English, the reference, among them) of ``demo_reports``'s fertility run, in
#: three scripts, and of its compare run, in five (two counted per character): a few languages, not
#: all 512, since the report's layout is the point
FERTILITY_LANGS = ("eng", "fra", "hin", "amh")
COMPARE_LANGS = ("eng", "tha", "vie", "jpn", "amh")


def udhr_subset(folder: Path, languages) -> Path:
    """A corpus folder of the shipped UDHR's ``languages`` and its languages.json."""
    folder.mkdir()
    for name in (*(f"{lang}.jsonl" for lang in languages), "languages.json"):
        (folder / name).write_bytes((ROOT / "corpora" / "udhr" / name).read_bytes())
    return folder


@pytest.fixture(scope="module")
def demo_reports(tmp_path_factory, smollm2_graph):
    """scan, check, extend, fertility and compare run on the demo model (and tokenizers) as a user
    runs them; the language corpora are under ``udhr-fertility`` and ``udhr-compare``."""
    from embscope.cli import main

    root = tmp_path_factory.mktemp("commands")
    runs = {
        "scan": ["scan", "--model", "smollm2-135m", "--no-map", "--verify", "4"],
        "check": ["check", "--model", "smollm2-135m", "--data", str(ROOT / "corpora/chat/medical-chat.jsonl")],
        "extend": ["extend", "--model", "smollm2-135m", "--corpus", "medical", "--top", "20", "--init", "subword-mean",
                   "--no-diagnostics"],
        "fertility": ["fertility", "-t", "gpt2", "--corpus", str(udhr_subset(root / "udhr-fertility", FERTILITY_LANGS))],
        "compare": ["compare", "-t", "gpt2", "-t", "o200k_base",
                    "--corpus", str(udhr_subset(root / "udhr-compare", COMPARE_LANGS))],
    }
    for name, argv in runs.items():
        assert main([*argv, "--out", str(root / name), "-q"]) == 0, name
    return root


@pytest.mark.slow
def test_every_command_report_leads_with_its_bottom_line(browser, tmp_path, smollm2_audit, demo_reports):
    """audit, scan, check, extend, fertility and compare: the bottom line first, then the command's
    own section, the overview, and only the sections the command ran."""
    js = browser.execute_script
    s = check_bottom_line(browser, smollm2_audit, tmp_path, "bl-audit",
                          ["overview", "tokens", "languages", "extension", "context"])
    check_token_counts(browser, s)
    assert [v["section"] for v in s["bottom_line"]["verdicts"]] == ["tokens", "languages", "extension", "context"]

    s = check_bottom_line(browser, demo_reports / "scan", tmp_path, "bl-scan", ["tokens", "overview"])
    check_token_counts(browser, s)
    assert "--no-map skipped the map" in js("return document.getElementById('map-panel').textContent")
    assert not js("return !!document.getElementById('atlas-hint')")

    s = check_bottom_line(browser, demo_reports / "check", tmp_path, "bl-check", ["readiness", "overview", "tokens"])
    check_token_counts(browser, s)
    findings = s["sections"]["readiness"]["findings"]
    assert js("return document.querySelectorAll('#findings-table tbody tr').length") == len(findings)
    assert "special-row-untrained" not in js("return document.body.innerText")
    assert "`check` does not lay out the map" in js("return document.getElementById('map-panel').textContent")

    s = check_bottom_line(browser, demo_reports / "extend", tmp_path, "bl-extend", ["extension", "overview"])
    ext = s["sections"]["extension"]
    assert js("return document.querySelector('#saved-card .v').textContent") == f"{ext['tokens_saved']:,}"
    assert f"save {100 * ext['saved_fraction']:.1f} %" in s["bottom_line"]["verdicts"][0]["text"]

    for name, tokenizers in (("fertility", 1), ("compare", 2)):
        s = check_bottom_line(browser, demo_reports / name, tmp_path, f"bl-{name}", ["languages", "overview"])
        assert not js("return !!document.querySelector('#overview .card')")  # no model: no matrix cards
        costs = s["sections"]["languages"]["costs"]
        # one verdict per tokenizer's costs, and per pair of tokenizers which is cheaper where
        pairs = s["sections"]["languages"].get("comparisons") or []
        assert len(costs) == tokenizers and len(pairs) == tokenizers * (tokenizers - 1) // 2
        assert len(s["bottom_line"]["verdicts"]) == tokenizers + len(pairs)
        note = js("return document.getElementById('double-note').textContent")
        assert note.startswith(f"{sum(c['double'] for c in costs):,} of ")


def test_diff_report_leads_with_what_training_changed(browser, tmp_path, finetune_run):
    from embscope.cli import main

    out = tmp_path / "diff"
    assert main(["diff", str(finetune_run["ext"]), str(finetune_run["lora"]), "--languages", "none", "--out",
                 str(out), "-q"]) == 1
    s = check_bottom_line(browser, out, tmp_path, "bl-diff", ["diff", "overview"])
    d = s["sections"]["diff"]
    js = browser.execute_script
    assert js("return document.querySelectorAll('#diff-findings tbody tr').length") == len(d["findings"])
    assert js("return document.querySelector('#diff-card-new .v').textContent") == \
        f"{d['matrices']['input']['new_moved']:,} / {d['new_rows']:,}"
    verdict = s["bottom_line"]["verdicts"][0]
    assert verdict["section"] == "diff" and verdict["level"] == "act"
    assert f"{d['matrices']['input']['new_moved']:,} of {d['new_rows']:,} new rows learnt" in verdict["text"]


def no_inner_scroll(js) -> list[str]:
    """Tables and their boxes that would need a scroll bar of their own (a hidden column), with
    every folded part of the page opened."""
    js("document.querySelectorAll('details').forEach(d => d.open = true)")
    return js("""return Array.from(document.querySelectorAll('.tablewrap, table.data, table.heat'))
        .filter(e => e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1
                     || e.getBoundingClientRect().right > e.closest('section').getBoundingClientRect().right + 1)
        .map(e => e.id || (e.querySelector('table') || {}).id || e.className)""")


def test_compare_report_words_and_pairs(browser, tmp_path, demo_reports):
    """Two tokenizers on UDHR (English, Thai, Vietnamese, Japanese, Amharic, with the corpus's
    languages.json: ``demo_reports``'s compare): names beside codes, Thai and Japanese ranked apart
    on fertility, the doubles counted as language × tokenizer pairs, every header with a tooltip,
    every column in view."""
    assert COMPARE_LANGS == ("eng", "tha", "vie", "jpn", "amh")
    out = demo_reports / "compare"
    check_page(browser, out / "index.html", tmp_path, "report-compare")
    js = browser.execute_script
    heads = js("return Array.from(document.querySelectorAll('#lang-heat tbody tr')).map(r => r.innerText)")
    sep = next(i for i, h in enumerate(heads) if h.startswith("* counted per character"))
    words, apart = heads[:sep], heads[sep + 1:]
    assert any(h.startswith("Vietnamese (vie)") for h in words) and any(h.startswith("English (eng)") for h in words)
    assert {h.split(" (")[0] for h in apart} == {"Thai", "Japanese"} and all(" *" in h for h in apart)
    note = js("return document.getElementById('double-note').innerText")
    import polars as pl

    t = pl.read_parquet(out / "languages.parquet")
    n_double = t.filter(pl.col("parity") >= 2).height
    langs = t.filter(pl.col("parity") >= 2)["language"].n_unique()
    assert note.startswith(f"{n_double} of 10 language × tokenizer pairs pay double") and f"{langs} of 5 languages" in note
    assert js("return Array.from(document.querySelectorAll('#double-table th')).every(th => th.title.length > 5)")
    cells = js("return Array.from(document.querySelectorAll('#double-table tbody tr')).map(r => r.cells[1].innerText)")
    assert "Thai (tha)" in cells and all(c != "tha" for c in cells)
    assert no_inner_scroll(js) == []
    # the metric switch keeps the per-character languages apart only where a word is the unit
    js("var s = document.getElementById('lang-metric'); s.value = 'parity'; s.dispatchEvent(new Event('change'));")
    heads = js("return Array.from(document.querySelectorAll('#lang-heat tbody tr')).map(r => r.innerText)")
    assert not any(h.startswith("* counted per character") for h in heads)
    # plain numbers: the page's formatter writes what embscope.report.render.fmt writes, never 2.43e-6
    from embscope.report.render import fmt

    values = [2.4257e-6, -4e-5, 0.00035, 1.4e-6, 3e-12, 0.28, 1234.6, 3.29441]
    got = js(f"return {values}.map(v => window.embscopeFmt(v))")
    assert got == [fmt(v) for v in values] and got[:2] == ["0.0000024", "-0.00004"]
    assert not any("e" in g for g in got)


def test_gemma_norms_all_equal_and_context_in_words(browser, tmp_path):
    """Gemma-3-270M's input norms all lie in 1.028–1.035: the histogram says in words that they are
    equal. Its GGUF config states no vocab_size: the context section counts the matrix's 262,144
    rows (embedding 168 M of ~268 M parameters, as Google publishes 170 M of 270 M), sized in the
    stored Q8_0, and the KV table stops one row past the model's 32,768."""
    from embscope.runner import run

    res = run("gemma3-270m", sections=["context", "tokens"], scan=False, out=tmp_path / "g")
    ctx = res.summary.sections.context
    assert ctx.vocab_size == 262_144 and ctx.weight_dtype == "Q8_0"
    assert ctx.embedding_bytes == 262_144 * 640 * 34 // 32 and 0.6 < ctx.embedding_share < 0.65
    assert list(ctx.kv_bytes["bf16"]) == [4096, 8192, 32768, 65536]
    check_page(browser, res.folder / "index.html", tmp_path, "report-gemma-norms")
    js = browser.execute_script
    note = js("return document.querySelector('#hist-in_norm .equal-norms').innerText")
    assert note.startswith("The norms are all about equal: every row lies between 1.028 and 1.035")
    assert "flagged rows in orange" not in js("return document.getElementById('hist-in_norm').innerText")
    rows = js("return Array.from(document.querySelectorAll('#kv-table tbody tr')).map(r => [r.className, r.innerText])")
    assert [c for c, _ in rows] == ["", "", "", "past"] and "past the model's context (32,768)" in rows[-1][1]
    assert "Q8_0" in js("return document.getElementById('share-note').innerText")
    key = js("return document.querySelector('#wavelength-chart svg').textContent")
    assert "orange" not in key  # no pair is drawn orange: the trained context is unknown
    assert no_inner_scroll(js) == []


def test_language_intervals_and_verdicts_in_browser(browser, tmp_path, demo_reports):
    """One tokenizer (``demo_reports``'s fertility on English, French, Hindi, Amharic): an error bar
    on every language's bar, spanning its interval on the bar's scale. Two, on the same languages:
    an interval under each heatmap cell and a winner per language."""
    import polars as pl

    from embscope.cli import main

    assert FERTILITY_LANGS == ("eng", "fra", "hin", "amh")
    corpus = demo_reports / "udhr-fertility"
    out = demo_reports / "fertility"
    check_page(browser, out / "index.html", tmp_path, "report-fertility-intervals")
    js = browser.execute_script
    bars = js("return Array.from(document.querySelectorAll('#lang-bars .barrow')).map(r => {"
              " var e = r.querySelector('.err'), t = r.querySelector('.track'), f = r.querySelector('.fill');"
              " return e ? [r.querySelector('.lbl').innerText, e.getBoundingClientRect().left - t.getBoundingClientRect().left,"
              " e.getBoundingClientRect().width, f.getBoundingClientRect().width, t.getBoundingClientRect().width] : null; })")
    t = pl.read_parquet(out / "languages.parquet")
    assert len(bars) == t.height and all(b is not None for b in bars)
    top = max(max(t["fertility"]), max(t["fertility_hi"]))
    for label, left, width, fill, track in bars:
        r = t.filter(pl.col("language") == label.split("(")[-1].rstrip(")").strip()).row(0, named=True)
        assert left == pytest.approx(r["fertility_lo"] / top * track, abs=1.5)
        assert left + width == pytest.approx(r["fertility_hi"] / top * track, abs=1.5)
        assert left <= fill <= left + width + 1  # the bar's end lies inside its interval
    out = tmp_path / "cmp"
    assert main(["compare", "-t", "gpt2", "-t", "o200k_base", "--corpus", str(corpus), "--out", str(out)]) == 0
    check_page(browser, out / "index.html", tmp_path, "report-compare-verdicts")
    cells = js("return Array.from(document.querySelectorAll('#lang-heat tbody td .ci')).length")
    assert cells == 8
    rows = js("return Array.from(document.querySelectorAll('#comparison-table tbody tr')).map(r => r.cells[5].innerText)")
    verdicts = pl.read_parquet(out / "comparisons.parquet")["verdict"].to_list()
    assert sorted(rows) == sorted(v.removesuffix(" cheaper") for v in verdicts)
