"""Make untrusted token text visible and inert.

Token strings come from tokenizer files anyone can write: they may hold HTML (``<script>``),
control characters (NUL), invisible format characters and bidi overrides (U+202E flips the
rest of a line, the "Trojan Source" trick of Boucher & Anderson 2021). The report shows them as
text, never as markup, and shows the invisible ones as code points.

Two layers, each done in one place:

1. :func:`display_token` (here, and ``displayToken`` in ``assets/base.js`` with the same rule):
   invisible characters become escapes, so what the reader sees is what the token holds.
2. HTML escaping: the template engine autoescapes every value (server side); the browser code
   only writes text through ``textContent`` (client side). JSON embedded in ``<script>`` blocks
   goes through :func:`script_json`.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

# Unicode general categories shown as code points: controls (Cc: NUL, ESC, DEL, C1), format
# characters (Cf: bidi overrides U+202A-E and isolates U+2066-9, zero-width joiners, BOM, soft
# hyphen), lone surrogates (Cs), line and paragraph separators (Zl, Zp).
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
# The three controls every reader knows by their short escape.
_SHORT = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape_char(ch: str) -> str:
    if ch in _SHORT:
        return _SHORT[ch]
    cp = ord(ch)
    if cp < 0x100:
        return f"\\x{cp:02x}"
    if cp < 0x10000:
        return f"\\u{cp:04x}"
    return f"\\U{cp:08x}"


def display_token(s: str | None) -> str:
    """Readable, single-line text for a token: invisible characters become code points.

    Characters of category Cc, Cf, Cs, Zl, Zp become ``\\xNN`` (below U+0100), ``\\uNNNN`` or
    ``\\UNNNNNNNN``; newline, tab and carriage return become ``\\n``, ``\\t``, ``\\r``. Everything
    else, ``<`` and ``&`` included, is kept: the result is plain text, still to be HTML-escaped by
    whoever writes it into a page (the template's autoescape does).

    >>> display_token("a\\u202eb\\x00")
    'a\\\\u202eb\\\\x00'
    >>> display_token("<b>\\n")
    '<b>\\\\n'
    >>> display_token(None)
    ''
    """
    if not s:
        return ""
    out = []
    for ch in s:
        if unicodedata.category(ch) in _HIDDEN_CATEGORIES:
            out.append(_escape_char(ch))
        else:
            out.append(ch)
    return "".join(out)


def script_json(data: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">``.

    ``<``, ``>`` and ``&`` become ``\\u003c``, ``\\u003e``, ``\\u0026`` so neither ``</script>`` nor
    ``<!--`` can end or confuse the block; non-ASCII (U+2028/2029 and lone surrogates included)
    is written as ``\\uNNNN``. ``JSON.parse`` restores the exact text. NaN and infinities become
    ``null`` (they are not JSON).

    >>> script_json({"t": "</script>"})
    '{"t":"\\\\u003c/script\\\\u003e"}'
    """
    text = json.dumps(_finite(data), ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _finite(obj: Any) -> Any:
    """Replace float NaN/inf by ``None``, recursively (lists, tuples, dicts)."""
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else None
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj
