"""The options of the per-language measures (:class:`LanguageOptions`): reference, intervals, selection, the model's scoring budget."""

from __future__ import annotations

from dataclasses import dataclass, field

from embscope.arguments import at_least
from embscope.errors import SpecError
from embscope.records import Record


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
        at_least("--resamples", self.resamples, 10)
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
