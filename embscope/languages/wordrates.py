"""How a tokenizer splits a language's words: ``split_word_rate`` and ``single_token_word_rate``.

Each distinct word of the language's word sample (its first
:data:`~embscope.languages.counting.WORD_SAMPLE_BYTES`, words as :mod:`embscope.languages.segment`
cuts them) is encoded on its own, with the space that precedes it in the text when the tokenizer
marks spaces in its tokens (GPT-2's ``Ġthe``; see :func:`embscope.languages.fertility.space_prefix`);
then, frequency-weighted over the words of the sample,

- ``split_word_rate`` = share of words encoded as ≥ 2 tokens (Rust et al. 2021's "proportion of
  continued words": a word is *continued* when it needs more than one piece);
- ``single_token_word_rate`` = share of words encoded as exactly one token.

Example: gpt2 on "the declaration": `` the`` and `` declaration`` are one token each → split 0.0,
single 1.0.

Not tokka-bench's ``continued_word_rate`` (bgub/tokka-bench, ``metrics.calculate_word_metrics``):
that one encodes every whitespace chunk *without* its space (punctuation attached, so ``rights,``
is a word), or every printable non-space character in languages written without spaces, over an
evenly spaced sample of at most 1000 words, and reports a percentage. Ours measures the words as
the tokenizer meets them in running text.

Per unit the sums (words, split, single) are kept for the bootstrap intervals
(:mod:`embscope.languages.intervals`).
"""

from __future__ import annotations

from collections import Counter

from embscope.languages.segment import word_counts
from embscope.tokenizer.base import Vocabulary

#: distinct words per encode call
ENCODE_CHUNK = 8192


def unit_word_counts(word_texts, word_units) -> dict:
    """unit → ``Counter`` of (word, after_space) over the sampled texts of that unit (key None for
    texts without one).

    >>> unit_word_counts(["a b", "a"], [0, 1])
    {0: Counter({('a', True): 1, ('b', True): 1}), 1: Counter({('a', True): 1})}
    """
    out: dict = {}
    for text, unit in zip(word_texts, word_units):
        out.setdefault(unit, Counter()).update(word_counts(text))
    return out


def word_rates(vocab: Vocabulary, per_unit: dict, prefix: bool):
    """(split_word_rate, single_token_word_rate, {unit: (words, split, single)}) of ``per_unit``'s
    words (:func:`unit_word_counts`); the rates are None without words."""
    freq: Counter = Counter()
    for c in per_unit.values():
        freq.update(c)
    if not freq:
        return None, None, {}
    keys = list(freq)
    texts = [(" " + w) if (after and prefix) else w for w, after in keys]
    lengths = {}
    for start in range(0, len(texts), ENCODE_CHUNK):
        for key, ids in zip(keys[start:start + ENCODE_CHUNK], vocab.encode_batch(texts[start:start + ENCODE_CHUNK])):
            lengths[key] = len(ids)
    sums = {}
    for unit, c in per_unit.items():
        n = split = single = 0
        for key, k in c.items():
            n += k
            split += k * (lengths[key] >= 2)
            single += k * (lengths[key] == 1)
        sums[unit] = (n, split, single)
    total = sum(s[0] for s in sums.values())
    return (sum(s[1] for s in sums.values()) / total, sum(s[2] for s in sums.values()) / total, sums)
