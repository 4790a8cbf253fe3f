"""What a corpus says about its languages before it is read: their ids, ISO 639-3 codes, ISO 15924
scripts and families.

Three sources, first that names a language wins:

1. the corpus folder's ``languages.json``: a list of objects with ``code`` (and ``iso639_3``,
   ``script``, ``family``, ``lineage``), or the shipped UDHR's ``{"languages": [...], ...}``
   (written by ``scripts/build_corpora.py``);
2. a FLORES file's name or columns (:mod:`embscope.corpus.flores`);
3. a folder or file named like a language code (``eng.jsonl``, ``cmn_hans/``: a 4-letter suffix
   is the script).

A corpus whose languages are only inside its records (a ``lang`` field) names none here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

#: a names file this large is not a list of languages (the shipped UDHR's is about 250 KiB)
MAX_BYTES = 4 << 20


@dataclass(frozen=True)
class Language:
    """One language of a corpus, as the corpus names it before it is read."""

    #: the id its records are measured under (``cmn_hans``)
    code: str
    #: ISO 639-3 code (null when not known)
    iso639_3: str | None = None
    #: ISO 15924 script code (null when not known)
    script: str | None = None
    #: top-level Glottolog family (null when not known, or an isolate)
    family: str | None = None
    #: every Glottolog group it belongs to, largest first
    lineage: tuple[str, ...] = field(default=())


def read_names_file(folder: str | Path) -> list[dict]:
    """The entries of a corpus folder's ``languages.json`` (a list of objects with ``code``, or the
    shipped UDHR's ``{"languages": [...]}``); [] when there is none or it is another shape."""
    path = Path(folder) / "languages.json"
    try:
        if not path.is_file() or path.is_symlink() or path.stat().st_size > MAX_BYTES:
            return []
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return []
    if isinstance(doc, dict):
        doc = doc.get("languages")
    return [d for d in doc if isinstance(d, dict) and isinstance(d.get("code"), str)] if isinstance(doc, list) else []


def _entry(d: dict) -> Language:
    text = lambda v: v if isinstance(v, str) and v else None  # noqa: E731
    lineage = tuple(g for g in d.get("lineage") or () if isinstance(g, str))
    return Language(d["code"], text(d.get("iso639_3")), text(d.get("script")), text(d.get("family")), lineage)


def _from_code(code: str) -> Language:
    """A language known by its id alone: ``cmn_hans`` → ISO 639-3 ``cmn``, script ``Hans``."""
    head, _, tail = code.replace("-", "_").partition("_")
    iso = head.lower() if len(head) == 3 and head.isalpha() else None
    script = tail.title() if len(tail) == 4 and tail.isalpha() else None
    return Language(code, iso, script)


def catalog(paths) -> dict[str, Language]:
    """``{code: Language}`` of the corpora ``paths`` (see the module doc); {} when they name none.

    >>> from embscope.assets import corpora_root
    >>> cat = catalog(corpora_root() / "udhr")
    >>> cat["cmn_hans"].script, cat["tam"].family, len(cat) >= 500
    ('Hans', 'Dravidian', True)
    """
    from embscope.corpus.flores import file_ids
    from embscope.corpus.listing import list_files, stem
    from embscope.corpus.stream import looks_like_lang

    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    out: dict[str, Language] = {}
    for p in paths:
        if Path(p).is_dir():
            for d in read_names_file(p):
                out.setdefault(d["code"], _entry(d))
        for f in list_files([p]):
            named = file_ids(f.path, f.fmt)
            if named:
                for code, iso, script in named:
                    out.setdefault(code, Language(code, iso, script))
                continue
            path, root = Path(f.path), Path(f.root)
            for name in ((path.parent.name,) if path.parent != root and root.is_dir() else ()) + (stem(path),):
                if looks_like_lang(name):
                    out.setdefault(name, _from_code(name))
                    break
    return out


