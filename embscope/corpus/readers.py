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
==================  ===========================================================================

A folder is walked recursively in sorted order, hidden entries skipped. A folder saved by HF
``datasets`` (``state.json`` next to ``dataset_info.json``) is read through the file list in its
``state.json`` (``_data_files``), so cache files that ``Dataset.map`` leaves beside the data
(``cache-*.arrow``) are not read twice; a ``DatasetDict`` folder (``dataset_dict.json``) is one
such folder per split. The ``datasets`` package is not needed: the files are read with pyarrow.

A path with ``*``, ``?`` or ``[`` is a glob (``data/**/*.jsonl.zst``; ``**`` recurses), expanded
in sorted order. Several paths may be given; their files are read in the order given.

Bounded memory: text files are read line by line through a cap of :data:`MAX_LINE_BYTES` per
read; Parquet and Arrow files are read one record batch at a time (Arrow files are memory-mapped).

Bad input is never silently dropped. :class:`FileIssues` collects, per file, the count of:

- ``invalid_utf8_lines``: a line (text or jsonl) that is not valid UTF-8;
- ``invalid_json_lines``: a jsonl line that does not parse;
- ``wrong_type_records``: a jsonl line that is not an object, or whose text field is not a
  string; a Parquet/Arrow text column that is not a string type (every row counts);
- ``missing_text_records``: a jsonl object without the text field, a null text in Parquet/Arrow;
- ``empty_text_records``: a jsonl/Parquet/Arrow text that is empty or only whitespace;
- ``jsonl_records_over_1MiB``: a jsonl line longer than :data:`MAX_LINE_BYTES` (cannot be parsed
  in pieces); ``long_line_pieces_split``: a text line or Parquet/Arrow text cut into pieces
  (kept, not dropped);
- ``files_without_text_field``, ``binary_files``, ``empty_files``, ``unreadable_files``,
  ``corrupt_compressed_files`` (a truncated ``.gz``: the records read before the damage are
  kept).
"""

from __future__ import annotations

import bz2
import glob
import gzip
import io
import json
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

#: longest text read at once: longer lines are split (text) or skipped (jsonl). 1 MiB is far
#: above any natural paragraph and keeps one read's memory small.
MAX_LINE_BYTES = 1 << 20
#: bytes sniffed for NUL (binary files)
SNIFF_BYTES = 8 << 10
#: Parquet/Arrow rows per record batch read
ROWS_PER_READ = 1024

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

    def add(self, path: str | Path, reason: str, n: int = 1) -> None:
        self.totals[reason] += n
        self.per_file.setdefault(str(path), Counter())[reason] += n

    def update(self, other: "FileIssues") -> None:
        self.totals.update(other.totals)
        for path, c in other.per_file.items():
            self.per_file.setdefault(path, Counter()).update(c)


@dataclass(frozen=True)
class ReadOptions:
    """Field names of record formats (jsonl keys, Parquet/Arrow columns)."""

    text_field: str = "text"
    lang_field: str | None = "lang"  # None: never read a language from the records
    unit_field: str | None = "unit"


@dataclass(frozen=True)
class SourceFile:
    """One readable file, in corpus order."""

    path: str
    root: str  # the corpus path it was found under (a folder, or the file itself)
    fmt: str  # text | jsonl | parquet | arrow
    compression: str | None  # gz | zst | bz2 | None


def classify(path: Path) -> tuple[str | None, str | None]:
    """``(format, compression)`` from the suffixes: ``eng.jsonl.zst`` → ``("jsonl", "zst")``."""
    suffixes = [s.lower() for s in path.suffixes]
    comp = COMPRESSIONS.get(suffixes[-1]) if suffixes else None
    if comp:
        suffixes = suffixes[:-1]
        return (TEXT_FORMATS.get(suffixes[-1]) if suffixes else None), comp
    last = suffixes[-1] if suffixes else ""
    return TEXT_FORMATS.get(last) or TABLE_FORMATS.get(last), None


def stem(path: str | Path) -> str:
    """File name without format and compression suffixes: ``eng.jsonl.gz`` → ``eng``."""
    name = Path(path).name
    for _ in range(2):
        p = Path(name)
        if p.suffix.lower() in COMPRESSIONS or p.suffix.lower() in TEXT_FORMATS or p.suffix.lower() in TABLE_FORMATS:
            name = p.stem
    return name


def is_glob(path: str) -> bool:
    return any(c in path for c in "*?[")


def _hf_data_files(folder: Path) -> list[Path] | None:
    """The data files of a folder saved by ``datasets.save_to_disk``, or None when it is not one."""
    state = folder / "state.json"
    if not state.is_file():
        return None
    try:
        meta = json.loads(state.read_text(encoding="utf-8"))
        names = [d["filename"] for d in meta.get("_data_files", [])]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return [folder / n for n in names if isinstance(n, str) and "/" not in n and "\\" not in n]


def _walk(root: Path, out: list[SourceFile], ignored: list[str]) -> None:
    hf_dirs: dict[Path, list[Path]] = {}
    emitted: set[Path] = set()
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).parts
        if any(part.startswith(".") for part in rel) or not p.is_file():
            continue
        folder = p.parent
        if folder not in hf_dirs:
            hf_dirs[folder] = _hf_data_files(folder) or []
        listed = hf_dirs[folder]
        if listed:  # an HF dataset folder: only its listed data files, in listed order
            if folder not in emitted:
                emitted.add(folder)
                out.extend(SourceFile(str(f), str(root), "arrow", None) for f in listed if f.is_file())
            elif p not in listed and p.suffix.lower() not in {".json"}:
                ignored.append(str(p))
            continue
        fmt, comp = classify(p)
        if fmt:
            out.append(SourceFile(str(p), str(root), fmt, comp))
        elif p.name not in {"dataset_info.json", "state.json", "dataset_dict.json"}:
            ignored.append(str(p))


def list_files(paths, ignored: list[str] | None = None) -> list[SourceFile]:
    """Expand corpus paths (files, folders, globs; one or a list) into readable files, in order.

    ``ignored`` collects files with suffixes the reader does not read. A path that matches
    nothing is returned as no files; the caller decides whether that is an error.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    ignored = ignored if ignored is not None else []
    out: list[SourceFile] = []
    for raw in paths:
        text = os.path.expanduser(str(raw))
        matches = sorted(glob.glob(text, recursive=True)) if is_glob(text) else [text]
        for m in matches:
            p = Path(m)
            if p.is_dir():
                _walk(p, out, ignored)
            elif p.is_file():
                fmt, comp = classify(p)
                if fmt:
                    out.append(SourceFile(str(p), str(p) if not is_glob(text) else str(p.parent), fmt, comp))
                else:
                    ignored.append(str(p))
    seen: set[str] = set()
    return [f for f in out if not (f.path in seen or seen.add(f.path))]


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
    if file.fmt in ("text", "jsonl") and b"\x00" in head:
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


def _lines(file: SourceFile, issues: FileIssues) -> Iterator[str]:
    """Decoded lines of a text/jsonl file; long lines split (text) or skipped (jsonl)."""
    jsonl = file.fmt == "jsonl"
    try:
        with open_binary(file) as f:
            carry = b""
            while True:
                raw = f.readline(MAX_LINE_BYTES)
                if not raw:
                    break
                if not raw.endswith(b"\n") and len(raw) >= MAX_LINE_BYTES:
                    if jsonl:  # drain the record and skip it
                        while raw and not raw.endswith(b"\n"):
                            raw = f.readline(MAX_LINE_BYTES)
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


def _jsonl_records(file: SourceFile, opts: ReadOptions, issues: FileIssues):
    for line in _lines(file, issues):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
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
        lang = rec.get(opts.lang_field) if opts.lang_field else None
        unit = rec.get(opts.unit_field) if opts.unit_field else None
        yield text, lang if isinstance(lang, str) and lang else None, unit


def _table_batches(file: SourceFile, columns_of, issues: FileIssues):
    """Record batches of a Parquet or Arrow file; ``columns_of(names)`` picks the columns."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if file.fmt == "parquet":
            pf = pq.ParquetFile(file.path)
            cols = columns_of(pf.schema_arrow)
            if cols is None:
                return
            yield from pf.iter_batches(batch_size=ROWS_PER_READ, columns=cols)
            return
        source = pa.memory_map(file.path, "r")
        try:
            reader = pa.ipc.open_stream(source)
        except pa.ArrowInvalid:
            reader = pa.ipc.open_file(source)
            cols = columns_of(reader.schema)
            if cols is None:
                return
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i).select(cols)
            return
        cols = columns_of(reader.schema)
        if cols is None:
            return
        for rb in reader:
            yield rb.select(cols)
    except (OSError, pa.ArrowException):
        issues.add(file.path, "unreadable_files")


def _table_records(file: SourceFile, opts: ReadOptions, issues: FileIssues):
    import pyarrow as pa

    text_ok = [True]

    def columns_of(schema):
        names = schema.names
        if opts.text_field not in names:
            issues.add(file.path, "files_without_text_field")
            return None
        t = schema.field(opts.text_field).type
        text_ok[0] = pa.types.is_string(t) or pa.types.is_large_string(t)
        return [opts.text_field] + [c for c in (opts.lang_field, opts.unit_field) if c and c in names]

    piece = MAX_LINE_BYTES // 4  # characters: at most 4 bytes each
    for rb in _table_batches(file, columns_of, issues):
        if not text_ok[0]:
            issues.add(file.path, "wrong_type_records", rb.num_rows)
            continue
        d = rb.to_pydict()
        langs = d.get(opts.lang_field) if opts.lang_field else None
        units = d.get(opts.unit_field) if opts.unit_field else None
        langs = langs or [None] * rb.num_rows
        units = units or [None] * rb.num_rows
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
            yield text, lang, unit


def iter_records(file: SourceFile, opts: ReadOptions, issues: FileIssues):
    """``(text, lang or None, unit or None)`` per good record of ``file``, in file order.

    Call :func:`sniff` first; bad records go into ``issues`` (see the module docstring).
    """
    if file.fmt in ("parquet", "arrow"):
        yield from _table_records(file, opts, issues)
    elif file.fmt == "jsonl":
        yield from _jsonl_records(file, opts, issues)
    else:
        for line in _lines(file, issues):
            line = line.rstrip("\r\n")
            if line.strip():
                yield line, None, None
