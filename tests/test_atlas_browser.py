"""The exported SmolLM2 token map in Embedding Atlas, in headless Chromium.

``embedding-atlas`` (the ``embscope[atlas]`` extra) serves the table on 127.0.0.1; the page must
show every row (49,152 points, 984 table pages of 50) and the neighbour column as the struct Atlas
reads (``{"ids": [...], "distances": [...]}``, the same ids as ``tokens.parquet``). Headless
Chromium has no WebGPU adapter with ``shader-f16``, so Atlas's map view says WebGPU is
unavailable; the table, the filters and the row counts come from its DuckDB all the same. The
screenshot is kept under tmp_path (and ``reports/test-artifacts/`` with ``EMBSCOPE_ARTIFACTS``).

Skipped, with the reason, when the extra or Chromium is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.test_browser import browser, screenshot  # noqa: F401  (the shared headless Chromium)

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def atlas_cli():
    pytest.importorskip("embedding_atlas", reason="the atlas extra is not installed: pip install 'embscope[atlas]'")
    exe = shutil.which("embedding-atlas") or str(Path(sys.executable).with_name("embedding-atlas"))
    if not Path(exe).exists():
        pytest.skip("the embedding-atlas command is not on PATH: pip install 'embscope[atlas]'")
    return exe


@pytest.fixture(scope="module")
def atlas_server(atlas_cli, smollm2_audit, tmp_path_factory):
    """``embedding-atlas`` on the exported table, on loopback; yields (url, table path)."""
    from embscope.cli import main

    out = tmp_path_factory.mktemp("atlas") / "atlas"
    assert main(["export", "atlas", str(smollm2_audit), "--out", str(out)]) == 0
    table = out / "tokens.parquet"
    port = _free_port()
    log = open(out.parent / "embedding-atlas.log", "w")
    env = dict(os.environ, HF_HUB_OFFLINE="1", NO_COLOR="1")
    # the command the report prints, plus loopback and a fixed port
    proc = subprocess.Popen([atlas_cli, str(table), "--x", "x", "--y", "y", "--text", "token",
                             "--neighbors", "neighbors", "--host", "127.0.0.1", "--port", str(port),
                             "--no-auto-port"], stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 180
        while True:
            try:
                with urllib.request.urlopen(url + "/data/metadata.json", timeout=2) as r:
                    meta = json.load(r)
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    log.flush()
                    pytest.fail("embedding-atlas did not start: "
                                + (out.parent / "embedding-atlas.log").read_text()[-2000:])
                time.sleep(0.5)
        yield url, table, meta
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_smollm2_map_opens_in_embedding_atlas(browser, atlas_server, tmp_path):  # noqa: F811
    import polars as pl

    url, table, meta = atlas_server
    data = meta["props"]["data"]
    assert data["neighbors"] == "neighbors" and data["text"] == "token"
    assert data["projection"] == {"x": "x", "y": "y"}
    t = pl.read_parquet(table)
    n = t.height
    assert n == 49152
    browser.get(url + "/")
    js = browser.execute_script
    deadline = time.time() + 120
    text = ""
    while time.time() < deadline:
        text = js("return document.body.innerText")
        heads = js("return Array.from(document.querySelectorAll('*')).filter(e => e.children.length == 0 "
                   "&& e.textContent.trim() == 'neighbors').length")
        if f"/ {n:,} points" in text and heads and '{"ids":[' in text:
            break
        time.sleep(0.5)
    assert f"{n:,} / {n:,} points" in text.replace("\n", " "), text[:500]  # every row is loaded
    assert f"of {math_ceil(n, 50)}" in text  # the table view pages through all rows, 50 a page
    assert heads >= 1  # the neighbour column is in the table
    first = t["neighbors"][0]
    shown = js("""return Array.from(document.querySelectorAll('*')).filter(e => e.children.length == 0
                  && e.textContent.startsWith('{"ids":[')).map(e => e.textContent)""")
    assert shown, "no neighbour cell drawn"
    cell = json.loads(shown[0])
    assert cell["ids"] == first["ids"]
    assert [round(d, 5) for d in cell["distances"]] == [round(d, 5) for d in first["distances"]]
    for name in ("category", "script", "flagged", "flag_reason"):
        assert f"{name} (" in text  # the filterable columns are in the schema panel
    shot = screenshot(browser, "embedding-atlas-smollm2", tmp_path)
    assert shot.stat().st_size > 10_000


def math_ceil(a: int, b: int) -> int:
    return -(-a // b)
