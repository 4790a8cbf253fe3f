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
from dataclasses import dataclass
from typing import Any

from embscope.changes.options import DiffOptions
from embscope.corpus.options import CorpusOptions
from embscope.extension.options import ExtensionOptions, RepairOptions
from embscope.geometry.options import ScanOptions
from embscope.languages.options import LanguageOptions
from embscope.models.options import DEVICES, DOWNLOADS, LoadOptions
from embscope.readiness.options import CheckOptions
from embscope.errors import SpecError, did_you_mean


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
