"""The context section: RoPE reach, KV-cache bytes and embedding share, from the model's config.

The record is :class:`embscope.context.ContextSummary` (see :mod:`embscope.context.summary` for
every field and its formula).
"""

from __future__ import annotations

from embscope.context.summary import ContextSummary
from embscope.sections.base import SectionInputs, SectionOutput, section


@section("context", record=ContextSummary, reads=("model",))
def context_section(inputs: SectionInputs) -> SectionOutput:
    """``ContextSummary`` of the model's config (the embedding sized in its stored dtype, and the
    matrix's rows as the vocabulary when the config states none); skipped for tokenizer-only runs."""
    from embscope.context import context_summary

    if inputs.model is None:
        return SectionOutput(skipped="no model: a tokenizer-only run has no config")
    config = inputs.model.config
    if not config.get("vocab_size"):  # a GGUF's config may not say: the matrix's rows are the vocabulary
        config = {**config, "vocab_size": inputs.model.n_rows}
    return SectionOutput(record=context_summary(config, stored_dtype=inputs.model.dtype))
