"""embscope: look inside a language model's vocabulary.

The Python API mirrors the command line; heavy libraries load on first use, so ``import embscope``
is quick::

    import embscope
    res = embscope.audit("smollm2-135m", corpora=["medical"])   # the whole review → res.folder
    res = embscope.scan("minilm-l6")                             # under-trained and isolated rows
    res = embscope.fertility("gpt2", "udhr")                     # per-language cost of a tokenizer
    res = embscope.compare(["gpt2", "o200k_base"], "udhr")       # several tokenizers side by side
    res, manifest = embscope.extend("smollm2-135m", "medical")   # vocabulary-extension candidates
    res = embscope.diff("smollm2-135m", "out/tuned", data="train.jsonl")  # what training changed
    ctx = embscope.rope("qwen2-7b")                              # RoPE + KV-cache budget (config only)
    res = embscope.run("smollm2-135m", sections=["context", "tokens"])  # any subset of sections
    model = embscope.load_model("smollm2-135m")                  # matrices + tokenizer, nothing else
    ctx = embscope.context_summary(model.config)
    vocab = embscope.load_vocabulary("cl100k_base")              # tokenizer-only specs

Each run returns a :class:`RunResult`: ``.folder`` (summary.json, Parquet tables, index.html) and
``.summary`` (a typed :class:`Summary`).
"""

from __future__ import annotations

__version__ = "0.2.0"

_LAZY = {
    "audit": "embscope.api",
    "scan": "embscope.api",
    "fertility": "embscope.api",
    "compare": "embscope.api",
    "extend": "embscope.api",
    "rope": "embscope.api",
    "check": "embscope.api",
    "diff": "embscope.api",
    "run": "embscope.runner",
    "RunResult": "embscope.runner",
    "RunOptions": "embscope.sections.options",
    "Summary": "embscope.summary",
    "load_model": "embscope.models.load",
    "load_vocabulary": "embscope.models.vocabulary",
    "context_summary": "embscope.context",
    "resolve": "embscope.models.resolve",
    "LoadedModel": "embscope.models.model",
    "Vocabulary": "embscope.tokenizer.base",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'embscope' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*_LAZY, "__version__"])


__all__ = list(_LAZY) + ["__version__"]
