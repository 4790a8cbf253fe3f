"""Training-data files → examples as a fine-tuning trainer sees them (the record shapes:
:mod:`embscope.corpus.shapes`).

The files are found and read as corpora are (:mod:`embscope.corpus.readers`: ``.jsonl``,
Parquet, Arrow, HF ``datasets`` folders, ``.gz``/``.zst``/``.bz2``, folders, globs), plus ``.json``
files holding one array of records (or ``{"data": [...]}``, ``{"train": [...]}``). Each record is a
JSON object, read whole, and its shape is detected on its own.

Splits: a ``DatasetDict`` folder (``dataset_dict.json`` naming its splits, one folder each) and hub
style shards (``train-00000-of-00002.parquet``) give each example its split, so that a check
reports each split on its own; ``split`` keeps one of them.

``fmt`` forces one shape; a record that fits none (or not the forced one) is counted with its
reason in :class:`DataRead` ``rejected``, never dropped silently; the record fields no shape read
are counted in ``ignored_fields``, KTO labels in ``labels``. Bad lines and files are counted in
``issues`` as the corpus readers count them.
"""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embscope.corpus.listing import list_files
from embscope.corpus.readers import COMPRESSIONS, FileIssues, SourceFile, _lines, sniff
from embscope.corpus.records import json_objects, table_objects
from embscope.formats.json_stream import lone_surrogate
from embscope.corpus.shapes import FORMATS, SHAREGPT_ROLES, Example, Reject, detect, to_example  # noqa: F401
from embscope.records import Record

#: the metadata files of an HF ``datasets`` folder (not data)
HF_META = {"dataset_info.json", "state.json", "dataset_dict.json"}
#: hub-style shard names: ``train-00000-of-00003.parquet``, ``test.jsonl``
SPLIT_NAME = re.compile(r"^(train|test|validation|valid|dev|eval)(?:[-_.]\d+(?:-of-\d+)?)?$", re.IGNORECASE)


@dataclass
class DataRead(Record):
    """What reading the training data found (``summary.json`` → ``sections.readiness.data``). Fill it
    by passing it to :func:`iter_examples` (its counters count up); :meth:`record` is what is written."""

    #: records seen (good and rejected)
    records: int = 0
    #: files read
    files: int = 0
    #: {shape: examples yielded}
    formats: dict[str, int] = field(default_factory=Counter)
    #: {reason: records that fit no shape, or not the forced one}
    rejected: dict[str, int] = field(default_factory=Counter)
    #: {reason: the first few rejected record indices}
    rejected_examples: dict[str, list[int]] = field(default_factory=dict)
    #: {reason: bad lines and files} (see embscope.corpus.readers)
    skipped: dict[str, int] = field(default_factory=Counter)
    #: {record field: records that carry it but whose shape does not read it}
    ignored_fields: dict[str, int] = field(default_factory=Counter)
    #: KTO labels: {desirable, undesirable: examples}
    labels: dict[str, int] = field(default_factory=Counter)
    #: {split: records} (empty when the data has no splits)
    splits: dict[str, int] = field(default_factory=Counter)
    #: {split: records} of the splits other than the one asked for, not read
    other_splits: dict[str, int] = field(default_factory=Counter)

    @functools.cached_property
    def issues(self) -> FileIssues:
        """Bad lines and files as the readers count them; their totals are :attr:`skipped`."""
        return FileIssues(totals=self.skipped)  # type: ignore[arg-type]

    def reject(self, index: int, reason: str) -> None:
        self.rejected[reason] += 1
        self.rejected_examples.setdefault(reason, [])
        if len(self.rejected_examples[reason]) < 5:
            self.rejected_examples[reason].append(index)

    def record(self) -> "DataRead":
        """What was read, as written (a copy)."""
        return DataRead(**{k: v.copy() if isinstance(v, dict) else v for k, v in vars(self).items() if k != "issues"})



def _json_records(file: SourceFile, issues: FileIssues):
    for rec in json_objects(file, issues):
        if lone_surrogate(rec):
            issues.add(file.path, "lone_surrogate_records")
            continue
        yield rec


def _jsonl_objects(file: SourceFile, issues: FileIssues):
    for line in _lines(file, issues):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            issues.add(file.path, "invalid_json_lines")
            continue
        if "\\u" in line and lone_surrogate(rec):  # only an escape can make one
            issues.add(file.path, "lone_surrogate_records")
            continue
        yield rec


def _table_objects(file: SourceFile, issues: FileIssues):
    return table_objects(file, issues)


def data_files(paths, ignored: list[str] | None = None) -> list[SourceFile]:
    """The files of ``paths`` as :func:`~embscope.corpus.readers.list_files` finds them, plus
    ``.json`` (and compressed ``.json.gz`` …) files, which the corpus readers leave out; within
    one path in sorted order, as the corpus readers walk it."""
    import os

    ignored = ignored if ignored is not None else []
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[SourceFile] = []
    for raw in paths:
        skipped: list[str] = []
        files = list_files([raw], skipped)
        jsons = []
        for p in skipped:
            path = Path(p)
            suffixes = [s.lower() for s in path.suffixes]
            comp = COMPRESSIONS.get(suffixes[-1]) if suffixes else None
            inner = suffixes[-2:-1] if comp else suffixes[-1:]
            if inner == [".json"] and path.name not in HF_META:
                jsons.append(SourceFile(str(path), str(path.parent), "json", comp))
            else:
                ignored.append(p)
        out += sorted(files + jsons, key=lambda f: f.path) if jsons else files
    return out


def file_split(file: SourceFile) -> str | None:
    """The split a data file belongs to: its folder's name inside a ``DatasetDict`` folder (whose
    ``dataset_dict.json`` lists it), else a hub-style file name (``test-00000-of-00001.parquet``),
    else None."""
    from embscope.corpus.listing import stem

    path = Path(file.path)
    for folder in path.parents:
        meta = folder.parent / "dataset_dict.json"
        if meta.is_file():
            from embscope.corpus.listing import META_BYTES
            from embscope.formats.files import read_json

            doc = read_json(meta, what="datasets split list", max_bytes=META_BYTES, fix="fix or remove it")
            names = doc.get("splits") if isinstance(doc, dict) else None
            if isinstance(names, list) and folder.name in names:
                return folder.name
        if str(folder) == file.root or folder == folder.parent:
            break
    m = SPLIT_NAME.match(stem(path))
    return m.group(1).lower() if m else None


def check_split(paths, split: str | None) -> None:
    """``--split`` before any work: refused, with the data's splits and a "did you mean", when no
    file of ``paths`` belongs to it (the file listing only: nothing is read but ``dataset_dict.json``)."""
    if split is not None:
        _check_split(split, {s for f in data_files(paths) if (s := file_split(f)) is not None})


def _check_split(split: str | None, named: set[str]) -> None:
    if split is not None and split not in named:
        from embscope.errors import SpecError, did_you_mean

        raise SpecError(f"--split {split!r} is not in the data{did_you_mean(split, named)} (splits: "
                        f"{', '.join(sorted(named)) or 'none: it has no splits'}); pass one of them, or leave --split out")


def iter_examples(paths, *, fmt: str | None = None, text_field: str = "text",
                  report: DataRead | None = None, split: str | None = None) -> Iterator[Example]:
    """Every good example of the training data at ``paths``, in reading order; rejected records,
    bad lines and unread fields go into ``report``. Examples carry their split when the data has
    two or more; ``split`` keeps only that one (its name, as ``dataset_dict.json`` or the file
    names give it)."""
    report = report if report is not None else DataRead()
    ignored: list[str] = []
    files = data_files(paths, ignored)
    splits = [file_split(f) for f in files]
    named = {s for s in splits if s is not None}
    if len(named) < 2 and split is None:
        splits = [None] * len(files)
    _check_split(split, named)
    for file, file_split_name in zip(files, splits):
        if split is not None and file_split_name != split:
            continue
        if file.fmt != "json" and not sniff(file, report.issues):
            continue
        if file.fmt == "text":  # a .txt/.md file: one text per line, as the corpus readers read it
            records: Any = ({"text": line.rstrip("\r\n")} for line in _lines(file, report.issues) if line.strip())
        elif file.fmt == "json":
            records = _json_records(file, report.issues)
        elif file.fmt == "jsonl":
            records = _jsonl_objects(file, report.issues)
        else:
            records = _table_objects(file, report.issues)
        report.files += 1
        field_name = "text" if file.fmt == "text" else text_field
        for rec in records:
            index = report.records
            report.records += 1
            if file_split_name is not None:
                report.splits[file_split_name] += 1
            try:
                ex, unread = to_example(rec, index, fmt, field_name)
            except Reject as why:
                report.reject(index, str(why))
                continue
            for k in unread:
                report.ignored_fields[str(k)[:60]] += 1
            if ex.label is not None:
                report.labels["desirable" if ex.label else "undesirable"] += 1
            ex.split = file_split_name
            report.formats[ex.format] += 1
            yield ex
    for p in ignored:
        report.issues.add(p, "ignored_files")
