"""Which languages a run measures: ``--lang CODE`` (repeatable), ``--lang script:Deva``,
``--lang family:Dravidian``, and audit's bounded default set (``set:audit``).

A corpus's languages, with their ISO 15924 script and family, come from what it says about itself
before it is read (:func:`catalog`): its ``languages.json`` (the shipped UDHR's lists code, ISO
639-3 code, script, name, family and lineage), the language in a file's name (``eng.jsonl``,
``cmn_hans.txt``: a 4-letter suffix is the script) and a FLORES layout's names and columns
(:mod:`embscope.corpus.flores`). A language without a family there takes the one the shipped UDHR
gives its ISO 639-3 code.

Each ``--lang`` value selects:

- ``CODE``: the language with that id, or every variety whose ISO 639-3 code it is (``--lang por``
  selects ``por`` and ``por_br``);
- ``script:XXXX``: every language written in that ISO 15924 script (``script:Deva``; any case);
- ``family:NAME``: every language in that Glottolog family or subgroup (``family:Dravidian``,
  ``family:Indo-Aryan``);
- ``set:audit``: :data:`AUDIT_LANGUAGES` (``set:all``: every language).

The union is measured, always with the reference language (parity divides by it). A value that
selects nothing is a one-line :class:`~embscope.errors.SpecError` with a "did you mean", before any
work. A corpus whose languages are only known once read (a ``lang`` field inside its records) can
be selected by code only.

>>> cat = {"eng": Language("eng", "eng", "Latn", "Indo-European", ("Indo-European", "Germanic")),
...        "hin": Language("hin", "hin", "Deva", "Indo-European", ("Indo-European", "Indo-Aryan")),
...        "tam": Language("tam", "tam", "Taml", "Dravidian", ("Dravidian",))}
>>> sorted(select(["script:deva"], cat)), sorted(select(["family:Dravidian"], cat))
(['eng', 'hin'], ['eng', 'tam'])
>>> select(["hni"], cat)
Traceback (most recent call last):
...
embscope.errors.SpecError: --lang 'hni' is not a language of the corpus (did you mean 'hin'?); pass a code (eng, hin, tam), script:XXXX or family:NAME
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from embscope.errors import SpecError, did_you_mean

#: the languages ``audit`` (and ``diff``) measure on the shipped UDHR unless ``--lang`` says
#: otherwise: the 68 of the corpus's first build (50 widely spoken languages in 27 scripts and 18
#: more), so an audit's language pass stays about as fast as it was
AUDIT_LANGUAGES = (
    "amh arb bel ben bod bul cat ces cmn_hans cym dan deu ell eng eus fin fra guj hau heb hin hrv hun "
    "hye ibo ind isl ita jpn kan kat kaz khk khm kor lao lit mal mar mlt mya nld npi pan pbu pes pol "
    "por ron rus sin slk som spa srp swe swh tam tel tgl tha tir tur ukr urd vie yor zul"
).split()
#: the ``--lang`` value audit and diff use by default on the shipped UDHR
AUDIT_SET = "set:audit"
#: the named sets ``set:NAME`` selects
SETS = ("audit", "all")
#: the group kinds ``KIND:VALUE`` selects by
KINDS = ("script", "family", "set")
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
    """``{code: Language}`` of the corpora ``paths`` (see the module doc); {} when they name none."""
    from embscope.corpus.flores import file_languages
    from embscope.corpus.listing import list_files
    from embscope.corpus.stream import looks_like_lang
    from embscope.corpus.listing import stem

    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    out: dict[str, Language] = {}
    for p in paths:
        if Path(p).is_dir():
            for d in read_names_file(p):
                out.setdefault(d["code"], _entry(d))
        for f in list_files([p]):
            named = file_languages(f)
            if named:
                for lang in named:
                    out.setdefault(lang.code, lang)
                continue
            path, root = Path(f.path), Path(f.root)
            for name in ((path.parent.name,) if path.parent != root and root.is_dir() else ()) + (stem(path),):
                if looks_like_lang(name):
                    out.setdefault(name, _from_code(name))
                    break
    return _with_families(out)


def _with_families(cat: dict[str, Language]) -> dict[str, Language]:
    """Languages without a family take the shipped UDHR's for their ISO 639-3 code."""
    if all(lang.family for lang in cat.values()):
        return cat
    from dataclasses import replace

    from embscope.assets import corpora_root

    known: dict[str, dict] = {}
    for d in read_names_file(corpora_root() / "udhr"):
        if isinstance(d.get("iso639_3"), str) and d.get("family"):
            known.setdefault(d["iso639_3"], d)
    for code, lang in cat.items():
        d = known.get(lang.iso639_3 or "")
        if not lang.family and d is not None:
            cat[code] = replace(lang, family=d["family"], lineage=tuple(d.get("lineage") or ()))
    return cat


def select(specs: Sequence[str], cat: dict[str, Language], reference: str = "eng") -> frozenset[str] | None:
    """The codes ``specs`` select in ``cat`` with ``reference`` added; None (every language) for no
    specs or ``set:all``. A code is taken as given when ``cat`` is empty (a corpus whose languages
    are inside its records)."""
    if not specs or "set:all" in specs:
        return None
    chosen: set[str] = set()
    for spec in specs:
        chosen |= _one(spec.strip(), cat)
    return frozenset(chosen | {reference})


def _one(spec: str, cat: dict[str, Language]) -> set[str]:
    kind, sep, value = spec.partition(":")
    if not sep:
        if not spec:
            raise SpecError("--lang needs a value: a language code, script:XXXX or family:NAME")
        if not cat:
            return {spec}
        hit = {c for c, lang in cat.items() if c == spec or lang.iso639_3 == spec}
        if not hit:
            codes = sorted(cat)
            shown = ", ".join(codes[:12]) + (", …" if len(codes) > 12 else "")
            raise SpecError(f"--lang {spec!r} is not a language of the corpus{did_you_mean(spec, codes)}; pass a "
                            f"code ({shown}), script:XXXX or family:NAME")
        return hit
    kind = kind.lower()
    if kind not in KINDS:
        raise SpecError(f"--lang {spec!r}: {kind!r} is not a group{did_you_mean(kind, KINDS)}; pass a code, "
                        "script:XXXX, family:NAME or set:audit")
    if kind == "set":
        if value not in SETS:
            raise SpecError(f"--lang {spec!r} is not a set{did_you_mean(value, SETS)}; pass set:audit or set:all")
        return set(AUDIT_LANGUAGES) & set(cat) if cat else set(AUDIT_LANGUAGES)
    if not cat:
        raise SpecError(f"--lang {spec!r}: the corpus names no languages before it is read (no languages.json, "
                        "no language-named files); select by code")
    if kind == "script":
        known = sorted({lang.script for lang in cat.values() if lang.script})
        hit = {c for c, lang in cat.items() if (lang.script or "").lower() == value.lower()}
        what, hint = "script", ", ".join(known[:12]) + (", …" if len(known) > 12 else "")
    else:
        groups = {g for lang in cat.values() for g in (*lang.lineage, lang.family or "") if g}
        known = sorted(groups)
        hit = {c for c, lang in cat.items() if value.lower() in {g.lower() for g in (*lang.lineage, lang.family or "")}}
        fams = sorted({lang.family for lang in cat.values() if lang.family})
        what, hint = "family", ", ".join(fams[:12]) + (", …" if len(fams) > 12 else "")
    if not hit:
        raise SpecError(f"--lang {spec!r}: no language of the corpus has that {what}"
                        f"{did_you_mean(value, known)}; known: {hint or 'none'}")
    return hit


def selected_languages(specs: Sequence[str], paths, reference: str = "eng") -> frozenset[str] | None:
    """:func:`select` over the :func:`catalog` of ``paths``: the codes to measure (None: all)."""
    if not specs or "set:all" in specs:
        return None
    return select(specs, catalog(paths), reference)


def describe(specs: Iterable[str]) -> str:
    """``--lang`` values as a phrase for a summary line: ``set:audit`` → ``the audit set (68)``."""
    parts = [f"the audit set ({len(AUDIT_LANGUAGES)} languages)" if s == AUDIT_SET else s for s in specs]
    return ", ".join(parts) if parts else "every language"
