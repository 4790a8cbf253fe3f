"""The readiness section (``check``): "Ready to fine-tune?" — the user's training data checked against the
model (:mod:`embscope.readiness`); ``findings.parquet`` has one row per finding.

It runs after the tokens section and reads its ``flagged`` column, so the under-trained rows are
the scan's; without a scan the rules that need it are left out (and say so).
"""

from __future__ import annotations

from pathlib import Path

from embscope.readiness.record import ROW_CODES, CheckRecord
from embscope.sections.base import SectionInputs, SectionOutput, section


@section("readiness", record=CheckRecord, tables=("findings",), reads=("model", "tokens", "data"),
         gives=("repair_rows",), requires=("data",))
def readiness_section(inputs: SectionInputs) -> SectionOutput:
    """Check ``inputs.data`` against ``inputs.model``."""
    from embscope.readiness import check_data, findings_frame
    from embscope.readiness.check import MODEL_TEMPLATE
    from embscope.tables import scan_flags

    model = inputs.model
    if model is None:
        return SectionOutput(skipped="no model: the check tokenizes the data with the model's tokenizer")
    if not inputs.data:
        return SectionOutput(skipped="no training data: pass --data")
    opts = inputs.options
    out = SectionOutput()
    flagged, status = scan_flags(inputs.tokens)
    if flagged is None:
        out.warnings.append("readiness: no geometry scan, so only zero rows are checked among the rows the data "
                            "uses (flagged rows need the scan)")
    template = MODEL_TEMPLATE
    if opts.readiness.chat_template:
        from embscope.formats.files import read_bytes

        raw = read_bytes(Path(opts.readiness.chat_template), what="chat template", max_bytes=1 << 20)
        template = raw.decode("utf-8", "replace")
    with inputs.steps.step("readiness", "read, render and tokenize the training data"):
        record = check_data(model, inputs.data, opts.readiness, text_field=opts.corpus.text_field, flagged=flagged,
                            status=status, engine=opts.corpus.corpus_engine(), template=template)
    out.record = record
    out.tables["findings"] = findings_frame(record.findings)
    # what --repair rewrites: the rows error-level findings point at (zero rows, flagged rows the data
    # uses that prompting did not clear, verified special rows, added tokens in padding rows); a
    # special row the scan merely flags (a warning) is often trained, and re-initialising SmolLM2's
    # own <|im_start|> would break it
    out.gives["repair_rows"] = sorted({i for f in record.findings if f.code in ROW_CODES and f.severity == "error"
                                       for i in f.ids if 0 <= i < model.n_rows})
    out.result = record
    return out

