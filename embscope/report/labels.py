"""Words for people: what the report calls each column, the one line a header's tooltip shows, and
the glossary of the report's own terms ("knot", "family", "drift", …).

A tooltip is the column's documentation, cut to its first clause: from :data:`embscope.schema.TABLES`
for the Parquet tables (the text ``docs/schema.md`` is made of) and from the record's ``#:`` lines
for the extension's strategy figures, so the page and the docs say the same thing.

>>> h = column_help()
>>> h["languages"]["tokens_per_char"]["label"], h["languages"]["tokens_per_char"]["tip"]
('tokens / char', 'tokens / characters; lower is cheaper')
>>> h["tokens"]["knot"]["label"]
'knot'
"""

from __future__ import annotations

import re
from functools import lru_cache

#: header labels, by column name (the same column means the same thing in every table it is in)
LABELS = {
    # tokens
    "token_id": "id", "undertrained_score": "score", "flag_reason": "why flagged", "in_norm": "‖e‖ (input norm)",
    "out_norm": "‖w‖ (output norm)", "magikarp_sim": "Magikarp sim.", "knn_sim_k": "k-th neighbour cos.",
    "verify_max_prob": "max p when prompted", "undertrained_status": "status", "corpus_count": "in your corpus",
    "template_count": "in the chat template", "neighbors": "nearest neighbours",
    # languages
    "language_name": "name", "unit": "word unit", "words": "words (units)", "chars": "characters",
    "fertility": "fertility (tokens / word)", "tokens_per_char": "tokens / char", "bytes_per_token": "bytes / token",
    "split_word_rate": "words split", "single_token_word_rate": "one-token words",
    "parity_units": "aligned units", "unk_rate": "unknown-token share", "byte_fallback_rate": "byte-fallback share",
    "roundtrip": "round-trip share", "vocab_utilisation": "vocabulary used", "mean_in_norm": "mean ‖e‖",
    "mean_isolation": "mean isolation", "isolation_exact_share": "isolation exact share",
    "flagged_share": "flagged share", "mean_within_sim": "within-language cos.",
    # candidates
    "frequency": "occurrences", "n_pieces": "pieces today", "n_words": "words", "savings_tokens": "tokens saved",
    "count_as_token": "as one new token",
    # extension strategies
    "score": "score (bits/byte)", "score_corpus": "Δ corpus", "score_general": "Δ general", "score_reading": "reading",
    "score_bytes": "corpus bytes", "fidelity_kl": "fidelity KL", "fidelity_kl_p90": "fidelity KL p90",
    "fidelity_top1": "top-1 agree", "fidelity_kl_after": "KL after", "fidelity_top1_after": "top-1 after",
    "fidelity_contexts": "contexts", "fidelity_after_positions": "positions after", "bits_per_byte": "bits/byte",
    "bits_per_byte_se": "± SE", "bits_per_byte_change": "Δ bits/byte", "bits_per_byte_change_se": "± SE Δ",
    "tokens_per_byte": "tokens/byte", "tokens_per_byte_change": "Δ tokens/byte",
    "general_bits_per_byte": "bits/byte general", "general_bits_per_byte_change": "Δ bits/byte general",
    "general_bits_per_byte_change_se": "± SE general", "kl": "KL mean", "kl_max": "KL max",
    "new_token_mass": "new-token mass", "new_token_mass_max": "mass max", "disturbance_positions": "positions",
    "norm_percentile_median": "norm pct. median", "norm_percentile_min": "norm pct. min",
    "norm_percentile_max": "norm pct. max", "nearest_cosine_median": "nearest cos. median",
    "output_norm_percentile_median": "out norm pct.", "output_nearest_cosine_median": "out nearest cos.",
}

#: the report's own words, each with one plain sentence (the glossary at the foot of the page)
GLOSSARY = {
    "under-trained score": "How far a row sits from the trained rows on its strongest indicator, in robust "
                           "standard deviations (median and MAD of the trained rows); 4 or more is flagged.",
    "knot": "An indicator: how tightly a row's nearest neighbours crowd around it. Untrained rows often sit at "
            "one point with equal norms; a knot counts as a flag only when it is such a collapse.",
    "family": "A knot of trained near-synonyms (spellings of one word, code identifiers): tight, but the rows "
              "differ in norm and were trained, so they are not flagged.",
    "drift": "Magikarp's indicator pointing towards the unused rows without reaching them: short of the known "
             "unused rows, so not flagged.",
    "Magikarp sim.": "Cosine of a row to the mean of the known-unused rows once the main direction is removed "
                     "(Land & Bartolo 2024); high means it looks like a row training never touched.",
    "isolation": "1 − the cosine to the nearest other row: a row far from every other row is isolated, "
                 "reported apart from the flags.",
    "verified": "The whole model was prompted to repeat the token; if its probability stays under the cut "
                "(max p 0.01) the row is verified under-trained, otherwise it is cleared as trained.",
    "candidate": "A flagged row no prompt checked yet: the indicators alone say it looks under-trained.",
    "recall@k": "The share of a row's k true nearest neighbours (exact search) that the neighbour graph found.",
    "fertility": "Tokens per word (Rust et al. 2021). For Thai, Lao, Khmer, Myanmar, Chinese and Japanese a "
                 "'word' is a character or cluster, so their fertility is not comparable with the others'.",
    "parity": "Tokens a language needs divided by the tokens the reference language needs for the same "
              "(parallel) text (Petrov et al. 2023); 2 means it pays double.",
    "pays double": "Parity of 2 or more. With several tokenizers each language × tokenizer pair counts once.",
    "bits per byte": "The model's loss on text, in bits per UTF-8 byte: lower is better, and it compares "
                     "tokenizers that cut the text differently.",
    "KL": "Kullback–Leibler divergence, in nats, between the original model's next-token distribution and the "
          "extended one's: how far the predictions move (0 = not at all).",
    "noise floor": "The largest change a row shows from storage alone (a bf16 cast, a re-quantisation): "
                   "below it a row did not move in training.",
}

#: what each ``flag_reason`` part means, one line (the flagged card's tooltips)
REASONS = {
    "in_norm": "the input row's norm is far below the trained rows'",
    "out_norm": "the output (LM-head) row's norm is far below the trained rows'",
    "magikarp": "Magikarp's indicator: the row points where the known-unused rows point",
    "knot": "a collapse: the row sits at one point with its neighbours, at an equal norm (a knot that is a collapse)",
    "zero": "every entry of the row is zero",
    "isolated": "far from every other row (1 − nearest cosine); reported apart, not a flag on its own",
    "family": "a knot of trained near-synonyms: tight, but not a collapse, so not flagged",
    "drift": "Magikarp's indicator short of the unused rows' own similarity, so not flagged",
}

#: strategy-table columns whose documentation lives on the record, not in schema.TABLES
_RECORD_TABLES = {"strategies": ("embscope.extension.diagnostics", "StrategyRecord")}


def one_line(doc: str, limit: int = 160) -> str:
    """A column's documentation without markdown; past ``limit`` characters, its first clause (cut
    at most at ``limit``).

    >>> one_line("**NaN** when `--no-map`; else x"), one_line("in (0–100; 50 typical). More" + 200 * "x")
    ('NaN when --no-map; else x', 'in (0–100; 50 typical)')
    """
    text = re.sub(r"[`*]", "", doc).strip()
    if len(text) <= limit:
        return text
    depth = 0
    for i, ch in enumerate(text):  # the first "; " or ". " outside parentheses ends the clause
        depth += (ch in "([") - (ch in ")]")
        if depth <= 0 and ((ch == ";") or (ch == "." and text[i + 1:i + 2] == " ")):
            text = text[:i]
            break
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


@lru_cache(maxsize=1)
def column_help() -> dict[str, dict[str, dict[str, str]]]:
    """``{table: {column: {"label", "tip"}}}`` for the Parquet tables and the strategy figures."""
    import importlib

    from embscope.records import field_docs
    from embscope.schema import TABLES

    docs = {table: {c: d for c, _, d, _ in cols} for table, cols in TABLES.items()}
    for table, (module, name) in _RECORD_TABLES.items():
        cls, merged, last = getattr(importlib.import_module(module), name), {}, ""
        for base in reversed(cls.__mro__):  # the parent records' fields first, in declaration order
            for field, doc in (field_docs(base) if "__dataclass_fields__" in vars(base) else {}).items():
                last = doc or last  # a field under another's comment shares it ("… and its SE")
                merged[field] = last
        docs[table] = merged
    return {table: {c: {"label": LABELS.get(c, c.replace("_", " ")), "tip": one_line(d)} for c, d in cols.items()}
            for table, cols in docs.items()}
