"""Script-aware word segmentation: the denominator of fertility (tokens per word).

Rules, in order:

1. Whitespace separates words (``str.split()``: any Unicode space).
2. The Ethiopic word separator ``፡`` (U+1361), full stop ``።`` (U+1362) and the other Ethiopic
   punctuation U+1363–U+1368 separate words too (Amharic and Tigrinya write ``ሰው፡ልጅ`` for
   "human being", with no space). Likewise the Tibetan tsheg ``་`` (U+0F0B) and its
   non-breaking form U+0F0C, which end every syllable: Tibetan "words" here are syllables
   (unit ``syllable``).
3. Scripts written without word spaces count one *character* per word: Han, Hiragana and
   Katakana one code point each (unit ``char``); Thai, Lao, Khmer and Myanmar one *cluster*, a
   base letter plus the combining marks that follow it (``ကမ္ဘာ`` is 3 words: ``က``, ``မ္``,
   ``ဘာ``), so vowel signs are not words of their own (unit ``cluster``). This is a crude stand-in
   for real word segmentation (dictionary or ML based); it makes fertility of these languages a
   *tokens per character* (or per cluster) figure, which every output says through its ``unit``.
   tokka-bench (bgub/tokka-bench, ``metrics.calculate_word_metrics``) differs: for such languages
   it counts every printable non-space code point, combining marks and punctuation included.
4. Punctuation: a whitespace-separated chunk made only of punctuation and symbols (``—``, ``:``,
   ``(1)`` is not one: it has a digit) is not a word. Punctuation attached to a word stays part
   of it (``rights,`` is one word), so the word count is simply "chunks that hold a letter,
   digit or mark".

Worked example: ``"All human beings — 人人生而自由。"`` → ``All``, ``human``, ``beings``,
``人``, ``人``, ``生``, ``而``, ``自``, ``由`` (``—`` and ``。`` are no words): 9 words.

:func:`count_words` is the fast path used on whole corpora (C-speed regular expressions, no
Python loop per word); :func:`words` returns the words themselves, for per-word tokenisation.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter

#: scripts counted one character per word (rule 3): code-point ranges.
_CHAR_SCRIPT_RANGES = (
    (0x0E00, 0x0E7F),  # Thai
    (0x0E80, 0x0EFF),  # Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x19E0, 0x19FF),  # Khmer symbols
    (0x2E80, 0x2FDF),  # CJK radicals, Kangxi radicals
    (0x3005, 0x3007),  # 々 〆 〇
    (0x3021, 0x3029),  # Hangzhou numerals
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xA9E0, 0xA9FF),  # Myanmar extended-B
    (0xAA60, 0xAA7F),  # Myanmar extended-A
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # halfwidth Katakana
    (0x20000, 0x323AF),  # CJK extensions B–H
)
#: the unit a word is, per script (``unit`` column of the languages table); ``word`` otherwise
UNITS = {"Han": "char", "Hiragana": "char", "Katakana": "char", "Japanese": "char", "Thai": "cluster",
         "Lao": "cluster", "Khmer": "cluster", "Myanmar": "cluster", "Tibetan": "syllable"}
#: rule 2: Ethiopic wordspace, full stop, comma, semicolon, colon, preface colon, question mark,
#: paragraph separator; then the Tibetan tsheg and non-breaking tsheg.
ETHIOPIC_SEPARATORS = "\u1361\u1362\u1363\u1364\u1365\u1366\u1367\u1368\u0f0b\u0f0c"

SEGMENTATION_NOTE = ("words = chunks delimited by whitespace or Ethiopic separators that hold a letter, digit "
                     "or mark (unit word); Tibetan counts tsheg-delimited syllables (unit syllable); Han and "
                     "kana count one character per word (unit char); Thai, Lao, Khmer and Myanmar one "
                     "cluster, a base character with its combining marks (unit cluster), so fertility there "
                     "is tokens per character or cluster. tokka-bench instead counts every printable "
                     "non-space code point of such languages, marks and punctuation included")


def unit_of(script: str) -> str:
    """The segmentation unit of a language written in ``script``: ``word``, ``syllable``
    (Tibetan), ``char`` (Han, kana) or ``cluster`` (Thai, Lao, Khmer, Myanmar).

    >>> unit_of("Latin"), unit_of("Tibetan"), unit_of("Japanese"), unit_of("Thai")
    ('word', 'syllable', 'char', 'cluster')
    """
    return UNITS.get(script, "word")


def _class(ranges) -> str:
    return "".join(f"\\U{a:08X}-\\U{b:08X}" for a, b in ranges)


def _char_script_marks() -> str:
    """Combining marks (Mn, Mc, Me) inside the character-word scripts, plus U+3099/309A."""
    out = []
    for a, b in _CHAR_SCRIPT_RANGES[:5] + ((0x3099, 0x309A), (0xA9E0, 0xA9FF), (0xAA60, 0xAA7F)):
        out.extend(chr(c) for c in range(a, b + 1) if unicodedata.category(chr(c)).startswith("M"))
    return re.escape("".join(out))


_C = _class(_CHAR_SCRIPT_RANGES)
_M = _char_script_marks()
_SEP = re.escape(ETHIOPIC_SEPARATORS)
#: one character-word: a base (not a mark) of those scripts, then its marks
_CLUSTER = re.compile(f"(?:(?![{_M}])[{_C}])[{_M}]*")
#: a run of anything else up to whitespace, separator or character-script letter
_RUN = re.compile(f"[^\\s{_SEP}{_C}]+")
#: a run made only of punctuation/symbols (no letter, digit, mark, underscore): not a word.
#: ``\w`` in Python's re covers letters, digits and most marks.
_PUNCT_RUN = re.compile(f"(?<![^\\s{_SEP}{_C}])[^\\w\\s{_SEP}{_C}]+(?![^\\s{_SEP}{_C}])")
#: anything that needs the slow rules 2–3
_SPECIAL = re.compile(f"[{_C}{_SEP}]")


def count_words(text: str) -> int:
    """Number of words in ``text`` under the module's rules.

    >>> count_words("All human beings — are born free.")
    6
    >>> count_words("人人生而自由。"), count_words("ሰው፡ልጅ፡ሁሉ።"), count_words("ภาษาไทย")
    (6, 3, 7)
    """
    punct = len(_PUNCT_RUN.findall(text))
    if not _SPECIAL.search(text):
        return len(text.split()) - punct
    return len(_RUN.findall(text)) - punct + len(_CLUSTER.findall(text))


def words(text: str) -> list[tuple[str, bool]]:
    """The words of ``text`` as ``(word, after_space)`` pairs, in order.

    ``after_space`` is True when the word starts a whitespace-delimited chunk (so in running text
    a space precedes it; per-word tokenisation adds that space for tokenizers that mark it),
    False for the second and later character-words of a chunk and for words after ``፡``.

    >>> words("Hi, 世界 ሰው፡ልጅ")
    [('Hi,', True), ('世', True), ('界', False), ('ሰው', True), ('ልጅ', False)]
    """
    out: list[tuple[str, bool]] = []
    for chunk in text.split():
        if not _SPECIAL.search(chunk):
            if not _PUNCT_RUN.fullmatch(chunk):
                out.append((chunk, True))
            continue
        first = True
        for m in _SPLIT.finditer(chunk):
            w = m.group(0)
            if w[0] in ETHIOPIC_SEPARATORS:
                first = False
                continue
            if _PUNCT_RUN.fullmatch(w):
                first = False
                continue
            out.append((w, first))
            first = False
    return out


def word_counts(text: str) -> Counter:
    """``Counter`` of ``(word, after_space)`` over ``text``: :func:`words`, counted, but fast —
    whitespace chunks are counted in C first, and the rules run once per *distinct* chunk.

    >>> sorted(word_counts("a b a — 世界").items())
    [(('a', True), 2), (('b', True), 1), (('世', True), 1), (('界', False), 1)]
    """
    out: Counter = Counter()
    for chunk, n in Counter(text.split()).items():
        if not _SPECIAL.search(chunk):
            if not _PUNCT_RUN.fullmatch(chunk):
                out[(chunk, True)] += n
            continue
        for w in words(chunk):
            out[w] += n
    return out


_SPLIT = re.compile(f"(?:(?![{_M}])[{_C}])[{_M}]*|[{_SEP}]+|[^\\s{_SEP}{_C}]+")
