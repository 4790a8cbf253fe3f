"""The diff section: "What training changed" — the run's model (BASE) against ``options.diff.tuned``
(:mod:`embscope.changes`); ``diff.parquet`` has one row per tuned row.

It runs after the tokens section and reads its ``flagged`` column (BASE's under-trained rows, for
``untrained-still``), the training data when there is some (the rows it uses), and the first corpus
(per-language drift).
"""

from __future__ import annotations

from embscope.changes.record import DiffRecord
from embscope.sections.base import SectionInputs, SectionOutput, section


@section("diff", record=DiffRecord, tables=("diff",), reads=("model", "tokens", "data", "languages"),
         enabled=lambda o: o.diff.tuned is not None)
def diff_section(inputs: SectionInputs) -> SectionOutput:
    """Diff ``inputs.model`` against ``inputs.options.diff.tuned``."""
    from embscope.changes import DiffInputs, diff_models
    from embscope.tables import scan_flags

    model, opts = inputs.model, inputs.options
    if model is None:
        return SectionOutput(skipped="no model: the diff compares the model with --tuned")
    out = SectionOutput()
    flagged, status = scan_flags(inputs.tokens)
    if flagged is None and inputs.data and opts.scan.scan:
        out.warnings.append("diff: no geometry scan, so untrained-still is not checked")
    corpus = inputs.languages[0] if inputs.languages else None
    if corpus is not None and opts.languages.lang:
        from embscope.languages.selection import selected_languages

        keep = selected_languages(opts.languages.lang, corpus, opts.languages.reference)
    else:
        keep = None
    with inputs.steps.step("diff", f"diff against {opts.diff.tuned}"):
        given = DiffInputs(data=list(inputs.data), data_format=opts.readiness.data_format,
                           text_field=opts.corpus.text_field, flagged=flagged, status=status, languages=corpus,
                           read_options=opts.corpus.read_options(), keep_languages=keep)
        res = diff_models(model, opts.diff.tuned, opts.diff, given, trust_pickle=opts.load.trust_pickle,
                          download=opts.load.download)
    out.record = res.record
    out.tables["diff"] = res.frame
    out.result = res
    adapter = res.record.tuned.adapter
    if adapter is not None and adapter.base_model and not same_model(adapter.base_model, model):
        out.warnings.append(f"diff: the adapter says it was trained on {adapter.base_model!r}, but BASE is "
                            f"{model.spec!r}; its changes are laid over BASE's rows as they are: pass the base it "
                            "names if that is another model")
    use = res.record.data
    if use is not None and use.examples and not use.tokens:  # nothing to count: the rows it uses are unknown
        out.warnings.append(f"diff: TUNED's tokenizer gives no token for the {use.examples:,} training examples "
                            f"(chat template: {use.template}): which rows the data uses is unknown; save TUNED with "
                            "its tokenizer files and chat template")
    if res.record.new_reference == "mean":
        out.warnings.append("diff: no extension manifest, so the new rows are compared with BASE's mean row "
                            "(transformers' mean_resizing); pass --manifest for rows initialised otherwise")
    return out


def same_model(name: str, model) -> bool:
    """Whether an adapter's ``base_model_name_or_path`` names ``model``: its spec, its folder or
    file (resolved), or the same last path component (a hub id ``org/name`` and a local ``…/name``).

    >>> from types import SimpleNamespace as M
    >>> same_model("HuggingFaceTB/SmolLM2-135M", M(spec="smollm2", path="/c/SmolLM2-135M", name="smollm2"))
    True
    >>> same_model("Qwen/Qwen2-7B", M(spec="out/ext", path="/w/out/ext", name="ext"))
    False
    """
    from pathlib import Path

    if name in (model.spec, model.path, model.name):
        return True
    try:
        if Path(name).expanduser().resolve() == Path(model.path).resolve():
            return True
    except (OSError, RuntimeError, ValueError):
        pass
    last = name.rstrip("/").rsplit("/", 1)[-1].lower()
    return last in {Path(str(model.path)).name.lower(), Path(str(model.spec)).name.lower(), str(model.name).lower()}
