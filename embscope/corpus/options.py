"""How a run reads its corpora and training data, where the passes run, and the bounds (:class:`CorpusOptions`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from embscope.arguments import at_least
from embscope.errors import SpecError
from embscope.records import Record

#: most ``--workers`` (processes or Ray CPUs): far above any machine, below every OS's process cap
MAX_WORKERS = 4096


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
        at_least("--sample-bytes", self.sample_bytes, 1)
        if self.workers is not None and self.workers > MAX_WORKERS:
            raise SpecError(f"--workers must be at most {MAX_WORKERS}, got {self.workers}")
        self.corpus_engine()  # unknown engine, bad worker count, --ray-address without ray
        if not self.text_field:
            raise SpecError("--text-field must name a field, e.g. text")
        return self
