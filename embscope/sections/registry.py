"""The sections, declared once: what each runs, what it records, which tables it writes, what it
reads from the run's :class:`~embscope.sections.base.Inputs` and what it hands to the sections
after it.

The runner (:func:`embscope.runner.run`) is a loop over :data:`SECTIONS` in this order: it calls
each section that is asked for and enabled, records its record (or the reason it has none), and
folds the values the section *gives* into the inputs of the next ones. A section may give only the
fields declared here, so every hand-off between sections is written in this one table:

============  =====================================  ==========================  ===================
section       reads                                  gives                       tables
============  =====================================  ==========================  ===================
context       model                                  —                           —
tokens        model, data                            tokens, scan                tokens
languages     vocabs, model, corpora, tokens, domain domain (first 1-language    languages
                                                     corpus, when none given)
extension     model, domain, tokens                  —                           candidates, new_tokens
finetune      model, tokens, training                repair_rows                 findings
repair        model, scan, data, repair_rows         —                           —
============  =====================================  ==========================  ===================

Adding a section: write ``sections/<name>.py`` (a function ``(Inputs) -> SectionOutput`` and its
:class:`~embscope.records.Record`), add a row here and a field to
:class:`embscope.summary.Sections`; ``tests/test_structure.py`` checks that the two agree.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from embscope.context.summary import ContextSummary
from embscope.finetune import CheckRecord
from embscope.records import Record
from embscope.sections.base import Inputs, RunOptions, SectionOutput
from embscope.sections.extension import ExtensionRecord
from embscope.sections.languages import LanguagesRecord
from embscope.sections.repair import RepairRecord
from embscope.sections.tokens import TokensRecord


def _always(options: RunOptions) -> bool:
    return True


@dataclass(frozen=True)
class Section:
    """One row of the registry."""

    #: the key in ``summary.json`` ``sections`` and in ``run(sections=[...])``
    name: str
    #: ``module:function``, imported when the section runs
    entry: str
    #: the record class stored under ``sections.<name>``
    record: type[Record]
    #: the Parquet tables it writes (file stems)
    tables: tuple[str, ...] = ()
    #: the :class:`Inputs` fields it reads
    reads: tuple[str, ...] = ()
    #: the :class:`Inputs` fields it fills for the sections after it
    gives: tuple[str, ...] = ()
    #: whether the options ask for it at all (a section that is not enabled is not run, not skipped)
    enabled: Callable[[RunOptions], bool] = _always

    def function(self) -> Callable[[Inputs], SectionOutput]:
        module, name = self.entry.split(":")
        return getattr(importlib.import_module(module), name)


SECTIONS: tuple[Section, ...] = (
    Section("context", "embscope.sections.context:context_section", ContextSummary, reads=("model",)),
    Section("tokens", "embscope.sections.tokens:tokens_section", TokensRecord, tables=("tokens",),
            reads=("model", "data"), gives=("tokens", "scan")),
    Section("languages", "embscope.sections.languages:languages_section", LanguagesRecord,
            tables=("languages",), reads=("vocabs", "model", "corpora", "tokens", "domain"), gives=("domain",)),
    Section("extension", "embscope.sections.extension:extension_section", ExtensionRecord,
            tables=("candidates", "new_tokens"), reads=("model", "domain", "tokens")),
    Section("finetune", "embscope.sections.finetune:finetune_section", CheckRecord, tables=("findings",),
            reads=("model", "tokens", "training"), gives=("repair_rows",)),
    Section("repair", "embscope.sections.repair:repair_section", RepairRecord,
            reads=("model", "scan", "data", "repair_rows"),
            enabled=lambda o: o.repair_to is not None),
)
#: section names in run order
SECTION_NAMES: tuple[str, ...] = tuple(s.name for s in SECTIONS)
BY_NAME: dict[str, Section] = {s.name: s for s in SECTIONS}
