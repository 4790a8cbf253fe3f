"""Read a corpus as a stream of per-language batches of texts, in bounded memory.

A corpus is a file or a folder (walked recursively, sorted, hidden entries skipped) of:

- ``.txt``, ``.md``: one text per non-blank line;
- ``.jsonl``: one JSON object per line, field ``text``; optional ``lang`` and ``unit`` (the
  alignment key of parallel text: records of different languages with the same ``unit`` say the
  same thing, e.g. UDHR article numbers in ``corpora/udhr``);
- ``.parquet``: column ``text``, optional ``lang`` and ``unit``, read in record batches.

Other extensions are ignored (counted in the report, e.g. ``languages.json``).

Language of a text, first that applies:

1. the jsonl ``lang`` field / parquet ``lang`` column;
2. the name of the file's folder below the corpus root when it looks like a language code;
3. the file name without extension when it looks like a language code (``eng.txt``,
   ``cmn_hans.jsonl``);
4. a guess from the writing system of the file's first 64 KiB: ``und_<script>`` with the ISO
   15924 code in lower case (Latin text → ``und_latn``, Cyrillic → ``und_cyrl``, Han →
   ``und_hani``), where ``und`` is ISO 639's "undetermined".

"Looks like a language code": 2–3 lower-case letters, optionally ``_``/``-`` and a 4-letter script
or 2-letter region (``eng``, ``en``, ``cmn_hans``, ``pt-BR``), and not one of a few common file
words (``all``, ``doc``, ``out``, …).

Bounded memory: files are read line by line with a cap of :data:`MAX_LINE_BYTES` per read, texts
are yielded in batches of at most ``batch_size`` texts and :data:`BATCH_BYTES` bytes, and
``sample_bytes`` caps the bytes read per language. A 1 GB corpus is never held whole.

Bad input never crashes the reader; it is counted in :class:`CorpusReport` and summed up in one
:class:`CorpusWarning` at the end:

- binary files (a NUL byte in the first 8 KiB), empty files, unreadable files: skipped;
- lines that are not valid UTF-8: skipped;
- text lines longer than :data:`MAX_LINE_BYTES`: **split** into pieces of at most that size (at a
  UTF-8 character boundary), so the text is kept and memory stays bounded; jsonl records longer
  than that are skipped (they cannot be parsed in pieces);
- jsonl lines that are not JSON objects with a string ``text``: skipped.

A path that yields no text at all raises :class:`~embscope.errors.CorpusError`.

>>> from pathlib import Path
>>> for batch in iter_corpus(Path("corpora/udhr/eng.jsonl")):  # doctest: +SKIP
...     print(batch.lang, len(batch.texts), batch.units[:3])
eng 31 [0, 1, 2]
"""

from __future__ import annotations

import json
import re
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from embscope.errors import CorpusError

#: longest text read at once: longer lines are split (text) or skipped (jsonl). 1 MiB is far
#: above any natural paragraph and keeps one read's memory small.
MAX_LINE_BYTES = 1 << 20
#: a batch is flushed when its texts reach this many bytes (bounds memory with long lines)
BATCH_BYTES = 4 << 20
#: bytes sniffed for NUL (binary) and for the script guess
SNIFF_BYTES = 8 << 10
GUESS_BYTES = 64 << 10
TEXT_SUFFIXES = {".txt", ".md"}
SUFFIXES = TEXT_SUFFIXES | {".jsonl", ".parquet"}

_LANG_CODE = re.compile(r"^[a-z]{2,3}(?:[_-](?:[A-Za-z]{4}|[A-Za-z]{2}))?$")
#: 2–3 letter file/folder names that are common words, not language codes
_NOT_LANG = {"all", "doc", "docs", "out", "new", "old", "raw", "tmp", "dev", "val", "src", "bin",
             "lib", "log", "var", "run", "set", "web", "www", "img", "etc", "misc"}
#: Unicode script name → ISO 15924 code (for ``und_<script>``)
_ISO15924 = {"Latin": "latn", "Cyrillic": "cyrl", "Greek": "grek", "Arabic": "arab",
             "Hebrew": "hebr", "Han": "hani", "Hiragana": "jpan", "Katakana": "jpan",
             "Hangul": "hang", "Devanagari": "deva", "Bengali": "beng", "Gurmukhi": "guru",
             "Gujarati": "gujr", "Oriya": "orya", "Tamil": "taml", "Telugu": "telu",
             "Kannada": "knda", "Malayalam": "mlym", "Sinhala": "sinh", "Thai": "thai",
             "Lao": "laoo", "Tibetan": "tibt", "Myanmar": "mymr", "Georgian": "geor",
             "Armenian": "armn", "Ethiopic": "ethi", "Khmer": "khmr", "Mongolian": "mong"}


class CorpusWarning(UserWarning):
    """Some input was skipped or split; the message counts what."""


@dataclass
class Batch:
    """A run of texts from one file, all in one language."""

    lang: str  # language id (ISO 639-3, maybe with a script suffix, or ``und_<script>``)
    texts: list[str]  # the texts, in file order
    units: list[int | str | None]  # alignment key per text (jsonl/parquet ``unit``), else None
    source: str  # file the texts come from


@dataclass
class CorpusReport:
    """What was read and what was skipped. Fill it by passing it to :func:`iter_corpus`."""

    files_read: int = 0  # files that gave at least one text
    texts: int = 0  # texts yielded
    bytes: int = 0  # UTF-8 bytes of the texts yielded
    skipped: Counter = field(default_factory=Counter)  # reason → count (see module docstring)
    ignored_files: int = 0  # files with an extension the reader does not read
    capped_languages: list[str] = field(default_factory=list)  # languages cut by sample_bytes
    lang_source: dict[str, str] = field(default_factory=dict)  # lang → how it was decided

    def summary(self) -> str:
        """One line: ``skipped 1 binary file, 3 invalid-UTF-8 lines; split 2 long lines``."""
        parts = [f"{n} {reason.replace('_', ' ')}" for reason, n in sorted(self.skipped.items())]
        return ", ".join(parts)

    def as_dict(self) -> dict:
        return {"files_read": self.files_read, "texts": self.texts, "bytes": self.bytes,
                "skipped": dict(sorted(self.skipped.items())), "ignored_files": self.ignored_files,
                "capped_languages": self.capped_languages, "lang_source": self.lang_source}


def looks_like_lang(name: str) -> bool:
    """``eng``, ``cmn_hans``, ``pt-BR`` → True; ``notes``, ``doc`` → False."""
    return bool(_LANG_CODE.match(name)) and name.lower() not in _NOT_LANG


def guess_lang(text: str) -> str:
    """``und_<iso15924>`` from the dominant script of ``text`` (``und`` when it has no letters).

    >>> guess_lang("Hello there"), guess_lang("Привет"), guess_lang("12 34")
    ('und_latn', 'und_cyrl', 'und')
    """
    from embscope.languages.script import dominant_script

    script = dominant_script(text)
    if script == "none":
        return "und"
    return "und_" + _ISO15924.get(script, script.lower()[:4])


def _files(root: Path, report: CorpusReport) -> list[Path]:
    if root.is_file():
        return [root]
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).parts
        if any(part.startswith(".") for part in rel) or not p.is_file():
            continue
        if p.suffix.lower() in SUFFIXES:
            out.append(p)
        else:
            report.ignored_files += 1
    return out


def _path_lang(root: Path, path: Path) -> tuple[str | None, str]:
    if root.is_dir() and path.parent != root and looks_like_lang(path.parent.name):
        return path.parent.name, "folder name"
    if looks_like_lang(path.stem):
        return path.stem, "file name"
    return None, ""


def _split_utf8(data: bytes) -> tuple[bytes, bytes]:
    """Split ``data`` before a trailing incomplete UTF-8 sequence: ``(complete, rest)``."""
    cut = len(data)
    for k in range(1, min(4, len(data)) + 1):
        b = data[-k]
        if b & 0xC0 != 0x80:  # a lead byte (or ASCII)
            need = 1 if b < 0x80 else 2 if b >> 5 == 0b110 else 3 if b >> 4 == 0b1110 else 4
            cut = len(data) - k if need > k else len(data)
            break
    return data[:cut], data[cut:]


def _lines(path: Path, report: CorpusReport, *, jsonl: bool) -> Iterator[str]:
    """Decoded lines of a text file; long lines split (text) or skipped (jsonl), bad ones counted."""
    with path.open("rb") as f:
        carry = b""
        while True:
            raw = f.readline(MAX_LINE_BYTES)
            if not raw:
                break
            if not raw.endswith(b"\n") and len(raw) >= MAX_LINE_BYTES:
                # Part of a long line. jsonl: drain and skip; text: yield pieces.
                if jsonl:
                    while raw and not raw.endswith(b"\n"):
                        raw = f.readline(MAX_LINE_BYTES)
                    report.skipped["jsonl_records_over_1MiB"] += 1
                    continue
                report.skipped["long_line_pieces_split"] += 1
                raw, carry_next = _split_utf8(carry + raw)
                carry = carry_next
            else:
                raw, carry = carry + raw, b""
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError:
                report.skipped["invalid_utf8_lines"] += 1


def _records(path: Path, report: CorpusReport) -> Iterator[tuple[str, str | None, object]]:
    """``(text, lang or None, unit or None)`` per record of one file."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        yield from _parquet_records(path, report)
        return
    jsonl = suffix == ".jsonl"
    for line in _lines(path, report, jsonl=jsonl):
        if not jsonl:
            line = line.rstrip("\r\n")
            if line.strip():
                yield line, None, None
            continue
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            report.skipped["bad_jsonl_lines"] += 1
            continue
        text = rec.get("text") if isinstance(rec, dict) else None
        if not isinstance(text, str):
            report.skipped["bad_jsonl_lines"] += 1
            continue
        if text.strip():
            lang = rec.get("lang")
            yield text, lang if isinstance(lang, str) and lang else None, rec.get("unit")


def _parquet_records(path: Path, report: CorpusReport):
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception:
        report.skipped["unreadable_files"] += 1
        return
    names = set(pf.schema_arrow.names)
    if "text" not in names:
        report.skipped["parquet_files_without_text_column"] += 1
        return
    cols = ["text"] + [c for c in ("lang", "unit") if c in names]
    for rb in pf.iter_batches(batch_size=1024, columns=cols):
        d = rb.to_pydict()
        langs = d.get("lang") or [None] * rb.num_rows
        units = d.get("unit") or [None] * rb.num_rows
        for text, lang, unit in zip(d["text"], langs, units):
            if not isinstance(text, str) or not text.strip():
                continue
            if len(text) > MAX_LINE_BYTES // 4 and len(text.encode("utf-8")) > MAX_LINE_BYTES:
                report.skipped["long_line_pieces_split"] += 1
                for i in range(0, len(text), MAX_LINE_BYTES // 4):
                    yield text[i:i + MAX_LINE_BYTES // 4], lang, None
                continue
            yield text, lang, unit


def _sniff(path: Path, report: CorpusReport) -> bool:
    """False (and counted) for empty, binary or unreadable files."""
    try:
        with path.open("rb") as f:
            head = f.read(SNIFF_BYTES)
    except OSError:
        report.skipped["unreadable_files"] += 1
        return False
    if not head:
        report.skipped["empty_files"] += 1
        return False
    if path.suffix.lower() != ".parquet" and b"\x00" in head:
        report.skipped["binary_files"] += 1
        return False
    return True


def iter_corpus(path: str | Path, *, sample_bytes: int | None = None, batch_size: int = 512,
                report: CorpusReport | None = None) -> Iterator[Batch]:
    """Yield :class:`Batch` es of texts from ``path`` (file or folder), per file and language.

    Args:
        path: corpus file or folder (see the module docstring for formats and language rules).
        sample_bytes: read at most this many UTF-8 bytes of text per language (None: all).
        batch_size: most texts per batch (batches also stop at :data:`BATCH_BYTES`).
        report: filled with counts of what was read and skipped.

    Raises:
        CorpusError: the path does not exist or holds no usable text.
    """
    root = Path(path).expanduser()
    if not root.exists():
        raise CorpusError(f"corpus path {str(root)!r} does not exist; pass a folder or a "
                          ".txt/.md/.jsonl/.parquet file")
    report = report if report is not None else CorpusReport()
    used: Counter = Counter()  # bytes read per language
    yielded = 0
    for file in _files(root, report):
        if not _sniff(file, report):
            continue
        path_lang, how = _path_lang(root, file)
        guessed: str | None = None
        pending: list[tuple[str, str | None, object]] = []  # texts held until the guess is made
        file_texts = 0
        batch: Batch | None = None
        batch_bytes = 0

        def records():
            nonlocal guessed
            it = _records(file, report)
            if path_lang is None:
                # Look ahead up to GUESS_BYTES of text without a lang field to guess the script.
                size = 0
                for rec in it:
                    pending.append(rec)
                    if rec[1] is None:
                        size += len(rec[0])
                        if size >= GUESS_BYTES:
                            break
                sample = "\n".join(t for t, lang, _ in pending if lang is None)[:GUESS_BYTES]
                guessed = guess_lang(sample) if sample else None
                yield from pending
            yield from it

        for text, rec_lang, unit in records():
            if rec_lang:
                lang, src = rec_lang, "lang field"
            elif path_lang:
                lang, src = path_lang, how
            else:
                lang, src = guessed or "und", "script guess"
            report.lang_source.setdefault(lang, src)
            nbytes = len(text.encode("utf-8"))
            if sample_bytes is not None and used[lang] + nbytes > sample_bytes:
                if lang not in report.capped_languages:
                    report.capped_languages.append(lang)
                if rec_lang is None:
                    break  # the whole rest of this file is the same language
                continue
            used[lang] += nbytes
            if batch is not None and (batch.lang != lang or len(batch.texts) >= batch_size
                                      or batch_bytes + nbytes > BATCH_BYTES):
                yield batch
                batch, batch_bytes = None, 0
            if batch is None:
                batch = Batch(lang=lang, texts=[], units=[], source=str(file))
            batch.texts.append(text)
            batch.units.append(unit)
            batch_bytes += nbytes
            report.texts += 1
            report.bytes += nbytes
            file_texts += 1
        if batch is not None:
            yield batch
        if file_texts:
            report.files_read += 1
            yielded += file_texts
    if report.skipped:
        warnings.warn(CorpusWarning(f"corpus {root.name}: {report.summary()}"), stacklevel=2)
    if not yielded:
        why = f" (skipped: {report.summary()})" if report.skipped else ""
        raise CorpusError(f"corpus path {str(root)!r} holds no usable text{why}; pass .txt, .md, "
                          ".jsonl (field 'text') or .parquet (column 'text') files in UTF-8")
