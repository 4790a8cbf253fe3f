"""``audit``: the whole vocabulary review of one model, written as one report folder.

Data flows one way: resolve → load (matrices + tokenizer) → analyse (context, geometry, languages,
extension) → tables (``tokens.parquet``, ``languages.parquet``, ``candidates.parquet``,
``summary.json``) → render (``index.html``). The folder is built aside and renamed into place at the
end, so an error or Ctrl-C leaves nothing half-written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embscope.output import atomic_folder, default_out, provenance, write_json
from embscope.progress import Steps


@dataclass
class AuditOptions:
    """Knobs of an audit; every field is recorded in summary.json under ``embscope.parameters``."""

    #: nearest neighbours per row in the kNN graph
    k: int = 10
    #: run the geometry scan (indicators, kNN graph, map)
    scan: bool = True
    #: compute the 2-D UMAP map (the slowest part of the scan on large vocabularies)
    layout: bool = True
    #: ``undertrained_score`` at or above which a row is flagged (see embscope.geometry.indicators)
    threshold: float = 2.5
    #: token ids known to be unused (the Magikarp reference set); ``None`` finds them automatically
    unused_ids: Sequence[int] | None = None
    #: reference language for parity
    reference: str = "eng"
    #: cap on corpus bytes read per language (``None``: all)
    sample_bytes: int | None = None
    #: extension candidates to keep
    top: int = 200
    #: initialisation strategies to diagnose for extension candidates
    init: Sequence[str] = ("mean", "hewitt", "subword-mean")
    #: allow PyTorch pickle checkpoints (still ``weights_only=True``)
    trust_pickle: bool = False
    #: ``auto``, ``cpu`` or ``cuda``
    device: str = "auto"
    #: folder for the kNN cache (default ``~/.cache/embscope``)
    cache_dir: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def audit(spec: str, *, corpora: Sequence[str | Path] = (), out: str | Path | None = None,
          options: AuditOptions | None = None, force: bool = False, verbose: bool | None = None) -> Path:
    """Run the whole review of ``spec`` and return the report folder.

    Args:
        spec: model spec (alias, hub id, folder, ``.gguf``; see :mod:`embscope.resolve`).
        corpora: corpus folders/files; each gives per-language metrics, and single-language
            (domain) corpora also give vocabulary-extension candidates.
        out: report folder (default ``reports/<model>-<UTC timestamp>``); must not exist unless
            ``force``.
        options: :class:`AuditOptions`.

    Example:
        >>> folder = audit("smollm2-135m", corpora=["corpora/medical"])  # doctest: +SKIP
        >>> sorted(p.name for p in folder.iterdir())
        ['candidates.parquet', 'index.html', 'languages.parquet', 'summary.json', 'tokens.parquet']
    """
    from dataclasses import asdict

    from embscope.context import context_summary
    from embscope.load import load_model, pick_device
    from embscope.resolve import resolve
    from embscope.tables import base_columns, tokens_frame

    opts = options or AuditOptions()
    steps = Steps(verbose=verbose)
    corpora = [Path(c) for c in corpora]
    _check_corpora(corpora)

    pick_device(opts.device)  # fail fast on --device cuda without a GPU
    resolved = resolve(spec, trust_pickle=opts.trust_pickle)
    target = Path(out) if out is not None else default_out(resolved.name)
    # The folder is claimed before the heavy work, so an unwritable --out fails in a second.
    with atomic_folder(target, force=force) as tmp:
        with steps.step("load", f"load {spec}"):
            model = load_model(resolved, device=opts.device, trust_pickle=opts.trust_pickle)
        summary: dict[str, Any] = {
            "embscope": provenance(asdict(opts) | {"corpora": [str(c) for c in corpora]}),
            "model": model_record(model),
            "skipped": {},
        }
        with steps.step("context", "RoPE and KV-cache summary"):
            summary["context"] = context_summary(model.config).to_dict()
        with steps.step("tokens", "token table and norms"):
            columns = base_columns(model)
        summary["categories"] = _counts(model.categories)

        if opts.scan:
            from embscope.geometry.scan import scan

            with steps.step("geometry", f"indicators and kNN graph (k={opts.k})"):
                result = scan(model, k=opts.k, unused_ids=opts.unused_ids, cache_dir=opts.cache_dir,
                              layout=opts.layout, threshold=opts.threshold)
            columns.update(result.columns)
            summary["geometry"] = result.summary
            summary["knn"] = result.summary.get("knn")
        else:
            summary["skipped"]["geometry"] = "scan disabled (--no-scan)"
        tokens = tokens_frame(columns)
        tokens.write_parquet(tmp / "tokens.parquet")

        if corpora and model.vocab is not None:
            _languages(model, corpora, tokens, opts, steps, tmp, summary)
        else:
            why = "no corpus given" if not corpora else "the model ships no tokenizer"
            summary["skipped"]["languages"] = why
            summary["skipped"]["extension"] = why

        summary["timings"] = dict(steps.timings)
        write_json(tmp / "summary.json", summary)
        from embscope.report import render

        with steps.step("report", "render index.html"):
            render(tmp)
        summary["timings"] = dict(steps.timings)
        write_json(tmp / "summary.json", summary)
    return target


def _languages(model, corpora, tokens, opts: AuditOptions, steps: Steps, tmp: Path, summary: dict) -> None:
    """Per-language metrics for every corpus; extension candidates from single-language corpora."""
    import polars as pl

    from embscope.languages.fertility import measure
    from embscope.extend import suggest

    tables, lang_summaries, domain = [], {}, None
    for corpus in corpora:
        with steps.step(f"languages:{corpus.name}", f"fertility and parity on {corpus}"):
            res = measure([model.vocab], corpus, reference=opts.reference, sample_bytes=opts.sample_bytes,
                          embed=model.embed, tokens=tokens)
        tables.append(res.table.with_columns(pl.lit(str(corpus)).alias("corpus")))
        lang_summaries[str(corpus)] = res.summary
        if domain is None and res.table.height == 1:
            domain = corpus
    pl.concat(tables, how="diagonal_relaxed").write_parquet(tmp / "languages.parquet")
    summary["languages"] = lang_summaries
    if domain is None:
        summary["skipped"]["extension"] = "no single-language (domain) corpus given"
        return
    with steps.step("extension", f"vocabulary-extension candidates from {domain}"):
        ext = suggest(model, domain, top=opts.top, init=tuple(opts.init), tokens=tokens)
    ext.table.write_parquet(tmp / "candidates.parquet")
    summary["extension"] = ext.summary | {"corpus": str(domain)}


def _check_corpora(corpora: list[Path]) -> None:
    from embscope.errors import CorpusError

    for c in corpora:
        if not c.exists():
            raise CorpusError(f"corpus {str(c)!r} does not exist; pass a folder or file of .txt/.md/.jsonl/"
                              ".parquet (shipped: corpora/medical, corpora/udhr)")


def _counts(values: Sequence[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def model_record(model) -> dict[str, Any]:
    """The ``model`` block of summary.json."""
    return {
        "spec": model.spec, "name": model.name, "source": model.source, "path": model.path,
        "arch": model.arch, "rows": model.n_rows, "dim": model.dim, "n_tokens": model.n_tokens,
        "tied": model.tied, "dtype": model.dtype, "device": model.device,
        "tensor_names": model.tensor_names, "files_read": model.files_read,
        "tokenizer": model.vocab.backend if model.vocab is not None else None,
        "load_seconds": round(model.load_seconds, 3),
    }
