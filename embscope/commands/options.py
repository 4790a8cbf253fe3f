"""Options shared by several commands, declared once, and the few helpers every command uses."""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from embscope.errors import SpecError


class Device(str, enum.Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


ModelOpt = Annotated[str, typer.Option("--model", "-m", help="alias (`embscope models`), HF hub id, model folder or .gguf file")]
Out = Annotated[Optional[Path], typer.Option("--out", "-o", help="output folder (default reports/<name>-<UTC time>)")]
Force = Annotated[bool, typer.Option("--force", help="replace the output folder if an earlier embscope run wrote it")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="no progress output (also: EMBSCOPE_QUIET=1)")]
Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="more detail: every step and its time, log lines")]
Json = Annotated[bool, typer.Option("--json", help="print the result as JSON on stdout")]
class Download(str, enum.Enum):
    ranges = "ranges"
    full = "full"


DownloadOpt = Annotated[Download, typer.Option("--download", help="a hub model's weights: ranges (only the embedding and head tensors' bytes, cached under the embscope cache) or full (the whole shards holding them, into the HF cache)")]
Corpus = Annotated[Path, typer.Option("--corpus", "-c", help="corpus: a folder or .txt/.md/.jsonl/.parquet file, or a shipped name (medical, udhr)")]
Reference = Annotated[str, typer.Option("--reference", help="language that parity divides by")]


class KnnMethod(str, enum.Enum):
    auto = "auto"
    exact = "exact"
    certified = "certified"
    ivf = "ivf"
    refined = "refined"
    hnsw = "hnsw"


class EngineKind(str, enum.Enum):
    local = "local"
    ray = "ray"


class DataFormat(str, enum.Enum):
    messages = "messages"
    sharegpt = "sharegpt"
    alpaca = "alpaca"
    prompt_completion = "prompt-completion"
    text = "text"
    preference = "preference"
    kto = "kto"


class TrainerKind(str, enum.Enum):
    trl = "trl"
    transformers = "transformers"
    unsloth = "unsloth"
    axolotl = "axolotl"
    llamafactory = "llamafactory"


# ------------------------------------------------------------------ run options, declared once
#
# Every option that sets a field of embscope.sections.base.RunOptions is declared here, once: its
# flag, its help and how the flag's value becomes the field's value. Its default is the field's
# default in the library. A command takes a group of them with @run_options(...) and receives the
# built RunOptions as its ``options`` argument.


@dataclass(frozen=True)
class RunOpt:
    """One RunOptions field on the command line."""

    #: the RunOptions field it sets
    field: str
    #: the command function's parameter: ``Annotated[type, typer.Option(...)]``
    annotation: Any
    #: flag value → field value (identity by default)
    to_field: Callable[[Any], Any] = lambda v: v
    #: field default → flag default (identity by default)
    from_field: Callable[[Any], Any] = lambda v: v


def _split_specs(items: list[str]) -> list[str]:
    return [s.strip() for item in items for s in item.split(",") if s.strip()]


RUN_OPTS: dict[str, RunOpt] = {
    # where and how the model loads
    "device": RunOpt("device", Annotated[Device, typer.Option("--device", help="where to compute: auto (GPU when present), cpu or cuda")],
                     to_field=lambda d: d.value, from_field=Device),
    "trust_pickle": RunOpt("trust_pickle", Annotated[bool, typer.Option("--trust-pickle", help="allow PyTorch .bin checkpoints (loaded with weights_only=True)")]),
    "download": RunOpt("download", DownloadOpt, to_field=lambda d: d.value, from_field=Download),
    # the scan
    "k": RunOpt("k", Annotated[int, typer.Option("--k", min=1, max=1000, help="nearest neighbours per row in the kNN graph")]),
    "knn": RunOpt("knn_method", Annotated[KnnMethod, typer.Option("--knn", help="how the kNN graph is built: auto (exact on small matrices, else certified when cheaper), exact, certified (exact decisions: every flagged, isolated or listed row searched exactly; docs/undertrained.md), or an approximate index: ivf, refined, hnsw")],
                  to_field=lambda m: m.value, from_field=KnnMethod),
    "no_scan": RunOpt("scan", Annotated[bool, typer.Option("--no-scan", help="skip indicators and the kNN graph")],
                      to_field=lambda v: not v, from_field=lambda v: not v),
    "no_map": RunOpt("layout", Annotated[bool, typer.Option("--no-map", help="skip the 2-D UMAP map")],
                     to_field=lambda v: not v, from_field=lambda v: not v),
    "unused_ids": RunOpt("unused_ids", Annotated[Optional[str], typer.Option("--unused-ids", help="comma-separated rows known to be unused (default: found automatically)")],
                         to_field=lambda v: parse_ids(v), from_field=lambda v: None if v is None else ",".join(map(str, v))),
    "threshold": RunOpt("threshold", Annotated[float, typer.Option("--threshold", help="flag rows whose undertrained_score (robust sigmas of the strongest indicator) is at least this")]),
    "verify": RunOpt("verify", Annotated[int, typer.Option("--verify", min=0, help="prompt the whole model on N flagged rows, up to 100 trained controls and N rows the gates stopped (causal LMs that fit in memory; at most 2000)")]),
    # audit's --verify: automatic by default (a capped random sample when the whole weights fit)
    "audit_verify": RunOpt("verify", Annotated[Optional[int], typer.Option("--verify", min=0, help="prompt the whole model on N flagged rows, up to 100 trained controls and N rows the gates stopped (default: 50 random flagged rows, stopped at 300 s, when the whole weights fit in memory; 0: off; at most 2000)")],
                           from_field=lambda v: None),
    "verify_sample": RunOpt("verify_sample", Annotated[str, typer.Option("--verify-sample", help="which flagged rows --verify checks: top (highest scores) or random (a seeded sample of all flags: estimates their precision)")]),
    "verify_time_cap": RunOpt("verify_time_cap", Annotated[Optional[float], typer.Option("--verify-time-cap", help="stop prompting after this many seconds (whole batches; the summary says so)")]),
    "repair": RunOpt("repair_to", Annotated[Optional[Path], typer.Option("--repair", help="also write the model with the flagged rows your --corpus uses re-initialised (a model folder, or a rows file for large models)")]),
    "repair_init": RunOpt("repair_init", Annotated[str, typer.Option("--repair-init", help="strategy for --repair: NAME or INPUT/OUTPUT (mean, subword-mean, ...)")]),
    # languages
    "reference": RunOpt("reference", Reference),
    # extension
    "top": RunOpt("top", Annotated[int, typer.Option("--top", min=1, help="vocabulary-extension terms to add (best estimated savings first)")]),
    "init": RunOpt("init", Annotated[list[str], typer.Option("--init", help="initialisation to diagnose: auto (every training-free strategy, and recommend one), NAME or INPUT/OUTPUT (untied models); repeat or comma-separate; names: mean, hewitt, subword-mean, weighted-subword, knn-pull, subword-mean-norm, omp, distil (fits each row through the model; named only)")],
                   to_field=_split_specs, from_field=list),
    "max_ngram": RunOpt("max_ngram", Annotated[int, typer.Option("--max-ngram", min=1, help="longest multi-word extension term, in words")]),
    "min_freq": RunOpt("min_freq", Annotated[int, typer.Option("--min-freq", min=1, help="least occurrences of an extension term")]),
    "no_diagnostics": RunOpt("diagnostics", Annotated[bool, typer.Option("--no-diagnostics", help="skip the extension's KL / new-token-mass check (no whole-model load)")],
                             to_field=lambda v: not v, from_field=lambda v: not v),
    "extend_as": RunOpt("extend_as", Annotated[str, typer.Option("--as", help="how new tokens are written: model (BPE merges ranked after every existing merge, Unigram pieces with a score: built only where the tokenizer would build them) or added (HF added tokens, matched anywhere in the raw text, with spaced twins)")]),
    "bpb_bytes": RunOpt("bpb_bytes", Annotated[Optional[int], typer.Option("--bpb-bytes", min=256, help="held-out corpus bytes for the extension's bits per byte (default: 24576 in extend, 4096 in audit)")]),
    "distil_budget": RunOpt("distil_budget", Annotated[Optional[float], typer.Option("--distil-budget", min=0, help="seconds distil may take inside --init auto, estimated from its first contexts (default: 180 in extend, 0 in audit); --init distil always runs it")]),
    # corpus reading and where the passes run
    "sample_bytes": RunOpt("sample_bytes", Annotated[Optional[int], typer.Option("--sample-bytes", min=1, help="read at most N bytes of text per language")]),
    "engine": RunOpt("engine", Annotated[EngineKind, typer.Option("--engine", help="where corpus passes run: local processes, or Ray Data (a local Ray, or --ray-address)")],
                     to_field=lambda e: e.value, from_field=EngineKind),
    "workers": RunOpt("workers", Annotated[Optional[int], typer.Option("--workers", min=1, help="local: worker processes (default: all cores for corpora of 32 MB or more); ray: CPUs of a local Ray")]),
    "ray_address": RunOpt("ray_address", Annotated[Optional[str], typer.Option("--ray-address", help="an existing Ray cluster (default: $RAY_ADDRESS, else a local Ray)")]),
    "text_field": RunOpt("text_field", Annotated[str, typer.Option("--text-field", help="text field of .jsonl records and Parquet/Arrow/HF-dataset columns")]),
    # the pre-fine-tune check
    "format": RunOpt("data_format", Annotated[Optional[DataFormat], typer.Option("--format", help="force one training-data record format (default: detected per record)")],
                     to_field=lambda f: f.value if f is not None else None, from_field=lambda v: DataFormat(v) if v else None),
    "max_length": RunOpt("max_length", Annotated[Optional[int], typer.Option("--max-length", min=1, help="the trainer's sequence length in tokens (default: the trainer's own, e.g. TRL's max_length 1024, else the model's context)")]),
    "chat_template": RunOpt("chat_template", Annotated[Optional[Path], typer.Option("--chat-template", help="render the training data with this template file (.jinja) instead of the model's own")],
                            to_field=lambda p: str(p) if p is not None else None),
    "trainer": RunOpt("trainer", Annotated[TrainerKind, typer.Option("--trainer", help="the trainer whose input ids, labels and loss mask to check: trl (default: TRL's SFT/DPO/KTO trainers, the most used; Unsloth builds on them), transformers (Trainer + DataCollatorForLanguageModeling: masks the pad id in the labels), unsloth, axolotl, llamafactory; see docs/trainers.md")],
                      to_field=lambda t: t.value, from_field=TrainerKind),
    "pad_token": RunOpt("pad_token", Annotated[Optional[str], typer.Option("--pad-token", help="the pad token you will set (tokenizer.pad_token); default: the one the trainer picks")]),
    "lf_template": RunOpt("lf_template", Annotated[Optional[str], typer.Option("--template", help="--trainer llamafactory: LLaMA-Factory's template name (smollm2, qwen, chatml, default, alpaca, empty); default: read off the model's chat template, as LLaMA-Factory does when template is unset")]),
    "train_on_prompt": RunOpt("train_on_prompt", Annotated[bool, typer.Option("--train-on-prompt", help="--trainer llamafactory: the prompts in the loss too (its train_on_prompt)")]),
    "mask_history": RunOpt("mask_history", Annotated[bool, typer.Option("--mask-history", help="--trainer llamafactory: only the last response in the loss (its mask_history)")]),
    "split": RunOpt("split", Annotated[Optional[str], typer.Option("--split", help="check only this split of a DatasetDict or of hub-style shards (train, test, ...); default: every split, each reported on its own")]),
    "lang_field": RunOpt("lang_field", Annotated[str, typer.Option("--lang-field", help="language field of records ('' to never read one)")]),
    # the bounds of docs/limits.md
    "limit": RunOpt("limits", Annotated[Optional[list[str]], typer.Option("--limit", help="raise a bound, NAME=VALUE (file-bytes=8G, corpus-bytes, ratio, languages, scan-bytes, top, max-ngram, hub-file-seconds, hub-run-seconds, hub-min-rate, gguf-metadata-bytes); repeat for several; see docs/limits.md")],
                    to_field=lambda v: list(v or []), from_field=lambda v: list(v) or None),
}
#: the groups commands take
LOAD = ("device", "trust_pickle", "download")
SCAN = ("k", "knn", "no_map", "unused_ids", "threshold", "verify", "verify_sample", "verify_time_cap", "repair", "repair_init")
#: audit's scan options: --verify is automatic by default
AUDIT_SCAN = tuple("audit_verify" if n == "verify" else n for n in SCAN)
EXTENSION = ("top", "init", "max_ngram", "min_freq", "no_diagnostics", "extend_as", "bpb_bytes", "distil_budget")
CORPUS = ("sample_bytes", "engine", "workers", "ray_address", "text_field", "lang_field", "limit")
CHECK = ("format", "max_length", "chat_template", "trainer", "pad_token", "lf_template", "train_on_prompt",
         "mask_history", "split")


def run_options(*names: str) -> Callable:
    """Give a command the run options ``names`` (keys of :data:`RUN_OPTS`) as keyword options with
    the library's defaults; the command receives them built and checked as ``options``.

    >>> @run_options("k")
    ... def cmd(model: str, options=None):
    ...     return options.k
    >>> cmd(model="m", k=3)
    3
    """
    from embscope.api import RunOptions

    defaults = {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
                for f in dataclasses.fields(RunOptions)}

    def wrap(fn: Callable) -> Callable:
        own = [p for p in inspect.signature(fn, eval_str=True).parameters.values() if p.name != "options"]
        added = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, annotation=RUN_OPTS[n].annotation,
                                   default=RUN_OPTS[n].from_field(defaults[RUN_OPTS[n].field])) for n in names]
        keyword = [p for p in own if p.kind == inspect.Parameter.KEYWORD_ONLY]
        positional = [p for p in own if p.kind != inspect.Parameter.KEYWORD_ONLY]
        # typer reads the order of the signature for --help: the command's own options first
        params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in positional] + keyword + added

        @functools.wraps(fn)
        def command(**kw: Any) -> Any:
            fields = {RUN_OPTS[n].field: RUN_OPTS[n].to_field(kw.pop(n)) for n in names if n in kw}
            return fn(**kw, options=RunOptions.build(**fields))

        command.__signature__ = inspect.Signature(params)
        command.__annotations__ = {p.name: p.annotation for p in params}
        del command.__wrapped__  # typer must read the signature above, not fn's
        return command

    return wrap


def setup(quiet: bool = False, verbose: bool = False) -> None:
    """Progress mode for this process: quiet, normal or verbose."""
    from embscope.progress import set_mode

    set_mode("quiet" if quiet else "verbose" if verbose else None)


def parse_ids(text: str | None) -> list[int] | None:
    """``"1,2, 5"`` → ``[1, 2, 5]``; ``None`` stays ``None``."""
    if text is None:
        return None
    try:
        ids = [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        raise SpecError(f"--unused-ids must be comma-separated integers, got {text!r}") from None
    return ids


def print_json(data) -> None:
    from embscope.records import to_json

    typer.echo(json.dumps(to_json(data), indent=2, ensure_ascii=False))


def print_warnings(warnings: list[str]) -> None:
    from rich.console import Console
    from rich.text import Text

    con = Console(stderr=True)
    for w in warnings:
        con.print(Text(f"warning: {w}", style="yellow"))


def print_repair(res) -> None:
    """The line naming the model ``--repair`` wrote, when the run wrote one."""
    rec = res.summary.sections.repair
    if rec is not None:
        typer.echo(f"repaired model ({rec.format}, {rec.n_repaired} rows): {rec.folder}")
