"""The runner: claim the output folder, load the model once, run the sections, write the folder.

Every command that writes a folder goes through :func:`run`, so every folder has the same layout::

    .embscope            marker (embscope made this folder)
    summary.json         embscope.summary.Summary: provenance, parameters, timings, section records
    tokens.parquet       one row per matrix row               (tokens section)
    languages.parquet    one row per tokenizer × language      (languages section)
    candidates.parquet   one row per extension candidate       (extension section)
    index.html           the offline report, rendered from the files above

The order is resolve → load → sections → tables → render. The sections run in the order of
:data:`embscope.sections.registry.SECTIONS`; what one hands to the next (the tokens table, the scan
result, the domain corpus) is declared there, and the runner only folds each section's declared
``gives`` into the inputs of the ones after it. A section with nothing to report records why
(``skipped``) and the run goes on; only a model that cannot load ends it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embscope.arguments import checked
from embscope.assets import corpora_root
from embscope.errors import CorpusError, EmbscopeError, SpecError, did_you_mean
from embscope.output import DefaultFolder
from embscope.progress import Steps
from embscope.sections.base import SectionInputs, RunOptions, Section, SectionOutput
from embscope.sections.registry import BY_NAME, SECTION_NAMES
from embscope.summary import SCHEMA_VERSION, ModelRecord, Sections, Summary

if TYPE_CHECKING:  # pragma: no cover
    import polars as pl

#: corpora that ship with embscope, by name (``--corpus medical``)
SHIPPED_CORPORA = ("medical", "udhr")
#: the multilingual corpus an audit measures by default (``--languages``)
DEFAULT_LANGUAGES = "udhr"


@dataclass
class RunResult:
    """What :func:`run` returns: the summary, the tables, and the folder they were written to."""

    #: the output folder written (null when the run was given no ``out``: nothing was written)
    folder: Path | None
    #: ``summary.json``'s record: provenance, parameters, timings, one record per section
    summary: Summary
    #: the Parquet tables by file stem (``tokens``, ``languages``, ``candidates``, ``findings``, ``diff``, …),
    #: as polars DataFrames, the same whether or not they were written
    tables: "dict[str, pl.DataFrame]" = field(default_factory=dict, repr=False)
    #: live section outputs (e.g. the extension result, for ``extend --apply``); not written
    outputs: dict[str, SectionOutput] = field(default_factory=dict, repr=False)

    @property
    def warnings(self) -> list[str]:
        return self.summary.warnings

    @property
    def repair(self) -> dict[str, Any] | None:
        """The manifest of the ``repair_to`` folder the run wrote, if any."""
        out = self.outputs.get("repair")
        return out.result if out is not None else None


def corpus_path(spec: str | Path) -> Path:
    """A corpus spec → path: an existing path as given, else a shipped corpus by name.

    >>> corpus_path("medical").name
    'medical'
    """
    from embscope.corpus.listing import is_glob

    path = Path(spec).expanduser()
    if is_glob(str(spec)):  # a glob is expanded by the reader (which says when it matches nothing)
        return path
    try:
        exists = path.exists()
    except OSError as err:  # a name past PATH_MAX, a loop of links
        raise CorpusError(f"corpus path {str(spec)[:80]!r}... cannot be read ({err.strerror}); pass a "
                          "shorter path" if len(str(spec)) > 80 else
                          f"corpus path {str(spec)!r} cannot be read ({err.strerror}); check the path") from None
    if exists:
        return path
    shipped = corpora_root() / str(spec)
    if str(spec) in SHIPPED_CORPORA and shipped.exists():
        return shipped
    raise CorpusError(f"corpus {str(spec)!r} does not exist; pass a folder or file of .txt/.md/.jsonl/"
                      f".parquet, or a shipped corpus by name ({', '.join(SHIPPED_CORPORA)})"
                      f"{did_you_mean(str(spec), SHIPPED_CORPORA)}")


def _model_record(model) -> ModelRecord:
    return ModelRecord(
        spec=model.spec, name=model.name, source=model.source, path=str(model.path), arch=model.arch,
        rows=model.n_rows, dim=model.dim, n_tokens=model.n_tokens, tied=model.tied, dtype=model.dtype,
        device=model.device, tensor_names=dict(model.tensor_names), files_read=list(model.files_read),
        tokenizer=model.vocab.backend if model.vocab is not None else None,
        load_seconds=round(model.load_seconds, 3))


def check_sections(sections: Sequence[str]) -> list[str]:
    """Validate section names; returns them in run order."""
    for s in sections:
        if s not in SECTION_NAMES:
            raise SpecError(f"unknown section {s!r}{did_you_mean(s, SECTION_NAMES)}; choose from "
                            f"{', '.join(SECTION_NAMES)}")
    return [s for s in SECTION_NAMES if s in sections]


@dataclass
class Given:
    """What a run reads besides its model. The names are the command line's: ``languages`` is
    ``--languages`` (the corpus of ``fertility``/``compare``), ``corpora`` is ``--corpus``, ``data``
    is ``--data``. A corpus is a path or a shipped corpus by name (``medical``, ``udhr``).

    >>> Given(languages="udhr")
    Traceback (most recent call last):
    ...
    embscope.errors.ArgumentError: Given(): languages='udhr' is one string where a list is expected; pass languages=['udhr']
    """

    #: corpora measured per language (fertility, parity, density; the diff's per-language drift)
    languages: Sequence[str | Path] = ()
    #: the corpus extension candidates come from (null: the first of ``languages`` and ``corpora`` in
    #: one language, :func:`domain_corpus`)
    domain: str | Path | None = None
    #: the user's own corpora: the scan lists the flagged rows their text (and the model's chat
    #: template) produces, and ``repair_to`` re-initialises them
    corpora: Sequence[str | Path] = ()
    #: training data for the readiness check (any record format of :mod:`embscope.corpus.conversations`;
    #: files, folders, globs); ``repair_to`` then re-initialises the rows its error-level findings point at
    data: Sequence[str | Path] = ()
    #: extra tokenizer specs measured beside the model's own (or alone, without a model)
    tokenizers: Sequence[str] = ()
    #: a tokens table from an earlier run (its ``flagged`` rows are left out of extension means)
    tokens: "pl.DataFrame | None" = None

    def __post_init__(self):
        from embscope.arguments import check_call

        check_call(Given, (), {f: getattr(self, f) for f in ("languages", "domain", "corpora", "data", "tokenizers")})


@dataclass
class Job:
    """How a run is recorded and shown."""

    #: the command recorded in the provenance
    command: str = "run"
    #: the folder kind (``scan``, ``extend``, ``languages``; empty for an audit)
    kind: str = ""
    #: write ``index.html`` (with ``out``)
    render: bool = True
    #: progress lines (null: when standard error is a terminal)
    verbose: bool | None = None
    #: things the caller already knows the user should hear (listed with the run's own)
    warnings: Sequence[str] = ()
    #: sections without which the run means nothing (a command's only section): their failure ends
    #: the run with its error and writes nothing, instead of being skipped
    required: Sequence[str] = ()


@checked
def run(model: str | None = None, *, sections: Sequence[str] = SECTION_NAMES, given: Given | None = None,
        out: str | Path | DefaultFolder | None = None, force: bool = False, options: RunOptions | None = None,
        job: Job | None = None, **fields: Any) -> RunResult:
    """Run ``sections`` on one model (or on tokenizers alone) and write one output folder.

    Args:
        model: a model spec (alias, hub id, folder, ``.gguf``); ``None`` for tokenizer-only runs.
        sections: which of :data:`~embscope.sections.registry.SECTION_NAMES` to run (a section
            whose option is off, e.g. ``repair`` without ``repair_to``, does not run).
        given: what the run reads besides the model (:class:`Given`: corpora, training data,
            tokenizers); none by default.
        out: the output folder; :data:`~embscope.output.DEFAULT_OUT` for
            ``reports/<name>[-<kind>]-<UTC time>``; None: nothing is written (``RunResult.folder`` is None).
        force: replace an earlier embscope folder at ``out`` (and at ``repair_to``).
        options: :class:`~embscope.sections.options.RunOptions`; ``**fields`` sets any of its options
            by name (a misspelt name is refused, naming the closest).
        job: how the run is recorded and shown (:class:`Job`: command, folder kind, progress lines).
    Returns:
        :class:`RunResult`.
    Example:
        >>> res = run("minilm-l6", sections=["context", "tokens"], scan=False)
        >>> res.summary.sections.tokens.categories["normal"], res.summary.sections.context.layers, list(res.tables)
        (30517, 6, ['tokens'])
    """
    from contextlib import nullcontext

    from embscope.output import DEFAULT_OUT, claim, default_out

    for name in fields:
        for record in (Given, Job):
            if name in record.__dataclass_fields__:
                raise SpecError(f"run() takes {name!r} in a {record.__name__}: pass "
                                f"{record.__name__.lower()}={record.__name__}({name}=...)")
    opts = RunOptions.build(options, **fields)
    given, job = given or Given(), job or Job()
    paths = _Paths(languages=[corpus_path(c) for c in given.languages],
                   domain=corpus_path(given.domain) if given.domain is not None else None,
                   corpora=[corpus_path(c) for c in given.corpora], data=[_training_path(c) for c in given.data])
    specs = [BY_NAME[n] for n in check_sections(sections) if BY_NAME[n].enabled(opts)
             and all(getattr(paths, r) for r in BY_NAME[n].requires)]  # the check runs on training data only
    if paths.domain is None and any(s.name == "extension" for s in specs):
        paths.domain = domain_corpus([*paths.languages, *paths.corpora], opts)
    _check_before_work(opts, [s.name for s in specs], paths, None if out is DEFAULT_OUT else out, force)
    resolved, extra_vocabs = _resolve(model, given.tokenizers, opts)
    label = resolved.name if resolved is not None else "-".join(v.name for v in extra_vocabs)
    target = None if out is None else default_out(label, job.kind) if out is DEFAULT_OUT else Path(out)
    steps = Steps(verbose=job.verbose)

    # The folder is claimed before the heavy work, so a bad --out fails in a second.
    with (claim(target, force=force, inputs=paths.paths(resolved, given.tokenizers), kind=job.kind or "audit")
          if target is not None else nullcontext()) as tmp:
        loaded = _load(resolved, opts, steps, readiness=any(s.name == "readiness" for s in specs))
        vocabs = ([loaded.vocab] if loaded is not None and loaded.vocab is not None else []) + extra_vocabs
        state = SectionInputs(options=opts, steps=steps, model=loaded, vocabs=vocabs, languages=paths.languages,
                              domain=paths.domain, tokens=given.tokens, corpora=paths.corpora, data=paths.data,
                              force=force)
        outputs, state = _run_sections(specs, state, steps, job.required)
        summary = _summary(job.command, opts, steps, loaded, resolved, model, outputs, state, given.tokenizers,
                           [*job.warnings, *(w for r in outputs.values() for w in r.warnings)])
        tables = _tables(outputs)
        if tmp is not None:
            _write(tmp, summary, tables, steps, job.render)
    return RunResult(folder=target, summary=summary, tables=tables, outputs=outputs)


@dataclass
class _Paths:
    """The paths a run was given (:class:`Given`, each corpus spec resolved), by the :class:`SectionInputs` field they fill."""

    languages: list[Path]
    domain: Path | None
    corpora: list[Path]
    data: list[Path]

    def check_readable(self) -> None:
        """Every path holds something the readers read (:mod:`embscope.corpus.preflight`)."""
        from embscope.corpus.preflight import check_readable

        check_readable([*self.languages, *([self.domain] if self.domain else []), *self.corpora])
        check_readable(self.data, training=True)

    def paths(self, resolved, tokenizers: Sequence[str]) -> list[Path]:
        """Every input that exists on disk (the output folder may be none of them)."""
        found = [resolved.path if resolved is not None else None, *self.languages, self.domain, *self.corpora,
                 *(p for p in self.data if p.exists()), *(Path(t) for t in tokenizers if Path(t).exists())]
        return [p for p in found if p is not None]


def domain_corpus(corpora: Sequence[Path], opts: RunOptions) -> Path | None:
    """The corpus the extension draws candidates from when none is given: the first of ``corpora``
    in one language (:func:`embscope.corpus.stream.first_languages`: one batch per file is read).

    >>> domain_corpus([corpus_path("udhr"), corpus_path("medical")], RunOptions()).name
    'medical'
    """
    from embscope.corpus.stream import first_languages

    for c in dict.fromkeys(corpora):
        try:
            if len(first_languages(c, opts.corpus.read_options())) == 1:
                return c
        except EmbscopeError:  # an unreadable corpus is the languages section's to report
            continue
    return None


def _check_before_work(opts: RunOptions, names: list[str], paths: "_Paths", out, force: bool) -> None:
    """What the run is given, refused before the model loads (``out``: the folder named, if any): the
    folders it would write, then the inputs it would read (a .csv or an empty file is named), then
    the values that depend on them."""
    if opts.repair.repair_to is not None:
        _check_repair(opts, paths, out, force)
    if opts.extension.apply_to is not None and "apply" in names:
        _check_apply(opts, paths, out, force)
    paths.check_readable()
    if "languages" in names:
        _check_reference(opts, paths.languages)
    if opts.languages.lang and ("languages" in names or "diff" in names):
        from embscope.languages.selection import selected_languages

        for corpus in paths.languages:  # --lang selects in the languages corpus, not in --corpus ones
            if corpus not in paths.corpora:
                selected_languages(opts.languages.lang, corpus, opts.languages.reference)
    if "readiness" in names and opts.readiness.split is not None:
        from embscope.corpus.conversations import check_split

        check_split(paths.data, opts.readiness.split)


def _check_reference(opts: RunOptions, corpora: Sequence[Path]) -> None:
    """``--reference`` before any work: refused when it is none of the languages of a corpus that
    holds one language per file (``corpora/udhr``: its files name its languages), with a "did you
    mean". A corpus that mixes languages inside its files is not judged here (a language may first
    appear deep inside one): the languages section warns when parity is empty."""
    from embscope.corpus.stream import file_languages

    ref, read = opts.languages.reference, opts.corpus.read_options()
    for corpus in corpora:
        try:
            langs = file_languages(corpus, read)
        except EmbscopeError:  # an unreadable corpus is the languages section's to report
            continue
        if ref in langs:
            return
        if len(langs) > 1 and len(set(langs)) == len(langs):
            shown = ", ".join(sorted(langs)[:12]) + (", …" if len(langs) > 12 else "")
            from embscope.languages.selection import suggest

            raise SpecError(f"--reference {ref!r} is not a language of {corpus}{suggest(ref, langs)}; pass one "
                            f"of its {len(langs)} languages ({shown})")


def _check_repair(opts: RunOptions, paths: _Paths, out, force: bool) -> None:
    """``--repair OUT``: something to repair, a scan to find it, and a target it may write."""
    from embscope.output import check_distinct, check_target

    if not paths.corpora and not paths.data:
        raise SpecError("--repair re-initialises the flagged rows your data uses: pass --corpus too")
    if not opts.scan.scan:
        raise SpecError("--repair re-initialises the rows the scan flags (and the zero rows it finds): drop "
                        "--no-scan")
    check_distinct([("--out", out), ("--repair", opts.repair.repair_to)])
    check_target(opts.repair.repair_to, force=force, inputs=[*paths.corpora, *(p for p in paths.data if p.exists())])
    _check_repair_kind(Path(opts.repair.repair_to))


def _check_apply(opts: RunOptions, paths: _Paths, out, force: bool) -> None:
    """``--apply OUT``: a target apart from ``--out`` that it may write (checked before any work)."""
    from embscope.output import check_distinct, check_target

    check_distinct([("--out", out), ("--apply", opts.extension.apply_to)])
    check_target(opts.extension.apply_to, force=force, inputs=[p for p in (paths.domain, *paths.languages) if p is not None])


def _resolve(model: str | None, tokenizers: Sequence[str], opts: RunOptions):
    """``(Resolved or None, the extra tokenizers loaded)``; the device is checked first."""
    from embscope.limits import using
    from embscope.models.load import pick_device
    from embscope.models.resolve import resolve
    from embscope.models.vocabulary import load_vocabulary

    pick_device(opts.load.device)  # fail fast on --device cuda without a GPU
    resolved = resolve(model, trust_pickle=opts.load.trust_pickle, download=opts.load.download,
                       limits=opts.corpus.bounds()) if model is not None else None
    if resolved is None and not tokenizers:
        raise SpecError("nothing to measure: pass a model or at least one tokenizer")
    with using(opts.corpus.bounds()):  # the tokenizer loader's bounds (tokenizer-bytes, merges)
        return resolved, [load_vocabulary(t) for t in tokenizers]


def _run_sections(specs, state: SectionInputs, steps: Steps, required) -> "tuple[dict[str, SectionOutput], SectionInputs]":
    """Run the sections in order, each reading what the ones before it gave; work a section left
    running (the map's layout process) is finished once every section has run, and abandoned when
    the run fails."""
    outputs: dict[str, SectionOutput] = {}
    try:
        for spec in specs:
            outputs[spec.name] = res = _run_section(spec, state, steps, spec.name in required)
            state = replace(state, **res.gives)
        for res in outputs.values():
            if res.background is not None:
                res.background.finish()
                res.background = None
    finally:
        for res in outputs.values():
            if res.background is not None:
                res.background.cancel()
    return outputs, state


def _load(resolved, opts: RunOptions, steps: Steps, *, readiness: bool):
    """The model's matrices and tokenizer (None for tokenizer-only runs); the values that need them
    (``--unused-ids``, ``--pad-token``) checked before any analysis; ``readiness``: the check runs
    (it reads the tokenizer's ids past the matrix's rows too)."""
    from embscope.limits import using
    from embscope.models.load import load_model

    if resolved is None:
        return None
    with steps.step("load", f"load {resolved.spec}"), using(opts.corpus.bounds()):
        loaded = load_model(resolved, device=opts.load.device, trust_pickle=opts.load.trust_pickle,
                            tokens_past_rows=readiness)
    bad = [i for i in opts.scan.unused_ids or () if i >= loaded.n_rows]
    if bad:
        raise SpecError(f"--unused-ids {bad[0]} is past the last row of {loaded.name} "
                        f"({loaded.n_rows - 1}); pass row ids of this model")
    if readiness and opts.readiness.pad_token is not None:  # the check's pad token, before the scan
        from embscope.readiness.trainers import pad_token_id

        pad_token_id(loaded, opts.readiness.pad_token)
    return loaded


def _check_repair_kind(target: Path) -> None:
    """``--repair`` replaces (with ``--force``) only a model folder an earlier repair wrote, never a
    report folder: refused here, before any work, like every other bad target."""
    from embscope.output import read_marker

    marker = read_marker(target) if target.is_dir() else None
    if marker is not None and marker.get("kind") not in (None, "model"):
        raise SpecError(f"--repair {target} holds an embscope {marker.get('kind')} report, not a repaired model; "
                        "pass another folder for the repaired model")


def _training_path(spec: str | Path) -> Path:
    """A training-data spec → path: an existing path, a glob, or a shipped corpus by name."""
    from embscope.corpus.listing import is_glob

    return Path(spec) if is_glob(str(spec)) else corpus_path(spec)


def _run_section(spec: Section, state: SectionInputs, steps: Steps, required: bool) -> SectionOutput:
    """One section: its output, or — when it fails with an embscope error or runs out of memory —
    the reason as ``skipped`` (a required section's failure ends the run instead)."""
    t0 = time.perf_counter()
    try:
        res = spec.function()(state)
    except (EmbscopeError, MemoryError) as err:  # only a model that cannot load ends a run
        if required:
            raise
        reason = str(err) if isinstance(err, EmbscopeError) else "not enough memory for this section"
        res = SectionOutput(skipped=reason, warnings=[f"{spec.name}: {reason}"])
    if spec.name not in steps.timings:
        steps.timings[spec.name] = round(time.perf_counter() - t0, 3)
    if res.skipped and required:
        raise SpecError(f"nothing to report: {res.skipped}")
    if res.skipped:
        steps.skip(spec.name, res.skipped)
    stray = sorted(set(res.gives) - set(spec.gives)) + sorted(set(res.tables) - set(spec.tables))
    if stray:
        raise TypeError(f"section {spec.name} gives {stray}, which the registry does not declare")  # a bug
    return res


def _summary(command, opts, steps, loaded, resolved, model, outputs, state, tokenizers, warnings) -> Summary:
    from embscope.provenance import library_versions, stamp, tensor_digest, tree_digest
    from embscope.summary import Fingerprints, ModelInputs, TensorDigests
    from embscope.verdict import RunFacts, bottom_line

    inputs = Fingerprints(corpora={str(p): tree_digest(p) for p in dict.fromkeys(
        [*state.languages, *([state.domain] if state.domain else []), *state.corpora])}, tokenizers=list(tokenizers))
    if loaded is not None:
        inputs.model = ModelInputs(spec=model, hub=resolved.hub, tensors=TensorDigests(
            embed=tensor_digest(loaded.embed),
            output=tensor_digest(loaded.output) if loaded.output is not None else None))
    if state.data:
        inputs.training = {str(p): tree_digest(p) if p.exists() else "glob" for p in state.data}
    summary = Summary(
        schema_version=SCHEMA_VERSION, embscope=stamp(command), versions=library_versions(),
        inputs=inputs, parameters=opts, timings=dict(steps.timings),
        model=_model_record(loaded) if loaded is not None else None,
        sections=Sections(**{n: r.record for n, r in outputs.items() if r.record is not None}),
        skipped={n: r.skipped for n, r in outputs.items() if r.skipped}, warnings=list(warnings))
    summary.bottom_line = bottom_line(summary.sections, RunFacts(
        command=command, model=model, corpora=[str(p) for p in state.corpora], data=[str(p) for p in state.data],
        options=opts))
    Summary.from_dict(summary.to_dict())  # what the report will read back must check out now
    return summary


def _tables(outputs: dict[str, SectionOutput]) -> dict[str, Any]:
    """Every section's tables by file stem, each column cast to its documented type."""
    from embscope.schema import conform

    return {stem: conform(stem, frame) for r in outputs.values() for stem, frame in r.tables.items()}


def _write(tmp: Path, summary: Summary, tables: dict[str, Any], steps: Steps, render: bool) -> None:
    """The folder's files: the tables, ``summary.json``, then ``index.html`` (timings updated)."""
    from embscope.output import json_text, replace_file, write_json, write_parquet

    meta = {"embscope.schema_version": str(SCHEMA_VERSION)}
    for stem, frame in tables.items():
        write_parquet(tmp / f"{stem}.parquet", frame, meta)
    write_json(tmp / "summary.json", summary)
    if render:
        from embscope.report import render as render_page

        with steps.step("report", "render index.html"):
            render_page(tmp)
        summary.timings = dict(steps.timings)
        replace_file(tmp / "summary.json", json_text(summary))
