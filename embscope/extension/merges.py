"""``extend --method merges``: a language's merges learned from its text (continued BPE,
:mod:`embscope.tokenizer.learn`), written into the tokenizer, and what they save, measured.

The words are the model's own pre-tokens: for byte-level BPE (GPT-2, SmolLM2, Llama 3) what its
pre-tokenizer cuts (so no merge joins across a cut the pre-tokenizer makes: GPT-2-style regexes
split Devanagari and Khmer at vowel signs); for SentencePiece-style BPE (Gemma, Llama 2), which
sees a whole line, the normalized line cut before each ``▁`` (SentencePiece's own training splits
at whitespace), so a learned merge never has ``▁`` inside its right side and never joins two words.

A corpus is either running text (any corpus ``extend`` reads) or a word-frequency list: one
``word<TAB>count`` per line (as ``scripts/fetch_language_data.py`` exports ``wordfreq``'s lists).
A listed word is counted as it stands in running text: after a space, except in scripts written
without spaces (Han, kana, Thai, Lao, Khmer, Myanmar), where it is counted bare.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from embscope.tokenizer.extend import SPACE, metaspace_style

if TYPE_CHECKING:  # pragma: no cover
    import polars as pl
    from tokenizers import Tokenizer

    from embscope.extension.savings import Savings

#: a word-frequency list's line: a word (no tab), a tab, a count
_LIST_LINE = re.compile(r"^[^\t]+\t\d+(\.\d+)?$")
#: lines of a file read to decide whether it is a word-frequency list
SNIFF_LINES = 200
#: Unicode name prefixes of scripts written without spaces between words
NO_SPACE_SCRIPTS = ("CJK", "HIRAGANA", "KATAKANA", "THAI", "LAO", "KHMER", "MYANMAR")
_METASPACE_WORD = re.compile(f"{SPACE}[^{SPACE}]*|[^{SPACE}]+")


def is_word_list(path: str | Path) -> bool:
    """A single ``.tsv``/``.txt`` file whose first non-blank lines (up to :data:`SNIFF_LINES`) are
    all ``word<TAB>count``."""
    p = Path(path)
    if not p.is_file() or p.suffix.lower() not in (".tsv", ".txt"):
        return False
    seen = 0
    with p.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            if not _LIST_LINE.match(line):
                return False
            seen += 1
            if seen >= SNIFF_LINES:
                break
    return seen > 0


def read_word_list(path: str | Path) -> dict[str, int]:
    """``{word: count}`` of a word-frequency list (counts rounded; words under 1 dropped).

    >>> # "ភាសា\\t1200\\nខ្មែរ\\t800.4\\n" → {"ភាសា": 1200, "ខ្មែរ": 800}
    """
    from embscope.errors import CorpusError

    out: Counter = Counter()
    with Path(path).open(encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            if not _LIST_LINE.match(line):
                raise CorpusError(f"{path}, line {n}: not 'word<TAB>count'; a word-frequency list has one per line")
            word, count = line.split("\t")
            c = round(float(count))
            if c >= 1:
                out[unicodedata.normalize("NFC", word)] += c
    if not out:
        raise CorpusError(f"{path} lists no word with a count of 1 or more")
    return dict(out)


def spaced(word: str) -> str:
    """The form a listed word takes in running text: ``" word"``, or bare in a script written
    without spaces.

    >>> spaced("hello"), spaced("ភាសា"), spaced("中文")
    (' hello', 'ភាសា', '中文')
    """
    first = next((c for c in word if c.isalpha()), "")
    name = unicodedata.name(first, "") if first else ""
    return word if name.startswith(NO_SPACE_SCRIPTS) else " " + word


def learning_words(tok: "Tokenizer", text: str) -> list[str]:
    """The words of ``text`` as the BPE model receives them (module docstring).

    >>> # SmolLM2: "the cat" → ["the", "Ġcat"]; Gemma: "the cat" → ["the", "▁cat"]
    """
    norm = tok.normalizer.normalize_str(text) if tok.normalizer is not None else text
    if metaspace_style(tok)[0] and tok.pre_tokenizer is None:
        return _METASPACE_WORD.findall(norm)
    if tok.pre_tokenizer is None:
        return re.findall(r"\s?\S+", norm)
    return [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(norm)]


def word_chunks(tok: "Tokenizer", batches, shard: int, *, chunk_words: int = 500_000):
    """Map step of word counting on an engine: chunks of ``(word, count, first)`` for one shard."""
    counts: Counter = Counter()
    for batch in batches:
        for text in batch.texts:
            counts.update(learning_words(tok, text))
        if len(counts) >= chunk_words:
            yield [(k, n, f"{shard:010d}") for k, n in counts.items()]
            counts = Counter()
    if counts:
        yield [(k, n, f"{shard:010d}") for k, n in counts.items()]


def corpus_words(tok: "Tokenizer", corpus, *, engine=None, sample_bytes: int | None = None, options=None):
    """``({word: count}, corpus report, is a word list)``: the learning's word table."""
    import functools

    from embscope.corpus.engine import count_keys
    from embscope.corpus.stream import CorpusRead

    if is_word_list(corpus):
        listed = read_word_list(corpus)
        words: Counter = Counter()
        for w, c in listed.items():
            for piece in learning_words(tok, spaced(w)):
                words[piece] += c
        size = Path(corpus).stat().st_size
        return dict(words), CorpusRead(files_read=1, texts=len(listed), bytes=size, bytes_read=size), True
    counts, report = count_keys(corpus, functools.partial(word_chunks, tok), engine=engine,
                                sample_bytes=sample_bytes, options=options, description="counting words")
    return {k: n for k, (n, _) in counts.items()}, report, False


def word_list_savings(tok: "Tokenizer", ext, corpus) -> "Savings":
    """:class:`~embscope.extension.savings.Savings` of a word-frequency list: every listed word
    (in its running-text form) encoded by both tokenizers, its tokens counted ``count`` times; the
    tokenization check runs over the distinct words."""
    import numpy as np

    from embscope.corpus.stream import CorpusRead
    from embscope.extension.savings import Savings
    from embscope.tokenizer.tokenization_check import count_changes

    listed = read_word_list(corpus)
    texts = [spaced(w) for w in listed]
    weights = np.asarray(list(listed.values()), dtype=np.int64)
    olds = tok.encode_batch(texts, add_special_tokens=False)
    news = ext.tokenizer.encode_batch(texts, add_special_tokens=False)
    out = []
    for encs, size in ((olds, tok.get_vocab_size(with_added_tokens=True)),
                       (news, ext.tokenizer.get_vocab_size(with_added_tokens=True))):
        counts = np.zeros(size, dtype=np.int64)
        ids = np.asarray([i for e in encs for i in e.ids], dtype=np.int64)
        reps = np.repeat(weights, [len(e.ids) for e in encs])
        np.add.at(counts, ids, reps)
        out.append(counts)
    size = Path(corpus).stat().st_size
    return Savings(int(out[0].sum()), out[0], int(out[1].sum()), out[1], count_changes(texts, olds, news, ext),
                   CorpusRead(files_read=1, texts=len(texts), bytes=size, bytes_read=size))


def learn_and_measure(tok: "Tokenizer", corpus, *, rows: int, min_freq: int, engine, sample_bytes, options):
    """``(extension, learned, savings, word list?, corpus report, distinct words)``: the merges learned
    from ``corpus``, written into ``tok``, and the corpus re-tokenized with both tokenizers."""
    import warnings

    from embscope.corpus.stream import CorpusWarning
    from embscope.errors import CorpusError
    from embscope.extension.savings import corpus_savings
    from embscope.tokenizer.learn import learn_merges, write_merges

    words, report, listed = corpus_words(tok, corpus, engine=engine, sample_bytes=sample_bytes, options=options)
    learned = learn_merges(tok, words, rows=rows, min_freq=min_freq)
    if not learned.merges:
        raise CorpusError(f"no pair of adjacent tokens occurs {min_freq}+ times inside a word of {corpus}; "
                          "lower --min-freq or pass a larger corpus")
    ext = write_merges(tok, learned)
    if listed:
        saved = word_list_savings(tok, ext, corpus)
    else:
        with warnings.catch_warnings():  # the first pass already warned about this corpus's bad input
            warnings.simplefilter("ignore", CorpusWarning)
            saved = corpus_savings(tok, ext, corpus, engine=engine, sample_bytes=sample_bytes, options=options)
    return ext, learned, saved, listed, report, len(words)


def merges_table(ext, pair_counts, counts_extended) -> "pl.DataFrame":
    """``candidates.parquet`` of the merges method: one row per learned merge, in rank order, with
    the columns of :func:`~embscope.extension.candidates.candidates_table` (``term``: the new token's
    text; ``frequency`` and ``savings_tokens``: the pair's count when it was merged, each occurrence
    one token fewer; ``pieces``: the merge's two sides; ``count_as_token``: the token's occurrences
    in the corpus under the written tokenizer) and ``left``/``right`` (the sides as stored)."""
    import polars as pl

    from embscope.tokenizer.learn import piece_text

    byte_level = any(t.text != t.piece for t in ext.tokens)
    toks = ext.tokens
    return pl.DataFrame({
        "rank": list(range(1, len(toks) + 1)), "term": [t.text for t in toks], "frequency": list(pair_counts),
        "pieces": [[piece_text(a, byte_level), piece_text(b, byte_level)] for a, b in ext.merges], "piece_ids": [t.pieces for t in toks],
        "n_pieces": [len(t.pieces) for t in toks], "n_words": [1] * len(toks), "savings_tokens": list(pair_counts),
        "added": [True] * len(toks), "count_as_token": [int(counts_extended[t.id]) for t in toks],
        "left": [a for a, _ in ext.merges], "right": [b for _, b in ext.merges],
    }, schema={"rank": pl.Int32, "term": pl.Utf8, "frequency": pl.Int64, "pieces": pl.List(pl.Utf8),
               "piece_ids": pl.List(pl.Int64), "n_pieces": pl.Int32, "n_words": pl.Int32,
               "savings_tokens": pl.Int64, "added": pl.Boolean, "count_as_token": pl.Int64,
               "left": pl.Utf8, "right": pl.Utf8})


def within_rows(tok, chosen, twins, as_: str, rows: int, skipped: dict[str, str]):
    """The best terms (and twins) whose tokens, intermediates included, number at most ``rows``:
    the longest prefix of ``chosen`` that fits (bisection on the written extension's size); the
    terms left out are listed in ``skipped``."""
    from embscope.tokenizer.extend import extend_tokenizer

    def size(k: int) -> int:
        keep = {c.term for c in chosen[:k]}
        tw = [t for t in twins if t[0][1:] in keep]  # a twin is " " or "▁" + its term
        ext = extend_tokenizer(tok, [c.term for c in chosen[:k]] + [t for t, _ in tw],
                               [c.piece_ids for c in chosen[:k]] + [p for _, p in tw], form=as_)
        return len(ext.tokens)

    if size(len(chosen)) <= rows:
        return chosen, twins
    lo, hi = 0, len(chosen)  # size(lo) <= rows < size(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if size(mid) <= rows:
            lo = mid
        else:
            hi = mid
    for c in chosen[lo:]:
        skipped[c.term] = f"past --rows {rows}: the tokens of the better terms fill the rows"
    keep = {c.term for c in chosen[:lo]}
    return chosen[:lo], [t for t in twins if t[0][1:] in keep]
