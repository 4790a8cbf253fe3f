"""Training-data files → examples as a fine-tuning trainer sees them: conversations or plain text.

The files are found and read as corpora are (:mod:`embscope.corpus.readers`: ``.jsonl``,
Parquet, Arrow, HF ``datasets`` folders, ``.gz``/``.zst``/``.bz2``, folders, globs), plus ``.json``
files holding one array of records (or ``{"data": [...]}``, ``{"train": [...]}``). Each record is a
JSON object, read whole, and its format is detected on its own, first that applies:

=====================  ==========================================================================
``messages``           ``{"messages": [{"role", "content"}, …]}``: HF chat datasets, TRL's SFT
                       trainer, OpenAI fine-tuning files; ``content`` a string or a list of typed
                       parts (``{"type": "text", "text": …}``), passed to the template as given
``sharegpt``           ``{"conversations": [{"from", "value"}, …]}``; ``from`` human/user →
                       ``user``, gpt/assistant/model → ``assistant``, system, tool/function/
                       observation → ``tool``; an optional ``system`` field becomes a first turn
``prompt-completion``  ``{"prompt", "completion"}``: strings (plain text, ``prompt + completion``)
                       or, TRL's conversational form, lists of messages (``prompt + completion``)
``alpaca``             ``{"instruction", "input"?, "output", "system"?}``: one user turn
                       ``instruction`` + ``"\\n"`` + ``input`` (when not empty, as LLaMA-Factory
                       joins them), one assistant turn ``output``
``text``               ``{"text": …}`` (``--text-field``): plain text
=====================  ==========================================================================

``fmt`` forces one format; a record that fits none (or not the forced one) is counted with its
reason in :class:`DataReport` ``rejected``, never dropped silently. Bad lines and files are counted
in ``issues`` as the corpus readers count them.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embscope.corpus.listing import list_files
from embscope.corpus.readers import (COMPRESSIONS, FileIssues, ReadOptions, SourceFile, _arrow_batches, _lines,
                                     _Meter, _parquet_batches, open_binary, sniff)

#: record formats, in detection order
FORMATS = ("messages", "sharegpt", "prompt-completion", "alpaca", "text")
#: ShareGPT ``from`` → chat role
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                  "model": "assistant", "chatgpt": "assistant", "bing": "assistant", "bard": "assistant",
                  "system": "system", "tool": "tool", "function": "tool", "observation": "tool"}
#: largest ``.json`` file read whole (a ``.jsonl`` is streamed instead)
MAX_JSON_BYTES = 256 << 20
#: the metadata files of an HF ``datasets`` folder (not data)
HF_META = {"dataset_info.json", "state.json", "dataset_dict.json"}


@dataclass
class Example:
    """One training example, as the trainer will see it."""

    #: position of the record in the data, 0-based, in reading order (rejected records count too)
    index: int
    #: the format it was read as (:data:`FORMATS`)
    format: str
    #: the conversation, for chat formats (``None`` for plain text)
    messages: list[dict[str, Any]] | None = None
    #: the text, for plain formats (``None`` for conversations)
    text: str | None = None


@dataclass
class DataReport:
    """What the readers read and what they rejected. Fill it by passing it to :func:`iter_examples`."""

    #: records seen (good and rejected)
    records: int = 0
    #: examples yielded, per format
    formats: Counter = field(default_factory=Counter)
    #: reason → records that fit no format (or not the forced one)
    rejected: Counter = field(default_factory=Counter)
    #: a few rejected record indices per reason
    rejected_examples: dict[str, list[int]] = field(default_factory=dict)
    #: bad lines and files (see :mod:`embscope.corpus.readers`)
    issues: FileIssues = field(default_factory=FileIssues)
    #: files read
    files: int = 0

    def reject(self, index: int, reason: str) -> None:
        self.rejected[reason] += 1
        self.rejected_examples.setdefault(reason, [])
        if len(self.rejected_examples[reason]) < 5:
            self.rejected_examples[reason].append(index)

    def to_dict(self) -> dict[str, Any]:
        return {"records": self.records, "files": self.files, "formats": dict(self.formats),
                "rejected": dict(self.rejected), "rejected_examples": dict(self.rejected_examples),
                "skipped": dict(self.issues.totals)}


class Reject(ValueError):
    """A record that does not fit the format; ``str()`` is the reason."""


def _content(value, where: str):
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, dict) for p in value):
        for p in value:
            if p.get("type", "text") == "text" and not isinstance(p.get("text"), str):
                raise Reject(f"{where}: a text part without a text string")
        return value
    if value is None:
        raise Reject(f"{where}: no content")
    raise Reject(f"{where}: content is neither a string nor a list of typed parts")


def _messages(value, key: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise Reject(f"{key} is not a non-empty list")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            raise Reject(f"{key}: a message is not an object")
        role = m.get("role")
        if not isinstance(role, str) or not role:
            raise Reject(f"{key}: a message without a role")
        msg = dict(m)
        if "content" in m and m["content"] is not None or not m.get("tool_calls"):
            msg["content"] = _content(m.get("content"), key)
        out.append(msg)
    return out


def _sharegpt(rec: dict) -> list[dict[str, Any]]:
    turns = rec["conversations"]
    if not isinstance(turns, list) or not turns:
        raise Reject("conversations is not a non-empty list")
    out = []
    system = rec.get("system")
    if isinstance(system, str) and system:
        out.append({"role": "system", "content": system})
    for t in turns:
        if not isinstance(t, dict):
            raise Reject("conversations: a turn is not an object")
        who = t.get("from", t.get("role"))
        role = SHAREGPT_ROLES.get(who.lower()) if isinstance(who, str) else None
        if role is None:
            raise Reject(f"conversations: unknown ShareGPT role {str(who)[:20]!r}")
        value = t.get("value", t.get("content"))
        if not isinstance(value, str):
            raise Reject("conversations: a turn's value is not a string")
        out.append({"role": role, "content": value})
    return out


def _alpaca(rec: dict) -> list[dict[str, Any]]:
    ins, inp, outp = rec.get("instruction"), rec.get("input") or "", rec.get("output")
    if not isinstance(ins, str) or not isinstance(outp, str) or not isinstance(inp, str):
        raise Reject("alpaca: instruction, input or output is not a string")
    msgs = []
    if isinstance(rec.get("system"), str) and rec["system"]:
        msgs.append({"role": "system", "content": rec["system"]})
    msgs.append({"role": "user", "content": ins + ("\n" + inp if inp else "")})
    msgs.append({"role": "assistant", "content": outp})
    return msgs


def detect(rec: dict, text_field: str = "text") -> str | None:
    """The format of one record (:data:`FORMATS`), or None when it fits none."""
    if "messages" in rec:
        return "messages"
    if "conversations" in rec:
        return "sharegpt"
    if "prompt" in rec and "completion" in rec:
        return "prompt-completion"
    if "instruction" in rec and "output" in rec:
        return "alpaca"
    if text_field in rec:
        return "text"
    return None


def to_example(rec: Any, index: int, fmt: str | None = None, text_field: str = "text") -> Example:
    """The example a record stands for; raises :class:`Reject` with the reason when it fits none."""
    if not isinstance(rec, dict):
        raise Reject("the record is not an object")
    found = detect(rec, text_field)
    if fmt is not None and found != fmt:
        raise Reject(f"not {fmt}" + (f" (looks like {found})" if found else ""))
    if found is None:
        keys = ", ".join(sorted(map(str, rec))[:6])
        raise Reject(f"no known fields (keys: {keys})" if keys else "an empty object")
    if found == "messages":
        return Example(index, found, messages=_messages(rec["messages"], "messages"))
    if found == "sharegpt":
        return Example(index, found, messages=_sharegpt(rec))
    if found == "alpaca":
        return Example(index, found, messages=_alpaca(rec))
    if found == "prompt-completion":
        p, c = rec["prompt"], rec["completion"]
        if isinstance(p, str) and isinstance(c, str):
            return Example(index, found, text=p + c)
        if isinstance(p, list) and isinstance(c, list):
            return Example(index, found, messages=_messages(p, "prompt") + _messages(c, "completion"))
        raise Reject("prompt-completion: prompt and completion must both be strings or both lists of messages")
    text = rec[text_field]
    if not isinstance(text, str):
        raise Reject("text: the text field is not a string")
    if not text.strip():
        raise Reject("text: empty")
    return Example(index, found, text=text)


def _json_records(file: SourceFile, issues: FileIssues):
    try:
        with open_binary(file) as f:
            raw = f.read(MAX_JSON_BYTES + 1)
    except Exception:  # noqa: BLE001 - an unreadable or damaged file is counted, not raised
        issues.add(file.path, "unreadable_files")
        return
    if len(raw) > MAX_JSON_BYTES:
        issues.add(file.path, "json_files_over_256MiB")
        return
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        issues.add(file.path, "invalid_json_files")
        return
    if isinstance(data, dict):
        lists = [v for k, v in data.items() if k in ("data", "train", "examples", "records") and isinstance(v, list)]
        data = lists[0] if lists else [data]
    if not isinstance(data, list):
        issues.add(file.path, "wrong_type_records")
        return
    yield from data


def _jsonl_objects(file: SourceFile, issues: FileIssues):
    for line in _lines(file, issues):
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except (ValueError, RecursionError):
            issues.add(file.path, "invalid_json_lines")


def _table_objects(file: SourceFile, issues: FileIssues):
    meter = _Meter(file, ReadOptions(), issues)  # the corpus readers' byte limits hold here too
    read = _parquet_batches if file.fmt == "parquet" else _arrow_batches
    for rb in read(file, lambda schema: list(schema.names), meter, issues):
        try:
            yield from rb.to_pylist()
        except (UnicodeDecodeError, ValueError):
            issues.add(file.path, "unreadable_files")
            return


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


def iter_examples(paths, *, fmt: str | None = None, text_field: str = "text",
                  report: DataReport | None = None) -> Iterator[Example]:
    """Every good example of the training data at ``paths``, in reading order; rejected records
    and bad lines go into ``report``."""
    report = report if report is not None else DataReport()
    ignored: list[str] = []
    for file in data_files(paths, ignored):
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
            try:
                ex = to_example(rec, index, fmt, field_name)
            except Reject as why:
                report.reject(index, str(why))
                continue
            report.formats[ex.format] += 1
            yield ex
    for p in ignored:
        report.issues.add(p, "ignored_files")
