"""What each language costs the model: bits per byte of aligned text, and information parity.

The whole model reads each text of each scored language after its start token (the model's BOS,
or EOS where it has none), every text token scored (:mod:`embscope.models.likelihood`). For a
language L and an aligned unit u (a UDHR article, a FLORES sentence), y_L(u) is the bits its
texts cost and B_L(u) their UTF-8 bytes:

- ``bits_per_byte`` = Σ_u y_L(u) / Σ_u B_L(u) over the units scored. Bytes do not depend on the
  tokenizer, so models with different tokenizers compare directly (the same figure the
  extension's English check reports, :mod:`embscope.extension.bpb`). Lower: the model predicts
  the language's text better.
- ``bits_per_byte_se``: its standard error over units, the ratio estimator's delta-method
  formula ``sqrt(n/(n−1) · Σ_u (y_u − bpb·B_u)²) / Σ_u B_u``
  (:func:`embscope.models.likelihood.ratio_se`; Cochran, *Sampling Techniques*, 1977, §6.3).
  Example: y = [10, 30] bits, B = [10, 10] bytes → 2.0 ± 1.0.
- ``information_parity`` = Σ_{u∈S} y_ref(u) / Σ_{u∈S} y_L(u), S the units both the reference
  language and L have — Tsvetkov & Kipnis 2024, "Information Parity: Measuring and Predicting the
  Multilingual Capabilities of Language Models" (Findings of EMNLP), who define it for a text and
  its translation as the reference's information content over the translation's; over a corpus
  embscope divides the sums (longer units weigh more). 1.0 for the reference; 0.5: the model
  spends twice the reference's bits on the same content. Example: English article 1 in 40 bits,
  French in 50 → 0.8.
- ``model_units``: the units scored in L.

**Which languages.** The reference and :data:`DEFAULT_LANGUAGES` (those the corpus has), unless
the run was narrowed to chosen languages (``--lang``): then every language it measures. A corpus
with none of the default set gets its first :data:`DEFAULT_COUNT` languages, the reference first.

**Which units: the work budget.** The work is counted before any forward pass: tokens (every
position, the start token included) × the model's parameters (tied matrices once), in 10¹²
multiply-adds, as the verification's and distil's budgets are (:func:`embscope.geometry.verify.row_work`).
Units are taken in corpus order, each with every scored language's texts of it, while the work
stays within the budget; the rest are left out, and the record says so. Every scored language is
thus scored on the same units, and the same units are scored on any machine at any load.
Texts without a ``unit`` key are units of their own (scored, but not aligned: no parity).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embscope.languages.record import ModelCostRecord

if TYPE_CHECKING:  # pragma: no cover
    import polars as pl

    from embscope.corpus.readers import ReadOptions
    from embscope.models.model import LoadedModel

#: languages the model scores by default (with the reference): English and four scripts that
#: tokenizers and models treat very differently (Cyrillic, Devanagari, Han, Arabic)
DEFAULT_LANGUAGES = ("eng", "rus", "hin", "cmn_hans", "arb")
#: languages scored in a corpus that holds none of the default set
DEFAULT_COUNT = 5
#: ``fertility --model``'s work budget, 10¹² multiply-adds: SmolLM2-135M on the default languages
#: of corpora/udhr needs 4.4 (32,600 tokens), a 1.5B model with a multilingual tokenizer ~20
WORK = 20.0
#: ``audit``'s: the first units of the default languages that fit, kept small so the Quickstart stays
#: under a minute (SmolLM2-135M in the Quickstart audit on 2 quiet AVX-512 cores: 2.0 scored 14 of
#: corpora/udhr's 31 units in 28.3 s; 0.5 scores the first few; ``fertility --model`` for the rest)
AUDIT_WORK = 0.5
#: the longest sequence scored, in tokens (the start token included; at most the model's context):
#: a unit with a longer text is left out in every language, so that one forward pass's attention
#: stays bounded (SmolLM2-135M at 8,192 tokens: ~2.4 GB of attention scores per layer without a
#: fused kernel)
MAX_SEQUENCE = 8192
#: the columns :func:`add_columns` writes
COLUMNS = ("bits_per_byte", "bits_per_byte_se", "information_parity", "model_units")


@dataclass
class ModelCost:
    """Output of :func:`model_cost`."""

    #: language → its columns (:data:`COLUMNS`)
    rows: dict[str, dict] = field(default_factory=dict)
    #: how it was scored
    record: ModelCostRecord | None = None


@dataclass
class Scorer:
    """How :func:`model_cost` runs the model: where, in which precision, and which whole model."""

    #: ``cpu`` or ``cuda``, as :func:`embscope.models.likelihood.sequence_bits` takes it
    device: str = "cpu"
    #: the compute precision, as ``sequence_bits`` takes it (None: its default)
    precision: str | None = None
    #: the whole causal LM, already loaded (None: :func:`embscope.models.fullmodel.load_causal_lm`
    #: loads the model's weights)
    lm: Any = None


def pick_languages(measured: Sequence[str], reference: str, narrowed: bool) -> tuple[list[str], str]:
    """``(languages, selection)``: the reference first, then the default set (module docstring).

    >>> pick_languages(["deu", "eng", "fra", "rus"], "eng", False)
    (['eng', 'rus'], 'default')
    >>> pick_languages(["deu", "eng", "nld"], "eng", True)
    (['eng', 'deu', 'nld'], 'all')
    """
    have = list(dict.fromkeys(measured))
    ref = [reference] if reference in have else []
    if narrowed:
        return ref + [g for g in have if g != reference], "all"
    chosen = [g for g in DEFAULT_LANGUAGES if g in have and g != reference]
    if chosen or not have:
        return ref + chosen, "default"
    rest = [g for g in sorted(have) if g != reference]
    return ref + rest[:max(0, DEFAULT_COUNT - len(ref))], "corpus"


def read_units(corpus: str | Path, languages: Sequence[str], *, sample_bytes: int | None = None,
               options: "ReadOptions | None" = None) -> dict[str, list[tuple[object, str]]]:
    """``{language: [(unit key, text), …]}`` in corpus order, for ``languages`` only, read as the
    counting pass reads the corpus (``sample_bytes`` per language). A text without a ``unit`` has
    the key ``("text", language, i)``: a unit of its own, aligned with nothing."""
    from embscope.corpus.stream import iter_corpus

    wanted = set(languages)
    out: dict[str, list[tuple[object, str]]] = {g: [] for g in languages}
    for batch in iter_corpus(corpus, sample_bytes=sample_bytes, options=options):
        if batch.lang not in wanted:
            continue
        texts = out[batch.lang]
        for unit, text in zip(batch.units, batch.texts):
            texts.append((("text", batch.lang, len(texts)) if unit is None else unit, text))
    return out


def plan_units(lengths: dict[str, list[tuple[object, int]]], params: int, budget: float | None) -> tuple[list, float, bool]:
    """``(units taken, work, stopped)``: unit keys in order of first appearance (languages in the
    given order, each language's units in corpus order, interleaved by position), each taken when
    the work of every scored language's sequences of it (their lengths, start token included, ×
    ``params``, in 10¹² multiply-adds) still fits within ``budget`` (None: all); a unit that does
    not fit is passed over, so a long first unit (the UDHR's preamble) does not leave a small
    budget unspent.

    >>> plan_units({"eng": [(0, 10), (1, 10)], "fra": [(0, 20), (1, 20)]}, 10**11, 5.0)
    ([0], 3.0, True)
    """
    order: dict[object, int] = {}  # unit → tokens of every language's texts of it (insertion: first appearance)
    width = max((len(v) for v in lengths.values()), default=0)
    for i in range(width):
        for units in lengths.values():
            if i < len(units):
                order.setdefault(units[i][0], 0)
    for units in lengths.values():
        for key, n in units:
            order[key] += n
    taken, work, stopped = [], 0.0, False
    for key, tokens in order.items():
        w = tokens * params / 1e12
        if budget is not None and work + w > budget + 1e-12:
            stopped = True  # passed over: a later, shorter unit may still fit
            continue
        taken.append(key)
        work += w
    return taken, work, stopped


def model_cost(model: "LoadedModel", corpus: str | Path, languages: Sequence[str], reference: str, *,
               budget: float | None, selection: str = "default", scorer: Scorer | None = None,
               sample_bytes: int | None = None, options: "ReadOptions | None" = None) -> ModelCost:
    """Score ``languages`` of ``corpus`` with the whole model (module docstring).

    Args:
        model: the loaded model (its tokenizer and config); its whole weights are loaded
            (:func:`embscope.models.fullmodel.load_causal_lm`) unless ``scorer.lm`` is given.
        corpus: the corpus the languages table measured.
        languages: the languages to score (:func:`pick_languages`), the reference among them.
        reference: the language ``information_parity`` divides by.
        budget: the work budget, 10¹² multiply-adds (None: every unit).
        scorer: device, precision and an already loaded whole model (:class:`Scorer`; default: CPU,
            ``sequence_bits``' precision, the weights loaded here).
    Returns:
        :class:`ModelCost`; a model that cannot be scored gets an empty one whose record says why.
    """
    from embscope.models.likelihood import sequence_bits, start_token

    t0 = time.perf_counter()
    scorer = scorer if scorer is not None else Scorer()
    lm = scorer.lm
    vocab = model.vocab
    base = dict(model=model.name, tokenizer=vocab.name if vocab is not None else "", work_budget=budget,
                languages=list(languages), selection=selection)
    why = None if vocab is not None else f"{model.name} ships no tokenizer"
    if why is None and lm is None:
        lm, why = _whole_model(model)
    start, kind = start_token(model.config)
    if start is None and lm is not None:
        start, kind = start_token(lm.config.to_dict())
    if why is None and start is None:
        why = f"{model.name} has neither a BOS nor an EOS token to start a text with"
    if why is not None:
        return ModelCost(record=ModelCostRecord(**base, note=f"not scored: {why}"))
    texts = read_units(corpus, languages, sample_bytes=sample_bytes, options=options)
    ids = {g: vocab.encode_batch([t for _, t in texts[g]]) for g in languages}
    params = sum(p.numel() for p in lm.parameters())  # tied matrices once
    lengths = {g: [(key, len(x) + 1) for (key, _), x in zip(texts[g], ids[g])] for g in languages}
    window = min(MAX_SEQUENCE, int(getattr(lm.config, "max_position_embeddings", 0) or MAX_SEQUENCE))
    too_long = {key for units in lengths.values() for key, n in units if n > window}
    lengths = {g: [(key, n) for key, n in units if key not in too_long] for g, units in lengths.items()}
    taken, work, stopped = plan_units(lengths, params, budget)
    keep = set(taken)
    seqs, owner = [], []  # the sequences scored, and (language, unit, bytes) of each
    for g in languages:
        for (key, text), x in zip(texts[g], ids[g]):
            if key in keep:
                seqs.append([start, *x])
                owner.append((g, key, len(text.encode("utf-8"))))
    if not seqs:  # not one unit fits what is left of the budget
        return ModelCost(record=ModelCostRecord(**base, start_token=int(start), start=kind,
                                                units_available=len({k for g in languages for k, _ in texts[g]}),
                                                stopped_at_budget=stopped, note="not scored: no unit fits the work "
                                                f"budget left ({budget:g}×10¹² multiply-adds)"))
    scored = sequence_bits(lm, seqs, device=scorer.device, precision=scorer.precision)
    bits: dict[str, dict] = {g: {} for g in languages}  # language → unit → [bits, bytes]
    for (g, key, size), y in zip(owner, scored.bits):
        acc = bits[g].setdefault(key, [0.0, 0])
        acc[0] += float(y)
        acc[1] += size
    rows = {g: _figures(units, bits.get(reference, {})) for g, units in bits.items() if units}
    available = {k for g in languages for k, _ in texts[g]}
    record = ModelCostRecord(
        **base, start_token=int(start), start=kind, units=len(taken), units_available=len(available),
        units_too_long=len(too_long), window=window,
        texts=len(seqs), tokens=int(sum(len(s) - 1 for s in seqs)), work=round(work, 4), stopped_at_budget=stopped,
        device=scored.device, dtype=scored.dtype, threads=scored.threads, seconds=round(time.perf_counter() - t0, 2),
        note=(f"stopped at the work budget of {budget:g}×10¹² multiply-adds: {len(taken)} of {len(available)} units "
              "scored in every language" if stopped else None))
    return ModelCost(rows=rows, record=record)


def _figures(units: dict, ref: dict) -> dict:
    """One language's columns from ``{unit: [bits, bytes]}`` and the reference's (module docstring)."""
    import numpy as np

    from embscope.models.likelihood import ratio_se

    y = np.array([v[0] for v in units.values()])
    b = np.array([v[1] for v in units.values()], dtype=np.float64)
    bpb, se = ratio_se(y, b)
    shared = [k for k in units if k in ref and not _own(k)]
    mine = sum(units[k][0] for k in shared)
    ip = sum(ref[k][0] for k in shared) / mine if shared and mine > 0 else None
    return {"bits_per_byte": bpb, "bits_per_byte_se": se, "information_parity": ip, "model_units": len(units)}


def _whole_model(model: "LoadedModel"):
    """``(the whole causal LM, None)``, or ``(None, why)`` when it is not one or its weights do not
    load (a note, not an error: the rest of the run goes on)."""
    from embscope.models.fullmodel import load_causal_lm, why_not_causal

    why = why_not_causal(model)
    if why is not None:
        return None, why
    try:
        return load_causal_lm(model), None
    except Exception as exc:  # noqa: BLE001 - weights that do not load are a note
        return None, f"the weights did not load ({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''})"


def _own(key) -> bool:
    """A text without a unit key: aligned with nothing."""
    return isinstance(key, tuple) and len(key) == 3 and key[0] == "text"


def add_columns(table: "pl.DataFrame", cost: ModelCost | None, tokenizer: str | None) -> "pl.DataFrame":
    """``table`` with :data:`COLUMNS`: the rows of ``tokenizer`` get ``cost``'s figures for the
    languages it scored, every other row null (and every row null without ``cost``)."""
    import polars as pl

    rows = cost.rows if cost is not None else {}
    types = {"bits_per_byte": pl.Float64, "bits_per_byte_se": pl.Float64, "information_parity": pl.Float64,
             "model_units": pl.Int64}
    cols = []
    for name in COLUMNS:
        values = [rows[g][name] if tok == tokenizer and g in rows else None
                  for tok, g in zip(table["tokenizer"].to_list(), table["language"].to_list())]
        cols.append(pl.Series(name, values, dtype=types[name]))
    return table.with_columns(cols)
