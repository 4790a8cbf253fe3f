"""What each language costs: corpus reading, word segmentation, Unicode scripts, fertility and parity.

- :mod:`~embscope.corpus.stream`: corpus files and folders → (language, text) records;
- :mod:`~embscope.languages.segment`: script-aware word units;
- :mod:`~embscope.text.script`: the Unicode script of a character or string;
- :mod:`~embscope.languages.fertility`: per-language fertility, parity and friends.
"""
