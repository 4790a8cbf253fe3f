"""After the fine-tune: which token rows training moved, whether the new tokens learnt, what it broke.

``embscope diff BASE TUNED`` compares two models' input embeddings (and heads, when either is
untied) row by row: :func:`~embscope.changes.core.diff_models` reads TUNED — any model spec, or a PEFT
adapter folder on BASE (:mod:`~embscope.changes.peft`) — measures the noise floor the two storage
formats leave on unchanged rows (:mod:`~embscope.changes.noise`), compares every row once
(:mod:`~embscope.changes.rows`), rows added past BASE's vocabulary against their initial rows
(:mod:`~embscope.changes.manifest`), counts the rows the training data uses and the languages whose rows
moved (:mod:`~embscope.changes.languages`), and reports what went wrong as findings with stable codes
(:mod:`~embscope.changes.findings`). Only the matrices are read: no whole-model load.
"""

from __future__ import annotations

_LAZY = {"DiffResult": "embscope.changes.core", "DiffInputs": "embscope.changes.core",
         "diff_models": "embscope.changes.core", "CODES": "embscope.changes.findings",
         "DiffRecord": "embscope.changes.record", "MatrixDiff": "embscope.changes.record"}


def __getattr__(name: str):
    if name in _LAZY:  # the record is imported by embscope.summary: keep that import light
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'embscope.changes' has no attribute {name!r}")


__all__ = sorted(_LAZY)
