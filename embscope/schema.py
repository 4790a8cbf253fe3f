"""Column-by-column documentation and types of the Parquet tables an output folder may hold.

The single source for ``docs/schema.md`` (``scripts/schema_doc.py`` writes it; a test fails when it
is stale), for the column types the runner writes (:func:`conform`: ids are int32 and counts int64
in every table), and for the check that every column a run writes is documented.
"""

from __future__ import annotations

from typing import Any


#: per table: (column, type, meaning, reference); a column is absent when its step did not run
TABLES: dict[str, list[tuple[str, str, str, str]]] = {
    "tokens": [
        ('token_id', 'int32',
         'row index in the embedding matrix (= token id)',
         ''),
        ('token', 'string',
         'readable token text (byte-level BPE decoded to UTF-8 where possible; `""` for padding rows); untrusted',
         ''),
        ('token_bytes', 'binary',
         'raw bytes the token stands for; null for special and padding rows (and rows past the tokenizer)',
         ''),
        ('category', 'categorical',
         "`normal`; `special` (control tokens: `<|im_start|>`, `[CLS]`); `byte` (byte-fallback piece `<0x41>`); `undecodable` (the token's bytes are not valid UTF-8 on their own, or it has none); `unreachable` (the tokenizer never emits it for its own text: `encode(decode([i])) != [i]`); `padding` (matrix row past the tokenizer size)",
         'Land & Bartolo 2024, *Fishing for Magikarp* (unreachable tokens)'),
        ('in_norm', 'float32',
         'L2 norm of the input-embedding row, ‖E_i‖₂',
         ''),
        ('out_norm', 'float32',
         'L2 norm of the output (LM-head) row ‖U_i‖₂; null on every row when the matrices are tied',
         ''),
        ('zero_row', 'bool',
         'every entry of the row is ≤ 1e-16 in absolute value (input row, or output row when untied)',
         ''),
        ('ref_sim', 'float32',
         "Magikarp reference similarity: remove the first principal component `c` from every row of the output matrix (tied: the one matrix), `m'_i = m_i − (m_i·c)c`, then `cos(m'_i, r)` with `r` the mean of `m'` over known-unused rows; higher = more like an untrained row. Null on every row when there are no known-unused rows (`summary.json` → `geometry.reference`)",
         'Land & Bartolo 2024, §3.1'),
        ('isolation', 'float32',
         '1 − mean cosine to the k nearest rows; higher = more isolated (near 0 or slightly negative for rows in a tight knot of identical rows)',
         ''),
        ('knn_sim_k', 'float32',
         'cosine similarity to the k-th nearest row; lower = more isolated',
         ''),
        ('script', 'string',
         'script of the token text (`Latin`, `Han`, `Cyrillic`, …); `mixed` when letters of several scripts; `none` for special and padding rows and for text with no letters (digits, punctuation, spaces)',
         '`embscope.languages.script` (after Unicode UAX #24)'),
        ('undertrained_score', 'float32',
         'mean of robust z-scores `(v − median) / (1.4826 · MAD)`, fitted on normal rows, of −log ‖m_i − μ‖ (distance from the mean trained row), the knot term 1 − `isolation`, and `ref_sim` when a reference set exists; **higher = more likely under-trained**',
         'Land & Bartolo 2024'),
        ('flagged', 'bool',
         '`undertrained_score` ≥ the threshold (`summary.json` → `geometry.threshold`, default 2.5), or a zero row',
         ''),
        ('neighbors', 'list[int32]',
         'ids of the k nearest rows by cosine similarity of the input embedding, nearest first, self excluded',
         'Johnson et al. 2019 (faiss) for the approximate index'),
        ('neighbor_sims', 'list[float32]',
         'cosine similarity to each neighbour, descending',
         ''),
        ('x', 'float32',
         '2-D UMAP layout of the kNN graph; **NaN** on every row when the layout was off (`--no-map`)',
         'McInnes et al. 2018 (UMAP)'),
        ('y', 'float32',
         '2-D UMAP layout of the kNN graph; **NaN** on every row when the layout was off (`--no-map`)',
         'McInnes et al. 2018 (UMAP)'),
    ],
    "languages": [
        ('tokenizer', 'string',
         'tokenizer name (`gpt2`, `qwen2`, model name, …)',
         ''),
        ('language', 'string',
         'language code as given by the corpus (`eng`, `cmn_hans`, …; `und_<script>` when guessed)',
         ''),
        ('script', 'string',
         "dominant script of the language's text",
         '`embscope.languages.script`'),
        ('segmentation', 'string',
         '`characters` where words are not whitespace-delimited (see `unit`), else `words`',
         ''),
        ('unit', 'string',
         'what one word is for `words` and `fertility`: `word` (whitespace-delimited), `syllable` (Tibetan, tsheg-delimited), `char` (Han, kana: one code point) or `cluster` (Thai, Lao, Khmer, Myanmar: a base character with its combining marks)',
         'embscope.languages.segment'),
        ('texts', 'int64',
         'texts read',
         ''),
        ('words', 'int64',
         'words (see `segmentation`)',
         ''),
        ('chars', 'int64',
         'characters (code points)',
         ''),
        ('bytes', 'int64',
         'UTF-8 bytes',
         ''),
        ('tokens', 'int64',
         'tokens produced',
         ''),
        ('fertility', 'float64',
         'tokens / words; lower is cheaper, 1.0 = one token per word',
         'Rust et al. 2021, *How Good is Your Tokenizer?*'),
        ('tokens_per_char', 'float64',
         'tokens / characters; lower is cheaper',
         ''),
        ('bytes_per_token', 'float64',
         'UTF-8 bytes / tokens; higher = more text per token',
         ''),
        ('continued_word_rate', 'float64',
         'share of words split into ≥ 2 tokens when each word is encoded alone (frequency-weighted, over the first 256 KiB of each language)',
         'Rust et al. 2021'),
        ('single_token_word_rate', 'float64',
         'share of words encoded as exactly one token (same sample)',
         ''),
        ('parity', 'float64',
         'Σ_u tokens_lang(u) / Σ_u tokens_ref(u) over the aligned units (`unit` keys) both languages have; 1.0 for the reference, 2.0 = pays double; null without `unit` keys or without the reference language',
         'Petrov et al. 2023, *Language Model Tokenizers Introduce Unfairness Between Languages*'),
        ('parity_units', 'int64',
         'aligned units the parity was computed over; null without alignment',
         ''),
        ('unk_rate', 'float64',
         'share of tokens that are the unknown token',
         ''),
        ('byte_fallback_rate', 'float64',
         'share of tokens that are byte-fallback pieces (`<0xE3>`)',
         ''),
        ('roundtrip', 'float64',
         'share of texts with `decode(encode(text)) == text` (first 200 texts per language)',
         ''),
        ('vocab_utilisation', 'float64',
         'distinct token ids used / vocabulary size',
         ''),
        ('mean_in_norm', 'float64',
         "Σ_i w_i ‖E_i‖ with w_i the token's share of the language's tokens (first tokenizer only; null for the others)",
         ''),
        ('mean_isolation', 'float64',
         'Σ_i w_i `isolation`_i (first tokenizer; needs the scan)',
         ''),
        ('flagged_share', 'float64',
         "Σ_i w_i [`flagged`_i]: share of the language's tokens that are flagged under-trained (first tokenizer; needs the scan)",
         ''),
        ('mean_within_sim', 'float64',
         "mean pairwise cosine of the language's 200 most frequent tokens' input rows; high = crowded in one corner of the space (first tokenizer)",
         ''),
        ('corpus', 'string',
         'corpus path as given to the audit (audit only)',
         ''),
    ],
    "candidates": [
        ('rank', 'int64',
         '1 = largest estimated savings',
         ''),
        ('term', 'string',
         'the surface form as it occurs, leading space included (`" hypertension"`); untrusted',
         ''),
        ('frequency', 'int64',
         'occurrences of this exact form in the domain corpus',
         ''),
        ('pieces', 'list[string]',
         'the tokens it is split into today, as readable text; untrusted',
         ''),
        ('piece_ids', 'list[int32]',
         'their ids',
         ''),
        ('n_pieces', 'int64',
         '`len(pieces)`',
         ''),
        ('n_words', 'int64',
         'words in the term (1 for single words)',
         ''),
        ('savings_tokens', 'int64',
         'estimated tokens saved: `frequency × (n_pieces − 1)`; higher is better (the measured saving of the chosen set is `summary.json` → `extension.tokens_saved`)',
         ''),
    ],
}


def dtype_of(name: str):
    """The polars dtype of a type name used in :data:`TABLES` (``list[int32]`` → ``List(Int32)``)."""
    import polars as pl

    simple = {"int32": pl.Int32, "int64": pl.Int64, "float32": pl.Float32, "float64": pl.Float64,
              "string": pl.String, "binary": pl.Binary, "bool": pl.Boolean, "categorical": pl.Categorical}
    if name.startswith("list["):
        return pl.List(simple[name[5:-1]])
    return simple[name]


def conform(table: str, frame: Any):
    """Cast ``frame``'s documented columns to their documented types (same types in every run)."""
    import polars as pl

    spec = {col: typ for col, typ, _, _ in TABLES.get(table, [])}
    casts = []
    for col in frame.columns:
        if col not in spec:
            continue
        target = dtype_of(spec[col])
        if frame[col].dtype != target:
            casts.append(pl.col(col).cast(target, strict=False))
    return frame.with_columns(casts) if casts else frame
