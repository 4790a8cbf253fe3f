"""Training-data records (whole JSON objects) from ``.json`` files and Parquet/Arrow rows, each at
most :data:`~embscope.corpus.readers.MAX_LINE_BYTES` (1 MiB), as a jsonl line is.

A training example is read whole (a conversation cannot be cut into pieces as a corpus text is),
so what bounds memory is the size of one record. The jsonl reader skips a line past 1 MiB; here
the same bound holds for the other containers:

- ``.json`` (an array, or ``{"data": [...]}`` and the like): streamed by
  :func:`embscope.formats.json_stream.iter_records`, one record at a time; a record past the
  bound is walked past without being built (``json_records_over_1MiB``). Peak memory is a window
  of a few MiB however large the file (``docs/limits.md``: a 325 MB array of 12 M records reads in
  25 MB of RSS, where ``json.loads`` takes 12 times the file). Invalid JSON stops the file where it is found,
  the records before it kept (``invalid_json_files``); a top level that is neither an array nor an
  object is ``wrong_type_records``.
- Parquet, Arrow IPC and HF ``datasets`` folders: each row's size is computed from the Arrow
  buffers (string and binary lengths, list offsets, fixed widths, per column, nested types
  included) before any row becomes Python objects; a row past the bound is skipped
  (``table_records_over_1MiB``), and the others are converted at most
  :data:`~embscope.corpus.readers.BATCH_READ_BYTES` at a time.

Both count their decompressed bytes against the file limits of :class:`~embscope.corpus.readers.ReadOptions`
(``files_cut_at_file_bytes``, ``files_over_ratio``), as the corpus readers do.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from embscope.corpus.readers import (BATCH_READ_BYTES, MAX_LINE_BYTES, FileIssues, ReadOptions, SourceFile,
                                     _arrow_batches, _Meter, _parquet_batches, _read_error, open_binary)

__all__ = ["json_objects", "row_bytes", "table_objects"]


class _Stopped(Exception):
    """The file's byte limits stopped it (the meter counted why)."""


def json_objects(file: SourceFile, issues: FileIssues, opts: ReadOptions | None = None) -> Iterator[Any]:
    """The records of a ``.json`` file, in order, each at most 1 MiB (see the module docstring)."""
    from embscope.formats.json_stream import OVERSIZED, JSONStreamError, iter_records

    meter = _Meter(file, opts or ReadOptions(), issues)
    try:
        with open_binary(file) as f:
            def read(n: int) -> bytes:
                raw = f.read(n)
                if raw and not meter.allows(len(raw)):
                    raise _Stopped
                return raw

            for rec in iter_records(read, max_record=MAX_LINE_BYTES):
                if rec is OVERSIZED:
                    issues.add(file.path, "json_records_over_1MiB")
                    continue
                yield rec
    except _Stopped:
        return
    except JSONStreamError as err:
        issues.add(file.path, "wrong_type_records" if err.reason == "not-array" else "invalid_json_files")
    except (UnicodeDecodeError, RecursionError):  # not UTF-8; nested past the decoder's depth
        issues.add(file.path, "invalid_json_files")
    except Exception as e:  # a truncated .gz, a damaged zstd frame, an I/O error
        if not _read_error(e):
            raise
        issues.add(file.path, "corrupt_compressed_files" if file.compression else "unreadable_files")


def row_bytes(rb) -> "Any":
    """Bytes each row of a record batch holds (a numpy int64 array, one entry per row): the sum over
    its columns of :func:`_array_bytes`."""
    import numpy as np

    total = np.zeros(rb.num_rows, np.int64)
    for col in rb.columns:
        total += _array_bytes(col)
    return total


def _array_bytes(arr) -> "Any":
    """Bytes per element of an Arrow array, from its buffers: string/binary lengths, the sum of a
    list's items (plus 4 per item for its offset), the sum of a struct's fields, a fixed width;
    dictionaries per index. Nulls count 0 (or their fixed width)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    t, n = arr.type, len(arr)
    if pa.types.is_dictionary(t):
        values = _array_bytes(arr.dictionary)
        idx = arr.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
        return values[idx] * valid if len(values) else np.zeros(n, np.int64)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return pc.binary_length(arr).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    if pa.types.is_map(t):
        arr = pa.ListArray.from_arrays(arr.offsets, pa.StructArray.from_arrays([arr.keys, arr.items], ["k", "v"]),
                                       mask=arr.is_null())
        t = arr.type
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        items = pc.list_flatten(arr)
        parents = pc.list_parent_indices(arr).to_numpy(zero_copy_only=False)
        sizes = _array_bytes(items) + 4
        return np.bincount(parents, weights=sizes, minlength=n).astype(np.int64)
    if pa.types.is_struct(t):
        out = np.zeros(n, np.int64)
        for field in arr.flatten():
            out += _array_bytes(field)
        return out
    if pa.types.is_null(t):
        return np.zeros(n, np.int64)
    try:
        return np.full(n, max(1, t.bit_width // 8), np.int64)
    except ValueError:  # a type without a fixed width that none of the above is: measure row by row
        return np.array([arr.slice(i, 1).nbytes for i in range(n)], np.int64)


def table_objects(file: SourceFile, issues: FileIssues, opts: ReadOptions | None = None) -> Iterator[dict]:
    """The rows of a Parquet or Arrow file as dicts, in order, each at most 1 MiB (see the module
    docstring); Parquet row groups and Arrow batches are charged to the file's limits before they
    are read, as the corpus readers charge them, and each batch's rows again by their decoded size
    before they are built (a dictionary-encoded column stores a repeated value once: a 3 KB file
    can decode to 60 GiB), so the ratio bound stops a dictionary bomb after a few MiB."""
    import pyarrow as pa

    meter = _Meter(file, opts or ReadOptions(), issues)
    read = _parquet_batches if file.fmt == "parquet" else _arrow_batches
    try:
        for rb in read(file, lambda schema: list(schema.names), meter, issues):
            sizes = row_bytes(rb)
            over = sizes > MAX_LINE_BYTES
            if over.any():
                issues.add(file.path, "table_records_over_1MiB", int(over.sum()))
            if not meter.allows(int(sizes[~over].sum())):  # decoded bytes, charged before the rows are
                return  # built: a dictionary repeats one stored value into gigabytes (a bomb)
            for start, rows in _runs(sizes, over):
                try:
                    yield from rb.slice(start, rows).to_pylist()
                except (UnicodeDecodeError, ValueError):
                    issues.add(file.path, "unreadable_files")
                    return
    except (OSError, pa.ArrowException):
        issues.add(file.path, "unreadable_files")


def _runs(sizes, over) -> Iterator[tuple[int, int]]:
    """``(start, rows)`` runs of rows not ``over``, each holding at most :data:`BATCH_READ_BYTES`
    (one row may hold more, up to the per-record bound)."""
    start, size = None, 0
    for i, (n, skip) in enumerate(zip(sizes.tolist(), over.tolist())):
        if skip:
            if start is not None:
                yield start, i - start
            start, size = None, 0
            continue
        if start is not None and size + n > BATCH_READ_BYTES:
            yield start, i - start
            start, size = None, 0
        if start is None:
            start = i
        size += n
    if start is not None:
        yield start, len(sizes) - start
