"""The diff section: "What training changed" — the run's model (BASE) against ``options.tuned``
(:mod:`embscope.delta`); ``diff.parquet`` has one row per tuned row.

It runs after the tokens section and reads its ``flagged`` column (BASE's under-trained rows, for
``untrained-still``), the training data when there is some (the rows it uses), and the first corpus
(per-language drift).
"""

from __future__ import annotations

from embscope.delta.record import DiffRecord
from embscope.sections.base import Inputs, SectionOutput, section


@section("diff", record=DiffRecord, tables=("diff",), reads=("model", "tokens", "data", "languages"),
         enabled=lambda o: o.tuned is not None)
def diff_section(inputs: Inputs) -> SectionOutput:
    """Diff ``inputs.model`` against ``inputs.options.tuned``."""
    import numpy as np

    from embscope.delta import diff_models

    model, opts = inputs.model, inputs.options
    if model is None:
        return SectionOutput(skipped="no model: the diff compares the model with --tuned")
    out = SectionOutput()
    flagged = None
    if inputs.tokens is not None and "flagged" in inputs.tokens.columns:
        flagged = np.asarray(inputs.tokens["flagged"].fill_null(False).to_numpy(), dtype=bool)
    elif inputs.data and opts.scan:
        out.warnings.append("diff: no geometry scan, so untrained-still is not checked")
    with inputs.steps.step("diff", f"diff against {opts.tuned}"):
        res = diff_models(model, opts.tuned, manifest=opts.manifest, data=list(inputs.data), flagged=flagged,
                          languages=inputs.languages[0] if inputs.languages else None, data_format=opts.data_format,
                          text_field=opts.text_field, trust_pickle=opts.trust_pickle, download=opts.download,
                          read_options=opts.read_options())
    out.record = res.record
    out.tables["diff"] = res.frame
    out.live = res
    if res.record.new_reference == "mean":
        out.warnings.append("diff: no extension manifest, so the new rows are compared with BASE's mean row "
                            "(transformers' mean_resizing); pass --manifest for rows initialised otherwise")
    return out
