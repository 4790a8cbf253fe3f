"""The extension section: which domain terms deserve new tokens, what they save (measured by
re-tokenising the corpus), and how each initialisation strategy behaves.

Runs :func:`embscope.extension.suggest`; the table (``candidates.parquet``) has one row per term.
"""

from __future__ import annotations

from embscope.extension.record import ExtensionRecord
from embscope.progress import Steps
from embscope.sections.base import SectionInputs, SectionOutput, section


@section("extension", record=ExtensionRecord, tables=("candidates", "new_tokens"), reads=("model", "domain", "tokens"),
         gives=("extension",))
def extension_section(inputs: SectionInputs) -> SectionOutput:
    """Extension candidates from the domain corpus; skipped without one or without a tokenizer."""
    from embscope.errors import CorpusError
    from embscope.extension import suggest

    if inputs.model is None:
        return SectionOutput(skipped="no model")
    if inputs.domain is None:
        return SectionOutput(skipped="no single-language (domain) corpus given")
    if inputs.model.vocab is None:
        return SectionOutput(skipped="the model ships no tokenizer")
    opts = inputs.options
    sub = Steps(verbose=False, announce="extension")  # its parts named as they start; times in summary.json
    with inputs.steps.step("extension", f"vocabulary-extension candidates from {inputs.domain}") as step:
        try:
            ext = suggest(inputs.model, inputs.domain, opts.extension, tokens=inputs.tokens, steps=sub,
                          engine=opts.corpus.corpus_engine(), sample_bytes=opts.corpus.sample_bytes,
                          read_options=opts.corpus.read_options())
        except CorpusError as err:  # nothing to suggest is a finding, not a failure
            step.nothing(str(err))
            return SectionOutput(skipped=str(err), warnings=[f"extension: {err}"])
        finally:
            inputs.steps.timings.update({f"extension:{k}": v for k, v in sub.timings.items()})
        target_costs(ext, inputs.model)
    return SectionOutput(record=ext.summary, tables={"candidates": ext.table, "new_tokens": ext.new_tokens},
                         result=ext, gives={"extension": ext})


def target_costs(ext, model) -> None:
    """The target language's tokenizer cost before → after (fertility, parity, token ratio with
    their intervals) into ``ext.summary.target_language``: measured by the languages package
    (:func:`embscope.languages.adaptation.cost_figures`) on the texts the extension chose
    (:func:`embscope.extension.target.tokenizer_costs`)."""
    from embscope.extension.target import tokenizer_costs
    from embscope.languages.adaptation import cost_figures
    from embscope.models.fullmodel import load_hf_tokenizer

    rec = ext.summary.target_language
    if rec is not None and ext.extension is not None:
        tokenizer_costs(rec, load_hf_tokenizer(model), ext.extension.tokenizer, ext.target_texts, cost_figures)
