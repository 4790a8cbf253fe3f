"""Write ``index.html``: one self-contained, offline page from an output folder.

The page is a Jinja2 template (``assets/page.html``, autoescape on) with the stylesheet and the
drawing code (``assets/report.css`` and the ``assets/*.js`` parts: plain JS, canvas and SVG, no third-party
code, no network) inlined. Tables are rendered here through :func:`~embscope.report.escape.display_token`;
charts, the token map and the sortable token table are drawn in the browser from one JSON block
(``<script type="application/json" id="embscope-data">``, written by
:func:`~embscope.report.escape.script_json`).
"""

from __future__ import annotations

import datetime as _dt
import functools
from importlib import resources
from pathlib import Path
from typing import Any

from embscope import __version__
from embscope.errors import OutputError
from embscope.report.data import DOUBLE_COST, build_payload
from embscope.report.escape import display_token, script_json
from embscope.report.labels import GLOSSARY, REASONS, column_help


def _asset(name: str) -> str:
    return resources.files("embscope.report").joinpath("assets", name).read_text(encoding="utf-8")


def fmt(v: Any) -> str:
    """Plain text for a table cell: numbers with sensible precision, lists joined, tokens made visible.

    Floats: thousands separators from 1,000 up; four significant digits below (trailing zeros
    dropped); tiny non-zero values (|v| < 5e-5, which four decimals would print as 0) with two
    significant digits as plain decimals, never scientific notation
    (:func:`embscope.text.numbers.plain`); never ``-0``.

    >>> fmt(0.123456), fmt(1234567), fmt(True), fmt(None), fmt([1, "a\\x00"])
    ('0.1235', '1,234,567', 'yes', '—', '1, a\\\\x00')
    >>> fmt(3.0e-4), fmt(-0.0), fmt(-1e-9 + 1e-9), fmt(2.4257e-06), fmt(3.29441), fmt(1.0)
    ('0.0003', '0', '0', '0.0000024', '3.294', '1')
    """
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return _float(v)
    if isinstance(v, (list, tuple)):
        return ", ".join(fmt(x) for x in v)
    if isinstance(v, dict):
        return ", ".join(f"{display_token(str(k))}={fmt(x)}" for k, x in v.items())
    return display_token(str(v))


def _float(v: float) -> str:
    """See :func:`fmt` (the same rule as ``fmt`` in ``assets/base.js``)."""
    import math

    if math.isnan(v) or math.isinf(v):
        return "—"
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 1000:
        text = f"{v:,.0f}"
    elif a < 5e-5:
        from embscope.text.numbers import plain

        return plain(v)
    else:
        decimals = 4 if a < 1 else 3 - int(math.floor(math.log10(a)))
        text = f"{v:.{decimals}f}"
        if "." in text:
            text = text.rstrip("0").rstrip(".")
    return "0" if text.lstrip("-") in ("0", "") else text


def pct(v: Any, digits: int = 2) -> str:
    """A fraction as a percentage: ``pct(0.00035) == '0.035 %'``; tiny shares keep 2 significant digits.

    >>> pct(0.00035), pct(0.08946), pct(0), pct(None)
    ('0.035 %', '8.95 %', '0 %', '—')
    """
    if not isinstance(v, (int, float)) or isinstance(v, bool) or v != v:
        return "—"
    p = v * 100
    if p == 0:
        return "0 %"
    if abs(p) < 10 ** -digits * 10:  # below 0.1 % (digits=2): keep two significant digits
        return f"{float(f'{p:.2g}'):g} %"
    return f"{p:.{digits}f} %"


def gib(n: Any) -> str:
    """Bytes as GiB/MiB text: ``gib(3 * 2**30) == '3.00 GiB'``."""
    if not isinstance(n, (int, float)) or isinstance(n, bool):
        return fmt(n)
    if abs(n) >= 2**30:
        return f"{n / 2**30:.2f} GiB"
    if abs(n) >= 2**20:
        return f"{n / 2**20:.1f} MiB"
    return f"{n / 2**10:.1f} KiB"


#: The page's script, in order; see the head comment of each part.
SCRIPT_PARTS = ("base.js", "tokens.js", "charts.js", "diff.js", "languages.js")


def _script() -> str:
    """The parts of the drawing code joined inside one function scope (``"use strict"``)."""
    body = "\n".join(_asset(name) for name in SCRIPT_PARTS)
    return '(function () {\n"use strict";\n' + body + "})();\n"


def _csp_hash(script: str) -> str:
    """``sha256-<base64>`` of the page's one script, for its Content-Security-Policy.

    The policy lets only that exact script run and forbids every network fetch, so even a
    token that slipped past escaping could neither execute nor phone home.
    """
    import base64
    import hashlib

    return "sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode()


@functools.lru_cache(maxsize=1)
def _page_template():
    """``page.html`` compiled once per process (Jinja's parse and code generation of the page take
    ~0.4 s; every render after the first in a process, a notebook's or a batch's, reuses it)."""
    return _env().from_string(_asset("page.html"))


def _env():
    import jinja2

    env = jinja2.Environment(autoescape=True, undefined=jinja2.ChainableUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["tok"] = display_token
    env.filters["fmt"] = fmt
    env.filters["gib"] = gib
    env.filters["pct"] = pct
    help_ = column_help()
    env.filters["label"] = lambda col, table: help_.get(table, {}).get(col, {}).get("label") or str(col).replace("_", " ")
    env.filters["tip"] = lambda col, table: help_.get(table, {}).get(col, {}).get("tip", "")
    return env


def render_html(out_dir: Path) -> str:
    """The page for ``out_dir`` as a string (see :func:`render` for the file)."""
    from embscope.report.atlas import atlas_command

    payload = build_payload(Path(out_dir))
    js = _script()
    v = payload["view"]
    return _page_template().render(
        model=v["model"], prov=v["prov"], params=v["parameters"], timings=v["timings"],
        categories=v["categories"], ctx=v["ctx"], geo=v["geo"], ext=v["ext"], langs=v["langs"], ft=v.get("ft") or {}, df=v.get("df") or {},
        skipped=v["skipped"], warnings=v["warnings"], versions=v["versions"],
        order=v["order"], titles=v["titles"], marks=v["marks"], bottom=v["bottom"],
        tokens=payload["tokens"],
        languages=payload["languages"],
        candidates=payload["candidates"],
        double_cost=DOUBLE_COST, glossary=GLOSSARY, reasons=REASONS,
        atlas_cmd="embscope export atlas . && " + atlas_command("atlas/tokens.parquet"),
        generated=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        renderer_version=__version__,  # for a summary.json without a version
        css=_asset("report.css"),
        js=js,
        script_hash=_csp_hash(js),
        data_json=script_json(payload),
    )


def render(out_dir: Path) -> Path:
    """Render ``out_dir/index.html`` from ``summary.json`` and the Parquet tables; return its path.

    The page is written under a fresh temporary name (created exclusively, never through a link) and
    moved into place with :func:`os.replace`, so a reader never sees half a page. An existing
    ``index.html`` is replaced only in a folder embscope made (it carries the marker).

    Args:
        out_dir: an audit output folder (must hold ``summary.json``).
    Returns:
        the path of ``index.html``.
    Raises:
        OutputError: the folder or ``summary.json`` is missing or unreadable, or not writable.
    Example:
        >>> render(Path("reports/smollm2-135m"))  # doctest: +SKIP
        PosixPath('reports/smollm2-135m/index.html')
    """
    from embscope.output import MARKER, read_marker, replace_file

    out_dir = Path(out_dir)
    html = render_html(out_dir)
    target = out_dir / "index.html"
    if (target.exists() or target.is_symlink()) and read_marker(out_dir) is None:
        raise OutputError(f"refusing to replace {target}: {out_dir} is not an embscope output folder "
                          f"(no {MARKER} marker)")
    replace_file(target, html)
    return target
