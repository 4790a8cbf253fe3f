"""After the fine-tune: which token rows training moved, whether the new tokens learnt, what it broke.

``embscope diff BASE TUNED`` compares two models' input embeddings (and heads, when either is
untied) row by row: :func:`~embscope.delta.core.diff_models` reads TUNED — any model spec, or a PEFT
adapter folder on BASE (:mod:`~embscope.delta.peft`) — measures the noise floor the two storage
formats leave on unchanged rows (:mod:`~embscope.delta.noise`), compares every row once
(:mod:`~embscope.delta.rows`), rows added past BASE's vocabulary against their initial rows
(:mod:`~embscope.delta.manifest`), counts the rows the training data uses and the languages whose rows
moved (:mod:`~embscope.delta.languages`), and reports what went wrong as findings with stable codes
(:mod:`~embscope.delta.findings`). Only the matrices are read: no whole-model load.
"""

from __future__ import annotations

_LAZY = {"DiffResult": "embscope.delta.core", "diff_models": "embscope.delta.core", "CODES": "embscope.delta.findings",
         "DiffRecord": "embscope.delta.record", "MatrixDiff": "embscope.delta.record"}


def __getattr__(name: str):
    if name in _LAZY:  # the record is imported by embscope.summary: keep that import light
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'embscope.delta' has no attribute {name!r}")


__all__ = sorted(_LAZY)
