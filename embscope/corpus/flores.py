"""A local FLORES+ / FLORES-200 copy, read in place (it may not be re-hosted, so embscope ships none).

Two layouts, as distributed:

- the release folder (FLORES+ ``floresp-v2.0-rc.3/{dev,devtest}/{split}.{lang}_{Script}``;
  FLORES-200 ``flores200_dataset/{dev,devtest}/{lang}_{Script}.{split}``): one sentence a line,
  line *i* of every file of a split the same sentence. A file's language and script come from its
  name; its records are aligned by ``unit = "<split>:<line>"`` (line numbers from 1, blank lines
  counted and skipped), so both splits are read and never mixed up.
- Parquet with the columns ``iso_639_3``, ``iso_15924``, ``text`` and an alignment column
  (``--unit-field``; ``id`` when the table has no ``unit``): language and script from the
  columns, ``unit = "<split>:<id>"`` with the split from the path (a ``dev``/``devtest`` folder or
  file-name part), or the id alone.

A language's id is its ISO 639-3 code when the corpus has it in one script (``eng``, so the
default ``--reference eng`` works), else the code with the script in lower case (``cmn_hans``,
``cmn_hant``), as the shipped UDHR names variants.

>>> flores_name("floresp-v2.0-rc.3/devtest/devtest.cmn_Hant"), flores_name("flores200_dataset/dev/eng_Latn.dev")
(('devtest', 'cmn', 'Hant'), ('dev', 'eng', 'Latn'))
>>> flores_name("notes.txt") is None
True
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

#: FLORES+ ``dev.eng_Latn`` and FLORES-200 ``eng_Latn.dev``
_PLUS = re.compile(r"^(?P<split>[a-z]+)\.(?P<lang>[a-z]{3})_(?P<script>[A-Z][a-z]{3})$")
_F200 = re.compile(r"^(?P<lang>[a-z]{3})_(?P<script>[A-Z][a-z]{3})\.(?P<split>dev|devtest)$")
#: the splits a path component may name
SPLITS = ("dev", "devtest", "test", "train", "validation")
#: the language and script columns of the Parquet form
ISO_COLUMNS = ("iso_639_3", "iso_15924")
#: the alignment column of the Parquet form when the table has no ``--unit-field`` column
ID_COLUMN = "id"


def flores_name(path: str | Path) -> tuple[str, str, str] | None:
    """``(split, ISO 639-3, ISO 15924)`` of a release file's name, None for any other name."""
    m = _PLUS.match(Path(path).name) or _F200.match(Path(path).name)
    return (m["split"], m["lang"], m["script"]) if m else None


def language_id(iso: str, script: str, scripts_of: dict[str, set[str]]) -> str:
    """``eng`` when the corpus writes ``eng`` in one script, else ``cmn_hans`` (see the module doc).

    >>> language_id("cmn", "Hans", {"cmn": {"Hans", "Hant"}}), language_id("eng", "Latn", {"eng": {"Latn"}})
    ('cmn_hans', 'eng')
    """
    return iso if len(scripts_of.get(iso, ())) <= 1 else f"{iso}_{script.lower()}"


@functools.lru_cache(maxsize=64)
def _folder_scripts(folder: str) -> dict[str, frozenset[str]]:
    """ISO 639-3 → scripts named by the release files (or ``{lang}_{Script}.parquet`` files) of a folder."""
    out: dict[str, set[str]] = {}
    try:
        names = os.listdir(folder)
    except OSError:
        return {}
    for name in names:
        hit = flores_name(name) or _parquet_name(name)
        if hit:
            out.setdefault(hit[1], set()).add(hit[2])
    return {k: frozenset(v) for k, v in out.items()}


def _parquet_name(name: str) -> tuple[str, str, str] | None:
    m = re.match(r"^(?P<lang>[a-z]{3})_(?P<script>[A-Z][a-z]{3})\.parquet$", name)
    return ("", m["lang"], m["script"]) if m else None


def split_of(path: str | Path) -> str | None:
    """The split a path names: a release file's name, else a ``dev``/``devtest``… folder or file-name part."""
    hit = flores_name(path)
    if hit:
        return hit[0]
    parts = [*Path(path).parent.parts[-2:], Path(path).name.split(".")[0].split("-")[0]]
    return next((p for p in reversed(parts) if p in SPLITS), None)


def is_table(names) -> bool:
    """Whether a Parquet/Arrow schema's column ``names`` are the FLORES form (language and script columns)."""
    return all(c in names for c in ISO_COLUMNS)


def unit_column(names, opts) -> str | None:
    """The alignment column of a FLORES table: ``--unit-field`` when it has one, else ``id``."""
    if opts.unit_field and opts.unit_field in names:
        return opts.unit_field
    return ID_COLUMN if ID_COLUMN in names else None


@functools.lru_cache(maxsize=256)
def _table_pairs(path: str) -> frozenset[tuple[str, str]]:
    """Distinct ``(iso_639_3, iso_15924)`` pairs of a FLORES Parquet file (two columns read)."""
    import pyarrow.parquet as pq

    try:
        t = pq.read_table(path, columns=list(ISO_COLUMNS))
    except Exception:  # an unreadable file is the reader's to count
        return frozenset()
    return frozenset(p for p in zip(*(t.column(c).to_pylist() for c in ISO_COLUMNS))
                     if all(isinstance(x, str) and x for x in p))


def table_ids(path: str) -> dict[tuple[str, str], str]:
    """``(iso, script) → id`` for the rows of a FLORES Parquet file: scripts per language from the
    file's own rows and from its folder's ``{lang}_{Script}.parquet`` names."""
    scripts: dict[str, set[str]] = {}
    for iso, script in _table_pairs(path):
        scripts.setdefault(iso, set()).add(script)
    for iso, ss in _folder_scripts(str(Path(path).parent)).items():
        scripts.setdefault(iso, set()).update(ss)
    return {(iso, s): language_id(iso, s, scripts) for iso, ss in scripts.items() for s in ss}


def file_ids(path: str, fmt: str | None) -> list[tuple[str, str, str]]:
    """``(id, ISO 639-3, ISO 15924)`` of the languages a FLORES file holds, from its name or its
    columns; [] for any other file."""
    hit = flores_name(path)
    if hit:
        _, iso, script = hit
        return [(language_id(iso, script, _folder_scripts(str(Path(path).parent))), iso, script)]
    if fmt == "parquet":
        try:
            import pyarrow.parquet as pq

            if not is_table(pq.ParquetFile(path).schema_arrow.names):
                return []
        except Exception:  # an unreadable file is the reader's to count
            return []
        return [(code, iso, script) for (iso, script), code in sorted(table_ids(path).items())]
    return []


def table_form(path: str, names, opts) -> dict | None:
    """How the rows of a FLORES table are read: ``ids`` ((iso, script) → id), ``unit`` (its column,
    or None) and ``split``; None when the columns are not the FLORES form."""
    if not is_table(names):
        return None
    return {"ids": table_ids(path), "unit": unit_column(names, opts), "split": split_of(path)}


def table_rows(d: dict, form: dict) -> tuple[list, list | None]:
    """The language ids and split-qualified units of a record batch (``to_pydict``) of a FLORES table."""
    langs = [form["ids"].get(pair) for pair in zip(*(d[c] for c in ISO_COLUMNS))]
    if not form["unit"]:
        return langs, None
    split = form["split"]
    return langs, [None if u is None else f"{split}:{u}" if split else u for u in d[form["unit"]]]


def iter_lines(path: str, opener, allows, add_issue, read_error, max_line_bytes: int):
    """``(text, language id, "<split>:<line>")`` per non-blank line of the release file ``path``,
    read from ``opener()`` (a binary stream) while ``allows(nbytes)`` (the file's byte limits). A
    line over ``max_line_bytes`` is skipped and counted (``add_issue(path,
    "aligned_lines_over_1MiB")``): a piece of it would align with nothing. An exception for which
    ``read_error(e)`` is true (I/O, damaged compression) ends the file, counted as ``unreadable_files``."""
    try:
        with opener() as f:
            yield from _lines(path, f, allows, add_issue, max_line_bytes)
    except Exception as e:
        if not read_error(e):
            raise
        add_issue(path, "unreadable_files")


def _lines(path: str, f, allows, add_issue, max_line_bytes: int):
    split, iso, script = flores_name(path)
    lang = language_id(iso, script, _folder_scripts(str(Path(path).parent)))
    line = 0
    while True:
        raw = f.readline(max_line_bytes)
        if not raw or not allows(len(raw)):
            return
        line += 1
        if not raw.endswith(b"\n") and len(raw) >= max_line_bytes:
            while raw and not raw.endswith(b"\n"):
                raw = f.readline(max_line_bytes)
                if not allows(len(raw)):
                    return
            add_issue(path, "aligned_lines_over_1MiB")
            continue
        try:
            text = raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            add_issue(path, "invalid_utf8_lines")
            continue
        if text.strip():
            yield text, lang, f"{split}:{line}"
