"""The sections, in run order. Each registers itself where it is defined
(:func:`embscope.sections.base.section`): what it runs, what it records, which tables it writes,
what it reads from the run's :class:`~embscope.sections.base.SectionInputs` and what it hands to the
sections after it. Importing this module imports every section module, in the order below.

The runner (:func:`embscope.runner.run`) is a loop over :data:`SECTIONS`: it calls each section
that is asked for and enabled, records its record (or the reason it has none), and folds the
values the section *gives* into the inputs of the next ones. A section may give only the fields it
declares, and reads only those it declares (``tests/test_structure.py`` checks both in its source):

============  =======================================  ==========================  ======================
section       reads                                    gives                       tables
============  =======================================  ==========================  ======================
context       model                                    —                           —
tokens        model, corpora, data                     tokens, scan                tokens
languages     vocabs, model, languages, tokens         —                           languages
extension     model, domain, tokens                    extension                   candidates, new_tokens
apply         model, extension, tokens, force          —                           —
readiness     model, tokens, data                      repair_rows                 findings
repair        scan, repair_rows, force                 —                           —
diff          model, tokens, data, languages           —                           diff
============  =======================================  ==========================  ======================

The runner fills the inputs from what the run was given; ``domain`` (the extension's corpus) is the
one it was given, else the first corpus in one language (:func:`embscope.runner.domain_corpus`).
The inputs bear the command line's names: ``data`` is ``--data`` (training data), ``corpora`` is
``--corpus`` (the user's own text), ``languages`` the corpora measured per language.

``requires`` names the inputs a section cannot run without: the check runs on training data only;
the diff reads training data when there is some.

Adding a section: write ``sections/<name>.py`` (a function ``(SectionInputs) -> SectionOutput`` under
``@section(...)``, and its :class:`~embscope.records.Record`), import it below in its place in the
run order, and add a field to :class:`embscope.summary.Sections`; ``tests/test_structure.py``
checks that the three agree.
"""

from __future__ import annotations

from embscope.sections import apply, context, diff, extension, languages, readiness, repair, tokens
from embscope.sections.base import REGISTERED, Section

#: the section modules in run order: a section reads only what the ones before it give
MODULES = (context, tokens, languages, extension, apply, readiness, repair, diff)

SECTIONS: tuple[Section, ...] = tuple(s for m in MODULES for s in REGISTERED.values() if s.run.__module__ == m.__name__)
#: section names in run order
SECTION_NAMES: tuple[str, ...] = tuple(s.name for s in SECTIONS)
BY_NAME: dict[str, Section] = {s.name: s for s in SECTIONS}
