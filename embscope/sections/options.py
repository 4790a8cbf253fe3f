"""The options of a run, one typed group per stage, and :class:`RunOptions`, all of them together.

Each stage reads its own group: :class:`LoadOptions` (resolve and load the model),
:class:`ScanOptions` (indicators, kNN graph, map, verification), :class:`RepairOptions`,
:class:`CorpusOptions` (how corpora are read and where the passes run), :class:`LanguageOptions`,
:class:`ExtensionOptions` (candidates, initialisation, ``--apply``), :class:`CheckOptions` (the
pre-fine-tune check) and :class:`DiffOptions`. Each group checks its own values (``check()``: a
one-line :class:`~embscope.errors.SpecError` naming the option and what to pass) before any work.

:class:`RunOptions` holds one of each (``opts.scan.k``, ``opts.extension.top``): the runner hands
each section the whole, and each section hands each stage function its own group. Option names are
unique across groups, so ``summary.json`` records them flat under ``parameters`` and the API
functions (:mod:`embscope.api`) take them as keyword parameters of the same names.

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
from typing import Any

from embscope.changes.options import DiffOptions
from embscope.corpus.options import CorpusOptions
from embscope.extension.options import ExtensionOptions, RepairOptions
from embscope.geometry.options import ScanOptions
from embscope.languages.options import LanguageOptions
from embscope.models.options import DEVICES, DOWNLOADS, LoadOptions
from embscope.readiness.options import CheckOptions
from embscope.errors import SpecError, did_you_mean
from embscope.records import Record


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


#: the stage groups by their :class:`RunOptions` field, in the order their fields appear in
#: ``summary.json`` ``parameters``
GROUPS: dict[str, type[Record]] = {
    "load": LoadOptions, "scan": ScanOptions, "repair": RepairOptions, "corpus": CorpusOptions,
    "languages": LanguageOptions, "extension": ExtensionOptions, "readiness": CheckOptions, "diff": DiffOptions}


@functools.lru_cache(maxsize=1)
def _homes() -> dict[str, str]:
    """``{option name: the RunOptions field of its group}``."""
    return {f.name: group for group, cls in GROUPS.items() for f in dataclasses.fields(cls)}


@dataclass
class RunOptions(Record):
    """Every option of a run, one group per stage; ``summary.json`` records them flat under
    ``parameters`` (``parameters.k``, not ``parameters.scan.k``), and the API functions take them as
    keyword parameters of the same names.

    >>> opts = RunOptions.build(k=5, top=20)
    >>> opts.scan.k, opts.extension.top, opts.to_dict()["k"]
    (5, 20, 5)
    """

    #: resolving and loading the model (``--device``, ``--download``, ``--trust-pickle``)
    load: LoadOptions = field(default_factory=LoadOptions)
    #: the geometry scan: indicators, kNN graph, map, verification
    scan: ScanOptions = field(default_factory=ScanOptions)
    #: ``--repair``
    repair: RepairOptions = field(default_factory=RepairOptions)
    #: how corpora and training data are read, where the passes run, the bounds
    corpus: CorpusOptions = field(default_factory=CorpusOptions)
    #: the per-language measures
    languages: LanguageOptions = field(default_factory=LanguageOptions)
    #: vocabulary extension and ``--apply``
    extension: ExtensionOptions = field(default_factory=ExtensionOptions)
    #: the pre-fine-tune check (``check``'s readiness)
    readiness: CheckOptions = field(default_factory=CheckOptions)
    #: the post-fine-tune diff
    diff: DiffOptions = field(default_factory=DiffOptions)

    #: ``summary.json`` holds the groups' fields flat (scripts/schema_doc.py documents them so)
    flat = True

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Every option name, in ``summary.json`` order."""
        return tuple(_homes())

    @classmethod
    def build(cls, options: "RunOptions | None" = None, **fields: Any) -> "RunOptions":
        """``options`` (default: every default) with ``fields`` (option names, flat) replaced,
        checked; an unknown name is a one-line :class:`SpecError` naming the closest option.

        >>> RunOptions.build(k=5).scan.k
        5
        """
        homes = _homes()
        for name in fields:
            if name not in homes:
                raise SpecError(f"unknown option {name!r}{did_you_mean(name, homes)}; see embscope.RunOptions")
        base = options or cls()
        changed = {group: dataclasses.replace(getattr(base, group), **{n: v for n, v in fields.items()
                                                                      if homes[n] == group})
                   for group in {homes[n] for n in fields}}
        return dataclasses.replace(base, **changed).check()

    def to_dict(self) -> dict[str, Any]:
        """The flat record ``summary.json`` writes under ``parameters``."""
        return {k: v for group in GROUPS for k, v in getattr(self, group).to_dict().items()}

    @classmethod
    def from_dict(cls, data: Any, *, where: str = "", depth: int = 0, strict: bool = False) -> "RunOptions":
        """Read the flat record back (each group takes its own names; ``strict``: an unknown name is
        refused)."""
        from embscope.records import RecordError

        name = where or cls.__name__
        if not isinstance(data, dict):
            raise RecordError(f"{name} must be an object, got {type(data).__name__}")
        if strict:
            unknown = sorted(set(data) - set(_homes()))
            if unknown:
                raise TypeError(f"RunOptions ({name}) has no field(s) {unknown}")  # a producer bug
        return cls(**{group: kind.from_dict({k: v for k, v in data.items() if _homes().get(k) == group},
                                            where=where, depth=depth, strict=strict)
                      for group, kind in GROUPS.items()})

    def check(self) -> "RunOptions":
        """Refuse impossible values before any work: every group's check, then the bounds."""
        from embscope.limits import check_at_most

        for group in GROUPS:
            getattr(self, group).check()
        bounds = self.corpus.bounds()
        check_at_most("--top", self.extension.top, bounds.top, "top")
        check_at_most("--max-ngram", self.extension.max_ngram, bounds.max_ngram, "max-ngram")
        return self
