"""The counting pass of the language measurements: every text of a corpus tokenised by every
tokenizer, counted per (tokenizer, language) and per language (words, characters, bytes, samples).

:func:`count_batches` is the map step over one shard's batches, :func:`merge_counts` the reduce step;
partials of consecutive shards merge into exactly the counts of one pass, so every engine
(:mod:`embscope.corpus.engine`) gives the same numbers. :mod:`embscope.languages.fertility` turns the
counts into the per-language metrics.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from embscope.languages.segment import count_words, word_counts
from embscope.limits import Limits
from embscope.tokenizer.base import Vocabulary

#: bytes of text per language whose words are tokenised one by one (continued-word rates):
#: ~40k words, plenty for a stable share (UDHR is 10–40 KB per language) at a bounded cost.
WORD_SAMPLE_BYTES = 256 << 10
#: texts per language checked for decode(encode(text)) == text
#: (a decode is ~50 µs; 200 texts tell a lossless tokenizer from a normalising one)
ROUNDTRIP_TEXTS = 200
#: bytes per language whose characters decide its script
SCRIPT_SAMPLE_CHARS = 64 << 10
#: texts / characters per encode window (:func:`_by_language`): 2048 short texts amortise the
#: per-language accounting, and 4 M characters bound the window's memory
WINDOW_TEXTS = 2048
WINDOW_BYTES = 4 << 20
#: the language that languages past ``max_languages`` are measured as (see :func:`count_batches`)
OTHER = "other"
#: characters of a folded language name kept to count distinct folded languages
FOLDED_NAME_CHARS = 64



@dataclass
class _Acc:
    """Running sums for one (tokenizer, language)."""

    texts: int = 0
    tokens: int = 0
    counts: object = None  # numpy int64 (V,): occurrences of each token id
    units: dict = field(default_factory=dict)  # unit → tokens
    #: unit → [(token ids, occurrences), …] of the unit's texts (the first tokenizer, when the density
    #: columns ask for it: :func:`count_batches`'s ``unit_tokens``); pieces of one unit just concatenate
    unit_ids: dict = field(default_factory=dict)
    rt: list = field(default_factory=list)  # decode(encode(t)) == t for the first texts, in order

    @property
    def rt_ok(self) -> int:
        return sum(self.rt)

    @property
    def rt_n(self) -> int:
        return len(self.rt)

    def merge(self, later: "_Acc") -> None:
        """Add the sums of texts that come after this accumulator's in corpus order."""
        self.texts += later.texts
        self.tokens += later.tokens
        self.counts += later.counts
        for unit, n in later.units.items():
            self.units[unit] = self.units.get(unit, 0) + n
        for unit, pieces in later.unit_ids.items():
            self.unit_ids.setdefault(unit, []).extend(pieces)
        self.rt += later.rt[:ROUNDTRIP_TEXTS - len(self.rt)]


@dataclass
class _LangAcc:
    """Running sums for one language, independent of the tokenizer.

    The word and script samples are kept as the sampled texts themselves, cut at text (words) and
    character (script) granularity, so they do not depend on how the stream was batched, and
    accumulators of consecutive parts of a corpus merge into exactly what one pass over the whole
    corpus gives (see :func:`merge_counts`).
    """

    words: int = 0
    chars: int = 0
    bytes: int = 0
    word_chars: int = 0  # characters of the texts in word_texts
    word_texts: list = field(default_factory=list)  # the language's first texts (< WORD_SAMPLE_BYTES before each)
    #: the unit key of each text in word_texts (None for a text without one)
    word_units: list = field(default_factory=list)
    #: unit → [words, characters, bytes] of the unit's texts (texts with a unit key only)
    units: dict = field(default_factory=dict)
    script_chars: int = 0
    script_texts: list = field(default_factory=list)  # pieces of its first SCRIPT_SAMPLE_CHARS characters

    def sample_words(self, texts: Sequence[str], units: Sequence | None = None) -> None:
        """Take the language's next ``texts`` (in order, with their ``units``) into the word sample
        while the characters taken before each are under :data:`WORD_SAMPLE_BYTES`."""
        for i, t in enumerate(texts):
            if self.word_chars >= WORD_SAMPLE_BYTES:
                break
            self.word_texts.append(t)
            self.word_units.append(units[i] if units is not None else None)
            self.word_chars += len(t)

    def add_units(self, texts: Sequence[str], units: Sequence) -> None:
        """Add each text's words, characters and bytes to its unit's sums."""
        for t, unit in zip(texts, units):
            if unit is not None:
                s = self.units.get(unit)
                if s is None:
                    s = self.units[unit] = [0, 0, 0]
                s[0] += count_words(t)
                s[1] += len(t)
                s[2] += len(t.encode("utf-8"))

    def sample_chars(self, texts: Sequence[str]) -> None:
        """Take characters of the language's next ``texts`` into the script sample up to
        :data:`SCRIPT_SAMPLE_CHARS`."""
        for t in texts:
            room = SCRIPT_SAMPLE_CHARS - self.script_chars
            if room <= 0:
                break
            self.script_texts.append(t[:room])
            self.script_chars += min(len(t), room)

    @property
    def word_freq(self) -> Counter:
        """(word, after_space) → count over the first :data:`WORD_SAMPLE_BYTES` of the language."""
        return word_counts("\n".join(self.word_texts))  # "\n" is whitespace to the rules

    @property
    def script(self) -> Counter:
        """Unicode script → characters, over the first :data:`SCRIPT_SAMPLE_CHARS`."""
        from embscope.text.script import script_counts

        return Counter(script_counts("".join(self.script_texts)))

    def merge(self, later: "_LangAcc") -> None:
        """Add the sums of texts that come after this accumulator's in corpus order.

        ``later``'s samples start at its own first text and hold at least what one pass would
        still take from there, so feeding them through the same sampling is exact.
        """
        self.words += later.words
        self.chars += later.chars
        self.bytes += later.bytes
        self.sample_words(later.word_texts, later.word_units)
        self.sample_chars(later.script_texts)
        for unit, (w, c, b) in later.units.items():
            s = self.units.setdefault(unit, [0, 0, 0])
            s[0] += w
            s[1] += c
            s[2] += b


@dataclass
class FertilityCounts:
    """Everything :func:`measure` counts over a run of batches: the partial result of one shard.

    ``acc[(k, lang)]`` for tokenizer ``vocabs[k]``, ``langs[lang]`` per language. Partials of
    consecutive shards merge (:func:`merge_counts`) into exactly the counts of one pass.
    """

    acc: dict = field(default_factory=dict)
    langs: dict = field(default_factory=dict)
    #: languages measured as :data:`OTHER` because ``max_languages`` others came first
    folded: set = field(default_factory=set)


def _fold(batches, out: FertilityCounts, max_languages: int, keep: frozenset | None = None):
    """Batches with languages past the first ``max_languages`` renamed :data:`OTHER` (counted in
    ``out.folded``): every language holds vocabulary-sized counts, so their number is bounded.
    With ``keep``, batches of other languages are left out (``--lang``)."""
    from dataclasses import replace

    kept: set = set(out.langs)
    for batch in batches:
        if keep is not None and batch.lang not in keep:
            continue
        if batch.lang not in kept:
            if batch.lang == OTHER or len(kept - {OTHER}) < max_languages:
                kept.add(batch.lang)
            else:
                out.folded.add(batch.lang[:FOLDED_NAME_CHARS])
                batch = replace(batch, lang=OTHER)
        yield batch


def count_batches(vocabs: Sequence[Vocabulary], batches, max_languages: int = Limits.languages,
                  unit_tokens: bool = False, keep: frozenset | None = None) -> FertilityCounts:
    """The map step: tokenise every batch with every tokenizer and count (see the module doc).

    Languages past the first ``max_languages`` of the batches are counted together as
    :data:`OTHER`. Texts with a unit key also add to their unit's sums (words, characters, bytes
    per language; tokens per tokenizer; with ``unit_tokens``, the first tokenizer's token ids too):
    the bootstrap intervals resample those units (:mod:`embscope.languages.bootstrap`). With
    ``keep``, only those languages are counted (``--lang``)."""
    import numpy as np

    out = FertilityCounts()
    acc, langs = out.acc, out.langs
    batches = _fold(batches, out, max_languages, keep)

    def account(batch, all_ids):
        la = langs.setdefault(batch.lang, _LangAcc())
        texts = batch.texts
        joined = "\n".join(texts)  # one regex pass per batch: "\n" is whitespace to the rules
        la.words += count_words(joined)
        la.chars += len(joined) - (len(texts) - 1)
        la.bytes += len(joined.encode("utf-8")) - (len(texts) - 1)
        has_units = any(u is not None for u in batch.units)
        la.sample_words(texts, batch.units)
        la.sample_chars(texts)
        if has_units:
            la.add_units(texts, batch.units)
        for k, (vocab, ids) in enumerate(zip(vocabs, all_ids)):
            a = acc.get((k, batch.lang))
            if a is None:
                a = acc[(k, batch.lang)] = _Acc(counts=np.zeros(len(vocab), dtype=np.int64))
            lens = list(map(len, ids))
            a.texts += len(ids)
            a.tokens += sum(lens)
            flat = _flatten(ids)
            if flat.size * 16 < len(vocab):  # few tokens: sort them rather than sweep the vocabulary
                u, c = np.unique(flat, return_counts=True)
                keep = u < len(vocab)
                a.counts[u[keep]] += c[keep]
            elif flat.size:
                a.counts += np.bincount(flat, minlength=len(vocab))[:len(vocab)]
            if has_units:
                for unit, n in zip(batch.units, lens):
                    if unit is not None:
                        a.units[unit] = a.units.get(unit, 0) + n
                if unit_tokens and k == 0:
                    for unit, one in zip(batch.units, ids):
                        if unit is not None and len(one):
                            u, c = np.unique(np.asarray(one, dtype=np.int64), return_counts=True)
                            a.unit_ids.setdefault(unit, []).append((u, c))
            if a.rt_n < ROUNDTRIP_TEXTS:
                take = min(ROUNDTRIP_TEXTS - a.rt_n, len(ids))
                a.rt += [d == t for d, t in zip(vocab.decode_batch(ids[:take]), texts[:take])]

    def encode_all(window):
        # One encode call per tokenizer for the whole window, whatever its languages.
        texts = [t for b in window for t in b.texts]
        out, ends = [], list(itertools.accumulate(len(b.texts) for b in window))
        for v in vocabs:
            ids = v.encode_batch(texts)
            out.append([ids[e - len(b.texts):e] for b, e in zip(window, ends)])
        return [list(per_batch) for per_batch in zip(*out)]  # [batch][tokenizer] → ids

    def account_all(window, encoded):
        for batch, all_ids in zip(window, encoded):
            account(batch, all_ids)

    # Encode window n+1 (Rust, GIL released) while Python accounts for window n.
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = None
        for window in _by_language(batches, WINDOW_TEXTS, WINDOW_BYTES):
            fut = pool.submit(encode_all, window)
            if pending is not None:
                account_all(*pending)
            pending = (window, fut.result())
        if pending is not None:
            account_all(*pending)
    return out


def _by_language(batches, max_texts: int, max_bytes: int):
    """Windows of the batch stream, each regrouped into one batch per language.

    A corpus whose records switch language every line (a multilingual jsonl with a ``lang``
    field) arrives as batches of one or two texts; accounting for each costs a pass over the
    whole vocabulary. A window collects batches until it holds ``max_texts`` texts or
    ``max_bytes`` characters, then yields one batch per language (languages in order of first
    appearance, each language's texts in corpus order). Every per-language count, and every
    per-language sample taken "from the start of the language", is the same as in the ungrouped
    stream up to the window boundaries, and the windows depend only on the shard's own batches,
    so every engine gives the same numbers.
    """
    from embscope.corpus.stream import Batch

    groups: dict[str, Batch] = {}
    texts = size = 0
    for batch in batches:
        g = groups.get(batch.lang)
        if g is None:
            g = groups[batch.lang] = Batch(lang=batch.lang, texts=[], units=[], source=batch.source)
        g.texts += batch.texts
        g.units += batch.units
        texts += len(batch.texts)
        size += sum(map(len, batch.texts))
        if texts >= max_texts or size >= max_bytes:
            yield list(groups.values())
            groups, texts, size = {}, 0, 0
    if groups:
        yield list(groups.values())


def merge_counts(earlier: FertilityCounts, later: FertilityCounts,
                 max_languages: int = Limits.languages) -> FertilityCounts:
    """The reduce step: ``later`` counted the batches right after ``earlier``'s (mutates ``earlier``).

    Sums add; the order-dependent samples (round-trip texts, word and script samples) are replayed
    in corpus order, so merging the shards' partials in shard order equals one pass exactly.
    Languages new in ``later`` once ``earlier`` holds ``max_languages`` are added to
    :data:`OTHER`. With :func:`count_batches` folding a shard's own languages past its first
    ``max_languages``, a language is measured on its own when it is among the first
    ``max_languages`` of the pass and of each shard it occurs in; the rest of its texts count as
    :data:`OTHER`. The shards are the same on every engine (files, or the driver's sample
    units), so every engine still gives the same numbers.
    """
    earlier.folded |= later.folded
    room = [lang for lang in later.langs if lang not in earlier.langs and lang != OTHER]
    fold = set(room[max(0, max_languages - len([g for g in earlier.langs if g != OTHER])):])
    if fold:
        earlier.folded |= {lang[:FOLDED_NAME_CHARS] for lang in fold}
        acc, langs = {}, {}
        for (k, lang), a in later.acc.items():
            key = (k, OTHER if lang in fold else lang)
            if key in acc:
                acc[key].merge(a)
            else:
                acc[key] = a
        for lang, la in later.langs.items():
            name = OTHER if lang in fold else lang
            if name in langs:
                langs[name].merge(la)
            else:
                langs[name] = la
        later = FertilityCounts(acc=acc, langs=langs, folded=later.folded)
    for key, a in later.acc.items():
        if key in earlier.acc:
            earlier.acc[key].merge(a)
        else:
            earlier.acc[key] = a
    for lang, la in later.langs.items():
        if lang in earlier.langs:
            earlier.langs[lang].merge(la)
        else:
            earlier.langs[lang] = la
    return earlier


def _flatten(ids: list[list[int]]):
    import numpy as np

    n = sum(map(len, ids))
    return np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=n)
