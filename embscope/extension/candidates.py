"""Which domain terms deserve their own token: frequent words the tokenizer splits into many pieces.

A term that occurs ``f`` times and costs ``k`` pieces would cost one token if added, so adding it
saves, by estimate, ``f × (k − 1)`` tokens on the corpus. Terms are ranked by that estimate.

Worked example: " cholecystitis" occurs 120 times and tokenizes as [" chole", "cyst", "itis"]
(k = 3), so it is estimated to save 120 × 2 = 240 tokens.

Terms are counted in the form the tokenizer sees them. The pre-tokenizer cuts text into pre-tokens
before BPE runs; byte-level BPE (GPT-2 lineage) keeps the space in front of a word inside its
pre-token, so mid-sentence "hypertension" is the pre-token " hypertension" (stored as
``Ġhypertension``) while a line-initial "Hypertension" has no space. The two forms are different
tokens, so they are counted, ranked and added apart, each as it occurs.

SentencePiece-style vocabularies (Llama 2, Mistral, Gemma) have no pre-tokenizer: the normalizer
turns every space into ``▁`` and the model sees a whole line at once. Words are then cut from the
raw text (a word keeps the space in front of it) and each is counted in the form the model sees,
``▁hypertension``; that is also the term's name and the content of the token to add. A text's first
word is seen as ``▁Word`` when the tokenizer prepends a ``▁`` (Llama 2's dummy prefix) and as
``Word`` otherwise (Gemma), so there the spaced twin of ``Hypertension`` is ``▁Hypertension``.

Multi-word terms (``max_ngram > 1``) are runs of adjacent word pre-tokens (" diabetes mellitus");
no merge joins two pre-tokens, so they are added only as added tokens (``--as added``).

The estimate double-counts overlaps (a unigram inside an added bigram) and ignores that a new
token is also built inside longer words that hold its pieces (and the intermediate tokens of
merge chains, :mod:`embscope.tokenizer.extend`); :func:`~embscope.extension.savings.corpus_savings` re-tokenizes
the corpus with the tokenizer that is written and reports what is really saved.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from embscope.tokenizer.extend import SPACE, added_tokenizer, metaspace_style

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import polars as pl
    from tokenizers import Tokenizer


@dataclass
class Candidate:
    """One term that could become a token."""

    #: the surface form as it occurs in text, leading space included (``" hypertension"``)
    term: str
    #: occurrences in the corpus (as this exact form)
    frequency: int
    #: the pieces the current tokenizer produces, as readable text
    pieces: list[str]
    #: their token ids in the current tokenizer
    piece_ids: list[int]
    #: number of words (1 for unigrams)
    n_words: int
    #: pre-tokens it spans: ``n_words`` unless the pre-tokenizer cuts a word itself (GPT-2's regex
    #: cuts Devanagari at vowel signs); more than one cannot become a merge, only an added token
    n_pretokens: int = 1

    @property
    def n_pieces(self) -> int:
        return len(self.piece_ids)

    @property
    def savings_tokens(self) -> int:
        """Estimated tokens saved on the corpus: ``frequency × (n_pieces − 1)`` (higher is better)."""
        return self.frequency * (self.n_pieces - 1)


#: the ``--as added`` form's tokenizer (kept under its earlier name)
extended_tokenizer = added_tokenizer


def _is_word(surface: str) -> bool:
    """A one-word surface: a whole word (:mod:`embscope.text.words`: letters and their combining
    marks) after an optional leading space (or ``▁``); no numbers or punctuation.

    >>> _is_word(" hypertension"), _is_word("▁नहीं"), _is_word(" 2"), _is_word(" A01"), _is_word(",")
    (True, True, False, False, False)
    """
    from embscope.text.words import word_spans

    core = surface[1:] if surface[:1] in (" ", SPACE) else surface
    return len(core) >= 2 and word_spans(core) == [(0, len(core))]


def _starts_spaced(surface: str) -> bool:
    return surface[:1] in (" ", SPACE)


#: the shortest word counted, in code points, outside the no-space scripts (one letter is one
#: token in every vocabulary worth extending; a Han character or Thai syllable may not be)
MIN_WORD = 2


def _long_enough(word: str) -> bool:
    from embscope.text.words import no_space

    return len(word) >= MIN_WORD or no_space(word)


def pretokens(tok: "Tokenizer", text: str) -> list[tuple[str, str, int, int]]:
    """``(surface, pretoken, start, end)`` for each pre-token of ``text``.

    ``surface`` is the slice of the (normalized) text the pre-token covers, ``pretoken`` the string
    the BPE model receives (``Ġhypertension`` for byte-level BPE). Tokenizers without a
    pre-tokenizer are split on whitespace, keeping the space in front of each word. For
    SentencePiece-style tokenizers (:func:`metaspace_style`) each word (:mod:`embscope.text.words`)
    is one pre-token, with the space in front of it, and both strings are its ``▁`` form
    (``▁hypertension``); offsets are the raw text's.
    """
    metaspace, prepends = metaspace_style(tok)
    if metaspace:
        return [(w, w, s, e) for w, s, e in _metaspace_words(text, prepends)]
    if tok.normalizer is not None:
        text = tok.normalizer.normalize_str(text)
    return _split(tok, text)


def _split(tok: "Tokenizer", text: str) -> list[tuple[str, str, int, int]]:
    """Pre-tokens of normalized ``text`` (whitespace-delimited without a pre-tokenizer)."""
    if tok.pre_tokenizer is None:
        return [(m.group(), m.group(), m.start(), m.end()) for m in re.finditer(r"\s?\S+", text)]
    return [(text[s:e], p, s, e) for p, (s, e) in tok.pre_tokenizer.pre_tokenize_str(text)]


def _metaspace_words(text: str, prepends: bool):
    """``(▁form, start, end)`` per word of raw ``text``: a word after a space keeps it (``▁word``,
    starting at the space), and so does the text's first word under a dummy prefix."""
    from embscope.text.words import word_spans

    for s, e in word_spans(text):
        if s > 0 and text[s - 1] == " ":
            yield SPACE + text[s:e], s - 1, e
        elif s == 0 and prepends:
            yield SPACE + text[s:e], s, e
        else:
            yield text[s:e], s, e


def _words_of(tok: "Tokenizer", text: str, tally: Counter | None = None):
    """``(surface, pre-token parts, start, end)`` per word of ``text`` the model can be given a
    token for, in text order.

    SentencePiece-style: every word (the model sees whole lines). Otherwise a word counts where
    the pre-tokenizer cuts the text at its ends (the first pre-token may hold the space in front of
    it): its parts are the pre-tokens covering it, more than one where the pre-tokenizer cuts the
    word itself (GPT-2's regex at a Devanagari vowel sign: ``" नह" + "ीं"``), which no merge can
    join. A word of a no-space script inside a longer pre-token (a Thai phrase) is one part, its
    own pre-token string. ``tally`` counts ``words`` and the words the pre-tokenizer ``split``.
    """
    import bisect

    from embscope.text.words import no_space, word_spans

    metaspace, prepends = metaspace_style(tok)
    if metaspace:
        for w, s, e in _metaspace_words(text, prepends):
            if tally is not None:
                tally["words"] += 1
            if _long_enough(w.lstrip(SPACE)):
                yield w, [w], s, e
        return
    if tok.normalizer is not None:
        text = tok.normalizer.normalize_str(text)
    pts = _split(tok, text)
    starts = [p[2] for p in pts]
    for s, e in word_spans(text):
        i, j = bisect.bisect_right(starts, s) - 1, bisect.bisect_right(starts, e - 1) - 1
        if i < 0 or pts[i][3] <= s or pts[j][3] < e:
            continue  # not inside pre-tokens (a pre-tokenizer that drops characters)
        if tally is not None:
            tally["words"] += 1
            tally["split"] += j > i
        word = text[s:e]
        if not _long_enough(word):
            continue
        begin = pts[i][2]
        spaced = begin == s - 1 and text[begin] == " "
        if (begin == s or spaced) and pts[j][3] == e:
            yield text[begin:e], [p[1] for p in pts[i:j + 1]], begin, e
        elif i == j and no_space(word):
            surface = text[begin:e] if spaced else word
            own = _split(tok, surface)
            if len(own) == 1:
                yield surface, [own[0][1]], s - spaced, e


def _terms_of(tok: "Tokenizer", text: str, max_ngram: int, tally: Counter | None = None):
    """``(term, words)`` for every word n-gram (n ≤ max_ngram) of one text, in text order; each
    word is ``(surface, parts, start, end)`` (:func:`_words_of`)."""
    run: list = []  # current run of adjacent words
    for surface, parts, s, e in _words_of(tok, text, tally):
        if run and (run[-1][3] != s or not _starts_spaced(surface)):
            run = []
        run.append((surface, parts, s, e))
        run = run[-max_ngram:]
        for n in range(1, len(run) + 1):  # every n-gram ending at this word
            gram = run[-n:]
            yield "".join(g[0] for g in gram), gram


def count_terms(tok: "Tokenizer", texts: Iterable[str], *, max_ngram: int = 1,
                total: int | None = None, tally: Counter | None = None) -> tuple[Counter, dict[str, list[list[str]]]]:
    """Count word terms (1..max_ngram adjacent words) in their surface form.

    Returns ``(counts, pretoken_parts)``: counts per surface form, and for each form the pre-token
    strings it is made of (what the BPE model sees), one list per word. ``tally`` (a ``Counter``)
    gets the number of ``words`` read and of those the pre-tokenizer ``split``.

    >>> # "Acute gastritis. Acute gastritis" -> {"Acute": 2, " gastritis": 2, "Acute gastritis": 2}
    """
    from embscope.progress import track

    counts: Counter = Counter()
    parts: dict[str, list[str]] = {}
    for text in track(texts, total=total, description="counting terms", unit="texts"):
        for key, gram in _terms_of(tok, text, max_ngram, tally):
            counts[key] += 1
            if key not in parts:
                parts[key] = [g[1] for g in gram]
    return counts, parts


def piece_ids(tok: "Tokenizer", pre_parts: Sequence[str]) -> list[int]:
    """Token ids the BPE model gives a term, pre-token by pre-token (exactly what ``encode`` does)."""
    ids: list[int] = []
    for p in pre_parts:
        ids.extend(t.id for t in tok.model.tokenize(p))
    return ids


def find_candidates(tok: "Tokenizer", texts: Iterable[str], *, max_ngram: int = 1, min_freq: int = 5,
                    total: int | None = None, tally: Counter | None = None) -> list[Candidate]:
    """All multi-piece word terms with ``frequency ≥ min_freq``, best estimated savings first.

    Excluded: numbers and anything with a digit or punctuation, terms that are already one token,
    and terms that already are an added token of the tokenizer. ``tally``: :func:`count_terms`.
    """
    counts, parts = count_terms(tok, texts, max_ngram=max_ngram, total=total, tally=tally)
    return _ranked(tok, ((t, f, parts[t]) for t, f in counts.items()), min_freq)


def _ranked(tok: "Tokenizer", terms, min_freq: int) -> list[Candidate]:
    """Candidates from ``(term, frequency, pre-token parts per word)``, best estimated savings first."""
    out: list[Candidate] = []
    for term, freq, parts in terms:  # (a token's id, not a copy of the vocabulary: Gemma-3's took 0.4 s)
        if freq < min_freq or tok.token_to_id(term) is not None:
            continue
        flat = [p for word in parts for p in word]
        ids = piece_ids(tok, flat)
        if len(ids) < 2:
            continue
        pieces = [tok.decode([i], skip_special_tokens=False) for i in ids]
        out.append(Candidate(term, freq, pieces, ids, len(parts), len(flat)))
    out.sort(key=lambda c: (-c.savings_tokens, -c.frequency, c.term))
    return out


def candidates_table(cands: Sequence[Candidate], measured: dict[str, int] | None = None) -> "pl.DataFrame":
    """The ``candidates.parquet`` table, one row per candidate, best first (``rank`` 1 = best).

    ``measured``: for the terms added, their occurrences as one token in the corpus under the
    written tokenizer (``count_as_token``, null for terms not added); the measured saving of a term
    is that count × (pieces − 1), summed in ``new_tokens.parquet`` → ``tokens_saved`` (not
    repeated here: it equals ``savings_tokens`` wherever every occurrence became the new token).
    """
    import polars as pl

    measured = measured or {}
    counts = [measured.get(c.term) for c in cands]
    return pl.DataFrame({
        "rank": list(range(1, len(cands) + 1)),
        "term": [c.term for c in cands],
        "frequency": [c.frequency for c in cands],
        "pieces": [c.pieces for c in cands],
        "piece_ids": [c.piece_ids for c in cands],
        "n_pieces": [c.n_pieces for c in cands],
        "n_words": [c.n_words for c in cands],
        "savings_tokens": [c.savings_tokens for c in cands],
        "added": [c.term in measured for c in cands],
        "count_as_token": counts,
    }, schema={"rank": pl.Int32, "term": pl.Utf8, "frequency": pl.Int64, "pieces": pl.List(pl.Utf8),
               "piece_ids": pl.List(pl.Int64), "n_pieces": pl.Int32, "n_words": pl.Int32,
               "savings_tokens": pl.Int64, "added": pl.Boolean, "count_as_token": pl.Int64})


def new_tokens_table(ext, counts_extended=None) -> "pl.DataFrame":
    """The ``new_tokens.parquet`` table: every token the extension adds, in id order, with its
    kind (``term``, or ``intermediate`` of a merge chain), its old pieces and, from the savings
    pass, its occurrences in the corpus and the tokens it saves there (count × (pieces − 1))."""
    import polars as pl

    rows = ext.tokens
    counts = [None if counts_extended is None else int(counts_extended[t.id]) for t in rows]
    return pl.DataFrame({
        "token_id": [t.id for t in rows], "text": [t.text for t in rows], "piece": [t.piece for t in rows],
        "kind": [t.kind for t in rows], "piece_ids": [t.pieces for t in rows],
        "n_pieces": [len(t.pieces) for t in rows], "count": counts,
        "tokens_saved": [None if n is None else n * (len(t.pieces) - 1) for n, t in zip(counts, rows)],
    }, schema={"token_id": pl.Int64, "text": pl.Utf8, "piece": pl.Utf8, "kind": pl.Utf8,
               "piece_ids": pl.List(pl.Int64), "n_pieces": pl.Int32, "count": pl.Int64, "tokens_saved": pl.Int64})


def count_tokens(tok: "Tokenizer", texts: Sequence[str], batch: int = 2048) -> int:
    """Total tokens of ``texts`` (no special tokens added)."""
    n = 0
    for i in range(0, len(texts), batch):
        n += sum(len(e.ids) for e in tok.encode_batch(list(texts[i:i + batch]), add_special_tokens=False))
    return n


def token_counts(tok: "Tokenizer", texts: Sequence[str], batch: int = 2048):
    """``(total, counts)``: total tokens and a (V,) numpy array of occurrences per token id."""
    import numpy as np

    size = tok.get_vocab_size(with_added_tokens=True)
    counts = np.zeros(size, dtype=np.int64)
    for i in range(0, len(texts), batch):
        ids = [j for e in tok.encode_batch(list(texts[i:i + batch]), add_special_tokens=False) for j in e.ids]
        counts += np.bincount(np.asarray(ids, dtype=np.int64), minlength=size)[:size]
    return int(counts.sum()), counts


def space_twins(tok: "Tokenizer", terms: Sequence[str]) -> list[tuple[str, list[int]]]:
    """For each chosen term without a leading space, its spaced form, when that is still split.

    An added token is matched in raw text before pre-tokenization, so adding "Laceration" alone
    would turn mid-sentence " Laceration" (old: [" L", "ac", "eration"]) into [" ", "Laceration"]:
    a bare-space token before a word, a sequence the model never saw in training. Adding the twin
    " Laceration" as well keeps the spaced form whole. Only for tokenizers whose pre-tokenizer keeps
    the space inside the word's pre-token (byte-level BPE), and for SentencePiece-style ones, whose
    twin is ``▁Laceration``. Returns ``[(twin, piece_ids), ...]``.
    """
    chosen = set(terms)
    existing = set(tok.get_vocab(with_added_tokens=True))
    out = []
    if metaspace_style(tok)[0]:
        for term in terms:
            twin = SPACE + term
            if _starts_spaced(term) or twin in chosen or twin in existing:
                continue
            ids = piece_ids(tok, [twin])
            if len(ids) > 1:
                out.append((twin, ids))
                chosen.add(twin)
        return out
    for term in terms:
        twin = " " + term
        if term.startswith(" ") or twin in chosen or twin in existing:
            continue
        pts = pretokens(tok, twin)
        if not pts or not _is_word(pts[0][0]) or not pts[0][0].startswith(" "):
            continue  # the tokenizer splits the space off: no twin needed
        ids = piece_ids(tok, [p[1] for p in pts])
        if len(ids) > 1:
            out.append((twin, ids))
            chosen.add(twin)
    return out


# ------------------------------------------------------------------ corpus passes on an engine

#: distinct terms one shard counts in memory before it hands them out as a chunk (a sorted run on
#: disk, or rows of a Ray Dataset); ~150 bytes each, so ~75 MB per worker. Exact either way: a
#: term in several chunks has its counts added by the merge.
CHUNK_TERMS = 500_000
_POS = 22  # width of the zero-padded "shard index + first position" prefix of a term's first key
#: prefix of the tally's keys among the terms ("#words", "#split"): no term holds a "#"
TALLY = "#"


def term_chunks(tok: "Tokenizer", batches, shard: int, *, max_ngram: int = 1,
                chunk_terms: int = CHUNK_TERMS):
    """Map step of term counting: chunks of ``(term, count, first)`` for one shard's batches.

    ``first`` = shard index (10 digits), position of the term's first occurrence in the shard
    (12 digits), then the JSON list of its pre-token parts; the least ``first`` over all shards is
    the corpus's first occurrence, whose parts :func:`count_terms` keeps too. The words read and
    split (:func:`count_terms`' tally) travel as the keys :data:`TALLY_KEYS`.
    """
    import json

    counts: Counter = Counter()
    tally: Counter = Counter()
    first: dict[str, str] = {}
    pos = 0

    def chunk():
        out = [(k, n, first[k]) for k, n in counts.items()]
        return out + [(TALLY + k, n, "0" * _POS + "[]") for k, n in tally.items() if n]

    for batch in batches:
        for text in batch.texts:
            for key, gram in _terms_of(tok, text, max_ngram, tally):
                if key not in first:
                    first[key] = f"{shard:010d}{pos:012d}" + json.dumps([g[1] for g in gram])
                    pos += 1
                counts[key] += 1
        if len(counts) >= chunk_terms:
            yield chunk()
            counts, first, tally = Counter(), {}, Counter()
    if counts or tally:
        yield chunk()


def corpus_candidates(tok: "Tokenizer", corpus, *, max_ngram: int = 1, min_freq: int = 5,
                      engine=None, sample_bytes: int | None = None, options=None,
                      chunk_terms: int = CHUNK_TERMS, tally: Counter | None = None):
    """:func:`find_candidates` over a corpus on an engine: ``(candidates, corpus report)``.

    Equal to ``find_candidates(tok, texts)`` over the same texts (same terms, frequencies, pieces
    and order) on every engine (:class:`embscope.corpus.engine.Engine`). ``tally`` (a
    ``Counter``) gets the words read and split (:func:`count_terms`; counts under ``min_freq``
    are dropped with the terms).
    """
    import functools
    import json

    from embscope.corpus.engine import count_keys

    chunker = functools.partial(term_chunks, tok, max_ngram=max_ngram, chunk_terms=chunk_terms)
    counts, report = count_keys(corpus, chunker, min_count=min_freq, engine=engine,
                                sample_bytes=sample_bytes, options=options)
    for key in [k for k in counts if k.startswith(TALLY)]:
        n, _ = counts.pop(key)
        if tally is not None:
            tally[key[len(TALLY):]] += n
    terms = ((t, n, json.loads(first[_POS:])) for t, (n, first) in counts.items())
    return _ranked(tok, terms, min_freq), report
