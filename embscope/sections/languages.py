"""The languages section: what each language costs each tokenizer, and — with a model — how dense
and how trained the embedding rows its text uses are (the "double cost").

Runs :func:`embscope.languages.fertility.measure` on every corpus; the table has one row per
(tokenizer, language, corpus).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from embscope.languages.record import CorpusMeasure
from embscope.records import Record
from embscope.sections.base import Inputs, SectionOutput, section


#: a (tokenizer, language) pair pays "double" when its parity (tokens relative to the reference
#: language on parallel text, Petrov et al. 2023) is at least this
DOUBLE_COST = 2.0


@dataclass
class LanguageCost(Record):
    """What one tokenizer charges the languages of one corpus, in one line: its costliest language by
    parity (tokens for the same content relative to the reference language; the unit a language's
    words are counted in does not enter it)."""

    #: the corpus path
    corpus: str
    #: the tokenizer
    tokenizer: str
    #: languages with a parity besides the reference (those whose text is aligned with the reference's)
    languages: int
    #: the costliest one: its code, and its name where the corpus's ``languages.json`` gives one
    language: str
    name: str | None
    #: its parity (×: tokens relative to the reference language; higher costs more)
    parity: float
    #: languages with a parity of at least :data:`DOUBLE_COST` (pay double or more)
    double: int
    #: the reference language's name where the corpus's ``languages.json`` gives one
    reference_name: str | None = None


@dataclass
class LanguagesRecord(Record):
    """Per-corpus summaries of the language measurements."""

    #: tokenizer names, the model's own first
    tokenizers: list[str]
    #: language that parity divides by
    reference: str
    #: {corpus path: how it was measured and what was read}
    corpora: dict[str, CorpusMeasure] = field(default_factory=dict)
    #: per corpus with parallel text and tokenizer: its costliest language (:class:`LanguageCost`)
    costs: list[LanguageCost] = field(default_factory=list)


@section("languages", record=LanguagesRecord, tables=("languages",),
         reads=("vocabs", "model", "languages", "tokens", "corpora"))
def languages_section(inputs: Inputs) -> SectionOutput:
    """Fertility, parity and embedding density per language, on every corpus."""
    import polars as pl

    from embscope.languages.fertility import measure
    from embscope.languages.selection import catalog, describe, select

    if not inputs.languages:
        return SectionOutput(skipped="no corpus given")
    if not inputs.vocabs:
        return SectionOutput(skipped="the model ships no tokenizer")
    opts = inputs.options
    embed = inputs.model.embed if inputs.model is not None else None
    tables, per_corpus, warnings = [], {}, []
    isolation = _exact_isolation(embed)  # one per run: a row searched for one corpus is not searched again
    for corpus in inputs.languages:
        # --lang selects in the languages corpus; a --corpus (domain) one is measured whole
        specs = opts.lang if corpus not in inputs.corpora else []
        names = catalog(corpus) if specs else {}
        available = len(names) or None
        keep = select(specs, names, opts.reference) if specs else None
        with inputs.steps.step(f"languages:{corpus.name}", f"fertility and parity on {corpus}"):
            res = measure(list(inputs.vocabs), corpus, reference=opts.reference,
                          sample_bytes=opts.sample_bytes, embed=embed, tokens=inputs.tokens,
                          exact_isolation=isolation,
                          engine=opts.corpus_engine(), options=opts.read_options(),
                          max_languages=opts.bounds().languages, languages=keep)
        res.summary.selection, res.summary.available = (list(specs) or None), available
        missing = sorted(keep - set(res.table["language"].to_list())) if keep is not None and not names else []
        if missing:  # codes taken as given (the languages are inside the records): say which never came
            warnings.append(f"{corpus}: --lang {', '.join(missing)}: no such language in its records")
        if keep is not None and available:
            warnings.append(f"{corpus}: measured {res.summary.languages} of its {available} languages "
                            f"({describe(specs)}, with the reference); --lang set:all measures every one")
        tables.append(res.table.with_columns(pl.lit(str(corpus)).alias("corpus")))
        per_corpus[str(corpus)] = res.summary
        if res.summary.languages_folded:
            warnings.append(f"{corpus}: {res.summary.languages_folded} languages past the first "
                            f"{res.summary.max_languages} were measured together as 'other'; raise "
                            "--limit languages=N to measure each")
        if res.table.height > 1 and not res.summary.reference_present:
            warnings.append(f"reference language {opts.reference!r} is not in {corpus}: parity is empty "
                            "there; pass --reference")
    table = pl.concat(tables, how="diagonal_relaxed")
    record = LanguagesRecord(tokenizers=[v.name for v in inputs.vocabs], reference=opts.reference,
                             corpora=per_corpus, costs=language_costs(table, opts.reference))
    return SectionOutput(record=record, tables={"languages": table}, warnings=warnings)


def language_costs(table, reference: str) -> list[LanguageCost]:
    """Per (corpus, tokenizer) with a parity: the costliest language and how many of the others pay
    double (:class:`LanguageCost`), from the languages table (``corpus``, ``tokenizer``,
    ``language``, ``parity``); ``reference`` (parity 1 by definition) is not counted."""
    import polars as pl

    if "parity" not in table.columns:
        return []
    out = []
    rows = table.filter(pl.col("parity").is_not_null() & pl.col("parity").is_finite() & (pl.col("language") != reference))
    for (corpus, tok), part in rows.group_by(["corpus", "tokenizer"], maintain_order=True):
        top = part.sort("parity", descending=True).row(0, named=True)
        names = language_names(str(corpus))
        out.append(LanguageCost(corpus=str(corpus), tokenizer=str(tok), languages=part.height,
                                language=str(top["language"]), name=names.get(str(top["language"])),
                                parity=round(float(top["parity"]), 3),
                                double=int((part["parity"] >= DOUBLE_COST).sum()), reference_name=names.get(reference)))
    return out


def language_names(corpus: str) -> dict[str, str]:
    """``{code: name}`` from a corpus folder's ``languages.json`` (the shipped UDHR has one: a list
    of ``{"code", "name"}``); empty when there is none or it is not that shape."""
    import json
    from pathlib import Path

    path = Path(corpus) / "languages.json"
    try:
        if not path.is_file() or path.stat().st_size > 1 << 20:
            return {}
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if isinstance(doc, dict) and isinstance(doc.get("languages"), list):
        doc = doc["languages"]  # the shipped UDHR's: {"rule", "languages", "left_out"}
    return {str(d["code"]): str(d["name"]) for d in doc if isinstance(d, dict) and "code" in d and "name" in d} \
        if isinstance(doc, list) else {}


def _exact_isolation(embed):
    """Exact search's isolation (1 − the nearest other row's cosine) of given rows of ``embed``
    (:func:`embscope.geometry.exact.nearest_cosine`), each row searched once however many corpora
    ask for it; None without a matrix."""
    if embed is None:
        return None
    import numpy as np

    known: dict[int, float] = {}

    def isolation(rows, bound=None):
        """``bound``: the graph's isolation of each row, an upper bound (its neighbour is a real row)."""
        import torch

        from embscope.geometry.exact import nearest_cosine

        rows = np.asarray(rows, dtype=np.int64)
        fresh = np.array([r not in known for r in rows.tolist()], dtype=bool)
        new = rows[fresh]
        if len(new):
            floor = None if bound is None else 1.0 - np.asarray(bound, dtype=np.float64)[fresh]
            known.update(zip(new.tolist(), (1.0 - nearest_cosine(torch.as_tensor(embed), new, floor)).tolist()))
        return np.array([known[r] for r in rows.tolist()], dtype=np.float64)

    return isolation
