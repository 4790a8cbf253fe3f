"""The runner: claim the output folder, load the model once, run the sections, write the folder.

Every command that writes a folder goes through :func:`run`, so every folder has the same layout::

    .embscope            marker (embscope made this folder)
    summary.json         embscope.summary.Summary: provenance, parameters, timings, section records
    tokens.parquet       one row per matrix row               (tokens section)
    languages.parquet    one row per tokenizer × language      (languages section)
    candidates.parquet   one row per extension candidate       (extension section)
    index.html           the offline report, rendered from the files above

Data flows one way: resolve → load → sections → tables → render. A section with nothing to report
records why (``skipped``) and the run goes on; only a model that cannot load ends it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embscope.errors import CorpusError, EmbscopeError, SpecError, did_you_mean
from embscope.progress import Steps
from embscope.sections.base import Inputs, RunOptions, SectionOutput
from embscope.summary import SCHEMA_VERSION, SECTION_NAMES, ModelRecord, Sections, Summary

#: corpora that ship with embscope, by name (``--corpus medical``)
SHIPPED_CORPORA = ("medical", "udhr")
#: the multilingual corpus an audit measures by default (``--languages``)
DEFAULT_LANGUAGES = "udhr"


@dataclass
class RunResult:
    """What :func:`run` returns: the folder it wrote and the summary in it."""

    folder: Path
    summary: Summary
    #: live section outputs (e.g. the extension result, for ``extend --apply``); not written
    outputs: dict[str, SectionOutput] = field(default_factory=dict, repr=False)
    #: the manifest of a ``--repair`` folder written after the run, if any
    repair: dict[str, Any] | None = None

    @property
    def warnings(self) -> list[str]:
        return self.summary.warnings


def corpora_root() -> Path:
    """The folder of the shipped corpora (``corpora/`` next to the package in a checkout)."""
    import os

    env = os.environ.get("EMBSCOPE_CORPORA")
    return Path(env) if env else Path(__file__).resolve().parent.parent / "corpora"


def corpus_path(spec: str | Path) -> Path:
    """A corpus spec → path: an existing path as given, else a shipped corpus by name.

    >>> corpus_path("medical").name
    'medical'
    """
    path = Path(spec).expanduser()
    if path.exists():
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


def _section_fns(scan: bool) -> dict[str, Callable[[Inputs], SectionOutput]]:
    from embscope.sections.context import context_section
    from embscope.sections.extension import extension_section
    from embscope.sections.languages import languages_section
    from embscope.sections.tokens import tokens_section

    return {"context": context_section,
            "tokens": lambda inputs: tokens_section(inputs, scan=scan),
            "languages": languages_section,
            "extension": extension_section}


def check_sections(sections: Sequence[str]) -> list[str]:
    """Validate section names; returns them in run order."""
    for s in sections:
        if s not in SECTION_NAMES:
            raise SpecError(f"unknown section {s!r}{did_you_mean(s, SECTION_NAMES)}; choose from "
                            f"{', '.join(SECTION_NAMES)}")
    return [s for s in SECTION_NAMES if s in sections]


def run(model: str | None = None, *, sections: Sequence[str] = SECTION_NAMES,
        corpora: Sequence[str | Path] = (), domain: str | Path | None = None, data: Sequence[str | Path] = (),
        tokenizers: Sequence[str] = (), out: str | Path | None = None, force: bool = False,
        options: RunOptions | None = None, scan: bool = True, render: bool = True, tokens=None,
        command: str = "run", kind: str = "", verbose: bool | None = None,
        warnings: Sequence[str] = (), required: Sequence[str] = (), pickle_hint: str | None = None) -> RunResult:
    """Run ``sections`` on one model (or on tokenizers alone) and write one output folder.

    Args:
        model: a model spec (alias, hub id, folder, ``.gguf``); ``None`` for tokenizer-only runs.
        sections: which of ``context``, ``tokens``, ``languages``, ``extension`` to run.
        corpora: corpora for per-language figures (paths, or shipped names ``medical``, ``udhr``).
        domain: the corpus that extension candidates come from (default: the first corpus with one
            language, found after the languages section ran).
        data: the user's own corpora: the scan lists the flagged rows their text (and the model's chat
            template) produces.
        tokenizers: extra tokenizer specs measured beside the model's own (or alone, without a model).
        out: the output folder (default ``reports/<name>[-<kind>]-<UTC time>``).
        force: replace an earlier embscope folder at ``out``.
        options: :class:`~embscope.sections.base.RunOptions`.
        scan: run the geometry scan inside the tokens section.
        render: write ``index.html``.
        command: the command recorded in the provenance.
        kind: the folder kind (``scan``, ``extend``, ``languages``; empty for an audit).
        tokens: a tokens table from an earlier run (``flagged`` rows are left out of extension means).
        warnings: things the caller already knows the user should hear (listed with the run's own).
        required: sections without which the run means nothing (a command's only section): their
            failure ends the run with its error and writes nothing, instead of being skipped.
        pickle_hint: how the caller can allow ``.bin`` checkpoints, ending the refusal message
            (default: the library's ``trust_pickle=True``; the CLI names its flag).
    Returns:
        :class:`RunResult`.
    Example:
        >>> res = run("smollm2-135m", sections=["context", "tokens"], scan=False)  # doctest: +SKIP
        >>> res.summary.sections.tokens.categories["normal"]  # doctest: +SKIP
    """
    from embscope.allocator import reuse_freed_blocks
    from embscope.models.load import load_model, pick_device
    from embscope.output import claim, default_out, replace_file, json_text, write_json, write_parquet
    from embscope.provenance import library_versions, run_stamp, tensor_digest, tree_digest
    from embscope.models.resolve import resolve
    from embscope.schema import conform

    opts = (options or RunOptions()).check()
    names = check_sections(sections)
    if os.environ.get("EMBSCOPE_REUSE_BLOCKS") == "1":  # opt-in: see embscope.allocator
        reuse_freed_blocks()
    steps = Steps(verbose=verbose)
    corpus_paths = [corpus_path(c) for c in corpora]
    domain_path = corpus_path(domain) if domain is not None else None
    data_paths = [corpus_path(c) for c in data]
    pick_device(opts.device)  # fail fast on --device cuda without a GPU
    from embscope.models.load import PICKLE_HINT

    hint = PICKLE_HINT if pickle_hint is None else pickle_hint
    resolved = (resolve(model, trust_pickle=opts.trust_pickle, pickle_hint=hint, download=opts.download)
                if model is not None else None)
    if resolved is None and not tokenizers:
        raise SpecError("nothing to measure: pass a model or at least one tokenizer")

    from embscope.models.vocabulary import load_vocabulary

    extra_vocabs = [load_vocabulary(t) for t in tokenizers]
    label = resolved.name if resolved is not None else "-".join(v.name for v in extra_vocabs)
    target = Path(out) if out is not None else default_out(label, kind)
    inputs_paths = [p for p in [resolved.path if resolved else None, *corpus_paths, domain_path, *data_paths,
                                *(t for t in tokenizers if Path(t).exists())] if p is not None]

    # The folder is claimed before the heavy work, so a bad --out fails in a second.
    with claim(target, force=force, inputs=inputs_paths, kind=kind or "audit") as tmp:
        loaded = None
        if resolved is not None:
            with steps.step("load", f"load {model}"):
                loaded = load_model(resolved, device=opts.device, trust_pickle=opts.trust_pickle)
            bad = [i for i in opts.unused_ids or () if i >= loaded.n_rows]
            if bad:
                raise SpecError(f"--unused-ids {bad[0]} is past the last row of {loaded.name} "
                                f"({loaded.n_rows - 1}); pass row ids of this model")
        vocabs = ([loaded.vocab] if loaded is not None and loaded.vocab is not None else []) + extra_vocabs
        state = Inputs(options=opts, steps=steps, model=loaded, vocabs=vocabs, corpora=corpus_paths,
                       domain=domain_path, tokens=tokens, data=data_paths)
        fns = _section_fns(scan)
        records: dict[str, Any] = {}
        skipped: dict[str, str] = {}
        warnings = list(warnings)
        outputs: dict[str, SectionOutput] = {}
        tables: dict[str, Any] = {}
        for name in names:
            if name == "extension" and state.domain is None:
                state.domain = _domain_corpus(outputs.get("languages"), corpus_paths)
            t0 = time.perf_counter()
            try:
                res = fns[name](state)
            except (EmbscopeError, MemoryError) as err:  # only a model that cannot load ends a run
                if name in required:
                    raise
                reason = str(err) if isinstance(err, EmbscopeError) else "not enough memory for this section"
                res = SectionOutput(skipped=reason, warnings=[f"{name}: {reason}"])
            outputs[name] = res
            if name not in steps.timings:
                steps.timings[name] = round(time.perf_counter() - t0, 3)
            if res.record is not None:
                records[name] = res.record
            if res.skipped and name in required:
                raise SpecError(f"nothing to report: {res.skipped}")
            if res.skipped:
                skipped[name] = res.skipped
                steps.skip(name, res.skipped)
            warnings += res.warnings
            tables.update(res.tables)
            if name == "tokens" and "tokens" in res.tables:
                state.tokens = res.tables["tokens"]

        fingerprints: dict[str, Any] = {}
        if loaded is not None:
            fingerprints["model"] = {"spec": model, "tensors": {
                "embed": tensor_digest(loaded.embed),
                "output": tensor_digest(loaded.output) if loaded.output is not None else None}}
            if resolved.hub is not None:  # read by ranges: the hub's commit and each file's ETag
                fingerprints["model"]["hub"] = resolved.hub
        fingerprints["corpora"] = {str(p): tree_digest(p) for p in dict.fromkeys(
            [*corpus_paths, *([state.domain] if state.domain else [])])}
        fingerprints["tokenizers"] = list(tokenizers)
        summary = Summary(
            schema_version=SCHEMA_VERSION, embscope=run_stamp(command), versions=library_versions(),
            inputs=fingerprints, parameters=opts, timings=dict(steps.timings),
            model=_model_record(loaded) if loaded is not None else None,
            sections=Sections(**records), skipped=skipped, warnings=warnings)
        Summary.from_dict(summary.to_dict())  # what the report will read back must check out now
        meta = {"embscope.schema_version": str(SCHEMA_VERSION)}
        for stem, frame in tables.items():
            write_parquet(tmp / f"{stem}.parquet", conform(stem, frame), meta)
        write_json(tmp / "summary.json", summary)
        if render:
            from embscope.report import render as render_page

            with steps.step("report", "render index.html"):
                render_page(tmp)
            summary.timings = dict(steps.timings)
            replace_file(tmp / "summary.json", json_text(summary))
    return RunResult(folder=target, summary=summary, outputs=outputs)


def _domain_corpus(languages: SectionOutput | None, corpora: Sequence[Path]) -> Path | None:
    """The first corpus with a single language (a domain corpus), from the languages section."""
    if languages is None or languages.record is None:
        return None
    table = languages.tables.get("languages")
    for c in corpora:
        if table is not None and table.filter(table["corpus"] == str(c))["language"].n_unique() == 1:
            return c
    return None

