"""The extension measured in its target language: before/after tokenizer cost and model figures.

``extend --lang CODE`` (default: the corpus's main language) adds, for language L:

- **Tokenizer cost**, original tokenizer against extended, with 95 % percentile-bootstrap
  intervals over units (:func:`embscope.languages.bootstrap.ratio_interval`; measured by
  :mod:`embscope.languages.adaptation`, brought in by the extension section), on two samples:
  L's UDHR articles (``corpora/udhr/<L>.jsonl``, aligned with ``eng.jsonl`` by ``unit``) and a
  held-out slice of the corpus (1 text in 4, never fitted on; the texts of L where the corpus
  labels languages). Per sample:

  - fertility = Σ tokens / Σ words (Rust et al. 2021; words of :mod:`embscope.languages.segment`);
  - parity = Σ_u t_L(u) / Σ_u t_eng(u) over the aligned UDHR units (Petrov et al. 2023), each
    language tokenized with the same tokenizer (original, then extended);
  - the token ratio after / before (paired by unit: its interval excludes 1 when the extension
    reliably cuts tokens).

  Example: 3 units of 10, 20, 30 words cut from 40, 60, 90 to 20, 30, 45 tokens: fertility 3.17
  → 1.58, token ratio 0.5.
- **Bits per byte in L** of the original model and of every initialisation whose disturbance is
  within bounds, on L's UDHR units (:func:`embscope.extension.bpb.text_losses`, ± SE over units,
  the change paired by unit). With ``--init auto`` the pick is the strategy with the lowest
  Δbpb(L) + Δbpb(English) among those that keep English retained (below).
- **English retention**: English bits per byte (UDHR English, the general text) before and after
  with the recommended rows; retained when it moves by at most its SE over units.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from embscope.extension.bpb import BitsPerByte
from embscope.records import Record

#: held-out corpus text the tokenizer-cost figures read (tokenizing is cheap: 512 KB in ~1 s)
SLICE_BYTES = 512 * 1024
#: UDHR bytes of L the bits per byte reads, spread over its units (Hindi: 27 KB in all; 8 KB is
#: ~3,300 SmolLM2 tokens per strategy); at most the plan's held-out corpus bytes
BPB_BYTES = 8 * 1024
#: the reference language of parity
REFERENCE = "eng"


@dataclass
class CostFigures(Record):
    """Tokenizer cost of one sample in L, original → extended (each ``[point, lo, hi]``, 95 %)."""

    #: what the sample is
    source: str
    #: units (UDHR articles, or corpus texts) read
    units: int
    #: words (:mod:`embscope.languages.segment`)
    words: int
    #: UTF-8 bytes of the units
    bytes: int
    #: tokens with the original tokenizer
    tokens_before: int
    #: tokens with the extended tokenizer
    tokens_after: int
    #: tokens per word with the original tokenizer (lower is cheaper)
    fertility_before: list[float]
    #: tokens per word with the extended tokenizer
    fertility_after: list[float]
    #: tokens after / tokens before, paired by unit (below 1: the extension saves)
    token_ratio: list[float]
    #: tokens(L) / tokens(eng) over aligned units, original tokenizer (null without alignment)
    parity_before: list[float] | None = None
    #: the same with the extended tokenizer
    parity_after: list[float] | None = None


@dataclass
class TargetBits(Record):
    """One strategy's bits per byte on L's UDHR units."""

    #: bits per UTF-8 byte (lower is better)
    bits_per_byte: float
    #: its standard error over units
    bits_per_byte_se: float
    #: minus the original model + tokenizer's, paired by unit (below 0: better than the original)
    change: float
    #: its standard error over units
    change_se: float


@dataclass
class TargetLanguageRecord(Record):
    """The extension measured in its target language (module docstring)."""

    #: the target language (ISO 639-3, as the UDHR files are named)
    lang: str
    #: how it was chosen: ``--lang``, or the corpus's main language
    lang_source: str
    #: cost on L's UDHR units (null when corpora/udhr has no L)
    udhr: CostFigures | None = None
    #: cost on the held-out corpus slice
    corpus: CostFigures | None = None
    #: the original model on L's UDHR units (bits per byte ± SE)
    bits_per_byte_original: BitsPerByte | None = None
    #: {strategy: its bits per byte on the same units}
    strategies: dict[str, TargetBits] = field(default_factory=dict)
    #: English bits per byte (UDHR English) of the original model
    english_before: float | None = None
    #: the same with ``english_strategy``'s rows
    english_after: float | None = None
    #: the SE over units of ``english_before``
    english_se: float | None = None
    #: the strategy whose English figure is reported (the recommended one)
    english_strategy: str | None = None
    #: |after − before| ≤ SE
    english_retained: bool | None = None
    #: what could not be measured, and why
    notes: list[str] = field(default_factory=list)


def udhr_units(lang: str) -> dict[str, str]:
    """``{unit: text}`` of ``corpora/udhr/<lang>.jsonl`` ({} when it is not shipped)."""
    from embscope.assets import corpora_root

    path = corpora_root() / "udhr" / f"{lang}.jsonl"
    if not path.is_file():
        return {}
    out: dict[str, str] = {}
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                out[str(rec.get("unit", len(out)))] = rec["text"]
    return out


def corpus_slice(corpus_path, lang: str | None, *, sample_bytes=None, options=None,
                 max_bytes: int = SLICE_BYTES) -> tuple[list[str], Counter]:
    """``(held-out texts of ``lang``, bytes per language of the whole read)``: the held-out texts
    (:func:`~embscope.extension.contexts.is_held_out`) of ``lang`` (every language when the corpus
    holds none labelled ``lang``), spread to ``max_bytes``."""
    import warnings

    from embscope.corpus.stream import CorpusWarning, iter_corpus
    from embscope.extension.contexts import is_held_out, spread

    by_lang: dict[str, list[str]] = {}
    sizes: Counter = Counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CorpusWarning)
        for batch in iter_corpus(corpus_path, sample_bytes=sample_bytes, options=options):
            for t in batch.texts:
                sizes[batch.lang] += len(t.encode("utf-8"))
                if is_held_out(t):
                    by_lang.setdefault(batch.lang, []).append(t)
    held = by_lang.get(lang) if lang is not None else None
    if held is None:
        held = [t for ts in by_lang.values() for t in ts]
    return spread(held, max_bytes), sizes


def main_language(sizes: Counter) -> tuple[str | None, str]:
    """The corpus's main language by bytes and how it was found (None for ``und``).

    >>> main_language(Counter({"hin": 900, "eng": 100}))
    ('hin', "the corpus's main language (90 % of its bytes)")
    """
    if not sizes:
        return None, "the corpus holds no text"
    lang, n = sizes.most_common(1)[0]
    if lang.startswith("und"):
        return None, "the corpus's main language is not labelled (name the file or folder by its code, or pass --lang)"
    return lang, f"the corpus's main language ({100 * n / sum(sizes.values()):.0f} % of its bytes)"


def tokenizer_costs(rec: TargetLanguageRecord, old_tok, ext_tok, held: Sequence[str], measure) -> None:
    """Fill ``rec.udhr`` and ``rec.corpus`` (the notes say what is missing). ``measure(old_tok,
    ext_tok, texts, reference)`` gives a sample's figures as :class:`CostFigures`' fields other
    than ``source`` (:func:`embscope.languages.adaptation.cost_figures`: the languages package
    counts words and bootstraps; the extension section brings the two together)."""
    units = udhr_units(rec.lang)
    if units:
        eng = udhr_units(REFERENCE)
        shared = [u for u in units if u in eng]
        rec.udhr = CostFigures(source=f"UDHR {rec.lang} (corpora/udhr/{rec.lang}.jsonl), {len(shared)} articles "
                                      f"aligned with {REFERENCE}",
                               **measure(old_tok, ext_tok, [units[u] for u in shared],
                                         [eng[u] for u in shared] if rec.lang != REFERENCE else None))
    else:
        rec.notes.append(f"corpora/udhr has no {rec.lang}.jsonl: no UDHR figures (the UDHR files are named by "
                         "ISO 639-3 code, e.g. hin, tam, ben)")
    if held:
        rec.corpus = CostFigures(source=f"held-out corpus text (1 text in 4, never fitted on), {len(held)} texts",
                                 **measure(old_tok, ext_tok, held, None))
    else:
        rec.notes.append("the corpus has no held-out text of this language")


def model_figures(rec: TargetLanguageRecord, lm, tok, ext_tok, new_ids: Sequence[int], rows: dict[str, dict],
                  max_bytes: int = BPB_BYTES) -> None:
    """Fill the original's and each strategy's bits per byte on L's UDHR units (``rows``: the
    strategies to measure, ``{name: {"embed", "output"?}}``)."""
    from embscope.extension.bpb import summarize, text_losses
    from embscope.extension.contexts import spread, start_ids

    # articles of at most a quarter of the budget (the preamble, 4.8 KB in Hindi, would fill a
    # 4 KB sample alone: an SE needs several units), evenly spread
    every = udhr_units(rec.lang)
    units = [u for u in every.values() if len(u.encode("utf-8")) <= max_bytes // 4]
    if not every:  # tokenizer_costs said so
        return
    if len(units) < 2 or not rows:
        rec.notes.append(f"bits per byte in {rec.lang} not measured: fewer than 2 UDHR articles of at most "
                         f"{max_bytes // 4} bytes" if rows else "no strategy to measure in the target language")
        return
    texts = spread(units, max_bytes)
    losses = text_losses(lm, texts, tok, ext_tok, start_ids(tok, lm.config.bos_token_id), new_ids, rows)
    base, figs = summarize(losses)
    rec.bits_per_byte_original = BitsPerByte(**base, source=f"UDHR {rec.lang}, {len(texts)} articles")
    rec.strategies = {n: TargetBits(d["bits_per_byte"], d["bits_per_byte_se"], d["bits_per_byte_change"],
                                    d["bits_per_byte_change_se"]) for n, d in figs.items()}


def retained(change: float | None, se: float | None) -> bool | None:
    """|Δ English bits per byte| ≤ its SE (None when unmeasured).

    >>> retained(0.0004, 0.02), retained(-0.05, 0.02)
    (True, False)
    """
    if change is None or se is None:
        return None
    return abs(change) <= se


def recommend_target(rec: TargetLanguageRecord, strategies: dict, english_se: float | None,
                     pool: Iterable[str]) -> tuple[str, str] | None:
    """``(name, why)``: among ``pool`` (strategies within the disturbance bounds), the lowest
    Δbpb(L) + Δbpb(English), preferring those with English retained; None without L's figures."""
    scored = {n: rec.strategies[n].change + (strategies[n].general_bits_per_byte_change or 0.0)
              for n in pool if n in rec.strategies and "/" not in n}
    if not scored:
        return None
    keep = {n: v for n, v in scored.items()
            if retained(strategies[n].general_bits_per_byte_change, english_se) is not False}
    ranked = sorted(keep or scored, key=lambda n: scored[n])
    best = ranked[0]
    t = rec.strategies[best]
    why = (f"{best}: on {rec.lang} Δ {t.change:+.4f} ± {t.change_se:.4f} bits/byte + English "
           f"{strategies[best].general_bits_per_byte_change or 0.0:+.5f} = {scored[best]:+.4f}")
    if len(ranked) > 1:
        why += f"; next {ranked[1]} {scored[ranked[1]]:+.4f}"
    if not keep:
        why += f"; no strategy kept English bits per byte within its SE ({english_se})"
    return best, why


def target_record(corpus_path, lang, sample_bytes, options) -> tuple[TargetLanguageRecord | None, list[str]]:
    """``(the target language's record, its held-out corpus slice)``; ``(None, [])`` when the
    language is neither given nor found in the corpus. The tokenizer costs are filled by
    :func:`tokenizer_costs`, the model's figures by :func:`target_bits`."""
    held, sizes = corpus_slice(corpus_path, lang, sample_bytes=sample_bytes, options=options)
    source = "--lang"
    if lang is None:
        lang, source = main_language(sizes)
        if lang is None:
            return None, []
    return TargetLanguageRecord(lang=lang, lang_source=source), held


def english_retention(rec, target, strategies, pick_on_target: bool) -> None:
    """With ``--lang``, ``auto``'s pick made on the target language (:func:`recommend_target`);
    then English bits per byte before and after with the recommended rows."""
    from embscope.extension.choose import within

    g = rec.general_bits_per_byte_original
    se = g.bits_per_byte_se if g is not None else None
    if pick_on_target and len(strategies) > 1:
        pool = [n for n, r in strategies.items() if within(r.kl, r.new_token_mass_max)] or list(strategies)
        picked = recommend_target(target, strategies, se, pool)
        if picked is not None:
            rec.recommended, rec.recommended_why = picked
    r = strategies.get(rec.recommended or "")
    if g is None or r is None or r.general_bits_per_byte_change is None:
        return
    target.english_strategy = rec.recommended
    target.english_before = g.bits_per_byte
    target.english_after = round(g.bits_per_byte + r.general_bits_per_byte_change, 5)
    target.english_se = se
    target.english_retained = retained(r.general_bits_per_byte_change, se)


def target_bits(target, lm, tok, ext_tok, new_ids, rows_of, specs, figures, steps, max_bytes: int = BPB_BYTES) -> None:
    """The target language's bits per byte of every strategy within the disturbance bounds, and of
    ``random`` (the baseline) whatever its disturbance."""
    from embscope.extension.choose import bounded
    from embscope.extension.fidelity import compute_precision, forward_precision
    from embscope.models.fullmodel import fastest_threads

    ok = {s: rows_of[s] for s in specs if bounded(figures.get(s, {})) or s.split("+")[0] == "random"}
    with steps.step("target bits per byte", f"UDHR {target.lang}, {len(ok)} strategies"), \
            fastest_threads(int(lm.config.hidden_size), compute_precision(), lm), forward_precision():
        model_figures(target, lm, tok, ext_tok, new_ids, ok, max_bytes)
