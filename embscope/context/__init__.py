"""What the model's position encoding and KV cache mean for context length.

- :mod:`~embscope.context.rope`: RoPE maths (scaling types, wavelengths, extension ratio);
- :mod:`~embscope.context.summary`: the context summary of a config (KV bytes, parameters, risk).
"""

from embscope.context.summary import ContextSummary, context_summary

__all__ = ["ContextSummary", "context_summary"]
