"""Corpus files → records ``(text, lang, unit)``: formats, compression, HF dataset folders, globs.

What is read (the suffix decides; a compression suffix is looked through first):

==================  ===========================================================================
``.txt`` ``.md``    one text per non-blank line (long lines split, see below)
``.jsonl``          one JSON object per line; ``text_field`` (default ``text``), optional
``.ndjson``         ``lang_field`` (default ``lang``) and ``unit``
``.parquet``        columns ``text_field``, optional ``lang_field`` and ``unit``, read in record
                    batches; a folder of Parquet shards is just a folder
``.arrow``          Arrow IPC (stream or file format) with the same columns: what HF
                    ``datasets.save_to_disk`` writes (``data-00000-of-00003.arrow``)
``.gz`` ``.zst``    any of the text formats above, compressed (``eng.jsonl.zst``,
``.zstd`` ``.bz2``  ``notes.txt.gz``): decompressed as a stream, never whole
FLORES              ``dev.eng_Latn``, Parquet with ``iso_639_3``: :mod:`embscope.corpus.flores`
==================  ===========================================================================

Which files a corpus path (file, folder, HF dataset folder, glob) means:
:mod:`embscope.corpus.listing`.

Bounded memory: text files are read line by line through a cap of :data:`MAX_LINE_BYTES` per
read; Parquet and Arrow files are read in record batches of at most :data:`BATCH_READ_BYTES` of
decompressed text (fewer rows when the rows are long), and their sizes are read from the file's
metadata before anything is decompressed (:mod:`embscope.formats.arrow_ipc` for Arrow). Arrow
batches are validated (offsets inside their buffers) before a value is read.

Bounded work: every file counts its decompressed bytes against ``ReadOptions.max_file_bytes`` and,
once past :data:`RATIO_FLOOR`, against ``max_ratio`` times its size on disk (a decompression bomb);
a file that reaches either has its rest skipped and counted (``files_cut_at_file_bytes``,
``files_over_ratio``). The limits and the options that raise them: :mod:`embscope.limits`.

Bad input is never silently dropped. :class:`FileIssues` collects, per file, the count of:

- ``invalid_utf8_lines``: a line (text or jsonl) that is not valid UTF-8;
- ``invalid_json_lines``: a jsonl line that does not parse;
- ``lone_surrogate_records``: a JSON record holding a lone UTF-16 surrogate (the escape
  ``"\\ud800"`` decodes to one): not Unicode text, and no tokenizer (nor a trainer's) encodes it;
- ``wrong_type_records``: a jsonl line that is not an object, or whose text field is not a
  string; a Parquet/Arrow text column that is not a string type (every row counts);
- ``missing_text_records``: a jsonl object without the text field, a null text in Parquet/Arrow;
- ``empty_text_records``: a jsonl/Parquet/Arrow text that is empty or only whitespace;
- ``jsonl_records_over_1MiB``: a jsonl line longer than :data:`MAX_LINE_BYTES` (cannot be parsed
  in pieces); ``long_line_pieces_split``: a text line or Parquet/Arrow text cut into pieces
  (kept, not dropped);
- ``files_without_text_field``, ``binary_files``, ``empty_files``, ``unreadable_files``,
  ``corrupt_compressed_files`` (a truncated ``.gz``: the records read before the damage are
  kept), ``invalid_arrow_batches`` (offsets outside their buffers: never read);
- ``files_cut_at_file_bytes``, ``files_over_ratio``: files whose rest was skipped at a limit;
  ``files_past_corpus_bytes`` (:mod:`~embscope.corpus.stream`): files not read at all;
- ``symlinks_outside_root``: a link inside a corpus folder that points outside it (not followed);
- ``json_records_over_1MiB``, ``table_records_over_1MiB``: a training-data record (read whole, not
  split) past :data:`MAX_LINE_BYTES` in a ``.json`` file or a Parquet/Arrow row
  (:mod:`~embscope.corpus.records`).
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from embscope.corpus import flores
from embscope.formats.json_stream import SURROGATE
from embscope.limits import Limits

#: longest text read at once: longer lines are split (text) or skipped (jsonl). 1 MiB is far
#: above any natural paragraph and keeps one read's memory small.
MAX_LINE_BYTES = 1 << 20
#: bytes sniffed for NUL (binary files)
SNIFF_BYTES = 8 << 10
#: Parquet/Arrow rows per record batch read
ROWS_PER_READ = 1024
#: decompressed text bytes turned into Python strings at once (Parquet/Arrow): long rows mean
#: fewer rows per read, so 1,024 rows of 1 MiB never sit in memory together
BATCH_READ_BYTES = 16 << 20
#: decompressed bytes a file may give before the compression ratio is checked: small files of
#: repetitive text compress far better than ``max_ratio`` and are no danger
RATIO_FLOOR = 4 << 20

TEXT_FORMATS = {".txt": "text", ".md": "text", ".jsonl": "jsonl", ".ndjson": "jsonl"}
TABLE_FORMATS = {".parquet": "parquet", ".arrow": "arrow"}
COMPRESSIONS = {".gz": "gz", ".zst": "zst", ".zstd": "zst", ".bz2": "bz2"}
#: what the reader reads, for messages
READABLE = ".txt, .md, .jsonl, .parquet, .arrow (optionally .gz/.zst/.bz2)"


@dataclass
class FileIssues:
    """Bad records and skipped files: totals and the same counts per file."""

    totals: Counter = field(default_factory=Counter)
    per_file: dict[str, Counter] = field(default_factory=dict)
    #: decompressed bytes read from the files (kept or not): what the per-run limit counts
    bytes_read: int = 0

    def add(self, path: str | Path, reason: str, n: int = 1) -> None:
        self.totals[reason] += n
        self.per_file.setdefault(str(path), Counter())[reason] += n

    def update(self, other: "FileIssues") -> None:
        self.totals.update(other.totals)
        self.bytes_read += other.bytes_read
        for path, c in other.per_file.items():
            self.per_file.setdefault(path, Counter()).update(c)


@dataclass(frozen=True)
class ReadOptions:
    """Field names of record formats (jsonl keys, Parquet/Arrow columns) and the reading limits."""

    text_field: str = "text"
    lang_field: str | None = "lang"  # None: never read a language from the records
    unit_field: str | None = "unit"
    max_file_bytes: int = Limits.file_bytes  # decompressed bytes read per file
    max_corpus_bytes: int = Limits.corpus_bytes  # decompressed bytes read per pass
    max_ratio: int = Limits.ratio  # decompressed / on-disk bytes of a file (past RATIO_FLOOR)
    nfc: bool = True  # texts read in Unicode NFC (embscope.corpus.stream), the non-NFC ones counted


class _Meter:
    """Decompressed bytes of one file against its limits (:class:`ReadOptions`)."""

    def __init__(self, file: "SourceFile", opts: ReadOptions, issues: "FileIssues"):
        self.file, self.opts, self.issues = file, opts, issues
        self.n = 0
        self.stopped: str | None = None  # the limit that stopped the file
        try:
            self.disk = max(1, os.path.getsize(file.path))
        except OSError:
            self.disk = 1

    def allows(self, nbytes: int) -> bool:
        """Count ``nbytes`` more; False (counted once) when the file passes a limit."""
        if self.stopped:
            return False
        n = self.n + nbytes
        if n > self.opts.max_file_bytes:
            self.stopped = "files_cut_at_file_bytes"
        elif n > RATIO_FLOOR and n > self.opts.max_ratio * self.disk:
            self.stopped = "files_over_ratio"
        if self.stopped:
            self.issues.add(self.file.path, self.stopped)
            return False
        self.n = n
        self.issues.bytes_read += nbytes
        return True


@dataclass(frozen=True)
class SourceFile:
    """One readable file, in corpus order."""

    path: str
    root: str  # the corpus path it was found under (a folder, or the file itself)
    fmt: str  # text | jsonl | parquet | arrow
    compression: str | None  # gz | zst | bz2 | None


def open_binary(file: SourceFile):
    """A binary stream of the file's decompressed bytes (caller closes it)."""
    if file.compression == "gz":
        return gzip.open(file.path, "rb")
    if file.compression == "bz2":
        return bz2.open(file.path, "rb")
    if file.compression == "zst":
        import zstandard

        raw = open(file.path, "rb")
        reader = zstandard.ZstdDecompressor().stream_reader(raw, closefd=True)
        return io.BufferedReader(reader, buffer_size=1 << 16)
    return open(file.path, "rb")


def sniff(file: SourceFile, issues: FileIssues) -> bool:
    """False (and counted) for empty, binary, unreadable or undecompressable files."""
    try:
        with open_binary(file) as f:
            head = f.read(SNIFF_BYTES)
    except Exception as e:  # OSError, EOFError, zstandard.ZstdError
        if not _read_error(e):
            raise
        issues.add(file.path, "corrupt_compressed_files" if file.compression else "unreadable_files")
        return False
    if not head:
        issues.add(file.path, "empty_files")
        return False
    if file.fmt in ("text", "jsonl", "flores") and b"\x00" in head:
        issues.add(file.path, "binary_files")
        return False
    return True


def _read_error(e: Exception) -> bool:
    """An error of reading or decompressing a file (not a bug): count it, do not raise."""
    return isinstance(e, (OSError, EOFError)) or type(e).__name__ == "ZstdError"


def split_utf8(data: bytes) -> tuple[bytes, bytes]:
    """Split ``data`` before a trailing incomplete UTF-8 sequence: ``(complete, rest)``."""
    cut = len(data)
    for k in range(1, min(4, len(data)) + 1):
        b = data[-k]
        if b & 0xC0 != 0x80:  # a lead byte (or ASCII)
            need = 1 if b < 0x80 else 2 if b >> 5 == 0b110 else 3 if b >> 4 == 0b1110 else 4
            cut = len(data) - k if need > k else len(data)
            break
    return data[:cut], data[cut:]


def _lines(file: SourceFile, issues: FileIssues, opts: ReadOptions | None = None) -> Iterator[str]:
    """Decoded lines of a text/jsonl file; long lines split (text) or skipped (jsonl); the file
    stops at its limits (:class:`_Meter`)."""
    jsonl = file.fmt == "jsonl"
    meter = _Meter(file, opts or ReadOptions(), issues)
    try:
        with open_binary(file) as f:
            carry = b""
            while True:
                if not carry and not _skip_blank_lines(f, meter):
                    break
                raw = f.readline(MAX_LINE_BYTES)
                if not raw or not meter.allows(len(raw)):
                    break
                if not raw.endswith(b"\n") and len(raw) >= MAX_LINE_BYTES:
                    if jsonl:  # drain the record and skip it
                        while raw and not raw.endswith(b"\n"):
                            raw = f.readline(MAX_LINE_BYTES)
                            if not meter.allows(len(raw)):
                                return
                        issues.add(file.path, "jsonl_records_over_1MiB")
                        continue
                    issues.add(file.path, "long_line_pieces_split")
                    raw, carry = split_utf8(carry + raw)
                else:
                    raw, carry = carry + raw, b""
                try:
                    yield raw.decode("utf-8")
                except UnicodeDecodeError:
                    issues.add(file.path, "invalid_utf8_lines")
    except Exception as e:  # a truncated .gz/.bz2 (EOFError), a damaged zstd frame, an I/O error
        if not _read_error(e):
            raise
        issues.add(file.path, "corrupt_compressed_files" if file.compression else "unreadable_files")


def _skip_blank_lines(f, meter: _Meter) -> bool:
    """At a line start: consume the run of blank lines ahead in one read (a file of a billion
    newlines would otherwise cost a billion ``readline`` calls). False when the meter stops."""
    peek = getattr(f, "peek", None)
    while peek is not None:
        head = peek(1 << 16)[:1 << 16]
        blank = len(head) - len(head.lstrip(b" \t\r\n"))
        cut = head.rfind(b"\n", 0, blank) + 1  # whole blank lines only: a line's own indent stays
        if not cut:
            return True
        f.read(cut)
        if not meter.allows(cut):
            return False
    return True


def _jsonl_records(file: SourceFile, opts: ReadOptions, issues: FileIssues):
    for line in _lines(file, issues, opts):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: a line nested thousands deep
            issues.add(file.path, "invalid_json_lines")
            continue
        if not isinstance(rec, dict):
            issues.add(file.path, "wrong_type_records")
            continue
        text = rec.get(opts.text_field)
        if text is None:
            issues.add(file.path, "missing_text_records")
            continue
        if not isinstance(text, str):
            issues.add(file.path, "wrong_type_records")
            continue
        if not text.strip():
            issues.add(file.path, "empty_text_records")
            continue
        if SURROGATE.search(text):
            issues.add(file.path, "lone_surrogate_records")
            continue
        lang = rec.get(opts.lang_field) if opts.lang_field else None
        unit = rec.get(opts.unit_field) if opts.unit_field else None
        yield text, lang if isinstance(lang, str) and lang else None, _unit(unit, file, issues)


def _unit(unit, file: SourceFile, issues: FileIssues):
    """An alignment key must be a string or an integer (a dict key); anything else is dropped, counted."""
    if unit is None or (isinstance(unit, (str, int)) and not isinstance(unit, bool)):
        return unit
    issues.add(file.path, "wrong_type_units")
    return None


def _parquet_batches(file: SourceFile, columns_of, meter: _Meter, issues: FileIssues):
    """Record batches of a Parquet file, row group by row group; each group's decompressed size
    (from the footer) is charged to ``meter`` before it is read, and long rows are read fewer at a
    time. Text columns are read as dictionaries, so repeated values are not multiplied before
    :func:`_texts_of` measures them."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(file.path)
    cols = columns_of(pf.schema_arrow)
    if cols is None:
        return
    md = pf.metadata
    text_col = cols[0]
    dict_cols = [c for c in cols if _is_string(pf.schema_arrow.field(c).type)]
    pf = pq.ParquetFile(file.path, read_dictionary=dict_cols)
    for i in range(md.num_row_groups):
        rg = md.row_group(i)
        size = sum(rg.column(j).total_uncompressed_size for j in range(rg.num_columns)
                   if rg.column(j).path_in_schema.split(".")[0] in cols)
        if not meter.allows(size):
            return
        text_bytes = sum(rg.column(j).total_uncompressed_size for j in range(rg.num_columns)
                         if rg.column(j).path_in_schema.split(".")[0] == text_col)
        rows = max(1, min(ROWS_PER_READ, BATCH_READ_BYTES * max(1, rg.num_rows) // max(1, text_bytes)))
        yield from pf.iter_batches(batch_size=rows, row_groups=[i], columns=cols)


def _arrow_batches(file: SourceFile, columns_of, meter: _Meter, issues: FileIssues):
    """Record batches of an Arrow IPC file (stream or file format), read from a plain file handle
    (never memory-mapped: a damaged offset cannot fault on a page past the end). The batches'
    decompressed sizes are read from their metadata first (:func:`embscope.formats.arrow_ipc.batch_sizes`);
    each batch is validated in full before it is used."""
    import pyarrow as pa

    from embscope.formats.arrow_ipc import IpcError, batch_sizes

    try:
        with pa.OSFile(file.path, "r") as src:
            sizes = [n for kind, n in batch_sizes(src) if kind == "record batch"]
    except IpcError:
        issues.add(file.path, "invalid_arrow_batches")
        return
    with pa.OSFile(file.path, "r") as src:
        try:
            reader = pa.ipc.open_stream(src)
            batches = iter(reader)
        except pa.ArrowInvalid:
            src.seek(0)
            reader = pa.ipc.open_file(src)
            batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
        cols = columns_of(reader.schema)
        if cols is None:
            return
        for size in sizes:
            if not meter.allows(size):
                return
            try:
                rb = next(batches)
            except StopIteration:
                return
            rb = rb.select(cols)
            try:
                rb.validate(full=True)
            except pa.ArrowInvalid:
                issues.add(file.path, "invalid_arrow_batches")
                continue
            yield rb


def _is_string(t) -> bool:
    import pyarrow as pa

    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _texts_of(rb, field_name: str, meter: _Meter):
    """``(start, rows)`` slices of a record batch whose texts, once decoded, hold at most
    :data:`BATCH_READ_BYTES` (a single longer value is a slice of its own); each slice's bytes
    are charged to ``meter`` (a dictionary column's repeats are real bytes once decoded)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    col = rb.column(field_name)
    if pa.types.is_dictionary(col.type):
        lens = pc.take(pc.binary_length(col.dictionary), col.indices)
        decoded_extra = True
    else:
        lens = pc.binary_length(col)
        decoded_extra = False
    lens = lens.fill_null(0).to_numpy(zero_copy_only=False)
    start = 0
    n = len(lens)
    while start < n:
        end, size = start, 0
        while end < n and (end == start or size + int(lens[end]) <= BATCH_READ_BYTES):
            size += int(lens[end])
            end += 1
        if decoded_extra and not meter.allows(size):
            return
        yield start, end - start
        start = end


def _table_records(file: SourceFile, opts: ReadOptions, issues: FileIssues):
    import pyarrow as pa

    text_ok = [True]
    form: dict = {}  # a FLORES table: its (iso, script) → id, the unit column and the split

    def columns_of(schema):
        names = schema.names
        if opts.text_field not in names:
            issues.add(file.path, "files_without_text_field")
            return None
        t = schema.field(opts.text_field).type
        text_ok[0] = _is_string(t) or (pa.types.is_dictionary(t) and _is_string(t.value_type))
        if file.fmt == "parquet" and flores.is_table(names):
            form.update(flores.table_form(file.path, names, opts))
            return [opts.text_field, *flores.ISO_COLUMNS] + ([form["unit"]] if form["unit"] else [])
        return [opts.text_field] + [c for c in (opts.lang_field, opts.unit_field) if c and c in names]

    meter = _Meter(file, opts, issues)
    batches = (_parquet_batches if file.fmt == "parquet" else _arrow_batches)(file, columns_of, meter, issues)
    piece = MAX_LINE_BYTES // 4  # characters: at most 4 bytes each
    try:
        for rb in batches:
            if meter.stopped:
                break
            if not text_ok[0]:
                issues.add(file.path, "wrong_type_records", rb.num_rows)
                continue
            for start, rows in _texts_of(rb, opts.text_field, meter):
                d = _pydict(rb.slice(start, rows), file, issues)
                if d is None:
                    continue
                langs = d.get(opts.lang_field) if opts.lang_field else None
                units = d.get(opts.unit_field) if opts.unit_field else None
                if form:  # FLORES: language from the two columns, unit split-qualified
                    langs, units = flores.table_rows(d, form)
                langs = langs or [None] * rows
                units = units or [None] * rows
                for text, lang, unit in zip(d[opts.text_field], langs, units):
                    if text is None:
                        issues.add(file.path, "missing_text_records")
                        continue
                    if not text.strip():
                        issues.add(file.path, "empty_text_records")
                        continue
                    lang = lang if isinstance(lang, str) and lang else None
                    if len(text) > piece and len(text.encode("utf-8")) > MAX_LINE_BYTES:
                        issues.add(file.path, "long_line_pieces_split")
                        for i in range(0, len(text), piece):
                            yield text[i:i + piece], lang, None
                        continue
                    yield text, lang, _unit(unit, file, issues)
    except (OSError, pa.ArrowException):
        issues.add(file.path, "unreadable_files")


def _pydict(rb, file: SourceFile, issues: FileIssues) -> dict | None:
    """``rb.to_pydict()``; rows with invalid UTF-8 in a string column are dropped and counted."""
    try:
        return rb.to_pydict()
    except UnicodeDecodeError:
        pass
    rows: dict[str, list] = {name: [] for name in rb.schema.names}
    for i in range(rb.num_rows):
        try:
            row = rb.slice(i, 1).to_pydict()
        except UnicodeDecodeError:
            issues.add(file.path, "invalid_utf8_records")
            continue
        for name in rows:
            rows[name] += row[name]
    return rows


def iter_records(file: SourceFile, opts: ReadOptions, issues: FileIssues):
    """``(text, lang or None, unit or None)`` per good record of ``file``, in file order.

    Call :func:`sniff` first; bad records go into ``issues`` (see the module docstring).
    """
    if file.fmt in ("parquet", "arrow"):
        yield from _table_records(file, opts, issues)
    elif file.fmt == "jsonl":
        yield from _jsonl_records(file, opts, issues)
    elif file.fmt == "flores":  # a FLORES release file: one aligned sentence a line
        yield from flores.iter_lines(file.path, lambda: open_binary(file), _Meter(file, opts, issues).allows, issues.add,
                              _read_error, MAX_LINE_BYTES)
    else:
        for line in _lines(file, issues, opts):
            line = line.rstrip("\r\n")
            if line.strip():
                yield line, None, None
