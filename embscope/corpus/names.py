"""Language names a corpus ships beside its texts: ``languages.json`` at the top of a corpus
folder, so a report can say "Vietnamese (vie)" where the records only say ``vie``.

Three shapes are read: the shipped UDHR's, an object whose ``languages`` is a list of objects with
``code`` and ``name`` (written by ``scripts/build_corpora.py``, with the rule and what it left out),
that list alone, and a plain mapping ``{code: name}``. Names are untrusted text (the
report escapes them); an entry that is not a pair of strings is left out, and a file that is not
JSON (or larger than :data:`MAX_BYTES`) gives no names and one :class:`CorpusWarning`.

>>> from embscope.assets import corpora_root
>>> names = language_names(corpora_root() / "udhr")
>>> names["vie"], names["cmn_hans"], len(names) >= 400
('Vietnamese', 'Chinese, Mandarin (Simplified)', True)
"""

from __future__ import annotations

import warnings
from pathlib import Path

#: the file a corpus folder names its languages in
NAMES_FILE = "languages.json"
#: a names file this large is not a list of languages (the UDHR's is 17 KiB)
MAX_BYTES = 4 << 20
#: longest name kept (characters)
MAX_NAME = 80


def language_names(*paths) -> dict[str, str]:
    """``{language code: name}`` from the ``languages.json`` of each corpus folder in ``paths``
    (earlier paths win on a code both name); ``{}`` when none has one."""
    from embscope.corpus.stream import CorpusWarning
    from embscope.errors import EmbscopeError
    from embscope.formats.files import read_json

    out: dict[str, str] = {}
    for p in paths:
        f = Path(p) / NAMES_FILE
        if not f.is_file() or f.is_symlink():
            continue
        try:
            data = read_json(f, what="language names file", max_bytes=MAX_BYTES, fix="fix or remove it")
        except EmbscopeError as err:
            warnings.warn(CorpusWarning(f"{err}; the report shows language codes without names"), stacklevel=2)
            continue
        if isinstance(data, dict) and isinstance(data.get("languages"), list):
            data = data["languages"]
        pairs = data.items() if isinstance(data, dict) else (
            (d.get("code"), d.get("name")) for d in data if isinstance(d, dict)) if isinstance(data, list) else ()
        for code, name in pairs:
            if isinstance(code, str) and isinstance(name, str) and name.strip():
                out.setdefault(code, name.strip()[:MAX_NAME])
    return out
