"""The language tables of the report: the cost table (every language, most expensive first, what
a row is named in words) and the "all measurements" tables (every column of ``languages.parquet``
in groups narrow enough to show at once). Pure functions of the rows the payload read."""

from __future__ import annotations

from typing import Any

# A (tokenizer, language) pair pays "double" when its parity (tokens relative to the reference
# language on parallel text, Petrov et al. 2023) is at least this.
DOUBLE_COST = 2.0


#: the "all measurements" tables: every column of languages.parquet, in groups narrow enough to
#: show every column at once (a 22-column table would need its own scroll bar)
MEASURE_GROUPS = (
    ("What was read", ("texts", "words", "chars", "bytes", "tokens", "parity_units")),
    ("What it costs", ("parity", "fertility", "tokens_per_char", "bytes_per_token", "split_word_rate",
                       "single_token_word_rate")),
    ("How well the tokenizer covers it", ("unk_rate", "byte_fallback_rate", "roundtrip", "vocab_utilisation")),
    ("Where its tokens sit in the embedding (first tokenizer)", ("mean_in_norm", "mean_isolation",
                                                                 "isolation_exact_share", "flagged_share",
                                                                 "mean_within_sim")),
    ("How sure: bootstrap intervals of the costs", ("parity_lo", "parity_hi", "fertility_lo", "fertility_hi",
                                                    "tokens_per_char_lo", "tokens_per_char_hi", "bytes_per_token_lo",
                                                    "bytes_per_token_hi")),
    ("How sure: bootstrap intervals of the word and density columns",
     ("split_word_rate_lo", "split_word_rate_hi", "single_token_word_rate_lo", "single_token_word_rate_hi",
      "mean_in_norm_lo", "mean_in_norm_hi", "mean_isolation_lo", "mean_isolation_hi", "isolation_exact_share_lo",
      "isolation_exact_share_hi", "flagged_share_lo", "flagged_share_hi")),
)
#: columns every group repeats (the row's identity), and columns shown inside another
_LEADS = ("tokenizer", "language", "script", "unit", "corpus")
_SHOWN_ELSEWHERE = ("language_name", "segmentation")


def measure_groups(columns: list[str], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:data:`MEASURE_GROUPS` with the columns the table has (a group with none is left out); a
    column no group names goes into a last group, so every column is shown once.

    >>> [g["title"] for g in measure_groups(["language", "tokens", "fertility", "new_metric"], [{}])]
    ['What was read', 'What it costs', 'Other measurements']
    """
    multi = {c: len({r.get(c) for r in rows}) > 1 for c in ("tokenizer", "corpus")}
    lead = [c for c in _LEADS if c in columns and multi.get(c, True)]
    named = {c for _, cols in MEASURE_GROUPS for c in cols}
    rest = [c for c in columns if c not in named and c not in _LEADS and c not in _SHOWN_ELSEWHERE]
    groups = [(t, [c for c in cols if c in columns]) for t, cols in MEASURE_GROUPS] + [("Other measurements", rest)]
    return [{"title": t, "columns": lead + cols} for t, cols in groups if cols]


#: the cost table's columns, in order, when some row has a value: what a language pays in tokens
#: (parity, fertility, ...) and where those tokens sit in the embedding space (the density columns)
COST_COLUMNS = ("language", "script", "parity", "fertility", "tokens_per_char", "bytes_per_token",
                "mean_in_norm", "mean_isolation", "flagged_share", "mean_within_sim")


def cost_table(rows: list[dict[str, Any]], corpora: list[str]) -> dict[str, Any]:
    """Every (tokenizer, language) row, most expensive first: by parity, then fertility; languages
    whose fertility counts characters, clusters or syllables (``unit`` not ``word``) after the
    per-word ones when there is no parity to rank by (their fertility is not tokens per word).

    The tokenizer (corpus) column is shown only when there are several tokenizers (corpora);
    density columns only when a row has them. ``n_double`` counts rows with parity ≥ DOUBLE_COST:
    with several tokenizers or corpora a row is a *pair* (language × tokenizer, language × corpus),
    which ``pairs`` names, and ``double_languages`` counts the languages with at least one such row.

    >>> t = cost_table([{"language": "a", "tokenizer": "x", "parity": 2.5}, {"language": "a", "tokenizer": "y",
    ...                 "parity": 2.1}, {"language": "b", "tokenizer": "x", "parity": 1.0}], [])
    >>> t["n_double"], t["n_rows"], t["double_languages"], t["n_languages"], t["pairs"]
    (2, 3, 1, 2, 'language × tokenizer pairs')
    """
    has_parity = any(isinstance(r.get("parity"), (int, float)) for r in rows)

    def key(r):
        p, f = r.get("parity"), r.get("fertility")
        apart = not has_parity and r.get("unit") not in (None, "word")
        return (apart, -(p if isinstance(p, (int, float)) else -1e9), -(f if isinstance(f, (int, float)) else -1e9))

    toks = {r.get("tokenizer") for r in rows}
    lead = (["tokenizer"] if len(toks) > 1 else []) + (["corpus"] if len(corpora) > 1 else [])
    columns = lead + [c for c in COST_COLUMNS if any(r.get(c) is not None for r in rows)]
    double = [r for r in rows if isinstance(r.get("parity"), (int, float)) and r["parity"] >= DOUBLE_COST]
    what = [w for w, n in (("tokenizer", len(toks)), ("corpus", len(corpora))) if n > 1]
    pairs = f"language × {' × '.join(what)} pairs" if what else "languages"
    return {"columns": columns, "rows": sorted(rows, key=key), "n_double": len(double), "n_rows": len(rows),
            "pairs": pairs, "double_languages": len({r.get("language") for r in double}),
            "n_languages": len({r.get("language") for r in rows}), "has_parity": has_parity}
