"""What every section shares: its inputs and what it hands back (options: :mod:`~embscope.sections.options`).

A section is a function ``(inputs: SectionInputs) -> SectionOutput``. It reads the loaded model, the
corpora and what earlier sections gave (the tokens table, the scan result, the domain corpus), and
returns a typed record (a :class:`~embscope.records.Record`), its Parquet tables, the values it
gives to later sections, and — when it has nothing to report — the reason instead of a record.
The runner writes the output folder; the one section that writes elsewhere is ``repair``, to the
folder its option names.

A section registers itself where it is defined, with :func:`section`: its name, its record, its
tables, the :class:`SectionInputs` fields it reads and those it gives; :mod:`embscope.sections.registry`
imports the section modules in run order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from embscope.progress import Steps
from embscope.records import Record
from embscope.sections.options import RunOptions  # noqa: F401 - its home before options.py

if TYPE_CHECKING:  # pragma: no cover
    import polars as pl

    from embscope.extension.extension import ExtensionResult
    from embscope.geometry.scan import ScanResult
    from embscope.models.model import LoadedModel
    from embscope.tokenizer.base import Vocabulary


class Scanned(NamedTuple):
    """The geometry scan of the run's model (given by the tokens section): ``model, result =
    inputs.scan`` unpacks it as the ``(model, ScanResult)`` pair it replaces."""

    #: the model scanned
    model: "LoadedModel"
    #: its per-row columns, summary, verification and corpus usage
    result: "ScanResult"


@dataclass
class SectionInputs:
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
    #: rows the check's error-level findings point at (given by the readiness section): what
    #: ``--repair`` rewrites instead of the scan's used flagged rows; None without a check
    repair_rows: list[int] | None = None
    #: a section that writes a folder of its own (repair) may replace an earlier embscope folder
    force: bool = False


@dataclass
class SectionOutput:
    """A section's result: a record, or the reason it has none; plus its tables and warnings."""

    record: Record | None = None
    #: file stem (``tokens``, ``languages``, ``candidates``) → polars DataFrame
    tables: "dict[str, pl.DataFrame]" = field(default_factory=dict)
    #: why the section has nothing to report (the run goes on)
    skipped: str | None = None
    #: things the user should know, listed at the end of the run
    warnings: list[str] = field(default_factory=list)
    #: the analysis's own result, for a caller after the run (never written): the :class:`Scanned`
    #: scan, the extension's result, the manifest ``apply`` or ``repair`` wrote, the diff's result
    result: Any = None
    #: values for the :class:`SectionInputs` of later sections (only the fields the registry says it gives)
    gives: dict[str, Any] = field(default_factory=dict)
    #: work the section started and left running in the background (the map), finished before
    #: the tables are written, cancelled when the run fails
    background: "Background | None" = None


class Background(Protocol):
    """Work a section left running while the later sections run (the map's layout process)."""

    def finish(self) -> None:
        """Complete the section's record and tables (waits for the work)."""

    def cancel(self) -> None:
        """Abandon the work (the run failed)."""


def _always(options: RunOptions) -> bool:
    return True


@dataclass(frozen=True)
class Section:
    """A registered section: what it runs, records, writes, reads and gives."""

    #: the key in ``summary.json`` ``sections`` and in ``run(sections=[...])``
    name: str
    #: the section function, ``(SectionInputs) -> SectionOutput``
    run: Callable[[SectionInputs], SectionOutput]
    #: the record class stored under ``sections.<name>``
    record: type[Record]
    #: the Parquet tables it writes (file stems)
    tables: tuple[str, ...] = ()
    #: the :class:`SectionInputs` fields it reads (besides ``options`` and ``steps``, which every section may)
    reads: tuple[str, ...] = ()
    #: the :class:`SectionInputs` fields it fills for the sections after it
    gives: tuple[str, ...] = ()
    #: whether the options ask for it at all (a section that is not enabled is not run, not skipped)
    enabled: Callable[[RunOptions], bool] = _always
    #: the :class:`SectionInputs` fields without which it is not run (asked for or not)
    requires: tuple[str, ...] = ()

    @property
    def entry(self) -> str:
        """``module:function`` of the section function."""
        return f"{self.run.__module__}:{self.run.__name__}"

    def function(self) -> Callable[[SectionInputs], SectionOutput]:
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
    def register(fn: Callable[[SectionInputs], SectionOutput]) -> Callable[[SectionInputs], SectionOutput]:
        if name in REGISTERED:
            raise TypeError(f"section {name!r} is registered twice ({REGISTERED[name].entry} and "
                            f"{fn.__module__}:{fn.__name__})")  # a bug, not input
        REGISTERED[name] = Section(name, fn, record, tuple(tables), tuple(reads), tuple(gives), enabled,
                                   tuple(requires))
        return fn

    return register
