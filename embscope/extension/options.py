"""The options of vocabulary extension (:class:`ExtensionOptions`: candidates, initialisation, ``--apply``) and of ``--repair`` (:class:`RepairOptions`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from embscope.arguments import at_least, one_of
from embscope.errors import SpecError, did_you_mean
from embscope.records import Record

#: how ``extend`` picks new tokens: the best words (``terms``), or continued BPE (``merges``)
METHODS = ("terms", "merges")


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
        from embscope.models.writer import MODES
        from embscope.tokenizer.extend import FORMS

        for name in ("top", "max_ngram", "min_freq"):
            at_least(f"--{name.replace('_', '-')}", getattr(self, name), 1)
        expand_specs(self.init)  # unknown strategy names fail here, with "did you mean"
        if self.target_lang is not None and not re.fullmatch(r"[a-z]{2,3}(_[a-z]{4})?", self.target_lang):
            raise SpecError(f"--lang {self.target_lang!r} is not a language code: use ISO 639-3 as corpora/udhr names "
                            "its files (hin, tam, ben, cmn_hans)")
        if self.extend_as not in FORMS:
            raise SpecError(f"--as {self.extend_as!r}: choose from {', '.join(FORMS)}{did_you_mean(self.extend_as, FORMS)}")
        at_least("--bpb-bytes", self.bpb_bytes, 256)
        if self.distil_work is not None and not (math.isfinite(self.distil_work) and self.distil_work >= 0):
            raise SpecError(f"--distil-work must be a number (10^12 multiply-adds), 0 or more (got {self.distil_work})")
        if self.apply_init != "auto":
            parse_init(self.apply_init)
        one_of("--apply-mode", self.apply_mode, MODES, "an apply mode")
        one_of("--method", self.method, METHODS, "an extension method")
        at_least("--rows", self.rows, 1)
        if self.method == "merges" and self.rows is None:
            raise SpecError("--method merges needs --rows N: the most rows the tokenizer may grow by")
        if self.method == "merges" and self.extend_as != "model":
            raise SpecError("--method merges writes merges into the tokenizer's model; drop --as added")
        return self
