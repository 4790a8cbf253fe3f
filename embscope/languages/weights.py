"""A data mix's language shares (``--weights FILE``): language code → share, for the expected tokens
per aligned unit of that mix (``tokenizers.mix_tokens_per_unit``, :mod:`embscope.languages.fairness`).

Two forms: a JSON object ``{"eng": 0.6, "fra": 0.3, "amh": 0.1}``, or a TSV (or space-separated)
file with one ``code<TAB>share`` line per language (``#`` comments and blank lines skipped). Shares
need not sum to 1: they are normalised over the languages the corpus holds.
"""

from __future__ import annotations

import math
from pathlib import Path

from embscope.errors import InputError

#: a weights file is a list of languages, never large
MAX_BYTES = 4 << 20


def read_weights(path: str | Path) -> dict[str, float]:
    """``{code: share}`` from ``path`` (JSON object or TSV, see the module doc).

    Raises :class:`~embscope.errors.InputError` with the fix on a missing file, a bad line, or a
    negative or non-finite share.
    """
    import json

    p = Path(path)
    if not p.is_file():
        raise InputError(f"--weights {p}: no such file; give a JSON object or TSV of language code → share")
    if p.stat().st_size > MAX_BYTES:
        raise InputError(f"--weights {p}: larger than {MAX_BYTES >> 20} MiB; give one line per language")
    text = p.read_text(encoding="utf-8-sig", errors="replace")
    out: dict[str, float] = {}
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError as err:
            raise InputError(f"--weights {p}: not valid JSON ({err}); write {{\"eng\": 0.6, \"fra\": 0.4}}") from None
        items = doc.items()
    else:
        items = []
        for n, line in enumerate(text.splitlines(), 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split("\t") if "\t" in line else line.split()
            if len(parts) != 2:
                raise InputError(f"--weights {p}:{n}: expected 'code<TAB>share', got {line[:60]!r}")
            items.append((parts[0].strip(), parts[1].strip()))
    for code, share in items:
        try:
            w = float(share)
        except (TypeError, ValueError):
            raise InputError(f"--weights {p}: the share of {str(code)[:40]!r} is not a number ({str(share)[:40]!r})") from None
        if not math.isfinite(w) or w < 0:
            raise InputError(f"--weights {p}: the share of {str(code)[:40]!r} must be a finite number ≥ 0, got {w}")
        out[str(code)] = out.get(str(code), 0.0) + w
    if not out or sum(out.values()) <= 0:
        raise InputError(f"--weights {p}: no language with a positive share")
    return out
