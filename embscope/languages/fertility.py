"""Tokenizer cost per language: fertility, parity and friends, one row per (tokenizer, language).

Metrics (counts are summed over every text of the language that was read):

- ``fertility`` = tokens / words — Rust et al. 2021, "How Good is Your Tokenizer? On the
  Monolingual Performance of Multilingual Language Models". Words follow
  :mod:`embscope.languages.segment`; each row's ``unit`` names what a word is there: ``word``
  (whitespace, Ethiopic ``፡``), ``syllable`` (Tibetan), ``char`` (Han, kana) or ``cluster`` (Thai,
  Lao, Khmer, Myanmar: a base character with its marks). Example: "human rights"
  → ``[human][ rights]`` = 2 tokens / 2 words = 1.0 with gpt2; gpt2 on Amharic "ሰው፡ልጅ" = 15
  tokens / 2 words = 7.5 (byte-level BPE without Ethiopic merges: ~one token per byte).
  Lower is cheaper; 1.0 is one token per word.
- ``tokens_per_char`` = tokens / characters (code points); ``bytes_per_token`` = UTF-8 bytes /
  tokens (higher = more text per token).
- ``continued_word_rate``: share of words split into ≥ 2 tokens when each word is tokenised on its
  own (Rust et al.'s "proportion of continued words"); ``single_token_word_rate`` = share encoded
  as exactly 1 token. Both are frequency-weighted over the words of the first
  :data:`WORD_SAMPLE_BYTES` of each language. A word that follows a space in the text is encoded
  with that leading space when the tokenizer marks spaces in its tokens (``" the"`` is one
  token and differs from ``"the"``: GPT-2-style byte-level BPE); otherwise (sentencepiece
  Metaspace adds its own ``▁``; WordPiece drops spaces) the bare word is encoded.
- ``parity`` = tokens(lang) / tokens(reference) over the aligned units both have — Petrov et al.
  2023, "Language Model Tokenizers Introduce Unfairness Between Languages" (their "premium").
  Example: UDHR article 1 is 33 gpt2 tokens in English and 61 in French → 61 / 33 = 1.85. Sums
  over the shared units, then divides: Σ_u t_L(u) / Σ_u t_ref(u). Null without ``unit`` keys or
  without the reference language; 1.0 for the reference itself.
- ``unk_rate`` = share of tokens that are the unknown token; ``byte_fallback_rate`` = share of
  tokens that are byte-fallback pieces (``<0xE3>``) — both 0 for byte-level BPE, which has
  neither.
- ``roundtrip`` = share of texts with ``decode(encode(text)) == text`` (first
  :data:`ROUNDTRIP_TEXTS` texts per language); below 1 for normalising tokenizers (lower-casing,
  NFKC) or lossy ones.
- ``vocab_utilisation`` = distinct token ids used / vocabulary size.

Optional "double cost" view (Petrov et al.'s cost in tokens, plus where those tokens sit in the
embedding space), for ``vocabs[0]`` when ``tokens`` (the geometry table: ``token_id``, ``in_norm``,
maybe ``isolation``, ``flagged``) and/or ``embed`` ((V, d) matrix) are given — weights are each
token's share of the language's tokens:

- ``mean_in_norm`` = Σ_i w_i ‖e_i‖, ``mean_isolation`` = Σ_i w_i isolation_i,
  ``flagged_share`` = Σ_i w_i [flagged_i];
- ``mean_within_sim`` = mean cosine similarity over pairs of the language's :data:`TOP_TOKENS`
  most frequent tokens (high: the language's tokens crowd one corner of the space).
"""

from __future__ import annotations

import functools
import itertools
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from typing import TYPE_CHECKING

from embscope.limits import Limits
from embscope.text.script import label as script_label
from embscope.languages.segment import CHAR_SCRIPTS, SEGMENTATION_NOTE, count_words, unit_of, word_counts
from embscope.tokenizer.base import Vocabulary

if TYPE_CHECKING:  # pragma: no cover
    from embscope.corpus.engine import Engine
    from embscope.corpus.readers import ReadOptions

#: bytes of text per language whose words are tokenised one by one (continued-word rates):
#: ~40k words, plenty for a stable share (UDHR is 10–40 KB per language) at a bounded cost.
WORD_SAMPLE_BYTES = 256 << 10
#: texts per language checked for decode(encode(text)) == text
#: (a decode is ~50 µs; 200 texts tell a lossless tokenizer from a normalising one)
ROUNDTRIP_TEXTS = 200
#: bytes per language whose characters decide its script
SCRIPT_SAMPLE_CHARS = 64 << 10
#: most frequent tokens per language compared pairwise for mean_within_sim (200² pairs)
TOP_TOKENS = 200
#: texts / characters per encode window (:func:`_by_language`): 2048 short texts amortise the
#: per-language accounting, and 4 M characters bound the window's memory
WINDOW_TEXTS = 2048
WINDOW_BYTES = 4 << 20
#: the language that languages past ``max_languages`` are measured as (see :func:`count_batches`)
OTHER = "other"
#: characters of a folded language name kept to count distinct folded languages
FOLDED_NAME_CHARS = 64


@dataclass
class LanguageResult:
    """Output of :func:`measure`."""

    table: object  # polars DataFrame, one row per (tokenizer, language); columns in the module doc
    summary: dict  # JSON-able: tokenizers, reference, segmentation note, corpus report, sizes
    token_counts: dict = field(default_factory=dict, repr=False)  # (tokenizer, lang) → counts array


@dataclass
class _Acc:
    """Running sums for one (tokenizer, language)."""

    texts: int = 0
    tokens: int = 0
    counts: object = None  # numpy int64 (V,): occurrences of each token id
    units: dict = field(default_factory=dict)  # unit → tokens
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
    script_chars: int = 0
    script_texts: list = field(default_factory=list)  # pieces of its first SCRIPT_SAMPLE_CHARS characters

    def sample_words(self, texts: Sequence[str]) -> None:
        """Take the language's next ``texts`` (in order) into the word sample while the
        characters taken before each are under :data:`WORD_SAMPLE_BYTES`."""
        for t in texts:
            if self.word_chars >= WORD_SAMPLE_BYTES:
                break
            self.word_texts.append(t)
            self.word_chars += len(t)

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
        self.sample_words(later.word_texts)
        self.sample_chars(later.script_texts)


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


def _fold(batches, out: FertilityCounts, max_languages: int):
    """Batches with languages past the first ``max_languages`` renamed :data:`OTHER` (counted in
    ``out.folded``): every language holds vocabulary-sized counts, so their number is bounded."""
    from dataclasses import replace

    kept: set = set(out.langs)
    for batch in batches:
        if batch.lang not in kept:
            if batch.lang == OTHER or len(kept - {OTHER}) < max_languages:
                kept.add(batch.lang)
            else:
                out.folded.add(batch.lang[:FOLDED_NAME_CHARS])
                batch = replace(batch, lang=OTHER)
        yield batch


def count_batches(vocabs: Sequence[Vocabulary], batches, max_languages: int = Limits.languages) -> FertilityCounts:
    """The map step: tokenise every batch with every tokenizer and count (see the module doc).

    Languages past the first ``max_languages`` of the batches are counted together as
    :data:`OTHER`."""
    import numpy as np

    out = FertilityCounts()
    acc, langs = out.acc, out.langs
    batches = _fold(batches, out, max_languages)

    def account(batch, all_ids):
        la = langs.setdefault(batch.lang, _LangAcc())
        texts = batch.texts
        joined = "\n".join(texts)  # one regex pass per batch: "\n" is whitespace to the rules
        la.words += count_words(joined)
        la.chars += len(joined) - (len(texts) - 1)
        la.bytes += len(joined.encode("utf-8")) - (len(texts) - 1)
        la.sample_words(texts)
        la.sample_chars(texts)
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
            if any(u is not None for u in batch.units):
                for unit, n in zip(batch.units, lens):
                    if unit is not None:
                        a.units[unit] = a.units.get(unit, 0) + n
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


def space_prefix(vocab: Vocabulary) -> bool:
    """Whether words after a space should be encoded with that space (see ``continued_word_rate``).

    True when ``" the"`` encodes as one token that differs from ``"the"`` (GPT-2 ``Ġthe``).
    """
    a, b = vocab.encode_batch([" the", "the"])
    return len(a) == 1 and a != b


def _flatten(ids: list[list[int]]):
    import numpy as np

    n = sum(map(len, ids))
    return np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=n)


def measure(vocabs: Sequence[Vocabulary], corpus_path: str | Path, *, reference: str = "eng",
            sample_bytes: int | None = None, embed=None, tokens=None,
            batch_size: int = 512, engine: "Engine | None" = None,
            options: "ReadOptions | None" = None, max_languages: int = Limits.languages) -> LanguageResult:
    """Measure every tokenizer in ``vocabs`` on every language of the corpus, in one pass.

    Args:
        vocabs: tokenizers to compare (``embscope.load_vocabulary("gpt2")`` …).
        corpus_path: folder or file, read by :func:`embscope.corpus.stream.iter_corpus`.
        reference: language that parity divides by (default ``eng``).
        sample_bytes: read at most this many bytes per language.
        embed: optional (V, d) embedding matrix of ``vocabs[0]``'s model (torch or numpy).
        tokens: optional polars DataFrame with ``token_id``, ``in_norm`` (and maybe
            ``isolation``, ``flagged``) for ``vocabs[0]``.
        batch_size: most texts per batch read from the corpus (encode calls take windows of
            :data:`WINDOW_TEXTS` texts, see :func:`_by_language`).
        engine: where the pass runs (:class:`embscope.corpus.engine.Engine`: one process,
            local worker processes, or Ray); every engine gives the same numbers.
        options: field names of the records (``ReadOptions(text_field=..., lang_field=...)``).
        max_languages: languages measured one by one; later ones are measured together as
            :data:`OTHER` (``summary["languages_folded"]`` counts them).

    Returns:
        :class:`LanguageResult`.

    Example::

        >>> from embscope.models.vocabulary import load_vocabulary
        >>> res = measure([load_vocabulary("gpt2")], "corpora/udhr")  # doctest: +SKIP
        >>> res.table.filter(language="eng")["parity"][0]  # doctest: +SKIP
        1.0
    """
    from embscope.corpus.engine import Engine, run_pass

    vocabs = list(vocabs)
    names = [v.name for v in vocabs]
    engine = engine or Engine()
    counts, report = run_pass(corpus_path, functools.partial(count_batches, vocabs, max_languages=max_languages),
                              functools.partial(merge_counts, max_languages=max_languages),
                              engine=engine, sample_bytes=sample_bytes, batch_size=batch_size,
                              options=options, description="tokenising corpus")
    acc, langs = counts.acc, counts.langs

    rows = _rows(vocabs, acc, langs, reference)
    if tokens is not None or embed is not None:
        _add_density(rows, vocabs[0].name, acc, tokens, embed)
    import polars as pl

    table = pl.DataFrame(rows, infer_schema_length=None)
    # A column that is null everywhere (parity without parallel text, density without a model)
    # would get Parquet type null; keep every metric a float so the schema never changes.
    table = table.with_columns(pl.col(c).cast(pl.Float64) for c, t in table.schema.items() if t == pl.Null)
    table = table.sort(["tokenizer", "fertility"])
    summary = {
        "tokenizers": [{"name": v.name, "backend": getattr(v, "backend", "?"), "vocab_size": len(v),
                        "space_prefix_for_words": space_prefix(v)} for v in vocabs],
        "reference": reference,
        "reference_present": reference in langs,
        "languages": len(langs),
        "max_languages": max_languages,
        "languages_folded": len(counts.folded),
        "sample_bytes": sample_bytes,
        "segmentation": SEGMENTATION_NOTE,
        "word_sample_bytes": WORD_SAMPLE_BYTES,
        "roundtrip_texts": ROUNDTRIP_TEXTS,
        "corpus": report.as_dict(),
        "engine": engine.as_dict(),
    }
    counts = {(names[k], lang): a.counts for (k, lang), a in acc.items()}
    return LanguageResult(table=table, summary=summary, token_counts=counts)


def _word_rates(vocab: Vocabulary, freq: Counter, prefix: bool) -> tuple[float | None, float | None]:
    """Frequency-weighted (continued_word_rate, single_token_word_rate) of ``freq``'s words."""
    if not freq:
        return None, None
    items = list(freq.items())
    texts = [(" " + w) if (after and prefix) else w for (w, after), _ in items]
    total = cont = single = 0
    for start in range(0, len(texts), 8192):
        chunk = vocab.encode_batch(texts[start:start + 8192])
        for ids, ((_, _), n) in zip(chunk, items[start:start + 8192]):
            total += n
            if len(ids) >= 2:
                cont += n
            elif len(ids) == 1:
                single += n
    return cont / total, single / total


def _rows(vocabs, acc, langs, reference) -> list[dict]:
    import numpy as np

    rows = []
    for k, vocab in enumerate(vocabs):
        prefix = space_prefix(vocab)
        ref = acc.get((k, reference))
        byte_ids = np.fromiter(sorted(vocab.byte_ids), dtype=np.int64) if vocab.byte_ids else None
        for lang in sorted(langs):
            a = acc.get((k, lang))
            la = langs[lang]
            if a is None:
                continue
            script = script_label(la.script)
            parity = units = None
            if ref is not None and a.units and ref.units:
                shared = a.units.keys() & ref.units.keys()
                if shared:
                    units = len(shared)
                    parity = sum(a.units[u] for u in shared) / max(1, sum(ref.units[u] for u in shared))
            cont, single = _word_rates(vocab, la.word_freq, prefix)
            tok = max(a.tokens, 1)
            unk = int(a.counts[vocab.unk_id]) if vocab.unk_id is not None and vocab.unk_id < len(a.counts) else 0
            fallback = int(a.counts[byte_ids].sum()) if byte_ids is not None else 0
            rows.append({
                "tokenizer": vocab.name,
                "language": lang,
                "script": script,
                "segmentation": "characters" if script in CHAR_SCRIPTS else "words",
                "unit": unit_of(script),
                "texts": a.texts,
                "words": la.words,
                "chars": la.chars,
                "bytes": la.bytes,
                "tokens": a.tokens,
                "fertility": a.tokens / la.words if la.words else None,
                "tokens_per_char": a.tokens / la.chars if la.chars else None,
                "bytes_per_token": la.bytes / a.tokens if a.tokens else None,
                "continued_word_rate": cont,
                "single_token_word_rate": single,
                "parity": parity,
                "parity_units": units,
                "unk_rate": unk / tok,
                "byte_fallback_rate": fallback / tok,
                "roundtrip": a.rt_ok / a.rt_n if a.rt_n else None,
                "vocab_utilisation": int(np.count_nonzero(a.counts)) / len(vocab),
            })
    return rows


def _add_density(rows, name, acc, tokens, embed) -> None:
    """Add the double-cost columns to ``rows`` of tokenizer ``name`` (vocabs[0])."""
    import numpy as np

    in_norm = isolation = flagged = None
    if tokens is not None:
        ids = tokens["token_id"].to_numpy()
        size = int(ids.max()) + 1 if len(ids) else 0

        def column(col, dtype):
            if col not in tokens.columns:
                return None
            arr = np.full(size, np.nan, dtype=np.float64)
            arr[ids] = tokens[col].cast(dtype).fill_null(np.nan).to_numpy()
            return arr

        import polars as pl

        in_norm = column("in_norm", pl.Float64)
        isolation = column("isolation", pl.Float64)
        flagged = column("flagged", pl.Float64)
        exact = column("knn_exact", pl.Float64)
        if isolation is not None and exact is not None and embed is not None:
            # a certified graph's isolation is exact search's only where knn_exact: the rows these
            # averages use get theirs exactly (embscope.geometry.exact.nearest_cosine)
            from embscope.geometry.exact import nearest_cosine

            used = np.zeros(size, dtype=bool)
            for row in rows:
                if row["tokenizer"] == name:
                    c = acc[(0, row["language"])].counts
                    used[:min(size, len(c))] |= c[:size] > 0
            todo = np.flatnonzero(used & (exact != 1.0) & np.isfinite(isolation))
            if len(todo):
                import torch

                isolation[todo] = 1.0 - nearest_cosine(torch.as_tensor(embed), todo)
    emb = embed  # (V, d), any dtype; only the rows of each language's top tokens are converted
    for row in rows:
        if row["tokenizer"] != name:
            continue
        counts = acc[(0, row["language"])].counts.astype(np.float64)

        def weighted(values):
            if values is None:
                return None
            n = min(len(values), len(counts))
            w, v = counts[:n], values[:n]
            ok = ~np.isnan(v) & (w > 0)
            return float((w[ok] * v[ok]).sum() / w[ok].sum()) if ok.any() else None

        row["mean_in_norm"] = weighted(in_norm)
        row["mean_isolation"] = weighted(isolation)
        row["flagged_share"] = weighted(flagged)
        sim = None
        if emb is not None:
            used = np.flatnonzero(counts[:len(emb)])
            top = used[np.argsort(-counts[used], kind="stable")[:TOP_TOKENS]]
            if len(top) >= 2:
                x = emb[top]  # (k, d): only these rows, in float32
                x = x.detach().float().cpu().numpy() if hasattr(x, "detach") else np.asarray(x, dtype=np.float32)
                x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
                s = x @ x.T  # (k, k) cosine similarities
                k = len(top)
                sim = float((s.sum() - np.trace(s)) / (k * (k - 1)))
        row["mean_within_sim"] = sim
    for row in rows:  # same columns on every row so the table has one schema
        for col in ("mean_in_norm", "mean_isolation", "flagged_share", "mean_within_sim"):
            row.setdefault(col, None)
