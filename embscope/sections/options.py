"""The options of a run, one typed group per stage, and :class:`RunOptions`, all of them together.

Each stage reads its own group: :class:`LoadOptions` (resolve and load the model),
:class:`ScanOptions` (indicators, kNN graph, map, verification), :class:`RepairOptions`,
:class:`CorpusOptions` (how corpora are read and where the passes run), :class:`LanguageOptions`,
:class:`ExtensionOptions` (candidates, initialisation, ``--apply``), :class:`CheckOptions` (the
pre-fine-tune check) and :class:`DiffOptions`. Each group checks its own values (``check()``: a
one-line :class:`~embscope.errors.SpecError` naming the option and what to pass) before any work.

:class:`RunOptions` derives from every group, so its fields are theirs, flat: ``summary.json``
records them under ``parameters`` with the names below, and the API functions
(:mod:`embscope.api`) take them as keyword parameters of the same names.

>>> ScanOptions(k=5).check().k
5
>>> RunOptions.build(thresold=3)
Traceback (most recent call last):
...
embscope.errors.SpecError: unknown option 'thresold' (did you mean 'threshold'?); see embscope.RunOptions
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embscope.errors import SpecError, did_you_mean
from embscope.records import Record

#: largest ``--threshold`` in robust sigmas: scores of real rows lie within about ±100
MAX_THRESHOLD = 1000.0
#: most ``--workers`` (processes or Ray CPUs): far above any machine, below every OS's process cap
MAX_WORKERS = 4096
#: where the matrices are computed
DEVICES = ("auto", "cpu", "cuda")
#: what a hub model's download reads: only the embedding/head tensors' bytes, or the whole shards
DOWNLOADS = ("ranges", "full")


@functools.lru_cache(maxsize=1)
def choices() -> dict[str, tuple[str, ...]]:
    """``{option: the values it accepts}`` for every option with a fixed set, read from the registry
    that defines them (the command line lists the same ones, so a new method, format or trainer
    appears in ``--help`` by being registered).

    >>> choices()["engine"], choices()["device"]
    (('local', 'ray'), ('auto', 'cpu', 'cuda'))
    """
    from embscope.corpus.backend import ENGINES
    from embscope.corpus.shapes import FORMATS
    from embscope.extension.init import AUTO, STRATEGIES
    from embscope.readiness.trainers import GGUF_TOKENIZERS, TRAINERS
    from embscope.geometry.knn_record import METHODS
    from embscope.geometry.records import SAMPLES
    from embscope.limits import Limits
    from embscope.models.writer import MODES
    from embscope.tokenizer.extend import FORMS
    from embscope.extension.extension import METHODS as EXTEND_METHODS

    return {"device": DEVICES, "download": DOWNLOADS, "knn_method": METHODS, "verify_sample": SAMPLES,
            "engine": tuple(ENGINES), "extend_as": FORMS, "init": (AUTO, *STRATEGIES), "apply_mode": MODES,
            "data_format": FORMATS, "trainer": tuple(TRAINERS), "gguf_tokenizer": GGUF_TOKENIZERS,
            "limits": tuple(Limits.names()), "method": EXTEND_METHODS}


def _choose(flag: str, value: Any, choices, what: str = "") -> None:
    """A one-line error when ``value`` is not one of ``choices``, with a "did you mean"."""
    if value not in choices:
        raise SpecError(f"{flag} {value!r} is not {what or 'a choice'}{did_you_mean(str(value), choices)}; "
                        f"choose from {', '.join(choices)}")


def _at_least(flag: str, value: int | float | None, least: int | float) -> None:
    if value is not None and value < least:
        raise SpecError(f"{flag} must be at least {least:g}, got {value}")


@dataclass
class LoadOptions(Record):
    """How the model is resolved and loaded."""

    #: auto, cpu or cuda
    device: str = "auto"
    #: a hub model's weights: ``ranges`` (only the embedding/head tensors' bytes) or ``full`` (whole shards)
    download: str = "ranges"
    #: allow PyTorch pickle checkpoints (still loaded with ``weights_only=True``)
    trust_pickle: bool = False

    def check(self):
        _choose("--device", self.device, choices()["device"], "a device")
        _choose("--download", self.download, choices()["download"], "a download mode")
        return self


@dataclass
class ScanOptions(Record):
    """The geometry scan: indicators, kNN graph, 2-D map, verification by prompting."""

    #: run the geometry scan (indicators, kNN graph) inside the tokens section
    scan: bool = True
    #: nearest neighbours per row in the kNN graph
    k: int = 10
    #: kNN method (:data:`embscope.geometry.knn_record.METHODS`; embscope.geometry.knn)
    knn_method: str = "auto"
    #: draw the 2-D UMAP map of the kNN graph (``--no-map``: off; the slowest part of the scan on
    #: large vocabularies)
    map: bool = True
    #: ``undertrained_score`` (robust sigmas of the strongest indicator) at or above which a row is
    #: flagged (see embscope.geometry.indicators)
    threshold: float = 4.0
    #: token ids known to be unused (the Magikarp reference set); null finds them automatically
    unused_ids: list[int] | None = None
    #: check N flagged rows (and up to 100 trained controls) by prompting the whole model; 0: off;
    #: null: automatic (``audit``): a random sample when the whole weights fit the memory budget
    verify: int | None = 0
    #: which flagged rows ``verify`` checks: top (highest scores) or random (seeded sample of all flags)
    verify_sample: str = "top"
    #: the prompting's work budget, 10¹² multiply-adds (tokens × parameters; null: the automatic
    #: run's 30, else none): rows beyond it stay unchecked, so the same rows are checked at any load
    verify_work: float | None = None
    #: folder for the kNN cache (null: ``$EMBSCOPE_CACHE`` or ``~/.cache/embscope``)
    cache_dir: str | None = None

    def check(self):
        import math

        from embscope.geometry.indicators import DEFAULT_THRESHOLD
        from embscope.geometry.verify import MAX_VERIFY, SECONDS_PER_ROW_CPU

        _at_least("--k", self.k, 1)
        if not math.isfinite(self.threshold) or abs(self.threshold) > MAX_THRESHOLD:
            raise SpecError(f"--threshold must be a finite number from -{MAX_THRESHOLD:g} to {MAX_THRESHOLD:g} (robust "
                            f"sigmas), got {self.threshold}; the default is {DEFAULT_THRESHOLD:g}")
        _at_least("--verify", self.verify, 0)
        if self.verify is not None and self.verify > MAX_VERIFY:
            lo, hi = (round(MAX_VERIFY * s / 60) for s in SECONDS_PER_ROW_CPU)
            raise SpecError(f"--verify {self.verify} is over the cap of {MAX_VERIFY} rows (each takes "
                            f"{SECONDS_PER_ROW_CPU[0]:g}–{SECONDS_PER_ROW_CPU[1]:g} s on a CPU, so {MAX_VERIFY} rows "
                            f"take {lo}–{hi} min); pass --verify {MAX_VERIFY} or less")
        _choose("--verify-sample", self.verify_sample, choices()["verify_sample"], "a way to pick rows")
        if self.verify_work is not None and not (self.verify_work > 0 and math.isfinite(self.verify_work)):
            raise SpecError(f"--verify-work must be a positive number (10^12 multiply-adds), got {self.verify_work}")
        _choose("--knn", self.knn_method, choices()["knn_method"], "a kNN method")
        if self.unused_ids is not None and any(i < 0 for i in self.unused_ids):
            raise SpecError("--unused-ids must be row numbers (0 or more)")
        return self


@dataclass
class RepairOptions(Record):
    """``--repair``: the model written again with the flagged rows the data uses re-initialised."""

    #: also write the model with the flagged rows the data uses re-initialised, to this folder
    repair_to: str | None = None
    #: initialisation of the repaired rows: ``NAME`` or ``INPUT/OUTPUT``
    repair_init: str = "subword-mean"

    def check(self):
        from embscope.extension.init import parse_init

        parse_init(self.repair_init)
        return self


@dataclass
class CorpusOptions(Record):
    """How corpora and training data are read, where the passes over them run, and the bounds."""

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
    #: raised bounds, ``NAME=VALUE`` (``file-bytes=8G``); the rest keep their defaults (docs/limits.md)
    limits: list[str] = field(default_factory=list)
    #: the field of records (jsonl key, Parquet/Arrow column) that aligns them across languages
    #: (parity compares the units two languages share); a FLORES table without it aligns by ``id``
    unit_field: str = "unit"

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
                           unit_field=self.unit_field or None,
                           max_file_bytes=b.file_bytes, max_corpus_bytes=b.corpus_bytes, max_ratio=b.ratio)

    def check(self):
        self.bounds()  # a bad --limit fails here
        _at_least("--sample-bytes", self.sample_bytes, 1)
        if self.workers is not None and self.workers > MAX_WORKERS:
            raise SpecError(f"--workers must be at most {MAX_WORKERS}, got {self.workers}")
        self.corpus_engine()  # unknown engine, bad worker count, --ray-address without ray
        if not self.text_field:
            raise SpecError("--text-field must name a field, e.g. text")
        return self


@dataclass
class LanguageOptions(Record):
    """Per-language costs (fertility, parity)."""

    #: reference language for parity
    reference: str = "eng"
    #: the order α of renyi_efficiency (Zouhar et al. 2023: 2.5)
    renyi_alpha: float = 2.5
    #: a data mix's language shares (JSON object or TSV code → share) for tokenizers.mix_tokens_per_unit
    weights: str | None = None
    #: bootstrap resamples of every interval over aligned units
    resamples: int = 1000
    #: the bootstrap's seed
    seed: int = 0
    #: the intervals' coverage
    level: float = 0.95
    #: the work the model may do scoring each language's aligned text (``bits_per_byte``,
    #: ``information_parity``), 10¹² multiply-adds (tokens × parameters, known before it runs;
    #: units past it are left out in every language; null: 20 in ``fertility --model``, 0.5 in
    #: ``audit``; 0: off)
    model_work: float | None = None
    #: languages measured (empty: every language): codes, ``script:XXXX`` (ISO 15924), ``family:NAME``
    #: (Glottolog) or ``set:audit``; the reference is always measured (docs/languages.md)
    lang: list[str] = field(default_factory=list)

    def check(self):
        import math

        if not self.reference:
            raise SpecError("--reference must name a language of the corpus, e.g. eng")
        if not self.renyi_alpha > 0:
            raise SpecError(f"--renyi-alpha must be a positive number, got {self.renyi_alpha}")
        _at_least("--resamples", self.resamples, 10)
        if not 0 < self.level < 1:
            raise SpecError(f"--level must lie strictly between 0 and 1 (0.95 for 95 % intervals), got {self.level}")
        if self.weights:
            from embscope.languages.weights import read_weights

            read_weights(self.weights)  # a bad file fails before any work
        if self.model_work is not None and not (math.isfinite(self.model_work) and self.model_work >= 0):
            raise SpecError(f"--model-work must be a number (10^12 multiply-adds), 0 or more (got {self.model_work})")
        for spec in self.lang:
            if not isinstance(spec, str) or not spec.strip() or spec.endswith(":"):
                raise SpecError(f"--lang {spec!r} needs a value: a language code, script:XXXX or family:NAME")
        return self

    def bootstrap(self):
        """The :class:`~embscope.languages.intervals.Bootstrap` these options ask for."""
        from embscope.languages.intervals import Bootstrap

        return Bootstrap(resamples=self.resamples, seed=self.seed, level=self.level)


@dataclass
class ExtensionOptions(Record):
    """Vocabulary-extension candidates, their initialisation, and ``--apply``."""

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
    #: the work ``distil`` may do inside ``--init auto``, 10¹² multiply-adds (tokens × parameters,
    #: known before it runs; null: 20 in ``extend``, 0 in ``audit``); a named ``--init distil``
    #: always runs
    distil_work: float | None = None
    #: also write the extended model (``extend --apply``) to this folder
    apply_to: str | None = None
    #: initialisation of the new rows ``apply_to`` writes: ``auto`` (the recommended strategy),
    #: ``NAME`` or ``INPUT/OUTPUT``
    apply_init: str = "auto"
    #: what ``apply_to`` holds: ``auto`` (a transformers folder when the whole model loads, else the
    #: new rows), ``full`` or ``rows``
    apply_mode: str = "auto"
    #: how new tokens are picked: ``terms`` (the best words by estimated savings) or ``merges``
    #: (continued BPE on the corpus, up to ``rows`` new tokens)
    method: str = "terms"
    #: the most rows (new tokens, intermediates included) the tokenizer grows by (null: ``--top``
    #: terms and their chains); ``--method merges`` needs it
    rows: int | None = None
    #: the extension's target language (ISO 639-3, as corpora/udhr names it): before/after figures
    #: in it, and ``auto`` picks on its bits per byte (null: the corpus's main language, figures only)
    target_lang: str | None = None
    #: also diagnose each strategy's per-script norm-corrected twin (``NAME+norm``)
    norm_correction: bool = False

    def check(self):
        import math
        import re

        from embscope.extension.init import expand_specs, parse_init

        for name in ("top", "max_ngram", "min_freq"):
            _at_least(f"--{name.replace('_', '-')}", getattr(self, name), 1)
        expand_specs(self.init)  # unknown strategy names fail here, with "did you mean"
        if self.target_lang is not None and not re.fullmatch(r"[a-z]{2,3}(_[a-z]{4})?", self.target_lang):
            raise SpecError(f"--lang {self.target_lang!r} is not a language code: use ISO 639-3 as corpora/udhr names "
                            "its files (hin, tam, ben, cmn_hans)")
        forms = choices()["extend_as"]
        if self.extend_as not in forms:
            raise SpecError(f"--as {self.extend_as!r}: choose from {', '.join(forms)}{did_you_mean(self.extend_as, forms)}")
        _at_least("--bpb-bytes", self.bpb_bytes, 256)
        if self.distil_work is not None and not (math.isfinite(self.distil_work) and self.distil_work >= 0):
            raise SpecError(f"--distil-work must be a number (10^12 multiply-adds), 0 or more (got {self.distil_work})")
        if self.apply_init != "auto":
            parse_init(self.apply_init)
        _choose("--apply-mode", self.apply_mode, choices()["apply_mode"], "an apply mode")
        _choose("--method", self.method, choices()["method"], "an extension method")
        _at_least("--rows", self.rows, 1)
        if self.method == "merges" and self.rows is None:
            raise SpecError("--method merges needs --rows N: the most rows the tokenizer may grow by")
        if self.method == "merges" and self.extend_as != "model":
            raise SpecError("--method merges writes merges into the tokenizer's model; drop --as added")
        return self


@dataclass
class CheckOptions(Record):
    """The pre-fine-tune check: how the trainer reads, renders and labels the training data."""

    #: training-data record format for the check (null: detected per record)
    data_format: str | None = None
    #: the trainer's sequence length, tokens (null: the config's context)
    max_length: int | None = None
    #: a chat template file (.jinja) to render the training data with (null: the model's own)
    chat_template: str | None = None
    #: the trainer whose ids, labels and loss mask the check follows (embscope.readiness.trainers)
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
    #: a GGUF model's tokenizer for the check: ``llamacpp`` (as llama.cpp splits) or ``transformers``
    #: (transformers' GGUF conversion: what a TRL or transformers script loading the GGUF gets)
    gguf_tokenizer: str = "llamacpp"
    #: Unsloth's ``train_on_responses_only`` (``--trainer unsloth``): only the assistant responses in the loss
    responses_only: bool = False
    #: its ``instruction_part``, the text that opens a user turn (null: read off the chat template)
    instruction_part: str | None = None
    #: its ``response_part``, the text that opens an assistant turn (null: read off the chat template)
    response_part: str | None = None

    def check(self):
        from embscope.readiness.trainers import check_options, get_trainer

        if self.data_format is not None:
            _choose("--format", self.data_format, choices()["data_format"], "a record format")
        _at_least("--max-length", self.max_length, 1)
        get_trainer(self.trainer)  # an unknown --trainer fails here, with "did you mean"
        _choose("--gguf-tokenizer", self.gguf_tokenizer, choices()["gguf_tokenizer"], "a GGUF tokenizer")
        if self.pad_token is not None and not self.pad_token:
            raise SpecError("--pad-token must name a token, e.g. '<|endoftext|>'")
        check_options(self.trainer, lf_template=self.lf_template, train_on_prompt=self.train_on_prompt,
                      mask_history=self.mask_history, gguf_tokenizer=self.gguf_tokenizer,
                      responses_only=self.responses_only, instruction_part=self.instruction_part,
                      response_part=self.response_part)
        if self.split is not None and not self.split:
            raise SpecError("--split must name a split, e.g. train")
        if self.chat_template is not None and not Path(self.chat_template).expanduser().is_file():
            raise SpecError(f"--chat-template {self.chat_template}: no such file; pass a chat template file (.jinja)")
        return self


@dataclass
class DiffOptions(Record):
    """The post-fine-tune diff: what it compares the run's model with."""

    #: the fine-tuned model (any model spec, or a PEFT adapter folder) diffed against the model (diff)
    tuned: str | None = None
    #: the manifest ``extend --apply`` wrote: the initial rows of the tokens added (null: the one in the
    #: model's folder, else the model's mean row)
    manifest: str | None = None

    def check(self):
        if self.manifest is not None and not Path(self.manifest).expanduser().exists():
            raise SpecError(f"--manifest {self.manifest}: no such file or folder; pass the embscope_extension.json "
                            "of `extend --apply` (or its folder)")
        return self


#: the stage groups, in the order their fields appear in ``summary.json`` ``parameters``
GROUPS = (LoadOptions, ScanOptions, RepairOptions, CorpusOptions, LanguageOptions, ExtensionOptions,
          CheckOptions, DiffOptions)


@dataclass
class RunOptions(DiffOptions, CheckOptions, ExtensionOptions, LanguageOptions, CorpusOptions, RepairOptions,
                 ScanOptions, LoadOptions):
    """Every option of a run (every stage's group, flat); recorded in ``summary.json`` under ``parameters``."""

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Every option name, in ``summary.json`` order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def build(cls, options: "RunOptions | None" = None, **fields: Any) -> "RunOptions":
        """``options`` (default: every default) with ``fields`` replaced, checked; an unknown name
        is a one-line :class:`SpecError` naming the closest option.

        >>> RunOptions.build(k=5).k
        5
        """
        names = cls.names()
        for name in fields:
            if name not in names:
                raise SpecError(f"unknown option {name!r}{did_you_mean(name, names)}; see embscope.RunOptions")
        return dataclasses.replace(options or cls(), **fields).check()

    def check(self) -> "RunOptions":
        """Refuse impossible values before any work: every group's check, then the bounds."""
        from embscope.limits import check_at_most

        for group in GROUPS:
            group.check(self)
        bounds = self.bounds()
        check_at_most("--top", self.top, bounds.top, "top")
        check_at_most("--max-ngram", self.max_ngram, bounds.max_ngram, "max-ngram")
        return self
