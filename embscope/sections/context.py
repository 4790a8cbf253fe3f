"""The context section: RoPE reach, KV-cache bytes and embedding share, from the model's config.

The record is :class:`embscope.context.ContextSummary` (see :mod:`embscope.context.summary` for
every field and its formula).
"""

from __future__ import annotations

from embscope.context.summary import ContextSummary
from embscope.sections.base import Inputs, SectionOutput, section


@section("context", record=ContextSummary, reads=("model",))
def context_section(inputs: Inputs) -> SectionOutput:
    """``ContextSummary`` of the model's config; skipped for tokenizer-only runs."""
    from embscope.context import context_summary

    if inputs.model is None:
        return SectionOutput(skipped="no model: a tokenizer-only run has no config")
    return SectionOutput(record=context_summary(inputs.model.config, stored_dtype=inputs.model.dtype))
