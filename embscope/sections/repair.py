"""The repair section: write the model with the flagged rows the user's data uses re-initialised
(:func:`embscope.extension.repair.repair`), after the tokens section found them.

It runs only when the options name a target (``--repair OUT``). Its record is the repair manifest,
so ``summary.json`` says what was written where; when the data uses no flagged row the section has
nothing to write and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from embscope.extension.diagnostics import RowDiagnostics
from embscope.records import Record, to_json
from embscope.sections.base import SectionInputs, SectionOutput, section


@dataclass
class RepairRecord(Record):
    """What ``--repair`` wrote (the manifest of ``embscope_repair.json``, less the pieces)."""

    #: the folder written
    folder: str
    #: ``transformers`` (a model folder that loads) or ``rows`` (the new rows and a README)
    format: str
    #: initialisation strategy, ``NAME`` or ``INPUT/OUTPUT``
    init: str
    #: rows re-initialised
    n_repaired: int
    #: their ids, most used first
    token_ids: list[int]
    #: their token strings (raw text, untrusted)
    tokens: list[str]
    #: norm percentiles and nearest trained cosines of the new rows; with the whole model, the KL
    #: against the old model and the mass on the repaired tokens (null: not measured)
    diagnostics: RowDiagnostics | None = None
    #: what the KL was measured on, or why it was not
    kl_note: str | None = None


@section("repair", record=RepairRecord, reads=("scan", "repair_rows", "force"),
         enabled=lambda o: o.repair.repair_to is not None)
def repair_section(inputs: SectionInputs) -> SectionOutput:
    """Re-initialise the flagged rows the data (and the chat template) uses; write the model."""
    import numpy as np

    from embscope.extension.repair import repair

    opts = inputs.options.repair  # the only group it reads
    if inputs.scan is None:
        return SectionOutput(skipped="the geometry scan did not run, so no row is flagged",
                             warnings=["repair: the scan did not run; nothing was written"])
    model, scan = inputs.scan.model, inputs.scan.result
    # a check names its rows (error-level findings); otherwise the flagged rows the data uses
    rows = inputs.repair_rows if inputs.repair_rows is not None else scan.repair_rows(model.categories)
    if not rows:
        return SectionOutput(skipped="none of the flagged rows occurs in the data",
                             warnings=["repair: none of the flagged rows occurs in the corpus; nothing was written"])
    with inputs.steps.step("repair", f"re-initialise {len(rows)} rows, write {opts.repair_to}"):
        manifest = repair(model, rows, opts.repair_to, init=opts.repair_init, force=inputs.force,
                          flagged=np.flatnonzero(np.asarray(scan.columns["flagged"])))
    record = RepairRecord(folder=str(opts.repair_to), format=manifest["format"], init=manifest["init"],
                          n_repaired=manifest["n_repaired"], token_ids=manifest["token_ids"],
                          tokens=manifest["tokens"], kl_note=manifest["kl_note"],
                          # the writer's manifest is plain JSON (NaN as null): checked field by field
                          diagnostics=RowDiagnostics.from_dict(to_json(manifest["diagnostics"]), strict=True))
    return SectionOutput(record=record, result=manifest)
