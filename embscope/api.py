"""The Python API: one function per command, each a thin layer over :func:`embscope.runner.run`.

>>> import embscope
>>> res = embscope.audit("smollm2-135m", corpora=["medical"])      # doctest: +SKIP
>>> res.folder, res.summary.sections.extension.tokens_saved        # doctest: +SKIP
>>> embscope.rope("smollm2-135m").kv_bytes_per_token               # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from embscope.models.registry import DEFAULT_MODEL
from embscope.runner import DEFAULT_LANGUAGES, RunResult, corpus_path, run
from embscope.sections.base import RunOptions


def audit(model: str = DEFAULT_MODEL, *, corpora: Sequence[str | Path] = (),
          languages: str | Path | None = DEFAULT_LANGUAGES, out: str | Path | None = None,
          force: bool = False, options: RunOptions | None = None, verbose: bool | None = None,
          data: Sequence[str | Path] = (), **kw: Any) -> RunResult:
    """The whole review: context, tokens + geometry, languages, extension; HTML + Parquet.

    Args:
        model: model spec.
        corpora: domain corpora (paths or shipped names); the first single-language one gives the
            extension candidates, and each adds its languages to the language table.
        languages: the multilingual corpus for per-language costs (default the shipped ``udhr``);
            ``None`` or ``"none"`` for none.
        data: training data: adds the "Ready to fine-tune?" section (:func:`check`'s findings).
        **kw: any :class:`RunOptions` field (``k``, ``threshold``, ``top``, ``device``, ``scan``, …);
            ``repair_to=OUT`` also writes the model with the flagged rows that ``corpora`` use
            re-initialised (:func:`embscope.extension.repair.repair`, strategy ``repair_init``).
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
    from embscope.extension.evaluate import AUDIT_CORPUS_BYTES
    from embscope.extension.extension import AUDIT_DISTIL_BUDGET

    for name, value in (("bpb_bytes", AUDIT_CORPUS_BYTES), ("distil_budget", AUDIT_DISTIL_BUDGET)):
        if kw.get(name) is None and getattr(options, name, None) is None:  # audit's smaller extension step
            kw[name] = value
    return run(model, languages=[*langs, *corpora], corpora=corpora, data=list(data), out=out, force=force,
               options=options, command="audit", verbose=verbose, warnings=notes, **kw)


def scan(model: str, *, corpora: Sequence[str | Path] = (), out: str | Path | None = None,
         force: bool = False, options: RunOptions | None = None, verbose: bool | None = None,
         **kw: Any) -> RunResult:
    """Under-trained and isolated rows: indicators, kNN graph, 2-D map (tokens section only).

    ``corpora`` (the user's data) lists which flagged rows the text and the model's chat template
    produce; ``repair_to`` then writes the model with those rows re-initialised; ``verify=N`` checks
    the top N flagged rows by prompting the whole model.

    Example:
        >>> scan("minilm-l6").summary.sections.tokens.geometry.flagged  # doctest: +SKIP
    """
    return run(model, sections=["tokens", "repair"], corpora=corpora, out=out, force=force, options=options,
               command="scan", kind="scan", verbose=verbose, required=["tokens"], **kw)


def check(model: str, data: str | Path | Sequence[str | Path], *, out: str | Path | None = None,
          force: bool = False, options: RunOptions | None = None, verbose: bool | None = None,
          **kw: Any) -> RunResult:
    """Ready to fine-tune? Read ``data`` as the trainer will and report every vocabulary hazard.

    The data is rendered with the model's chat template and tokenized exactly as
    ``apply_chat_template`` does (plain texts as ``tokenizer(text)``), and labelled as the trainer
    labels it (:mod:`embscope.finetune.trainers`); the findings carry stable codes
    (:mod:`embscope.finetune.findings`). Reads only the matrices, config and tokenizer.

    Args:
        model: model spec.
        data: training data: files, folders or globs of jsonl/json/Parquet/Arrow records in the
            ``messages``, ShareGPT, Alpaca, prompt/completion or ``text`` format.
        out: write the report folder (summary.json, tokens.parquet, findings.parquet, index.html);
            without it nothing is written and ``res.folder`` is None.
        **kw: any :class:`RunOptions` field: ``trainer`` (``trl`` by default, ``transformers``,
            ``unsloth``, ``axolotl``, ``llamafactory``), ``pad_token`` (the pad you will set),
            ``split`` (one split of a DatasetDict), ``data_format`` (force one record shape),
            ``max_length`` (the trainer's sequence length; default the config's context),
            ``chat_template`` (a template file instead of the model's own), ``scan=False`` (no
            ``untrained-used``), ``threshold``, ``repair_to`` (also write the model with the rows
            the error-level findings point at re-initialised), …; ``layout`` defaults to off.
    Returns:
        :class:`RunResult`; the findings are ``res.summary.sections.finetune.findings``.
    Example:
        >>> res = check("smollm2-135m", "corpora/chat/medical-chat.jsonl")  # doctest: +SKIP
        >>> [f.code for f in res.summary.sections.finetune.findings]  # doctest: +SKIP
        ['special-row-untrained', 'exceeds-context', 'pad-is-eos']
    """
    import shutil
    import tempfile

    paths = [data] if isinstance(data, (str, Path)) else list(data)
    kw.setdefault("layout", False)
    tmp = Path(tempfile.mkdtemp(prefix="embscope-check-")) if out is None else None
    try:
        res = run(model, sections=["tokens", "finetune", "repair"], data=paths,
                  out=out if out is not None else tmp / "check", force=force, render=out is not None,
                  options=options, command="check", kind="check", verbose=verbose, required=["finetune"], **kw)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    if tmp is not None:
        res.folder = None  # type: ignore[assignment]
    return res


def diff(base: str, tuned: str | Path, *, data: str | Path | Sequence[str | Path] = (),
         manifest: str | Path | None = None, languages: str | Path | None = DEFAULT_LANGUAGES,
         tokens: str | Path | None = None, out: str | Path | None = None, force: bool = False,
         options: RunOptions | None = None, verbose: bool | None = None, **kw: Any) -> RunResult:
    """After the fine-tune: which token rows training moved, whether new tokens learnt, what broke.

    BASE and TUNED are any model spec (TUNED may be a PEFT adapter folder on BASE); only their
    embeddings and heads are read (:mod:`embscope.delta`).

    Args:
        base: the model training started from.
        tuned: the fine-tuned model, or a PEFT adapter folder.
        data: the training data (any format :func:`check` reads): the rows it uses; with it BASE is
            scanned (``scan=False`` to skip) for ``untrained-still``.
        manifest: ``extend --apply``'s manifest (or its folder): the initial rows of the added
            tokens (default: the one in BASE's folder, else the one in TUNED's folder while its
            rows are still the ones ``extend`` wrote, else BASE's mean row).
        languages: the multilingual corpus for per-language drift (default the shipped ``udhr``;
            ``None``/``"none"`` for none).
        tokens: a ``tokens.parquet`` of an earlier scan of BASE: its ``flagged`` rows instead of a scan.
        out: write the report folder (summary.json, diff.parquet, index.html); without it nothing
            is written and ``res.folder`` is None.
        **kw: any :class:`RunOptions` field (``device``, ``data_format``, ``threshold``, ``scan``, …).
    Returns:
        :class:`RunResult`; the record is ``res.summary.sections.diff`` (findings, per-matrix floors
        and counts), the per-row table ``res.outputs["diff"].live.frame``.
    Example:
        >>> res = diff("smollm2-135m", "out/smollm2-med-tuned", data="train.jsonl")  # doctest: +SKIP
        >>> [f.code for f in res.summary.sections.diff.findings]  # doctest: +SKIP
        []
    """
    import shutil
    import tempfile

    from embscope.errors import CorpusError
    from embscope.output import check_target

    paths = [data] if isinstance(data, (str, Path)) else list(data)
    opts = RunOptions.build(options, tuned=str(tuned), manifest=str(manifest) if manifest is not None else None, **kw)
    if out is not None:  # never write over TUNED or the manifest's folder
        check_target(out, force=force, inputs=[p for p in (Path(tuned), Path(manifest) if manifest else None)
                                               if p is not None and p.exists()])
    langs, notes = [] if languages in (None, "none") else [languages], []
    if langs == [DEFAULT_LANGUAGES]:
        try:
            corpus_path(DEFAULT_LANGUAGES)
        except CorpusError:
            langs, notes = [], [f"the shipped {DEFAULT_LANGUAGES!r} corpus is not installed here; pass "
                                "languages=PATH for per-language drift"]
    table = read_tokens_table(tokens) if tokens is not None else None
    sections = ["tokens", "diff"] if paths and opts.scan and table is None else ["diff"]
    opts = RunOptions.build(opts, layout=kw.get("layout", False))
    tmp = Path(tempfile.mkdtemp(prefix="embscope-diff-")) if out is None else None
    try:
        res = run(base, sections=sections, languages=langs, data=paths, tokens=table,
                  out=out if out is not None else tmp / "diff", force=force, render=out is not None,
                  options=opts, command="diff", kind="diff", verbose=verbose, required=["diff"], warnings=notes)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    if tmp is not None:
        res.folder = None  # type: ignore[assignment]
    return res


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
    return run(None, sections=["languages"], languages=[corpus], tokenizers=list(tokenizers), out=out,
               force=force, options=options, command="compare" if len(tokenizers) > 1
               else "fertility", kind="languages", verbose=verbose, required=["languages"], **kw)


def extend(model: str, corpus: str | Path, *, out: str | Path | None = None, force: bool = False,
           apply_to: str | Path | None = None, apply_init: str = "auto", rows_only: bool = False,
           tokens: str | Path | None = None, options: RunOptions | None = None,
           verbose: bool | None = None, **kw: Any) -> tuple[RunResult, dict | None]:
    """Vocabulary-extension candidates from a domain corpus; with ``apply_to``, the extended model.

    Both output folders and ``apply_init`` are checked before any work, so a bad one fails at once;
    the manifest of ``apply_to`` is also ``res.summary.sections.apply``.

    Returns:
        (the run's result, the ``--apply`` manifest or ``None``).
    Example:
        >>> res, manifest = extend("smollm2-135m", "medical", top=50)  # doctest: +SKIP
    """
    table = read_tokens_table(tokens) if tokens is not None else None
    res = run(model, sections=["extension", "apply"], domain=corpus, out=out, force=force, tokens=table,
              options=options, command="extend", kind="extend", verbose=verbose,
              required=["extension", "apply"], apply_to=str(apply_to) if apply_to is not None else None,
              apply_init=apply_init, apply_mode="rows" if rows_only else "auto", **kw)
    applied = res.outputs.get("apply")
    return res, applied.live if applied is not None else None


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

    from embscope.errors import SpecError
    from embscope.models.load import load_model
    from embscope.output import claim
    from embscope.provenance import tensor_digest
    from embscope.report.projector import write_projector
    from embscope.report.token_table import read_tokens

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
    tokens = read_tokens(src)
    m = load_model(spec, device="cpu", download=download)
    want = ((recorded or {}).get("tensors") or {}).get("embed")
    if want and tensor_digest(m.embed) != want:
        raise SpecError(f"the embedding of {spec} is not the one {report} was made from (its fingerprint "
                        "differs from summary.json); pass the model it was made from with --model")
    with claim(target, force=force, inputs=[src], kind="projector") as tmp:
        info = write_projector(tokens, m.embed, tmp, name=m.name, sample=sample)
    return {"folder": target, **info}


def read_tokens_table(path: str | Path):
    """A ``tokens.parquet`` of an earlier run (its ``flagged`` rows stay out of the extension's
    means); a file that is not Parquet is a one-line :class:`~embscope.errors.SpecError`."""
    import polars as pl

    from embscope.errors import SpecError
    from embscope.formats.files import check_regular

    path = Path(path)
    check_regular(path, what="tokens table")
    try:
        table = pl.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - polars raises many kinds for a damaged file
        raise SpecError(f"--tokens {path.name} is not a readable Parquet file ({type(exc).__name__}); "
                        "pass the tokens.parquet of an earlier scan or audit") from None
    return table
