"""The apply section: write the extended model (:func:`embscope.extension.apply.apply`) after the
extension section measured it.

It runs only when the options name a target (``extend --apply OUT``); its options are checked with
the others before any work (:meth:`~embscope.sections.base.RunOptions.check`, and the target by
the runner). Its record is the manifest of ``embscope_extension.json``, so ``summary.json`` says
what was written where.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from embscope.records import Record
from embscope.sections.base import SectionInputs, SectionOutput, section


@dataclass
class ApplyRecord(Record):
    """What ``--apply`` wrote (the manifest of ``embscope_extension.json``, less its provenance)."""

    #: the folder written
    folder: str
    #: the model extended
    base_model: str
    #: where it was read from
    base_path: str
    #: initialisation strategy of the new rows, ``NAME`` or ``INPUT/OUTPUT``
    init: str
    #: why that strategy (the recommendation's figures under ``auto``, else "asked for")
    init_reason: str | None
    #: ``transformers`` (a model folder that loads) or ``rows`` (the new rows, tokenizer and a README)
    format: str
    #: new tokens written
    n_added: int
    #: their ids, in id order
    token_ids: list[int]
    #: the extension's terms (raw text, untrusted)
    terms: list[str]
    #: per new token: ``term``, or ``intermediate`` of a term's merge chain
    kinds: list[str] = field(default_factory=list)
    #: how the tokenizer holds them: ``merges``, ``pieces``, ``vocab`` or ``added``
    tokenizer_form: str = ""
    #: merges appended to the BPE merge list
    merges_added: int = 0
    #: rows of the written matrices
    vocab_size: int = 0
    #: corpus tokens the extension saves (measured by re-tokenising)
    tokens_saved: int | None = None
    #: why only the rows were written (null: a full folder)
    note: str | None = None
    #: XXH3-128 digest of the new input rows as written (float32): ``diff`` tells an untouched
    #: extended folder from a trained one by it, and refuses rows that do not match
    rows_digest: str | None = None


@section("apply", record=ApplyRecord, reads=("model", "extension", "tokens", "force"),
         enabled=lambda o: o.extension.apply_to is not None)
def apply_section(inputs: SectionInputs) -> SectionOutput:
    """Write the extended tokenizer and the new rows the extension measured."""
    from embscope.extension.apply import apply

    opts = inputs.options.extension  # the only group it reads
    if inputs.model is None or inputs.extension is None:
        return SectionOutput(skipped="the extension did not run, so there is nothing to write",
                             warnings=["apply: the extension did not run; nothing was written"])
    if not inputs.extension.extension.ids:
        why = ("no term was added (every candidate was left out: summary.json → terms_skipped says why), so "
               f"{opts.apply_to} was not written")
        return SectionOutput(skipped=why, warnings=[f"apply: {why}"])
    with inputs.steps.step("apply", f"write the extended model to {opts.apply_to}"):
        manifest = apply(inputs.model, inputs.extension, opts.apply_to, init=opts.apply_init,
                         mode=opts.apply_mode, tokens=inputs.tokens, force=inputs.force)
    fields = {k: v for k, v in manifest.items() if k != "embscope"}  # the stamp is summary.json's own
    rec = inputs.extension.summary.recommended
    warn = ([f"apply: wrote the rows of {manifest['init']}, not the recommended {rec} (--apply-init auto writes "
             f"{rec}; summary.json → sections.extension.recommended_why says why)"]
            if rec and manifest["init"] != rec else [])
    return SectionOutput(record=ApplyRecord(folder=str(opts.apply_to), **fields), result=manifest, warnings=warn)
