"""Unicode script of a string, from the Unicode Character Database: ``script_of("日本") == "Han"``.

Each code point gets its ``Script`` property (UAX #24) as the ``regex`` module's Unicode tables
give it (``\\p{Script=Latin}``; Unicode 16/17 with current ``regex``, newer than Python's own
``unicodedata``). ``Common`` and ``Inherited`` characters (digits, spaces, punctuation, symbols,
combining marks) carry no script of their own and are ignored — unless their
``Script_Extensions`` name exactly one script (then they count for it) or only Hiragana,
Katakana and Han (the prolonged sound mark ``ー``: they count as ``Japanese``).

Japanese writing mixes three scripts, so a text or token whose letters are Han, Hiragana and
Katakana together, with kana among them, is labelled ``Japanese`` (ISO 15924 ``Jpan``) rather than
whichever of the three is most frequent; all-Han text stays ``Han``.

The table is built once, on first use: one ``bytes`` object over code points ``0 … 0x3FFFF`` (every
script lives there), filled by one C-speed regular-expression pass per run of scripted
characters (about 0.1 s). Later lookups are an index per character.

>>> script_of("hello"), script_of("Привет"), script_of("日本"), script_of("123 !"), script_of("aб")
('Latin', 'Cyrillic', 'Han', 'none', 'mixed')
>>> script_of("\\u1720"), script_of("テスト"), script_of("日本語のテキスト")
('Hanunoo', 'Katakana', 'Japanese')
"""

from __future__ import annotations

from collections import Counter

#: Unicode Script property values (long names, UCD ``PropertyValueAliases.txt``), Common,
#: Inherited and Unknown left out. Names the installed ``regex`` does not know are skipped.
SCRIPTS = (
    "Latin Greek Coptic Cyrillic Armenian Hebrew Arabic Syriac Thaana Nko Samaritan Mandaic "
    "Devanagari Bengali Gurmukhi Gujarati Oriya Tamil Telugu Kannada Malayalam Sinhala Thai Lao "
    "Tibetan Myanmar Georgian Hangul Ethiopic Cherokee Canadian_Aboriginal Ogham Runic Tagalog "
    "Hanunoo Buhid Tagbanwa Khmer Mongolian Limbu Tai_Le New_Tai_Lue Buginese Tai_Tham Balinese "
    "Sundanese Batak Lepcha Ol_Chiki Braille Glagolitic Tifinagh Han Hiragana Katakana Bopomofo Yi "
    "Lisu Vai Bamum Syloti_Nagri Phags_Pa Saurashtra Kayah_Li Rejang Javanese Cham Tai_Viet "
    "Meetei_Mayek Linear_B Lycian Carian Old_Italic Gothic Old_Permic Ugaritic Old_Persian Deseret "
    "Shavian Osmanya Osage Elbasan Caucasian_Albanian Vithkuqi Todhri Linear_A Cypriot "
    "Imperial_Aramaic Palmyrene Nabataean Hatran Phoenician Lydian Sidetic Meroitic_Hieroglyphs "
    "Meroitic_Cursive Kharoshthi Old_South_Arabian Old_North_Arabian Manichaean Avestan "
    "Inscriptional_Parthian Inscriptional_Pahlavi Psalter_Pahlavi Old_Turkic Old_Hungarian "
    "Hanifi_Rohingya Garay Yezidi Old_Sogdian Sogdian Old_Uyghur Chorasmian Elymaic Brahmi Kaithi "
    "Sora_Sompeng Chakma Mahajani Sharada Khojki Multani Khudawadi Grantha Tulu_Tigalari Newa "
    "Tirhuta Siddham Modi Takri Ahom Dogra Warang_Citi Dives_Akuru Nandinagari Zanabazar_Square "
    "Soyombo Pau_Cin_Hau Sunuwar Bhaiksuki Marchen Masaram_Gondi Gunjala_Gondi Tolong_Siki Makasar "
    "Kawi Cuneiform Cypro_Minoan Egyptian_Hieroglyphs Anatolian_Hieroglyphs Gurung_Khema Mro Tangsa "
    "Bassa_Vah Pahawh_Hmong Kirat_Rai Medefaidrin Beria_Erfe Miao Tangut Nushu Khitan_Small_Script "
    "Duployan SignWriting Nyiakeng_Puachue_Hmong Toto Wancho Nag_Mundari Ol_Onal Tai_Yo "
    "Mende_Kikakui Adlam"
).split()
#: the label of mixed Han/Hiragana/Katakana writing (ISO 15924 Jpan)
JAPANESE = "Japanese"
_JAPANESE_PARTS = frozenset({"Han", "Hiragana", "Katakana", JAPANESE})
_KANA = ("Hiragana", "Katakana", JAPANESE)
#: a text counts as Japanese when kana are at least this share of its Han + kana characters
#: (Japanese prose runs 30–70 % kana; Chinese text has none, or a stray loanword's worth)
KANA_SHARE = 0.1
#: scripts written without spaces between words: a word is not a whitespace chunk there (fertility
#: counts characters or clusters, :mod:`embscope.languages.segment`; the extension's words come
#: from a word breaker, :mod:`embscope.text.words`)
CHAR_SCRIPTS = ("Han", "Hiragana", "Katakana", "Japanese", "Thai", "Lao", "Khmer", "Myanmar")
#: code points covered by the table; everything above is Common/Inherited/unassigned
_LIMIT = 0x40000

_NAMES: list[str] = ["common"]  # id 0 = common / inherited / unassigned
_TABLE: bytes | None = None


def _build() -> bytes:
    import regex

    names = []
    for name in SCRIPTS:
        try:
            regex.compile(rf"\p{{Script={name}}}")
        except regex.error:  # an older regex without this (newer) script
            continue
        names.append(name)
    _NAMES[1:] = names + [JAPANESE]
    japanese = len(_NAMES) - 1
    text = "".join(chr(c) if not 0xD800 <= c <= 0xDFFF else "\x00" for c in range(_LIMIT))
    table = bytearray(_LIMIT)
    one_of = regex.compile("|".join(rf"(\p{{Script={n}}}+)" for n in names))
    scripted = regex.compile(r"[^\p{Script=Common}\p{Script=Inherited}\p{Script=Unknown}]+")
    for run in scripted.finditer(text):
        for m in one_of.finditer(text, run.start(), run.end()):
            table[m.start():m.end()] = bytes([m.lastindex]) * (m.end() - m.start())
    # Common/Inherited characters used by one script only (Script_Extensions), or by Japanese only
    shared = regex.compile(r"[\p{Script=Common}\p{Script=Inherited}]")
    cps = [m.start() for m in shared.finditer(text)]
    common = "".join(text[c] for c in cps)
    users: dict[int, list[int]] = {}
    for sid, name in enumerate(names, 1):
        for m in regex.finditer(rf"\p{{Script_Extensions={name}}}", common):
            users.setdefault(cps[m.start()], []).append(sid)
    for cp, sids in users.items():
        if len(sids) == 1:
            table[cp] = sids[0]
        elif {_NAMES[s] for s in sids} <= _JAPANESE_PARTS:
            table[cp] = japanese
    return bytes(table)


def _table() -> bytes:
    """``bytes``: code point → index into ``_NAMES`` (0 = common). Built once."""
    global _TABLE
    if _TABLE is None:
        _TABLE = _build()
    return _TABLE


def char_script(ch: str) -> str:
    """Script of one character, ``"common"`` for digits, punctuation, spaces, marks.

    >>> char_script("ᜠ"), char_script("5")
    ('Hanunoo', 'common')
    """
    cp = ord(ch)
    return _NAMES[_table()[cp]] if cp < _LIMIT else "common"


def script_counts(text: str) -> Counter:
    """Characters per script, common characters left out.

    >>> dict(script_counts("Tokyo 東京"))
    {'Latin': 5, 'Han': 2}
    """
    import numpy as np

    table = np.frombuffer(_table(), dtype=np.uint8)
    cps = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    cps = cps[cps < _LIMIT]
    counts = np.bincount(table[cps], minlength=len(_NAMES))
    return Counter({_NAMES[i]: int(c) for i, c in enumerate(counts) if i and c})


def label(counts: Counter) -> str:
    """The script of a text from its :func:`script_counts`: the most frequent one, except that Han
    mixed with kana (at least :data:`KANA_SHARE` of the Han + kana characters) is ``Japanese``.

    >>> label(Counter({"Han": 6, "Hiragana": 3, "Katakana": 4})), label(Counter({"Han": 50, "Katakana": 1}))
    ('Japanese', 'Han')
    """
    if not counts:
        return "none"
    top = counts.most_common(1)[0]
    kana = sum(counts.get(k, 0) for k in _KANA)
    cjk = kana + counts.get("Han", 0)
    parts = sum(1 for k in ("Han", "Hiragana", "Katakana") if counts.get(k))
    if parts >= 2 and kana >= KANA_SHARE * cjk and cjk >= top[1]:
        return JAPANESE
    return top[0]


def dominant_script(text: str) -> str:
    """The script of a text (``"none"`` when it has no letters); see :func:`label`.

    >>> dominant_script("日本語のテキストです"), dominant_script("人人生而自由")
    ('Japanese', 'Han')
    """
    return label(script_counts(text))


def script_of(text: str) -> str:
    """The one script of ``text``'s letters, ``"mixed"`` when several (``"Japanese"`` when they are
    Han, Hiragana and Katakana together), ``"none"`` when none.

    Fast for short strings such as token texts: ASCII is decided without the table (letters →
    ``Latin``), other strings index the table once per character.
    """
    if text.isascii():
        return "Latin" if any(c.isalpha() for c in text) else "none"
    table = _TABLE if _TABLE is not None else _table()
    found = 0
    others = None
    for ch in text:
        cp = ord(ch)
        sid = table[cp] if cp < _LIMIT else 0
        if sid and sid != found:
            if not found:
                found = sid
            else:
                others = others or set()
                others.add(sid)
    if not found:
        return "none"
    if others is None:
        return _NAMES[found]
    names = {_NAMES[found]} | {_NAMES[s] for s in others}
    if not names <= _JAPANESE_PARTS:
        return "mixed"
    if len(names) == 2 and JAPANESE in names and "Han" not in names:  # コーヒー: Katakana + ー
        return next(n for n in names if n != JAPANESE)
    return JAPANESE
