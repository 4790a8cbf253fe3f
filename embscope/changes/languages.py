"""Per-language drift: which languages' rows training pulled.

Each language of the languages corpus (the shipped UDHR by default: the same declaration in 50+
languages) is tokenized with TUNED's tokenizer; with ``w_i`` the share of the language's tokens that
are token ``i``,

- ``moved_share = Σ_i w_i [moved_i]``: the share of the language's text whose input rows moved;
- ``mean_change = Σ_i w_i ‖t_i − r_i‖/‖r_i‖``: its token-weighted mean relative change.

A fine-tune on English medical text moves the rows English (and Latin-script) text uses and leaves
Thai's where they were; a run that moved every language's rows alike trained the whole embedding
(weight decay, or data in every language).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from embscope.changes.record import LanguageDrift

if TYPE_CHECKING:  # pragma: no cover
    from embscope.tokenizer.base import Vocabulary

#: tokens listed per language: the most frequent of its moved rows
TOP = 5


def count_languages(vocab: "Vocabulary", corpus: str | Path, *, n_rows: int, options=None,
                    keep: frozenset | None = None) -> dict[str, dict[str, Any]]:
    """``{language: {ids, counts, script, name}}``: the distinct ids each language's text tokenizes to
    (``name`` from the corpus's ``languages.json``, :mod:`embscope.corpus.names`); with ``keep``,
    only those languages (``--lang``)."""
    from embscope.corpus.stream import iter_corpus
    from embscope.text.script import dominant_script

    acc: dict[str, dict[str, Any]] = {}
    for batch in iter_corpus(corpus, options=options):
        if keep is not None and batch.lang not in keep:
            continue
        ids = [i for row in vocab.encode_batch(batch.texts) for i in row]
        a = acc.setdefault(batch.lang, {"counts": np.zeros(n_rows, np.int64), "sample": ""})
        if ids:
            arr = np.asarray(ids, dtype=np.int64)
            arr = arr[(arr >= 0) & (arr < n_rows)]
            a["counts"] += np.bincount(arr, minlength=n_rows)
        if len(a["sample"]) < 2000:
            a["sample"] += " ".join(batch.texts)[:2000]
    from embscope.corpus.names import language_names

    names = language_names(corpus) if Path(corpus).is_dir() else {}
    out = {}
    for lang, a in acc.items():
        nz = np.flatnonzero(a["counts"])
        out[lang] = {"ids": nz, "counts": a["counts"][nz], "script": dominant_script(a["sample"]),
                     "name": names.get(lang)}
    return out


def language_drift(per_lang: dict[str, dict[str, Any]], moved: np.ndarray, change: np.ndarray, strings) -> list[LanguageDrift]:
    """One row per language (see the module docstring), most moved first."""
    rows = []
    ch = np.nan_to_num(change, nan=0.0, posinf=0.0)
    for lang, a in per_lang.items():
        ids, c = a["ids"], a["counts"]
        total = int(c.sum())
        if not total:
            continue
        w = c / total
        m = moved[ids]
        top = ids[m][np.argsort(-c[m], kind="stable")][:TOP]
        rows.append(LanguageDrift(language=lang, script=a["script"], tokens=total, distinct=int(len(ids)),
                                  moved_share=round(float((w * m).sum()), 5), mean_change=float((w * ch[ids]).sum()),
                                  top=[strings[i] for i in top], name=a.get("name")))
    rows.sort(key=lambda r: (-r.moved_share, -r.mean_change, r.language))
    return rows
