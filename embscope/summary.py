"""``summary.json``: one envelope around the section records.

:class:`Summary` is what every output folder holds: the schema version, where the result came from
(embscope version and git hash, library versions, input fingerprints, parameters), timings, the
model's facts, one record per section, the reason for every section that has none, and warnings.
The report reads it only through :meth:`Summary.from_dict`, so every field it uses is checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from embscope.context.summary import ContextSummary
from embscope.changes.record import DiffRecord
from embscope.readiness.record import CheckRecord
from embscope.models.resolve import HubRead
from embscope.provenance import RunStamp, TreeDigest
from embscope.records import Record, RecordError
from embscope.sections.apply import ApplyRecord
from embscope.sections.extension import ExtensionRecord
from embscope.sections.languages import LanguagesRecord
from embscope.sections.options import RunOptions
from embscope.sections.repair import RepairRecord
from embscope.sections.tokens import TokensRecord
from embscope.verdict import BottomLine

#: bumped when a field changes meaning or type; the report refuses folders of another version.
#: 4: ``parameters.layout`` is ``parameters.map`` (the option ``--no-map`` sets)
#: 5: ``bottom_line``; ``sections.tokens.geometry.flagged.by_reason`` counts the flagged normal rows
#: 6: budgets in work, not seconds: ``parameters.verify_work`` and ``parameters.distil_work`` (were
#: ``verify_time_cap`` and ``distil_budget``), the verification's ``work_budget``, ``work`` and
#: ``stopped_at_budget`` (were ``time_cap_s`` and ``stopped_at_cap``), the extension's
#: ``distil_work_budget`` and ``distil_work`` (was ``distil_budget``)
#: 7: the kNN record has no inverted-file fields (``nlist``, ``nprobe``, ``scanned_share``,
#: ``tuned_recall``, ``scan``, ``estimated_cost``, ``refine_*``, ``hnsw_pilot``,
#: ``exact_estimate_seconds``: the ``ivf`` and ``refined`` methods are gone) and an ``nndescent`` one
#: 8: ``sections.readiness`` is ``sections.finetune`` (the check's readiness; its verdicts'
#: ``section`` and ``source`` too); version 7 files are read, the old key taken as the new
SCHEMA_VERSION = 8


@dataclass
class ModelRecord(Record):
    """The loaded model's facts."""

    #: the spec as given (alias, hub id, folder, .gguf)
    spec: str
    #: short name for folders and tables
    name: str
    #: package, gguf, folder or hub-cache
    source: str
    #: the folder or .gguf file read
    path: str
    #: architecture from the config (``Qwen2ForCausalLM``), if any
    arch: str | None
    #: matrix rows
    rows: int
    #: hidden size (columns)
    dim: int
    #: tokens the tokenizer defines
    n_tokens: int
    #: input and output matrices are one (or bit-identical)
    tied: bool
    #: stored dtype of the matrices
    dtype: str
    #: where the matrices live (cpu, cuda)
    device: str
    #: {embed, output} tensor names read
    tensor_names: dict[str, str | None]
    #: files opened for the matrices
    files_read: list[str]
    #: tokenizer backend (tokenizers, tiktoken, sentencepiece), null without one
    tokenizer: str | None
    #: seconds to load
    load_seconds: float


@dataclass
class Sections(Record):
    """One record per section (:data:`embscope.sections.registry.SECTIONS`, in its order); null when
    the section did not run or had nothing to report."""

    #: RoPE, KV cache and parameter figures (:class:`embscope.context.ContextSummary`)
    context: ContextSummary | None = None
    #: token table headline figures and the geometry scan
    tokens: TokensRecord | None = None
    #: per-language costs and density
    languages: LanguagesRecord | None = None
    #: vocabulary-extension savings and initialisation diagnostics
    extension: ExtensionRecord | None = None
    #: what ``extend --apply`` wrote (the extended model: tokenizer and new rows)
    apply: ApplyRecord | None = None
    #: "Ready to fine-tune?": the training data's findings (embscope.readiness; ``finetune`` before
    #: schema version 8)
    readiness: CheckRecord | None = None
    #: what ``--repair`` wrote (the flagged rows the data uses, re-initialised)
    repair: RepairRecord | None = None
    #: "What training changed": BASE against TUNED, row by row (embscope.changes)
    diff: DiffRecord | None = None


@dataclass
class TensorDigests(Record):
    """What the model's matrices hash to (:func:`embscope.provenance.tensor_digest`)."""

    #: the input embedding's digest, ``<hash>:<32 hex>``
    embed: str
    #: the untied head's; null when tied
    output: str | None


@dataclass
class ModelInputs(Record):
    """The model a run read."""

    #: the spec as given
    spec: str
    #: what its matrices hash to
    tensors: TensorDigests
    #: a hub model read by byte ranges: the commit, each file's ETag and the ranges read
    hub: HubRead | None = None


@dataclass
class Fingerprints(Record):
    """What a run read, hashed (``summary.json`` → ``inputs``)."""

    #: the model (null for tokenizer-only runs)
    model: ModelInputs | None = None
    #: {corpus path: digest of its files}: the corpora measured per language, the domain corpus, ``--corpus``
    corpora: dict[str, TreeDigest] = field(default_factory=dict)
    #: the tokenizer specs measured beside the model's own
    tokenizers: list[str] = field(default_factory=list)
    #: {training-data path: digest of its files, or ``glob`` for a glob}; null without training data
    training: dict[str, TreeDigest | str] | None = None


@dataclass
class Summary(Record):
    """The whole ``summary.json``."""

    #: the layout version of this file (see SCHEMA_VERSION)
    schema_version: int
    #: the embscope run: version, git commit, start time, Python, command
    embscope: RunStamp
    #: {distribution: version} of the libraries that shape the results
    versions: dict[str, str]
    #: what was read, hashed: the model's matrices, the corpora, the training data
    inputs: Fingerprints
    #: every option of the run
    parameters: RunOptions
    #: {step: seconds}, in the order the steps ran
    timings: dict[str, float]
    #: the model's facts; null for tokenizer-only runs
    model: ModelRecord | None
    #: the section records
    sections: Sections
    #: {section: why it has no record}
    skipped: dict[str, str] = field(default_factory=dict)
    #: what the user should know about this run
    warnings: list[str] = field(default_factory=list)
    #: one short verdict per section with its number and the next command (embscope.verdict); the
    #: terminal's last lines and the report's first screen show it
    bottom_line: BottomLine | None = None


def read_summary(data: Any, *, where: str = "summary.json") -> Summary:
    """Check and convert parsed ``summary.json`` data; :class:`RecordError` names what is wrong."""
    if not isinstance(data, dict):
        raise RecordError(f"{where} does not hold a JSON object; re-run embscope to rewrite it")
    version = data.get("schema_version")
    if version == 7:  # the one older version read (its upgrade below)
        data = _from_7(data)
        version = SCHEMA_VERSION
    if version != SCHEMA_VERSION:
        raise RecordError(f"{where} has schema version {version!r}, this embscope reads {SCHEMA_VERSION}; "
                          "re-run the command that wrote it")
    try:
        return Summary.from_dict(data)
    except RecordError as err:
        raise RecordError(f"{where}: {err}; re-run the command that wrote it") from None


def _from_7(data: dict) -> dict:
    """A version 7 ``summary.json`` as version 8: ``sections.finetune`` is ``sections.readiness``, and
    the verdicts that named it name the new key.

    >>> _from_7({"schema_version": 7, "sections": {"finetune": {"x": 1}}, "bottom_line": {"verdicts": [
    ...     {"section": "finetune", "source": "finetune.findings"}]}})["sections"]
    {'readiness': {'x': 1}}
    """
    data = dict(data, schema_version=8, **{k: _renamed(data[k]) for k in ("sections", "skipped") if k in data})
    line = data.get("bottom_line")
    if isinstance(line, dict) and isinstance(line.get("verdicts"), list):
        data["bottom_line"] = dict(line, verdicts=[
            dict(v, section="readiness", source=_renamed(v.get("source"))) if isinstance(v, dict)
            and v.get("section") == "finetune" else v for v in line["verdicts"]])
    return data


def _renamed(x: Any) -> Any:
    """``finetune`` → ``readiness``: a dict's key, or the head of a dotted source (``finetune.findings``)."""
    if isinstance(x, dict):
        return {("readiness" if k == "finetune" else k): v for k, v in x.items()}
    if isinstance(x, str) and (x == "finetune" or x.startswith("finetune.")):
        return "readiness" + x[len("finetune"):]
    return x
