"""The tokens table: one row per matrix row, the spine every analysis adds columns to.

Base columns (see docs/schema.md): ``token_id`` (int), ``token`` (display string, untrusted text),
``token_bytes`` (raw bytes, null for special and padding rows), ``category``, ``in_norm`` (L2 norm of
the input-embedding row), ``out_norm`` (L2 norm of the output row; null when tied).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from embscope.models.model import LoadedModel
from embscope.models.rows import row_norms


def scan_flags(table, n_rows: int | None = None) -> tuple["Any", list | None]:
    """``(flagged, status)`` of a tokens table: its ``flagged`` column as a bool array (nulls
    false; None without the column) and its ``undertrained_status`` column as a list (None without
    it), padded or cut to ``n_rows`` when given. What ``check``, ``diff`` and the trainer callback
    read of an earlier scan.

    >>> import polars as pl
    >>> fl, st = scan_flags(pl.DataFrame({"flagged": [True, None], "undertrained_status": ["cleared", None]}), 3)
    >>> fl.tolist(), st
    ([True, False, False], ['cleared', None, None])
    """
    import numpy as np

    if table is None or "flagged" not in table.columns:
        return None, None
    flagged = np.asarray(table["flagged"].fill_null(False).to_numpy(), dtype=bool)
    status = table["undertrained_status"].to_list() if "undertrained_status" in table.columns else None
    if n_rows is not None:
        flagged = np.concatenate([flagged[:n_rows], np.zeros(max(0, n_rows - len(flagged)), dtype=bool)])
        if status is not None:
            status = status[:n_rows] + [None] * max(0, n_rows - len(status))
    return flagged, status


def base_columns(model: LoadedModel) -> dict[str, Sequence[Any]]:
    """The base columns of ``tokens.parquet`` for a loaded model."""
    n_tok = model.n_tokens
    vocab = model.vocab
    raw = vocab.all_token_bytes() if vocab is not None else []
    token_bytes = [raw[i] if i < n_tok and i < len(raw) else None for i in range(model.n_rows)]
    return {
        "token_id": list(range(model.n_rows)),
        "token": model.token_strings(),
        "token_bytes": token_bytes,
        "category": list(model.categories),
        "in_norm": row_norms(model.embed),
        "out_norm": row_norms(model.output) if model.output is not None else [None] * model.n_rows,
    }


def tokens_frame(columns: Mapping[str, Sequence[Any]]):
    """A polars DataFrame from column arrays, with stable dtypes for the base columns."""
    import polars as pl

    f32 = pl.Float32
    schema = {"token_id": pl.Int32, "token": pl.String, "token_bytes": pl.Binary,
              "category": pl.Categorical, "in_norm": f32, "out_norm": f32,
              # scan columns (embscope.geometry.scan): fixed types even when a column is all-null
              "zero_row": pl.Boolean, "ref_sim": f32, "isolation": f32, "knn_sim_k": f32,
              "script": pl.String, "undertrained_score": f32, "flagged": pl.Boolean, "knn_exact": pl.Boolean,
              "neighbors": pl.List(pl.Int32), "neighbor_sims": pl.List(f32), "x": f32, "y": f32}
    series = []
    for name, values in columns.items():
        dtype = schema.get(name)
        if dtype is pl.Categorical:
            series.append(pl.Series(name, list(values), dtype=pl.String).cast(pl.Categorical))
        elif getattr(values, "ndim", 1) == 2 and isinstance(dtype, pl.List):
            # an (n, k) array (the kNN graph): one fixed-width conversion, ~50× faster than lists
            series.append(pl.Series(name, values).cast(dtype))
        else:
            series.append(pl.Series(name, values, dtype=dtype, strict=False))
    return pl.DataFrame(series)
