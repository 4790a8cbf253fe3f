"""Ready to fine-tune? The user's training data, read and tokenized as the trainer will, checked
against the model's vocabulary hazards.

:func:`check_data` reads the data (:mod:`embscope.corpus.conversations`), collects the special ids
from every source (:mod:`~embscope.readiness.specials`), renders and tokenizes each example
(:mod:`~embscope.readiness.encode`) and turns what it finds into findings with stable codes
(:mod:`~embscope.readiness.findings`). It reads only the matrices, the config and the tokenizer
files: no whole-model load.
"""

from __future__ import annotations

from embscope.readiness.record import CODES, SEVERITIES, CheckRecord, Finding, worst

#: the check's functions, imported on first use: the record above is read with every summary.json
#: (and by ``embscope --help``), the check needs numpy and the tokenizer
_LAZY = {"check_data": "embscope.readiness.check", "make_context": "embscope.readiness.check",
         "trainer_sequences": "embscope.readiness.check", "findings_frame": "embscope.readiness.findings"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'embscope.readiness' has no attribute {name!r}")


__all__ = sorted(["CODES", "SEVERITIES", "CheckRecord", "Finding", "worst", *_LAZY])
