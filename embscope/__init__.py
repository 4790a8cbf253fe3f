"""embscope: look inside a language model's vocabulary.

The public API (heavy libraries load on first use, so ``import embscope`` is quick)::

    import embscope
    model = embscope.load_model("smollm2-135m")          # matrices + tokenizer, nothing else
    vocab = embscope.load_vocabulary("cl100k_base")      # tokenizer-only specs
    ctx = embscope.context_summary(model.config)         # RoPE + KV-cache budget
    out = embscope.audit("smollm2-135m", corpora=["corpora/medical"])  # the whole review
"""

from __future__ import annotations

__version__ = "0.1.0"

_LAZY = {
    "load_model": "embscope.load",
    "load_vocabulary": "embscope.tokenizer.load",
    "context_summary": "embscope.context",
    "audit": "embscope.audit",
    "resolve": "embscope.resolve",
    "LoadedModel": "embscope.model",
    "Vocabulary": "embscope.tokenizer.base",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'embscope' has no attribute {name!r}")


__all__ = list(_LAZY) + ["__version__"]
