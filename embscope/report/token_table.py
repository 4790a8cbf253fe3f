"""The ``tokens.parquet`` of an output folder, read back for an export, its columns checked first.

An export reads a report folder that may have been edited since it was written (a column
rewritten as text, a list column as a string). Before a value is used, every column the export
reads is checked against the type ``docs/schema.md`` documents for it (:data:`embscope.schema.TABLES`),
by kind: any integer type for ``int32``, any number for ``float32``, text or a category for
``string``, and so on; a column that is all nulls passes. The first mismatch is a one-line
:class:`~embscope.errors.SpecError` naming the column, its type and the expected one.

>>> import polars as pl
>>> check_columns(pl.DataFrame({"x": ["1.5"]}), ["x"])
Traceback (most recent call last):
...
embscope.errors.SpecError: tokens.parquet column 'x' is String, but float32 (a number) is expected (docs/schema.md); the report was changed after it was written: run the scan again
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from embscope.errors import SpecError

#: what each documented type accepts, in words
KINDS = {"int32": "an integer", "int64": "an integer", "float32": "a number", "float64": "a number",
         "string": "text", "categorical": "text", "bool": "a boolean", "binary": "bytes",
         "list[int32]": "a list of integers", "list[float32]": "a list of numbers"}


def read_tokens(path: Path):
    """``path`` (a ``tokens.parquet``) as a polars DataFrame; a one-line error for a file that is
    not readable Parquet."""
    import polars as pl

    try:
        return pl.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - polars raises many kinds for a damaged file
        raise SpecError(f"{path} is not a readable Parquet file ({type(exc).__name__}); pass a folder written "
                        "by `embscope audit` or `scan`") from None


def _matches(dtype, documented: str) -> bool:
    import polars as pl

    if dtype == pl.Null:
        return True
    if documented.startswith("list["):
        inner = documented[5:-1]
        return isinstance(dtype, (pl.List, pl.Array)) and _matches(dtype.inner, inner)
    if documented in ("int32", "int64"):
        return dtype.is_integer()
    if documented in ("float32", "float64"):
        return dtype.is_numeric()
    if documented in ("string", "categorical"):
        return dtype in (pl.String, pl.Categorical) or isinstance(dtype, (pl.Categorical, pl.Enum))
    if documented == "bool":
        return dtype == pl.Boolean
    if documented == "binary":
        return dtype == pl.Binary
    return True


def check_columns(tokens, columns: Iterable[str], where: str = "tokens.parquet") -> None:
    """Refuse the first of ``columns`` (those the table has) whose type is not the documented one."""
    from embscope.schema import TABLES

    spec = {col: typ for col, typ, _, _ in TABLES["tokens"]}
    for col in columns:
        if col in tokens.columns and col in spec and not _matches(tokens[col].dtype, spec[col]):
            raise SpecError(f"{where} column {col!r} is {tokens[col].dtype}, but {spec[col]} ({KINDS.get(spec[col], spec[col])}) "
                            "is expected (docs/schema.md); the report was changed after it was written: run the scan again")
