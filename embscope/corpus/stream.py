"""Read a corpus as a stream of per-language batches of texts, in bounded memory.

A corpus is one or more paths: files, folders (walked recursively, sorted, hidden entries
skipped) or globs, of ``.txt``/``.md`` (one text per non-blank line), ``.jsonl`` (one object per
line, field ``text``), ``.parquet`` or ``.arrow`` (column ``text``), each optionally ``.gz``,
``.zst`` or ``.bz2`` compressed, and folders saved by HF ``datasets``. Formats, field options and
the bad-record counts are in :mod:`embscope.corpus.readers`. Records may carry ``lang`` and
``unit`` (the alignment key of parallel text: records of different languages with the same
``unit`` say the same thing, e.g. UDHR article numbers in ``corpora/udhr``). Other files are
ignored (counted in the report, e.g. ``languages.json``).

Language of a text, first that applies:

1. the record's ``lang`` field (``--lang-field`` names another);
2. the name of the file's folder below the corpus root when it looks like a language code;
3. the file name without its suffixes when it looks like a language code (``eng.txt``,
   ``cmn_hans.jsonl.zst``);
4. a guess from the writing system of the file's first 64 KiB: ``und_<script>`` with the ISO
   15924 code in lower case (Latin text → ``und_latn``, Cyrillic → ``und_cyrl``, Han →
   ``und_hani``), where ``und`` is ISO 639's "undetermined".

"Looks like a language code": 2–3 lower-case letters, optionally ``_``/``-`` and a 4-letter script
or 2-letter region (``eng``, ``en``, ``cmn_hans``, ``pt-BR``), and not one of a few common file
words (``all``, ``doc``, ``out``, …).

Bounded memory: records are streamed (see :mod:`~embscope.corpus.readers`), texts are yielded
in batches of at most ``batch_size`` texts and :data:`BATCH_BYTES` bytes, and a batch never spans
two files. A 1 GB corpus is never held whole.

Sampling (``sample_bytes``) is deterministic: per language, texts are taken in corpus order (files
in the order above, records in file order) while the language's total stays within
``sample_bytes``; a text that would pass it is skipped (a record with its own ``lang``: later,
shorter ones of that language may still fit) or ends the file (a file whose language comes from
its path). The same corpus and budget always give the same sample, on any engine.

Texts are read in Unicode normalization form NFC (``ReadOptions.nfc``): the same letter typed
precomposed (``ế``, one code point) or decomposed (``e`` + two combining marks, three) is one
text, so token counts and character counts do not depend on how a file was typed. A text that was
not NFC is counted (``nfc_normalized``, per file in ``nfc_per_file``) and a corpus holding any is
named in one :class:`CorpusWarning`: trainers read the file as it is, so the fix is to store it as
NFC. (Unicode Standard Annex #15; ``unicodedata.is_normalized`` answers quickly for text already
in NFC.)

Bad input never crashes the reader and is never dropped silently: it is counted in
:class:`CorpusRead` (``skipped`` totals, ``per_file`` counts) and summed up in one
:class:`CorpusWarning` at the end. A path that yields no text at all raises
:class:`~embscope.errors.CorpusError`.

:func:`read_texts` holds a bounded list of a corpus's texts, for the steps that need them in memory
(the flagged rows a corpus uses, tokenizer conformance tables), not for the streaming passes.

>>> from pathlib import Path
>>> for batch in iter_corpus(Path("corpora/udhr/eng.jsonl")):
...     print(batch.lang, len(batch.texts), batch.units[:3])
eng 31 [0, 1, 2]
"""

from __future__ import annotations

import functools
import re
import unicodedata
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from embscope.errors import CorpusError
from embscope.records import Record
from embscope.corpus.listing import is_glob, list_files, stem
from embscope.corpus.readers import (MAX_LINE_BYTES, READABLE, FileIssues, ReadOptions, SourceFile,
                                     iter_records, sniff)

__all__ = ["MAX_LINE_BYTES", "BATCH_BYTES", "Batch", "CorpusRead", "CorpusWarning", "ReadOptions",
           "corpus_files", "iter_corpus", "iter_file", "finish", "guess_lang", "looks_like_lang",
           "past_corpus_limit", "read_texts", "MAX_CORPUS_BYTES"]

#: a batch is flushed when its texts reach this many bytes (bounds memory with long lines)
BATCH_BYTES = 4 << 20
#: bytes of text looked at for the script guess
GUESS_BYTES = 64 << 10
#: most text held while looking ahead for that guess (a file whose first records all carry a
#: ``lang`` field has nothing to guess from: its later unlabelled records are ``und``)
LOOKAHEAD_BYTES = 4 << 20
#: languages listed in ``lang_source`` and ``capped_languages`` (a corpus with a million distinct
#: ``lang`` values would otherwise write a million entries into summary.json)
MAX_LISTED_LANGUAGES = 4096

_LANG_CODE = re.compile(r"^[a-z]{2,3}(?:[_-](?:[A-Za-z]{4}|[A-Za-z]{2}))?$")
#: 2–3 letter file/folder names that are common words, not language codes
_NOT_LANG = {"all", "doc", "docs", "out", "new", "old", "raw", "tmp", "dev", "val", "src", "bin",
             "lib", "log", "var", "run", "set", "web", "www", "img", "etc", "misc"}
#: Unicode script name → ISO 15924 code (for ``und_<script>``)
_ISO15924 = {"Latin": "latn", "Cyrillic": "cyrl", "Greek": "grek", "Arabic": "arab",
             "Hebrew": "hebr", "Han": "hani", "Hiragana": "jpan", "Katakana": "jpan", "Japanese": "jpan",
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
class CorpusRead(Record):
    """What reading a corpus found (``summary.json``: each languages corpus's ``corpus``). Fill it
    by passing it to :func:`iter_corpus`; :meth:`record` is what is written."""

    #: files that gave at least one text
    files_read: int = 0
    #: texts read
    texts: int = 0
    #: their UTF-8 bytes
    bytes: int = 0
    #: {reason: bad records or files} over all files (see embscope.corpus.readers)
    skipped: dict[str, int] = field(default_factory=Counter)
    #: {file: {reason: count}} for the files with a bad record or that were skipped
    per_file: dict[str, dict[str, int]] = field(default_factory=dict)
    #: files with a suffix the reader does not read
    ignored_files: int = 0
    #: bytes read from the files (compressed size for compressed files)
    bytes_read: int = 0
    #: languages cut by sample_bytes (the first 4,096)
    capped_languages: list[str] = field(default_factory=list)
    #: {language: how it was decided} (the first 4,096)
    lang_source: dict[str, str] = field(default_factory=dict)
    #: texts that were not in Unicode NFC and were read normalized to NFC
    nfc_normalized: int = 0
    #: {file: texts read normalized to NFC} for the files that held any (the first 4,096)
    nfc_per_file: dict[str, int] = field(default_factory=Counter)

    @functools.cached_property
    def issues(self) -> FileIssues:
        """Bad records as the readers count them: their totals are :attr:`skipped`, their files
        :attr:`per_file`; the bytes they read are :attr:`bytes_read` once recorded."""
        return FileIssues(totals=self.skipped, per_file=self.per_file)  # type: ignore[arg-type]

    def summary(self) -> str:
        """One line: ``1 binary files, 3 invalid utf8 lines``."""
        parts = [f"{n} {reason.replace('_', ' ')}" for reason, n in sorted(self.skipped.items())]
        return ", ".join(parts)

    def merge(self, later: "CorpusRead") -> None:
        """Add the report of files read after this one's (order matters for ``lang_source``)."""
        self.files_read += later.files_read
        self.texts += later.texts
        self.bytes += later.bytes
        self.issues.update(later.issues)
        self.ignored_files += later.ignored_files
        seen = set(self.capped_languages)
        self.capped_languages += [c for c in later.capped_languages if c not in seen]
        del self.capped_languages[MAX_LISTED_LANGUAGES:]
        for lang, src in later.lang_source.items():
            if len(self.lang_source) >= MAX_LISTED_LANGUAGES:
                break
            self.lang_source.setdefault(lang, src)
        self.nfc_normalized += later.nfc_normalized
        self.nfc_per_file.update(later.nfc_per_file)

    def record(self) -> "CorpusRead":
        """What was read, as written (a copy, keys sorted); ``per_file`` lists only files with a bad
        record or that were skipped."""
        return CorpusRead(files_read=self.files_read, texts=self.texts, bytes=self.bytes,
                          skipped=dict(sorted(self.skipped.items())),
                          per_file={f: dict(sorted(c.items())) for f, c in sorted(self.per_file.items())},
                          ignored_files=self.ignored_files, bytes_read=self.issues.bytes_read,
                          capped_languages=list(self.capped_languages), lang_source=dict(self.lang_source),
                          nfc_normalized=self.nfc_normalized,
                          nfc_per_file=dict(sorted(self.nfc_per_file.items())[:MAX_LISTED_LANGUAGES]))



def looks_like_lang(name: str) -> bool:
    """``eng``, ``cmn_hans``, ``pt-BR`` → True; ``notes``, ``doc`` → False."""
    return bool(_LANG_CODE.match(name)) and name.lower() not in _NOT_LANG


def guess_lang(text: str) -> str:
    """``und_<iso15924>`` from the dominant script of ``text`` (``und`` when it has no letters).

    >>> guess_lang("Hello there"), guess_lang("Привет"), guess_lang("12 34")
    ('und_latn', 'und_cyrl', 'und')
    """
    from embscope.text.script import dominant_script

    script = dominant_script(text)
    if script == "none":
        return "und"
    return "und_" + _ISO15924.get(script, script.lower()[:4])


def _path_lang(file: SourceFile) -> tuple[str | None, str]:
    root, path = Path(file.root), Path(file.path)
    if root.is_dir() and path.parent != root and looks_like_lang(path.parent.name):
        return path.parent.name, "folder name"
    name = stem(path)
    if looks_like_lang(name):
        return name, "file name"
    return None, ""


def first_languages(paths, options: ReadOptions | None = None, enough: int = 2) -> set[str]:
    """The languages of the first batch of each file of a corpus (a record's language field, else
    the folder or file name, else the script; as :func:`iter_file` decides), stopping once
    ``enough`` are seen: a cheap look at whether a corpus is in one language, reading one batch
    per file at most, so a language that first appears deep inside a file is not seen.

    >>> from embscope.assets import corpora_root
    >>> sorted(first_languages(corpora_root() / "udhr")), first_languages(corpora_root() / "medical")
    (['aar', 'abk'], {'eng'})
    """
    seen: set[str] = set()
    for file in corpus_files(paths, options):
        batch = next(iter_file(file, options=options), None)
        if batch is not None:
            seen.add(batch.lang)
        if len(seen) >= enough:
            break
    return seen


def corpus_files(paths, options: ReadOptions | None = None,
                 report: CorpusRead | None = None) -> list[SourceFile]:
    """The readable files of a corpus, in corpus order (the shards the engines hand out).

    Raises:
        CorpusError: a path that does not exist, or a glob that matches nothing.
    """
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    for p in paths:
        text = str(Path(p).expanduser()) if not is_glob(str(p)) else str(p)
        if not is_glob(text) and not Path(text).exists():
            raise CorpusError(f"corpus path {text!r} does not exist; pass a folder, a glob or a "
                              f"{READABLE} file")
    ignored: list[str] = []
    files = list_files(paths, ignored, report.issues if report is not None else None)
    if report is not None:
        report.ignored_files += len(ignored)
    if not files and any(is_glob(str(p)) for p in paths) and not ignored:
        raise CorpusError(f"corpus glob {', '.join(map(str, paths))!r} matches no file; check the "
                          "pattern (quote it so the shell does not expand it)")
    return files


def iter_file(file: SourceFile, *, options: ReadOptions | None = None, batch_size: int = 512,
              report: CorpusRead | None = None, sample_bytes: int | None = None,
              used: Counter | None = None) -> Iterator[Batch]:
    """Batches of one file (a shard), languages decided as in the module docstring.

    ``used`` (bytes taken per language so far) carries the sampling state across files; the
    engines read whole files and pass neither it nor ``sample_bytes``.
    """
    options = options or ReadOptions()
    report = report if report is not None else CorpusRead()
    used = used if used is not None else Counter()
    if not sniff(file, report.issues):
        return
    path_lang, how = _path_lang(file)
    it = iter_records(file, options, report.issues)
    guessed = None
    if path_lang is None:
        # Look ahead up to GUESS_BYTES of text without a lang field to guess the script, and at
        # most LOOKAHEAD_BYTES in all (records that carry a lang field would otherwise be held
        # until the end of the file: 2.4 GB for a 200 KB .jsonl.zst).
        pending, size, held = [], 0, 0
        for rec in it:
            pending.append(rec)
            held += len(rec[0])
            if rec[1] is None:
                size += len(rec[0])
            if size >= GUESS_BYTES or held >= LOOKAHEAD_BYTES:
                break
        sample = "\n".join(t for t, lang, _ in pending if lang is None)[:GUESS_BYTES]
        guessed = guess_lang(sample) if sample else None
        it = _chain(pending, it)
    batch: Batch | None = None
    batch_bytes = file_texts = 0
    for text, rec_lang, unit in it:
        normalized = options.nfc and not unicodedata.is_normalized("NFC", text)
        if normalized:
            text = unicodedata.normalize("NFC", text)
        if rec_lang:
            lang, src = rec_lang, "lang field"
        elif path_lang:
            lang, src = path_lang, how
        else:
            lang, src = guessed or "und", "script guess"
        if len(report.lang_source) < MAX_LISTED_LANGUAGES:
            report.lang_source.setdefault(lang, src)
        nbytes = len(text.encode("utf-8"))
        if sample_bytes is not None and used[lang] + nbytes > sample_bytes:
            if len(report.capped_languages) < MAX_LISTED_LANGUAGES and lang not in report.capped_languages:
                report.capped_languages.append(lang)
            if rec_lang is None:
                break  # the whole rest of this file is the same language
            continue
        used[lang] += nbytes
        if normalized:
            report.nfc_per_file[file.path] += 1
            report.nfc_normalized += 1
        if batch is not None and (batch.lang != lang or len(batch.texts) >= batch_size
                                  or batch_bytes + nbytes > BATCH_BYTES):
            yield batch
            batch, batch_bytes = None, 0
        if batch is None:
            batch = Batch(lang=lang, texts=[], units=[], source=file.path)
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


def past_corpus_limit(file: SourceFile, options: ReadOptions | None, report: CorpusRead) -> bool:
    """True (and ``file`` counted as ``files_past_corpus_bytes``) once the pass has read
    ``options.max_corpus_bytes`` decompressed bytes: later files are not read."""
    limit = (options or ReadOptions()).max_corpus_bytes
    if report.issues.bytes_read < limit:
        return False
    report.issues.add(file.path, "files_past_corpus_bytes")
    return True


def _chain(first, rest):
    yield from first
    yield from rest


def finish(paths, report: CorpusRead, *, stacklevel: int = 3) -> None:
    """After a whole corpus was read: raise if no text was read (the error names what was skipped),
    otherwise warn once about skipped input."""
    name = ", ".join(Path(str(p)).name for p in ([paths] if isinstance(paths, (str, Path)) else paths))
    if not report.texts:
        why = f" (skipped: {report.summary()})" if report.skipped else ""
        raise CorpusError(f"corpus {name!r} holds no usable text{why}; pass {READABLE} files in "
                          "UTF-8 (--text-field names the text field of jsonl/Parquet/Arrow)")
    if report.skipped:
        worst = sorted(report.issues.per_file.items(), key=lambda kv: -sum(kv[1].values()))[:3]
        where = "; ".join(f"{Path(f).name}: {sum(c.values())}" for f, c in worst)
        warnings.warn(CorpusWarning(f"corpus {name}: {report.summary()} (most in {where}; every "
                                    "file is listed in the report's per_file)"), stacklevel=stacklevel)
    if report.nfc_per_file:
        warnings.warn(CorpusWarning(nfc_message(name, report)), stacklevel=stacklevel)


def nfc_message(name: str, report: CorpusRead) -> str:
    """The warning for a corpus with texts not in NFC (see the module docstring).

    >>> r = CorpusRead(texts=40, nfc_normalized=31); r.nfc_per_file.update({"udhr/vie.jsonl": 31})
    >>> nfc_message("udhr", r)  # doctest: +NORMALIZE_WHITESPACE
    'corpus udhr: 31 of 40 texts are not in Unicode NFC (vie.jsonl: 31); they were counted as NFC,
    so a letter typed decomposed is one character; a trainer reads them as stored: store them as NFC'
    """
    worst = sorted(report.nfc_per_file.items(), key=lambda kv: (-kv[1], kv[0]))
    where = "; ".join(f"{Path(f).name}: {n:,}" for f, n in worst[:3])
    more = f"; {len(worst) - 3:,} more files" if len(worst) > 3 else ""
    return (f"corpus {name}: {report.nfc_normalized:,} of {report.texts:,} texts are not in Unicode NFC "
            f"({where}{more}); they were counted as NFC, so a letter typed decomposed is one character; "
            "a trainer reads them as stored: store them as NFC")


def iter_corpus(path, *, sample_bytes: int | None = None, batch_size: int = 512,
                report: CorpusRead | None = None, options: ReadOptions | None = None) -> Iterator[Batch]:
    """Yield :class:`Batch` es of texts from ``path``, per file and language, in corpus order.

    Args:
        path: a corpus file, folder or glob, or a list of them (see the module docstring).
        sample_bytes: read at most this many UTF-8 bytes of text per language (None: all).
        batch_size: most texts per batch (batches also stop at :data:`BATCH_BYTES`).
        report: filled with counts of what was read and skipped.
        options: field names (``ReadOptions(text_field="abstract", lang_field="language")``).

    Raises:
        CorpusError: the path does not exist or holds no usable text.
    """
    report = report if report is not None else CorpusRead()
    used: Counter = Counter()  # bytes read per language
    for file in corpus_files(path, options, report):
        if past_corpus_limit(file, options, report):
            continue
        yield from iter_file(file, options=options, batch_size=batch_size, report=report,
                             sample_bytes=sample_bytes, used=used)
    finish(path, report)


#: bytes of corpus text :func:`read_texts` holds at most (per language): a 1 GB corpus is sampled,
#: not held whole (the passes of :mod:`embscope.corpus.engine` stream the corpus instead)
MAX_CORPUS_BYTES = 256 * 2**20


def read_texts(corpus_path: str | Path, max_bytes: int = MAX_CORPUS_BYTES, *,
               options: "ReadOptions | None" = None, total_bytes: int | None = None,
               cut: list | None = None) -> list[str]:
    """All texts of a corpus (file or folder), through :func:`embscope.corpus.stream.iter_corpus`,
    read with ``options`` (``--text-field``, ``--lang-field``, ...).

    At most ``max_bytes`` per language and ``total_bytes`` (default ``max_bytes``) in all: the
    total bounds the memory whatever the number of languages. When the total stops the reading,
    ``cut`` (a list) gets the corpus path appended, so the caller can say so.
    """
    total = max_bytes if total_bytes is None else total_bytes
    texts: list[str] = []
    size = 0
    stream = iter_corpus(corpus_path, sample_bytes=max_bytes, options=options)
    for batch in stream:
        for t in batch.texts:
            size += len(t.encode("utf-8"))
            if size > total:
                break
            texts.append(t)
        if size > total:
            stream.close()  # the corpus is not read further
            if cut is not None:
                cut.append(str(corpus_path))
            break
    if not texts:
        raise CorpusError(f"{corpus_path} holds no text; pass a folder of .txt/.jsonl/.parquet files")
    return texts


#: :func:`file_languages` of the corpora seen in this process, by corpus, read options and files
_FILE_LANGUAGES: dict[tuple, list[str]] = {}


def file_languages(corpus: Path, read: ReadOptions | None) -> list[str]:
    """The language of each file's first batch, one per file in corpus order (where
    :func:`first_languages` stops at the first few distinct ones). Kept per process while no file
    of the corpus changes (its path, size and modification time): a process that runs several
    commands on one corpus (the shipped UDHR's 512 files) reads their first records once."""
    import os

    files = corpus_files(corpus, read)
    try:
        key = (str(corpus), repr(read), tuple((repr(f), os.stat(f.path).st_size, os.stat(f.path).st_mtime_ns)
                                            for f in files))
    except OSError:
        key = None
    if key is not None and key in _FILE_LANGUAGES:
        return list(_FILE_LANGUAGES[key])
    langs = [b.lang for f in files if (b := next(iter_file(f, options=read), None))]
    if key is not None:
        if len(_FILE_LANGUAGES) >= 16:
            _FILE_LANGUAGES.clear()
        _FILE_LANGUAGES[key] = list(langs)
    return langs
