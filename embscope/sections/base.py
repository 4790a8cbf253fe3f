"""What every section shares: the run's options, its inputs, and what a section hands back.

A section is a function ``(inputs: Inputs) -> SectionOutput``. It reads the loaded model, the
corpora and what earlier sections gave (the tokens table, the scan result, the domain corpus), and
returns a typed record (a :class:`~embscope.records.Record`), its Parquet tables, the values it
gives to later sections, and — when it has nothing to report — the reason instead of a record.
The runner writes the output folder; the one section that writes elsewhere is ``repair``, to the
folder its option names.

A section registers itself where it is defined, with :func:`section`: its name, its record, its
tables, the :class:`Inputs` fields it reads and those it gives; :mod:`embscope.sections.registry`
imports the section modules in run order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from embscope.progress import Steps
from embscope.records import Record

if TYPE_CHECKING:  # pragma: no cover
    import polars as pl

    from embscope.extension.extension import ExtensionResult
    from embscope.geometry.scan import ScanResult
    from embscope.models.model import LoadedModel
    from embscope.tokenizer.base import Vocabulary


#: largest ``--threshold`` in robust sigmas: scores of real rows lie within about ±100
MAX_THRESHOLD = 1000.0
#: most ``--workers`` (processes or Ray CPUs): far above any machine, below every OS's process cap
MAX_WORKERS = 4096


@dataclass
class RunOptions(Record):
    """Every knob of a run; recorded in ``summary.json`` under ``parameters``."""

    #: nearest neighbours per row in the kNN graph
    k: int = 10
    #: run the geometry scan (indicators, kNN graph) inside the tokens section
    scan: bool = True
    #: compute the 2-D UMAP map (the slowest part of the scan on large vocabularies)
    layout: bool = True
    #: ``undertrained_score`` (robust sigmas of the strongest indicator) at or above which a row is
    #: flagged (see embscope.geometry.indicators)
    threshold: float = 4.0
    #: check N flagged rows (and up to 100 trained controls) by prompting the whole model; 0: off;
    #: null: automatic (``audit``): a random sample when the whole weights fit the memory budget
    verify: int | None = 0
    #: which flagged rows ``verify`` checks: top (highest scores) or random (seeded sample of all flags)
    verify_sample: str = "top"
    #: seconds after which the prompting stops (null: the automatic run's cap, else none)
    verify_time_cap: float | None = None
    #: token ids known to be unused (the Magikarp reference set); null finds them automatically
    unused_ids: list[int] | None = None
    #: kNN method: auto, exact, certified, ivf, refined or hnsw (embscope.geometry.knn)
    knn_method: str = "auto"
    #: reference language for parity
    reference: str = "eng"
    #: cap on corpus bytes read per language (null: all)
    sample_bytes: int | None = None
    #: where corpus passes run: local (processes on this machine) or ray (Ray Data, local or a cluster)
    engine: str = "local"
    #: local: worker processes (null: all cores for corpora of 32 MB or more); ray: CPUs of a local Ray
    workers: int | None = None
    #: an existing Ray cluster (null: $RAY_ADDRESS, else a local Ray started for the run)
    ray_address: str | None = None
    #: the text field of .jsonl records and Parquet/Arrow columns
    text_field: str = "text"
    #: the language field of records (an empty string: never read a language from records)
    lang_field: str = "lang"
    #: extension candidates to add (best estimated savings first)
    top: int = 200
    #: longest multi-word extension term, in words
    max_ngram: int = 1
    #: least occurrences of an extension term
    min_freq: int = 5
    #: initialisation strategies to diagnose for extension candidates (``auto``: all, and recommend one)
    init: list[str] = field(default_factory=lambda: ["auto"])
    #: load the whole model (when it fits) for the extension's KL and new-token-mass check
    diagnostics: bool = True
    #: how new tokens are written: ``model`` (BPE merges, Unigram pieces: the tokenizer's own terms)
    #: or ``added`` (HF added tokens, matched anywhere in the raw text)
    extend_as: str = "model"
    #: held-out corpus bytes the extension's bits per byte reads (null: 24 KB in ``extend``, 4 KB in
    #: ``audit``, which also reads 5 KB of general text instead of all 10 KB)
    bpb_bytes: int | None = None
    #: seconds ``distil`` may take inside ``--init auto``, estimated from its first contexts (null:
    #: 180 in ``extend``, 0 in ``audit``); a named ``--init distil`` always runs
    distil_budget: float | None = None
    #: allow PyTorch pickle checkpoints (still loaded with ``weights_only=True``)
    trust_pickle: bool = False
    #: auto, cpu or cuda
    device: str = "auto"
    #: a hub model's weights: ``ranges`` (only the embedding/head tensors' bytes) or ``full`` (whole shards)
    download: str = "ranges"
    #: folder for the kNN cache (null: ``$EMBSCOPE_CACHE`` or ``~/.cache/embscope``)
    cache_dir: str | None = None
    #: also write the model with the flagged rows the data uses re-initialised, to this folder
    repair_to: str | None = None
    #: initialisation of the repaired rows: ``NAME`` or ``INPUT/OUTPUT``
    repair_init: str = "subword-mean"
    #: also write the extended model (``extend --apply``) to this folder
    apply_to: str | None = None
    #: initialisation of the new rows ``apply_to`` writes: ``auto`` (the recommended strategy),
    #: ``NAME`` or ``INPUT/OUTPUT``
    apply_init: str = "auto"
    #: what ``apply_to`` holds: ``auto`` (a transformers folder when the whole model loads, else the
    #: new rows), ``full`` or ``rows``
    apply_mode: str = "auto"
    #: raised bounds, ``NAME=VALUE`` (``file-bytes=8G``); the rest keep their defaults (docs/limits.md)
    limits: list[str] = field(default_factory=list)
    #: training-data record format for the check (null: detected per record)
    data_format: str | None = None
    #: the trainer's sequence length, tokens (null: the config's context)
    max_length: int | None = None
    #: a chat template file (.jinja) to render the training data with (null: the model's own)
    chat_template: str | None = None
    #: the trainer whose ids, labels and loss mask the check follows (embscope.finetune.trainers)
    trainer: str = "trl"
    #: the pad token the user will set (null: the trainer's own choice)
    pad_token: str | None = None
    #: check only this split of data with several (null: each split, reported on its own)
    split: str | None = None
    #: LLaMA-Factory's ``template`` (``--trainer llamafactory``; null: read off the model's chat
    #: template, as LLaMA-Factory does when it is unset)
    lf_template: str | None = None
    #: LLaMA-Factory's ``train_on_prompt``: the prompts in the loss too
    train_on_prompt: bool = False
    #: LLaMA-Factory's ``mask_history``: only the last response in the loss
    mask_history: bool = False
    #: the fine-tuned model (any model spec, or a PEFT adapter folder) diffed against the model (diff)
    tuned: str | None = None
    #: the manifest ``extend --apply`` wrote: the initial rows of the tokens added (null: the one in the
    #: model's folder, else the model's mean row)
    manifest: str | None = None

    @classmethod
    def build(cls, options: "RunOptions | None" = None, **fields: Any) -> "RunOptions":
        """``options`` (default: every default) with ``fields`` replaced, checked.

        >>> RunOptions.build(k=5).k
        5
        """
        import dataclasses

        from embscope.errors import SpecError

        unknown = sorted(set(fields) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise SpecError(f"unknown option(s) {unknown}; see embscope.RunOptions")
        return dataclasses.replace(options or cls(), **fields).check()

    def bounds(self):
        """The :class:`~embscope.limits.Limits` of this run (defaults raised by ``limits``)."""
        from embscope.limits import parse_limits

        return parse_limits(self.limits)

    def corpus_engine(self):
        """The :class:`~embscope.corpus.engine.Engine` these options ask for."""
        from embscope.corpus.engine import Engine

        return Engine(kind=self.engine, workers=self.workers, ray_address=self.ray_address)

    def read_options(self):
        """The :class:`~embscope.corpus.readers.ReadOptions` for record fields."""
        from embscope.corpus.readers import ReadOptions

        b = self.bounds()
        return ReadOptions(text_field=self.text_field, lang_field=self.lang_field or None,
                           max_file_bytes=b.file_bytes, max_corpus_bytes=b.corpus_bytes, max_ratio=b.ratio)

    def check(self) -> "RunOptions":
        """Refuse impossible values before any work (one-line :class:`SpecError`)."""
        import math

        from embscope.errors import SpecError
        from embscope.extension.init import expand_specs, parse_init
        from embscope.geometry.indicators import DEFAULT_THRESHOLD
        from embscope.limits import check_at_most

        bounds = self.bounds()  # a bad --limit fails here
        for name in ("k", "top", "max_ngram", "min_freq"):
            if getattr(self, name) < 1:
                raise SpecError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        check_at_most("--top", self.top, bounds.top, "top")
        check_at_most("--max-ngram", self.max_ngram, bounds.max_ngram, "max-ngram")
        if not math.isfinite(self.threshold) or abs(self.threshold) > MAX_THRESHOLD:
            raise SpecError(f"--threshold must be a finite number from -{MAX_THRESHOLD:g} to {MAX_THRESHOLD:g} (robust "
                            f"sigmas), got {self.threshold}; the default is {DEFAULT_THRESHOLD:g}")
        if self.workers is not None and self.workers > MAX_WORKERS:
            raise SpecError(f"--workers must be at most {MAX_WORKERS}, got {self.workers}")
        from embscope.geometry.verify import MAX_VERIFY, SAMPLES, SECONDS_PER_ROW_CPU

        if self.verify is not None and self.verify < 0:
            raise SpecError(f"--verify must be 0 or more, got {self.verify}")
        if self.verify is not None and self.verify > MAX_VERIFY:
            lo, hi = (round(MAX_VERIFY * s / 60) for s in SECONDS_PER_ROW_CPU)
            raise SpecError(f"--verify {self.verify} is over the cap of {MAX_VERIFY} rows (each takes "
                            f"{SECONDS_PER_ROW_CPU[0]:g}–{SECONDS_PER_ROW_CPU[1]:g} s on a CPU, so {MAX_VERIFY} rows "
                            f"take {lo}–{hi} min); pass --verify {MAX_VERIFY} or less")
        if self.verify_sample not in SAMPLES:
            raise SpecError(f"--verify-sample must be one of {', '.join(SAMPLES)}, got {self.verify_sample!r}")
        if self.verify_time_cap is not None and not (self.verify_time_cap > 0 and math.isfinite(self.verify_time_cap)):
            raise SpecError(f"--verify-time-cap must be a positive number of seconds, got {self.verify_time_cap}")
        if self.sample_bytes is not None and self.sample_bytes < 1:
            raise SpecError(f"--sample-bytes must be at least 1, got {self.sample_bytes}")
        from embscope.geometry.knn import METHODS

        if self.knn_method not in METHODS:
            raise SpecError(f"--knn must be one of {', '.join(METHODS)}, got {self.knn_method!r}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise SpecError(f"--device must be auto, cpu or cuda, got {self.device!r}")
        if self.download not in ("ranges", "full"):
            raise SpecError(f"--download must be ranges or full, got {self.download!r}")
        if self.unused_ids is not None and any(i < 0 for i in self.unused_ids):
            raise SpecError("--unused-ids must be row numbers (0 or more)")
        expand_specs(self.init)  # unknown strategy names fail here, with "did you mean"
        from embscope.errors import did_you_mean
        from embscope.tokenizer.extend import FORMS

        if self.extend_as not in FORMS:
            raise SpecError(f"--as {self.extend_as!r}: choose from {', '.join(FORMS)}{did_you_mean(self.extend_as, FORMS)}")
        if self.bpb_bytes is not None and self.bpb_bytes < 256:
            raise SpecError(f"--bpb-bytes must be at least 256 (got {self.bpb_bytes})")
        if self.distil_budget is not None and not (math.isfinite(self.distil_budget) and self.distil_budget >= 0):
            raise SpecError(f"--distil-budget must be a number of seconds, 0 or more (got {self.distil_budget})")
        parse_init(self.repair_init)
        from embscope.models.writer import MODES

        if self.apply_init != "auto":
            parse_init(self.apply_init)
        if self.apply_mode not in MODES:
            raise SpecError(f"unknown apply mode {self.apply_mode!r}; choose from {', '.join(MODES)}")
        self.corpus_engine()  # unknown engine, bad worker count, --ray-address without ray
        if self.max_length is not None and self.max_length < 1:
            raise SpecError(f"--max-length must be at least 1, got {self.max_length}")
        if not self.text_field:
            raise SpecError("--text-field must name a field, e.g. text")
        from embscope.finetune.trainers import get_trainer

        get_trainer(self.trainer)  # an unknown --trainer fails here, with "did you mean"
        if self.pad_token is not None and not self.pad_token:
            raise SpecError("--pad-token must name a token, e.g. '<|endoftext|>'")
        from embscope.finetune.trainers import check_options

        check_options(self.trainer, lf_template=self.lf_template, train_on_prompt=self.train_on_prompt,
                      mask_history=self.mask_history)
        return self


class Scanned(NamedTuple):
    """The geometry scan of the run's model (given by the tokens section): ``model, result =
    inputs.scan`` unpacks it as the ``(model, ScanResult)`` pair it replaces."""

    #: the model scanned
    model: "LoadedModel"
    #: its per-row columns, summary, verification and corpus usage
    result: "ScanResult"


@dataclass
class Inputs:
    """What a section may read: what the runner loaded, and what earlier sections gave
    (:data:`embscope.sections.registry.SECTIONS` declares who gives what). The names are the
    command line's: ``--data`` is :attr:`data`, ``--corpus`` is :attr:`corpora`, ``--languages`` (and
    the corpus of ``fertility``/``compare``) is :attr:`languages`."""

    options: RunOptions
    steps: Steps
    #: the loaded model (null for tokenizer-only runs: ``fertility``, ``compare``)
    model: "LoadedModel | None" = None
    #: tokenizers to measure (the model's own first, when there is a model)
    vocabs: "Sequence[Vocabulary]" = ()
    #: corpora measured per language (fertility, parity, density; the diff's per-language drift)
    languages: Sequence[Path] = ()
    #: the domain corpus for vocabulary extension (null: no extension)
    domain: Path | None = None
    #: the tokens table as built so far (base columns + scan columns), or None
    tokens: "pl.DataFrame | None" = None
    #: the user's own corpora (``--corpus``): the scan lists which flagged rows their text produces
    corpora: Sequence[Path] = ()
    #: the geometry scan (given by the tokens section), or None
    scan: Scanned | None = None
    #: the extension's live result (given by the extension section): what ``apply`` writes
    extension: "ExtensionResult | None" = None
    #: training data (``--data``: records in any format of embscope.corpus.conversations)
    data: Sequence[Path] = ()
    #: rows the check's error-level findings point at (given by the finetune section): what
    #: ``--repair`` rewrites instead of the scan's used flagged rows; None without a check
    repair_rows: list[int] | None = None
    #: a section that writes a folder of its own (repair) may replace an earlier embscope folder
    force: bool = False


@dataclass
class SectionOutput:
    """A section's result: a record, or the reason it has none; plus its tables and warnings."""

    record: Record | None = None
    #: file stem (``tokens``, ``languages``, ``candidates``) → polars DataFrame
    tables: dict[str, Any] = field(default_factory=dict)
    #: why the section has nothing to report (the run goes on)
    skipped: str | None = None
    #: things the user should know, listed at the end of the run
    warnings: list[str] = field(default_factory=list)
    #: live objects a caller may need after the run (never written), e.g. the :class:`Scanned` scan
    live: Any = None
    #: values for the :class:`Inputs` of later sections (only the fields the registry says it gives)
    gives: dict[str, Any] = field(default_factory=dict)
    #: work the section started and left running (the map): ``finish()`` completes the record and
    #: tables before they are written, ``cancel()`` abandons it when the run fails
    pending: Any = None


def _always(options: RunOptions) -> bool:
    return True


@dataclass(frozen=True)
class Section:
    """A registered section: what it runs, records, writes, reads and gives."""

    #: the key in ``summary.json`` ``sections`` and in ``run(sections=[...])``
    name: str
    #: the section function, ``(Inputs) -> SectionOutput``
    run: Callable[[Inputs], SectionOutput]
    #: the record class stored under ``sections.<name>``
    record: type[Record]
    #: the Parquet tables it writes (file stems)
    tables: tuple[str, ...] = ()
    #: the :class:`Inputs` fields it reads (besides ``options`` and ``steps``, which every section may)
    reads: tuple[str, ...] = ()
    #: the :class:`Inputs` fields it fills for the sections after it
    gives: tuple[str, ...] = ()
    #: whether the options ask for it at all (a section that is not enabled is not run, not skipped)
    enabled: Callable[[RunOptions], bool] = _always
    #: the :class:`Inputs` fields without which it is not run (asked for or not)
    requires: tuple[str, ...] = ()

    @property
    def entry(self) -> str:
        """``module:function`` of the section function."""
        return f"{self.run.__module__}:{self.run.__name__}"

    def function(self) -> Callable[[Inputs], SectionOutput]:
        return self.run


#: every section, by name, as the section modules registered them (import order)
REGISTERED: dict[str, Section] = {}


def section(name: str, *, record: type[Record], tables: Sequence[str] = (), reads: Sequence[str] = (),
            gives: Sequence[str] = (), enabled: Callable[[RunOptions], bool] = _always,
            requires: Sequence[str] = ()) -> Callable:
    """Register the decorated function as section ``name`` (see :class:`Section` for each field).

    >>> @section("demo", record=Record, reads=("model",))
    ... def demo_section(inputs):
    ...     return SectionOutput(skipped="a demonstration")
    >>> REGISTERED.pop("demo").entry
    'embscope.sections.base:demo_section'
    """
    def register(fn: Callable[[Inputs], SectionOutput]) -> Callable[[Inputs], SectionOutput]:
        if name in REGISTERED:
            raise TypeError(f"section {name!r} is registered twice ({REGISTERED[name].entry} and "
                            f"{fn.__module__}:{fn.__name__})")  # a bug, not input
        REGISTERED[name] = Section(name, fn, record, tuple(tables), tuple(reads), tuple(gives), enabled,
                                   tuple(requires))
        return fn

    return register
