"""embscope: look inside a language model's vocabulary.

The Python API mirrors the command line, one function per command with the command's options as
keyword parameters (``help(embscope.scan)`` lists them); heavy libraries load on first use, so
``import embscope`` is quick::

    import embscope
    res = embscope.audit("smollm2-135m", corpora=["medical"])   # the whole review
    res = embscope.scan("minilm-l6", threshold=3.5)              # under-trained and isolated rows
    res = embscope.check("smollm2-135m", "train.jsonl")          # ready to fine-tune?
    res = embscope.diff("smollm2-135m", "out/tuned", data="train.jsonl")  # what training changed
    res = embscope.fertility("gpt2", "udhr")                     # per-language cost of a tokenizer
    res = embscope.compare(["gpt2", "o200k_base"], "udhr")       # several tokenizers side by side
    res, manifest = embscope.extend("smollm2-135m", "medical")   # vocabulary-extension candidates
    ctx = embscope.rope("qwen2-7b")                              # RoPE + KV-cache budget (config only)
    res = embscope.run("smollm2-135m", sections=["context", "tokens"])  # any subset of sections
    model = embscope.load_model("smollm2-135m")                  # matrices + tokenizer, nothing else
    ctx = embscope.context_summary(model.config)
    vocab = embscope.load_vocabulary("cl100k_base")              # tokenizer-only specs

Each run returns a :class:`RunResult`: ``.summary`` (a typed :class:`Summary`), ``.tables`` (the
Parquet tables as polars DataFrames) and ``.folder``: a folder is written only when ``out`` is
given (``out=embscope.DEFAULT_OUT``: ``reports/<name>-<UTC time>``, as the command line does).
See ``docs/api.md``.
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
    "Given": "embscope.runner",
    "Job": "embscope.runner",
    "RunOptions": "embscope.sections.options",
    "DEFAULT_OUT": "embscope.output",
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
