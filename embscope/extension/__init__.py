"""Vocabulary extension: which domain terms to add, what that saves, how to initialise new rows.

    from embscope.extension import ExtensionOptions, suggest, apply
    result = suggest(model, "corpora/medical", ExtensionOptions(top=200, init=["subword-mean", "hewitt"]))
    apply(model, result, "out/smollm2-medical", init="subword-mean")

Modules: :mod:`.candidates` (terms and measured savings), :mod:`.init` (strategies; :mod:`.omp`
and :mod:`.distil` for two of them), :mod:`.diagnostics` (norms, neighbours, KL on old text),
:mod:`.contexts` (held-out and fit corpus contexts), :mod:`.fidelity` (new token vs its pieces;
bits per byte), :mod:`.choose` (``--init auto``), :mod:`.extension` (``suggest``), :mod:`.record`
(its ``summary.json`` record), :mod:`.apply`, :mod:`.fullmodel` (loading the whole causal LM when it
fits). Heavy libraries load inside the functions, so importing this package is cheap.
"""

from __future__ import annotations

from embscope.extension.apply import apply
from embscope.extension.extension import ExtensionResult, suggest
from embscope.extension.init import STRATEGIES
from embscope.extension.options import ExtensionOptions

__all__ = ["suggest", "apply", "ExtensionResult", "ExtensionOptions", "STRATEGIES"]
