"""The token map as Embedding Atlas reads it (``pip install embedding-atlas``, Apple, 0.26).

``embedding-atlas FILE --x x --y y --text token --neighbors neighbors`` wants, per row: the 2-D
position, a text, and the nearest neighbours as a struct ``{ids: [n1, n2, …], distances: [d1, d2,
…]}`` whose ids are *zero-based row indices* of the same table (Atlas numbers the rows itself and
joins on that number). ``tokens.parquet`` keeps ``neighbors`` (token ids) and ``neighbor_sims``
(cosine similarities) as two list columns; here they become that struct, with ``distances`` =
1 − cosine similarity, and the rows stay in token-id order, so token id = row index = neighbour id.

Columns written: ``token_id``, ``token`` (the text as the report shows it: invisible characters as
code points, :func:`embscope.report.escape.display_token`), ``x``, ``y``, ``neighbors``, and the
columns worth filtering on: ``category``, ``script``, ``flagged``, ``flag_reason``, ``verified``
(from ``verify_max_prob``: true below 0.01, false at or above, null where not checked),
``isolated``, ``undertrained_score``, ``in_norm``, ``out_norm``.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from embscope.errors import SpecError

#: the file name inside the export folder
ATLAS_FILE = "tokens.parquet"
#: columns every Atlas table is made from
REQUIRED = ("token_id", "token", "x", "y", "neighbors", "neighbor_sims")
#: columns copied as they are, when the table has them
KEEP = ("category", "script", "flagged", "flag_reason", "isolated", "undertrained_score", "in_norm", "out_norm")


def atlas_command(path: str | Path) -> str:
    """The one-line command that opens an exported table in Embedding Atlas.

    >>> atlas_command("r/atlas/tokens.parquet")
    'embedding-atlas r/atlas/tokens.parquet --x x --y y --text token --neighbors neighbors'
    """
    return f"embedding-atlas {shlex.quote(str(path))} --x x --y y --text token --neighbors neighbors"


def atlas_table(tokens):
    """``tokens.parquet`` (a polars DataFrame) → the Atlas table (see the module docstring).

    Raises:
        SpecError: no map (``x``/``y`` all NaN: the run laid none out), no kNN graph, rows
            not in token-id order, or a column whose type is not the documented one (a report
            edited since: :func:`embscope.report.token_table.check_columns`).
    """
    import polars as pl

    from embscope.geometry.verify import MAX_PROB_CUT
    from embscope.report.escape import display_token
    from embscope.report.token_table import check_columns

    missing = [c for c in REQUIRED if c not in tokens.columns]
    if missing:
        raise SpecError(f"tokens.parquet has no {', '.join(missing)} column; run `embscope scan` (with the "
                        "map) on the model first")
    check_columns(tokens, [*REQUIRED, *KEEP, "verify_max_prob"])
    n = tokens.height
    if tokens["x"].is_nan().all() or tokens["x"].null_count() == n:
        raise SpecError("tokens.parquet has no 2-D map (the run that wrote it laid none out: `check` and `diff` "
                        "never do, `scan --no-map` and `audit --no-map` skip it); run `embscope scan --model M` "
                        "and export that folder")
    ids = tokens["token_id"].cast(pl.Int64)
    if not ids.equals(pl.Series("token_id", range(n), dtype=pl.Int64)):
        raise SpecError("tokens.parquet rows are not in token-id order 0..n-1; re-run the scan")
    nbr = tokens["neighbors"].cast(pl.List(pl.Int64))
    bad = nbr.list.eval(pl.element().is_null() | (pl.element() < 0) | (pl.element() >= n)).list.any()
    if bad.any():
        raise SpecError("tokens.parquet has neighbour ids outside its rows; re-run the scan")
    cols = [
        tokens["token_id"].cast(pl.Int32),
        pl.Series("token", [display_token(t) for t in tokens["token"].to_list()], dtype=pl.String),
        tokens["x"].cast(pl.Float32), tokens["y"].cast(pl.Float32),
    ]
    frame = pl.DataFrame(cols).with_columns(
        pl.struct(ids=tokens["neighbors"].cast(pl.List(pl.Int32)),
                  distances=tokens["neighbor_sims"].cast(pl.List(pl.Float32)).list.eval(1.0 - pl.element()),
                  ).alias("neighbors"))
    extra = [tokens[c].cast(pl.String) if c == "category" else tokens[c] for c in KEEP if c in tokens.columns]
    if "verify_max_prob" in tokens.columns:
        p = tokens["verify_max_prob"]
        extra.append(pl.Series("verified", [None if v is None else bool(v < MAX_PROB_CUT) for v in p.to_list()],
                               dtype=pl.Boolean))
    return frame.with_columns(extra)


def write_atlas(report: Path, out: Path) -> Path:
    """Write ``out/tokens.parquet`` for Atlas from ``report/tokens.parquet``; returns its path.
    ``out`` must be a folder being written (the caller claims it)."""
    from embscope.report.token_table import read_tokens

    src = Path(report) / "tokens.parquet"
    if not src.is_file():
        raise SpecError(f"{report} has no tokens.parquet; pass a folder written by `embscope audit` or `scan`")
    table = atlas_table(read_tokens(src))
    path = Path(out) / ATLAS_FILE
    table.write_parquet(path)
    return path
