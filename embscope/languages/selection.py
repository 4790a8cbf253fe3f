"""Which languages a run measures: ``--lang CODE`` (repeatable), ``--lang script:Deva``,
``--lang family:Dravidian``, and audit's bounded default set (``set:audit``).

A corpus's languages, with their ISO 15924 script and family, come from what it says about itself
before it is read (:mod:`embscope.corpus.catalog`); a language without a family there takes the
one the shipped UDHR gives its ISO 639-3 code.

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

from collections.abc import Iterable, Sequence

from embscope.corpus.catalog import Language, read_names_file
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


def catalog(paths) -> dict[str, Language]:
    """:func:`embscope.corpus.catalog.catalog`, languages without a family given the shipped UDHR's."""
    from embscope.corpus.catalog import catalog as named

    return _with_families(named(paths))


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


def suggest(word: str, codes: Iterable[str]) -> str:
    """`` (did you mean 'eng'?)``: the shortest code that starts with ``word`` (a two-letter ISO
    639-1 code names its three-letter one: ``en`` → ``eng``, not the equally similar ``ven``),
    else the closest by :func:`~embscope.errors.did_you_mean`.

    >>> suggest("en", ["ven", "eng", "enq_x"]), suggest("hinn", ["hin", "hun"])
    (" (did you mean 'eng'?)", " (did you mean 'hin'?)")
    """
    codes = list(codes)
    starts = sorted((c for c in codes if c.startswith(word) and c != word), key=lambda c: (len(c), c))
    return f" (did you mean {starts[0]!r}?)" if starts and len(word) >= 2 else did_you_mean(word, codes)


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
            raise SpecError(f"--lang {spec!r} is not a language of the corpus{suggest(spec, codes)}; pass a "
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
