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

from embscope.report import render

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


def test_fake_report_in_browser(browser, tmp_path):
    from tests.test_report import HOSTILE, build_fake_output

    out = build_fake_output(tmp_path / "fake-135m", 5000)
    html = render(out)
    check_page(browser, html, tmp_path, "report-fake")
    js = browser.execute_script
    for sid in ("overview", "tokens", "languages", "extension", "context"):
        assert js(f"return !!document.getElementById('{sid}')"), sid
    # Charts and tables drawn.
    # The score table: TOP_N normal tokens shown by default, the other categories on request.
    assert js("return document.querySelectorAll('#top-table tbody tr').length") == 600
    assert js("return Array.from(document.querySelectorAll('#top-table tbody tr')).filter(r => !r.hidden).length") == 300
    assert js("return document.getElementById('top-category').value") == "=normal"
    cats = js("return Array.from(document.querySelectorAll('#top-table tbody tr')).filter(r => !r.hidden).map(r => r.cells[3].textContent)")
    assert set(cats) == {"normal"}
    assert js("return document.querySelectorAll('#hist-in_norm svg rect').length") > 10
    assert js("return document.querySelectorAll('#hist-out_norm svg rect').length") > 10
    assert js("return document.querySelectorAll('#wavelength-chart svg circle').length") == 32
    assert js("return document.querySelectorAll('#kv-chart svg rect').length") >= 10
    assert js("return document.querySelectorAll('#lang-heat td').length") == 20
    assert js("return document.querySelectorAll('#cand-table tbody tr').length") == 7
    assert js("return document.getElementById('map-canvas').width") > 0
    assert "Showing" not in js("return document.getElementById('map-note').textContent")  # 5000 < 30k
    assert js("return document.body.innerText.indexOf('no data:')") == -1
    # Scan summary views: flagged card, by-script table, most under-trained chips.
    card = js("return document.getElementById('flagged-card').innerText")
    assert "normal rows (" in card and "special 1 of 1" in card and "score ≥ 2.5" in card
    assert js("return document.querySelectorAll('#script-table tbody tr').length") == 2
    assert js("return document.querySelectorAll('#top-undertrained .chip').length") == 30
    assert js("return document.querySelector('#top-undertrained .tok').textContent") == HOSTILE[1]
    # Numbers: fixed decimals, never "-0".
    nums = js("return Array.from(document.querySelectorAll('#top-table td.n')).map(td => td.textContent)")
    assert nums and not [t for t in nums if t.startswith("-0") and not t.strip("-0.")]
    assert all(len(t.split(".")[1]) in (3, 4) for t in nums if "." in t), nums[:10]
    # Hostile tokens appear as visible text, not markup: exactly our two <script> elements.
    assert js("return document.scripts.length") == 2
    assert js("return document.images.length") == 0
    cells = js("return Array.from(document.querySelectorAll('#top-table .tok')).slice(0, 7).map(e => e.textContent)")
    assert cells[0] == HOSTILE[0] and cells[1] == HOSTILE[1]
    assert cells[3] == "\\u202eevil\\u202c" and cells[4] == "nul\\x00byte" and cells[6] == "line\\u2028sep"
    # JS and Python apply the same display rule.
    from embscope.report import display_token

    probe = ["a\u202eb", "\x00\x1b", "x\ny", "\ud800", "\U000e0041", "<b>", "\u2066i\u2069"]
    import json

    # Sent as ASCII JSON: the WebDriver wire cannot carry a lone surrogate as such.
    got = js("return JSON.parse(arguments[0]).map(window.embscopeDisplayToken)", json.dumps(probe))
    assert got == [display_token(s) for s in probe]
    # Search filters the table; sorting reorders it.
    box = browser.find_element("id", "top-search")
    box.send_keys("img")
    assert js("return Array.from(document.querySelectorAll('#top-table tbody tr')).filter(r => !r.hidden).length") == 1
    js("var b = document.getElementById('top-search'); b.value = ''; b.dispatchEvent(new Event('input'));")
    assert js("return Array.from(document.querySelectorAll('#top-table tbody tr')).filter(r => !r.hidden).length") == 300
    # The category filter brings back the special, byte, padding... rows.
    js("var s = document.getElementById('top-category'); s.value = '*'; s.dispatchEvent(new Event('change'));")
    assert js("return Array.from(document.querySelectorAll('#top-table tbody tr')).filter(r => !r.hidden).length") == 600
    js("var s = document.getElementById('top-category'); s.value = '!normal'; s.dispatchEvent(new Event('change'));")
    assert set(js("return Array.from(document.querySelectorAll('#top-table tbody tr')).filter(r => !r.hidden).map(r => r.cells[3].textContent)")) == {"special", "unreachable", "undecodable", "byte", "padding"}
    js("var s = document.getElementById('top-category'); s.value = '=normal'; s.dispatchEvent(new Event('change'));")
    # Sorting by id ascending puts the lowest normal id (1) first among the shown rows.
    js("document.querySelectorAll('#top-table th')[1].click()")
    js("document.querySelectorAll('#top-table th')[1].click()")
    first = js("return Array.from(document.querySelectorAll('#top-table tbody tr')).filter(r => !r.hidden)[0].cells[1].textContent")
    assert first == "1"
    # Hovering the map shows a token.
    from selenium.webdriver.common.action_chains import ActionChains

    canvas = browser.find_element("id", "map-canvas")
    for dx, dy in [(0, 0), (30, 20), (-40, 10), (10, -30)]:
        ActionChains(browser).move_to_element_with_offset(canvas, dx, dy).perform()
        if not js("return document.getElementById('map-tip').hidden"):
            break
    assert not js("return document.getElementById('map-tip').hidden")
    assert js("return document.querySelector('#map-tip .tok') !== null")
    assert js("return window.__pwned") is None and js("return window.__alerts") == []


def test_big_vocab_is_sampled_and_quick(browser, tmp_path):
    from tests.test_report import build_fake_output

    out = build_fake_output(tmp_path / "big", 260_000, seed=2)
    t = time.perf_counter()
    html = render(out)
    render_s = time.perf_counter() - t
    t = time.perf_counter()
    check_page(browser, html, tmp_path, "report-260k")
    open_s = time.perf_counter() - t
    note = browser.execute_script("return document.getElementById('map-note').textContent")
    assert note.startswith("Showing 30,000 of 260,000 tokens")
    assert html.stat().st_size < 8_000_000
    assert render_s < 20 and open_s < 20, (render_s, open_s)


def test_bare_report_says_why(browser, tmp_path):
    import json

    out = tmp_path / "bare"
    out.mkdir()
    (out / "summary.json").write_text(json.dumps({"model": {"name": "bare"},
                                                  "skipped": {"languages": "no corpus given"}}))
    check_page(browser, render(out), tmp_path, "report-bare")
    text = browser.execute_script("return document.body.innerText")
    assert "no data: no corpus given" in text
    assert "no data: tokens.parquet not found" in text


@pytest.mark.slow
def test_real_demo_audit(browser, tmp_path):
    """The SmolLM2-135M demo audit end to end (UDHR corpus), opened in the browser.

    The geometry scan runs when :mod:`embscope.geometry` provides it, without the UMAP layout
    (the slowest part) so the test stays near a minute on two cores.
    """
    audit_mod = pytest.importorskip("embscope.audit", reason="embscope.audit is not there yet")
    options = audit_mod.AuditOptions(scan=True, layout=False, cache_dir=tmp_path / "knn-cache")
    t = time.perf_counter()
    out = audit_mod.audit("smollm2-135m", corpora=[ROOT / "corpora" / "udhr"], out=tmp_path / "smollm2-135m",
                          options=options)
    audit_s = time.perf_counter() - t
    html = Path(out) / "index.html"
    assert html.is_file()
    import json

    geo = json.loads((Path(out) / "summary.json").read_text(encoding="utf-8"))["geometry"]
    check_page(browser, html, tmp_path, "report-smollm2-135m")
    js = browser.execute_script
    text = js("return document.body.innerText")
    assert "smollm2-135m" in text and "49,152 × 576" in text
    assert js("return document.querySelectorAll('#hist-in_norm svg rect').length") > 10
    assert js("return document.querySelectorAll('#wavelength-chart svg circle').length") == 32
    assert js("return document.querySelectorAll('#lang-bars .barrow').length") >= 50  # one tokenizer: bars
    assert "no data: the output matrix is tied to the input embedding" in text
    # The scan's views, from the real summary keys.
    f = geo["flagged"]
    card = js("return document.getElementById('flagged-card').innerText")
    assert f"{f['normal']:,} normal rows (" in card and "normal_share" not in card
    assert f"special {f['by_category']['special']} of " in card
    assert js("return document.querySelectorAll('#script-table tbody tr').length") == len(geo["per_script"]) > 5
    assert js("return document.querySelectorAll('#top-undertrained .chip').length") == len(geo["top_undertrained"])
    shown = js("return Array.from(document.querySelectorAll('#top-table tbody tr')).filter(r => !r.hidden).map(r => r.cells[3].textContent)")
    assert shown and set(shown) == {"normal"}
    assert "recall@k" in js("return document.getElementById('knn-card').innerText")
    # The cost table: every language, most expensive first.
    assert js("return document.querySelectorAll('#double-table tbody tr').length") >= 50
    assert "no data: the 2-D layout was not computed" in text
    print(f"audit {audit_s:.1f} s")
