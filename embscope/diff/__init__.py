"""After the fine-tune: which token rows training moved, whether the new tokens learnt, what it broke.

``embscope diff BASE TUNED`` compares two models' input embeddings (and heads, when either is
untied) row by row: :func:`~embscope.diff.core.diff_models` reads TUNED — any model spec, or a PEFT
adapter folder on BASE (:mod:`~embscope.diff.peft`) — measures the noise floor the two storage
formats leave on unchanged rows (:mod:`~embscope.diff.noise`), compares every row once
(:mod:`~embscope.diff.rows`), rows added past BASE's vocabulary against their initial rows
(:mod:`~embscope.diff.manifest`), counts the rows the training data uses and the languages whose rows
moved (:mod:`~embscope.diff.languages`), and reports what went wrong as findings with stable codes
(:mod:`~embscope.diff.findings`). Only the matrices are read: no whole-model load.
"""

from __future__ import annotations

_LAZY = {"DiffResult": "embscope.diff.core", "diff_models": "embscope.diff.core", "CODES": "embscope.diff.findings",
         "DiffRecord": "embscope.diff.record", "MatrixDiff": "embscope.diff.record"}


def __getattr__(name: str):
    if name in _LAZY:  # the record is imported by embscope.summary: keep that import light
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'embscope.diff' has no attribute {name!r}")


__all__ = sorted(_LAZY)
