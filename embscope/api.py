"""The Python API: one function per command, each a thin layer over :func:`embscope.runner.run`.

>>> import embscope
>>> res = embscope.audit("smollm2-135m", corpora=["medical"])      # doctest: +SKIP
>>> res.folder, res.summary.sections.extension.tokens_saved        # doctest: +SKIP
>>> embscope.rope("smollm2-135m").kv_bytes_per_token               # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from embscope.runner import DEFAULT_LANGUAGES, RunResult, corpus_path, run
from embscope.sections.base import RunOptions


def _options(options: RunOptions | None, kw: dict[str, Any]) -> RunOptions:
    from embscope.errors import SpecError

    opts = options or RunOptions()
    unknown = sorted(set(kw) - set(RunOptions.__dataclass_fields__))
    if unknown:
        raise SpecError(f"unknown option(s) {unknown}; see embscope.RunOptions")
    return replace(opts, **kw)


def audit(model: str = "smollm2-135m", *, corpora: Sequence[str | Path] = (),
          languages: str | Path | None = DEFAULT_LANGUAGES, out: str | Path | None = None,
          force: bool = False, scan: bool = True, options: RunOptions | None = None,
          verbose: bool | None = None, pickle_hint: str | None = None, repair_to: str | Path | None = None,
          repair_init: str = "subword-mean", **kw: Any) -> RunResult:
    """The whole review: context, tokens + geometry, languages, extension; HTML + Parquet.

    Args:
        model: model spec.
        corpora: domain corpora (paths or shipped names); the first single-language one gives the
            extension candidates, and each adds its languages to the language table.
        languages: the multilingual corpus for per-language costs (default the shipped ``udhr``);
            ``None`` or ``"none"`` for none.
        repair_to: also write the model with the flagged rows that ``corpora`` use re-initialised
            (:func:`embscope.extension.repair.repair`), with strategy ``repair_init``.
        **kw: any :class:`RunOptions` field (``k``, ``threshold``, ``top``, ``device``, …).
    Example:
        >>> audit("smollm2-135m", corpora=["medical"]).folder  # doctest: +SKIP
    """
    from embscope.errors import CorpusError

    langs, notes = [] if languages in (None, "none") else [languages], []
    if langs == [DEFAULT_LANGUAGES]:
        try:
            corpus_path(DEFAULT_LANGUAGES)
        except CorpusError:  # an install without the shipped corpora: say so, run the rest
            langs, notes = [], [f"the shipped {DEFAULT_LANGUAGES!r} corpus is not installed here; pass "
                                "--languages PATH for per-language costs"]
    if repair_to is not None:
        _check_repair(repair_to, force, corpora)
    res = run(model, corpora=[*langs, *corpora], data=corpora, out=out, force=force, scan=scan,
              options=_options(options, kw), command="audit", verbose=verbose, warnings=notes,
              pickle_hint=pickle_hint)
    if repair_to is not None:
        _repair(res, repair_to, repair_init, force)
    return res


def scan(model: str, *, corpora: Sequence[str | Path] = (), out: str | Path | None = None,
         force: bool = False, options: RunOptions | None = None, verbose: bool | None = None,
         pickle_hint: str | None = None, repair_to: str | Path | None = None,
         repair_init: str = "subword-mean", **kw: Any) -> RunResult:
    """Under-trained and isolated rows: indicators, kNN graph, 2-D map (tokens section only).

    ``corpora`` (the user's data) lists which flagged rows the text and the model's chat template
    produce; ``repair_to`` then writes the model with those rows re-initialised; ``verify=N`` checks
    the top N flagged rows by prompting the whole model.

    Example:
        >>> scan("minilm-l6").summary.sections.tokens.geometry.flagged  # doctest: +SKIP
    """
    if repair_to is not None:
        _check_repair(repair_to, force, corpora)
    res = run(model, sections=["tokens"], data=corpora, out=out, force=force, options=_options(options, kw),
              command="scan", kind="scan", verbose=verbose, required=["tokens"], pickle_hint=pickle_hint)
    if repair_to is not None:
        _repair(res, repair_to, repair_init, force)
    return res


def _check_repair(repair_to, force: bool, corpora) -> None:
    from embscope.errors import SpecError
    from embscope.output import check_target

    if not corpora:
        raise SpecError("--repair re-initialises the flagged rows your data uses: pass --corpus too")
    check_target(repair_to, force=force, inputs=[corpus_path(c) for c in corpora])


def _repair(res: RunResult, repair_to, init: str, force: bool) -> None:
    """Re-initialise the flagged rows the corpus uses; the manifest goes into ``res.repair``."""
    import numpy as np

    from embscope.extension.repair import repair

    live = res.outputs["tokens"].live
    if live is None:
        return
    model, scan_result = live
    rows = scan_result.repair_rows(model.categories)
    if not rows:
        res.summary.warnings.append("repair: none of the flagged rows occurs in the corpus; nothing was written")
        return
    res.repair = repair(model, rows, repair_to, init=init, force=force,
                        flagged=np.flatnonzero(np.asarray(scan_result.columns["flagged"])))


def fertility(tokenizer: str, corpus: str | Path = DEFAULT_LANGUAGES, *, out: str | Path | None = None,
              force: bool = False, options: RunOptions | None = None, verbose: bool | None = None,
              **kw: Any) -> RunResult:
    """Per-language fertility, parity and friends for one tokenizer (languages section only).

    Example:
        >>> fertility("gpt2", "udhr").folder  # doctest: +SKIP
    """
    return compare([tokenizer], corpus, out=out, force=force, options=options, verbose=verbose, **kw)


def compare(tokenizers: Sequence[str], corpus: str | Path = DEFAULT_LANGUAGES, *,
            out: str | Path | None = None, force: bool = False, options: RunOptions | None = None,
            verbose: bool | None = None, **kw: Any) -> RunResult:
    """The same as :func:`fertility` for several tokenizers, side by side.

    Example:
        >>> compare(["gpt2", "cl100k_base"], "udhr").folder  # doctest: +SKIP
    """
    return run(None, sections=["languages"], corpora=[corpus], tokenizers=list(tokenizers), out=out,
               force=force, options=_options(options, kw), command="compare" if len(tokenizers) > 1
               else "fertility", kind="languages", verbose=verbose, required=["languages"])


def extend(model: str, corpus: str | Path, *, out: str | Path | None = None, force: bool = False,
           apply_to: str | Path | None = None, apply_init: str = "subword-mean", rows_only: bool = False,
           tokens: str | Path | None = None, options: RunOptions | None = None,
           verbose: bool | None = None, **kw: Any) -> tuple[RunResult, dict | None]:
    """Vocabulary-extension candidates from a domain corpus; with ``apply_to``, the extended model.

    Both output folders are checked before any work, so a bad ``apply_to`` or ``out`` fails at once.

    Returns:
        (the run's result, the ``--apply`` manifest or ``None``).
    Example:
        >>> res, manifest = extend("smollm2-135m", "medical", top=50)  # doctest: +SKIP
    """
    from embscope.output import check_target

    corpus = corpus_path(corpus)
    if apply_to is not None:
        check_target(apply_to, force=force, inputs=[corpus])
    table = None
    if tokens is not None:
        import polars as pl

        table = pl.read_parquet(tokens)
    res = run(model, sections=["extension"], domain=corpus, out=out, force=force, tokens=table,
              options=_options(options, kw), command="extend", kind="extend", verbose=verbose,
              required=["extension"], pickle_hint="")
    manifest = None
    live = res.outputs["extension"].live
    if apply_to is not None and live is not None:
        from embscope.extension import apply

        model_obj, result = live
        manifest = apply(model_obj, result, apply_to, init=apply_init,
                         mode="rows" if rows_only else "auto", tokens=table, force=force)
    return res, manifest


def rope(model: str):
    """The context summary of any model spec (reads the config only, no weights).

    Example:
        >>> rope("qwen2-7b").kv_bytes_per_token  # doctest: +SKIP
        57344
    """
    from embscope.context import context_summary
    from embscope.models.resolve import resolve_config

    return context_summary(resolve_config(model))


def export_atlas(report: str | Path, *, out: str | Path | None = None, force: bool = False) -> Path:
    """The token map of an output folder as Embedding Atlas reads it (:mod:`embscope.report.atlas`).

    Writes ``out/tokens.parquet`` (default ``out`` = ``report/atlas``); returns its path. Open it
    with :func:`embscope.report.atlas.atlas_command`'s command.

    Example:
        >>> export_atlas("reports/smollm2-135m")  # doctest: +SKIP
        PosixPath('reports/smollm2-135m/atlas/tokens.parquet')
    """
    from embscope.output import claim
    from embscope.report.atlas import ATLAS_FILE, write_atlas

    report = Path(report)
    target = Path(out) if out is not None else report / "atlas"
    with claim(target, force=force, inputs=[report / "tokens.parquet"], kind="atlas") as tmp:
        write_atlas(report, tmp)
    return target / ATLAS_FILE


def export_projector(report: str | Path, *, out: str | Path | None = None, model: str | None = None,
                     sample: int = 10_000, force: bool = False, download: str = "ranges") -> dict[str, Any]:
    """The input embedding and the token metadata in the TensorBoard projector's formats
    (:mod:`embscope.report.projector`), for the model the output folder ``report`` was made from
    (``model`` overrides the spec in its ``summary.json``; the matrix must hash to the fingerprint
    recorded there). Default ``out``: ``report/projector``. Returns ``{folder, rows, dim, files}``.

    Example:
        >>> export_projector("reports/smollm2-135m", sample=5000)["rows"]  # doctest: +SKIP
        5000
    """
    import json

    import polars as pl

    from embscope.errors import SpecError
    from embscope.models.load import load_model
    from embscope.output import claim
    from embscope.provenance import tensor_digest
    from embscope.report.projector import write_projector

    report = Path(report)
    src = report / "tokens.parquet"
    if not src.is_file():
        raise SpecError(f"{report} has no tokens.parquet; pass a folder written by `embscope audit` or `scan`")
    try:
        recorded = json.loads((report / "summary.json").read_text(encoding="utf-8"))["inputs"]["model"]
    except (OSError, ValueError, KeyError, TypeError):
        recorded = None
    spec = model or (recorded or {}).get("spec")
    if not spec:
        raise SpecError(f"{report}/summary.json names no model; pass --model")
    target = Path(out) if out is not None else report / "projector"
    tokens = pl.read_parquet(src)
    m = load_model(spec, device="cpu", download=download)
    want = ((recorded or {}).get("tensors") or {}).get("embed")
    if want and tensor_digest(m.embed) != want:
        raise SpecError(f"the embedding of {spec} is not the one {report} was made from (its fingerprint "
                        "differs from summary.json); pass the model it was made from with --model")
    with claim(target, force=force, inputs=[src], kind="projector") as tmp:
        info = write_projector(tokens, m.embed, tmp, name=m.name, sample=sample)
    return {"folder": target, **info}
