"""Words as lexical units: whole letter-and-mark runs, cut by a dictionary segmenter in scripts
written without spaces. The unit a vocabulary extension adds (:mod:`embscope.extension.candidates`).

A word is a maximal run ``\\p{L}[\\p{L}\\p{M}]*``: a letter, then letters and combining marks
(vowel signs, viramas, nuktas, tone marks), with these joiners kept inside:

- ZWNJ / ZWJ (U+200C/U+200D), which Persian, Hindi and Sinhala write between two letters of one
  word (``می‌خواهم``, ``क्‍ष``);
- before a letter only: the Catalan middle dot (``col·lectiu``, U+00B7) and the Hebrew geresh and
  gershayim (U+05F3/U+05F4, ``צ׳יפס``).

Digits, punctuation and spaces end a word, and so do the Ethiopic word space ``፡`` and full stop
``።`` (punctuation: ``ሰው፡ልጅ`` is ``ሰው`` and ``ልጅ``). Python's ``str.isalpha`` and ``[^\\W\\d_]``
stop at a combining mark, which cut Hindi ``नहीं`` into ``नह``; a mark is never a word's end
here. Such a run never ends inside an extended grapheme cluster (UAX #29 ``\\X``), and neither
does a dictionary word (:func:`segment_run`); ``tests/test_words.py`` checks every UDHR language.

Scripts written without spaces between words (:data:`NO_SPACE`: Han, Hiragana, Katakana, Thai,
Lao, Khmer, Myanmar) put a phrase or a sentence in one run; there the run is cut by ICU's word
break iterator (UAX #29 with ICU's dictionaries for Chinese/Japanese, Thai, Lao, Khmer and Burmese;
https://unicode-org.github.io/icu/userguide/boundaryanalysis/), through ``icu4py``. On the UDHR its
cuts agree with single-language segmenters (``docs/extension.md``: jieba for Chinese, PyThaiNLP for
Thai, khmer-nltk for Khmer).

Worked example: ``"नहीं, ሰው፡ልጅ ภาษาไทย 2x"`` → ``नहीं``, ``ሰው``, ``ልጅ``, ``ภาษา``, ``ไทย``, ``x``.

:mod:`embscope.languages.segment` counts the denominator of fertility with its own, documented
units (a character or cluster per word in these scripts, so counts stay comparable across
tokenizers and need no dictionary); the two share the list of scripts.
"""

from __future__ import annotations

import functools

from embscope.errors import EmbscopeError
from embscope.text.script import CHAR_SCRIPTS

#: scripts written without spaces between words, cut by the dictionary segmenter
NO_SPACE = tuple(s for s in CHAR_SCRIPTS if s != "Japanese")  # Japanese = Han + kana
#: joiners kept inside a word (ZWNJ, ZWJ), and marks kept only before a letter
JOINERS = "\u200c\u200d"
INNER = "\u00b7\u05f3\u05f4"
#: the ``regex`` pattern of a word
WORD_PATTERN = rf"\p{{L}}(?:[\p{{L}}\p{{M}}{JOINERS}]|[{INNER}](?=\p{{L}}))*"
#: the pinned segmenter, for the message when it is missing
SEGMENTER = "icu4py==1.2.0"


@functools.cache
def _patterns():
    import regex

    no_space = regex.compile("[" + "".join(rf"\p{{Script={s}}}" for s in NO_SPACE) + "]")
    return regex.compile(WORD_PATTERN), no_space


def word_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each word of ``text``, in order (module docstring).

    >>> t = "नहीं, ሰው፡ልጅ 2x"
    >>> [t[s:e] for s, e in word_spans(t)]
    ['नहीं', 'ሰው', 'ልጅ', 'x']
    """
    word, no_space = _patterns()
    out: list[tuple[int, int]] = []
    for m in word.finditer(text):
        s, e = m.span()
        if no_space.search(text, s, e) is None:
            out.append((s, e))
            continue
        at = s
        for piece in segment_run(text[s:e]):
            out.append((at, at + len(piece)))
            at += len(piece)
    return out


def no_space(word: str) -> bool:
    """Does ``word`` hold a letter of a script written without spaces (:data:`NO_SPACE`)?

    >>> no_space("ไทย"), no_space("word")
    (True, False)
    """
    return _patterns()[1].search(word) is not None


def words(text: str) -> list[str]:
    """The words of ``text`` (:func:`word_spans`).

    >>> words("ภาษาไทย 日本語のテキスト")
    ['ภาษา', 'ไทย', '日本語', 'の', 'テキスト']
    """
    return [text[s:e] for s, e in word_spans(text)]


@functools.lru_cache(maxsize=65536)
def segment_run(run: str) -> tuple[str, ...]:
    """One letter run of a no-space script cut into words by ICU's word break iterator. A cut
    inside an extended grapheme cluster (``\\X``) is undone: ICU's Khmer dictionary cuts
    ``យុត្ដិ`` after the coeng, ``យុត្`` + ``ដិ``, 12 times in the Khmer UDHR), and so is one before
    a piece that starts with no letter. Cached: runs repeat in a corpus."""
    import regex

    word, _ = _patterns()
    try:
        from icu4py.breakers import WordBreaker
    except ImportError as err:
        raise EmbscopeError(f"cutting {run[:12]!r}… into words needs ICU's word break; "
                            f"pip install {SEGMENTER}") from err
    clusters = {m.end() for m in regex.finditer(r"\X", run)}
    out: list[str] = []
    at = 0
    for piece in WordBreaker(run, "und"):
        if not piece:
            continue
        if out and (at not in clusters or not word.match(piece)):
            out[-1] += piece
        else:
            out.append(piece)
        at += len(piece)
    return tuple(out)
