"""Unicode script of a string: ``script_of("日本") == "Han"``.

Each code point gets the script named by the first word(s) of its Unicode character name
(``"CYRILLIC SMALL LETTER A"`` → Cyrillic, ``"CJK UNIFIED IDEOGRAPH-4E00"`` → Han, ``"THAI
CHARACTER MAI EK"`` → Thai). Characters whose name starts with no script word (digits, spaces,
punctuation, symbols, ``COMBINING …`` marks) are *common* and ignored. The table is built once, on
first use, as a ``numpy.uint8`` array over code points ``0 … 0x323AF`` (about 0.2 s), so later
lookups are an array index.

This follows the spirit of the Unicode ``Script`` property (UAX #24) without its data file; it
differs on a few punctuation marks that carry a script word in their name (``DEVANAGARI DANDA`` is
Devanagari here, Common in UAX #24).

>>> script_of("hello"), script_of("Привет"), script_of("日本"), script_of("123 !"), script_of("aб")
('Latin', 'Cyrillic', 'Han', 'none', 'mixed')
"""

from __future__ import annotations

import unicodedata
from collections import Counter

#: first word of a character name → script. ``CJK``/``KANGXI``/``IDEOGRAPHIC`` are handled apart.
_SCRIPT_WORDS = {
    "LATIN": "Latin", "GREEK": "Greek", "COPTIC": "Coptic", "CYRILLIC": "Cyrillic",
    "ARMENIAN": "Armenian", "HEBREW": "Hebrew", "ARABIC": "Arabic", "SYRIAC": "Syriac",
    "THAANA": "Thaana", "NKO": "Nko", "DEVANAGARI": "Devanagari", "BENGALI": "Bengali",
    "GURMUKHI": "Gurmukhi", "GUJARATI": "Gujarati", "ORIYA": "Oriya", "TAMIL": "Tamil",
    "TELUGU": "Telugu", "KANNADA": "Kannada", "MALAYALAM": "Malayalam", "SINHALA": "Sinhala",
    "THAI": "Thai", "LAO": "Lao", "TIBETAN": "Tibetan", "MYANMAR": "Myanmar",
    "GEORGIAN": "Georgian", "HANGUL": "Hangul", "ETHIOPIC": "Ethiopic", "CHEROKEE": "Cherokee",
    "CANADIAN": "Canadian_Aboriginal", "OGHAM": "Ogham", "RUNIC": "Runic", "KHMER": "Khmer",
    "MONGOLIAN": "Mongolian", "HIRAGANA": "Hiragana", "KATAKANA": "Katakana",
    "BOPOMOFO": "Bopomofo", "YI": "Yi", "TIFINAGH": "Tifinagh", "JAVANESE": "Javanese",
    "BALINESE": "Balinese", "SUNDANESE": "Sundanese", "TAGALOG": "Tagalog", "VAI": "Vai",
    "SAMARITAN": "Samaritan", "MANDAIC": "Mandaic", "LIMBU": "Limbu", "BUGINESE": "Buginese",
    "BAMUM": "Bamum", "ADLAM": "Adlam", "OL": "Ol_Chiki", "MEETEI": "Meetei_Mayek",
    "TAI": "Tai", "CHAM": "Cham", "LEPCHA": "Lepcha", "SYLOTI": "Syloti_Nagri",
}
#: second word decides for ``FULLWIDTH LATIN …``, ``HALFWIDTH KATAKANA …``
_WIDTH_WORDS = {"FULLWIDTH", "HALFWIDTH"}

#: last code point in the table: end of CJK Unified Ideographs Extension H (Unicode 15).
_MAX_CP = 0x323AF

_NAMES: list[str] = ["common"]  # id 0 = common / unassigned
_TABLE = None


def _script_for_name(name: str) -> str | None:
    if not name:
        return None
    words = name.split(" ", 2)
    first = words[0]
    if first in _WIDTH_WORDS and len(words) > 1:
        first = words[1]
    if first == "CJK" and ("IDEOGRAPH" in name):
        return "Han"
    if first == "KANGXI" or name.startswith("IDEOGRAPHIC ITERATION") or name == "IDEOGRAPHIC NUMBER ZERO":
        return "Han"
    return _SCRIPT_WORDS.get(first)


def _table():
    """``uint8`` array: code point → index into ``_NAMES`` (0 = common). Built once."""
    global _TABLE
    if _TABLE is None:
        import numpy as np

        table = np.zeros(_MAX_CP + 1, dtype=np.uint8)
        ids: dict[str, int] = {"Latin": 1}
        _NAMES[1:] = ["Latin"]
        for cp in range(0x80, _MAX_CP + 1):
            if 0xD800 <= cp <= 0xDFFF:
                continue
            if 0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp:
                script = "Han" if unicodedata.category(chr(cp)) == "Lo" else None
            elif 0xAC00 <= cp <= 0xD7A3:
                script = "Hangul"
            else:
                script = _script_for_name(unicodedata.name(chr(cp), ""))
            if script is None:
                continue
            if script not in ids:
                ids[script] = len(_NAMES)
                _NAMES.append(script)
            table[cp] = ids[script]
        for cp in range(0x41, 0x5B):
            table[cp] = table[cp + 0x20] = ids["Latin"]
        _TABLE = table
    return _TABLE


def char_script(ch: str) -> str:
    """Script of one character, ``"common"`` for digits, punctuation, spaces, marks."""
    cp = ord(ch)
    if cp > _MAX_CP:
        return "common"
    return _NAMES[_table()[cp]]


def script_counts(text: str) -> Counter:
    """Characters per script, common characters left out.

    >>> dict(script_counts("Tokyo 東京"))
    {'Latin': 5, 'Han': 2}
    """
    import numpy as np

    table = _table()
    cps = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    cps = cps[cps <= _MAX_CP]
    counts = np.bincount(table[cps], minlength=len(_NAMES))
    return Counter({_NAMES[i]: int(c) for i, c in enumerate(counts) if i and c})


def dominant_script(text: str) -> str:
    """The script with the most characters (``"none"`` when there is none): the script of a text.

    >>> dominant_script("日本語のテキストです")
    'Katakana'
    """
    counts = script_counts(text)
    return counts.most_common(1)[0][0] if counts else "none"


def script_of(text: str) -> str:
    """The one script of ``text``'s letters, ``"mixed"`` when several, ``"none"`` when none.

    Fast for short strings such as token texts: ASCII is decided without the table (letters →
    ``Latin``), other strings index a precomputed table per character.
    """
    if text.isascii():
        return "Latin" if any(c.isalpha() for c in text) else "none"
    table = _table()
    found = 0
    for ch in text:
        cp = ord(ch)
        sid = table[cp] if cp <= _MAX_CP else 0
        if sid:
            if found and sid != found:
                return "mixed"
            found = sid
    return _NAMES[found] if found else "none"
