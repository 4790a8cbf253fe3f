"""Options shared by several commands, declared once, and the few helpers every command uses."""

from __future__ import annotations

import enum
import functools
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from embscope.api import SHIPPED_CORPORA
from embscope.errors import SpecError


def choice(option: str, name: str | None = None) -> type[enum.Enum]:
    """An enum of the values the library accepts for ``option`` (a :class:`RunOptions` field), read
    from its registry (:func:`embscope.api.option_choices`): a new method, format or trainer is in
    ``--help`` once it is registered, with no second list here."""
    from embscope.api import option_choices

    return enum.Enum(name or option.title().replace("_", ""), {v: v for v in option_choices()[option]}, type=str)


def names(option: str) -> str:
    """``"a, b, c"``: the values ``option`` accepts, for a help text."""
    from embscope.api import option_choices

    return ", ".join(option_choices()[option])


Device, Download, KnnMethod, EngineKind, DataFormat, TrainerKind, VerifySample, ExtendAs, GgufTokenizer = (
    choice("device"), choice("download"), choice("knn_method", "KnnMethod"), choice("engine", "EngineKind"),
    choice("data_format", "DataFormat"), choice("trainer", "TrainerKind"), choice("verify_sample"),
    choice("extend_as", "ExtendAs"), choice("gguf_tokenizer", "GgufTokenizer"))

ModelOpt = Annotated[str, typer.Option("--model", "-m", help="alias (`embscope models`), HF hub id, model folder or .gguf file")]
Json = Annotated[bool, typer.Option("--json", help="print the result as JSON on stdout")]
DownloadOpt = Annotated[Download, typer.Option("--download", help="a hub model's weights: ranges (only the embedding and head tensors' bytes, cached under the embscope cache) or full (the whole shards holding them, into the HF cache)")]
Corpus = Annotated[Path, typer.Option("--corpus", "-c", help=f"corpus: a folder or .txt/.md/.jsonl/.parquet file, or a shipped name ({', '.join(SHIPPED_CORPORA)})")]
Force = Annotated[bool, typer.Option("--force", help="replace the output folder if an earlier embscope run wrote it")]


# ------------------------------------------------------------------ run options, declared once
#
# Every option that sets a field of embscope.sections.options.RunOptions is declared here, once: its
# flag, its help and how the flag's value becomes the API keyword's. Its default is the default of
# the library function the command calls; its choices are the library's registries (choice()). A
# command takes a group of them, and the options every run command shares, with @run_command(...).


@dataclass(frozen=True)
class RunOpt:
    """One RunOptions field on the command line."""

    #: the RunOptions field it sets (the API keyword of the same name)
    field: str
    #: the command function's parameter: ``Annotated[type, typer.Option(...)]``
    annotation: Any
    #: flag value → field value (identity by default)
    to_field: Callable[[Any], Any] = lambda v: v
    #: field default → flag default (identity by default)
    from_field: Callable[[Any], Any] = lambda v: v


def _split_specs(items: list[str]) -> list[str]:
    return [s.strip() for item in items for s in item.split(",") if s.strip()]


def _value(enum_value):
    return enum_value.value if enum_value is not None else None


def _opt(*flags: str, **kw: Any):
    return typer.Option(*flags, **kw)


_VERIFY_HELP = ("prompt the whole model on N flagged rows, up to 100 trained controls and N rows the gates stopped "
                "(causal LMs that fit in memory; at most 2000)")
RUN_OPTS: dict[str, RunOpt] = {
    # where and how the model loads
    "device": RunOpt("device", Annotated[Device, _opt("--device", help="where to compute: auto (GPU when present), cpu or cuda")],
                     to_field=_value, from_field=Device),
    "trust_pickle": RunOpt("trust_pickle", Annotated[bool, _opt("--trust-pickle", help="allow PyTorch .bin checkpoints (loaded with weights_only=True)")]),
    "download": RunOpt("download", DownloadOpt, to_field=_value, from_field=Download),
    # the scan
    "k": RunOpt("k", Annotated[int, _opt("--k", min=1, max=1000, help="nearest neighbours per row in the kNN graph")]),
    "knn": RunOpt("knn_method", Annotated[KnnMethod, _opt("--knn", help="how the kNN graph is built: auto (exact on small matrices, else certified when cheaper), exact, certified (exact decisions: every flagged, isolated or listed row searched exactly), or an approximate index; see docs/undertrained.md")],
                  to_field=_value, from_field=KnnMethod),
    "no_scan": RunOpt("scan", Annotated[bool, _opt("--no-scan", help="skip indicators and the kNN graph")],
                      to_field=lambda v: not v, from_field=lambda v: not v),
    "no_map": RunOpt("map", Annotated[bool, _opt("--no-map", help="skip the 2-D UMAP map")],
                     to_field=lambda v: not v, from_field=lambda v: not v),
    "unused_ids": RunOpt("unused_ids", Annotated[Optional[str], _opt("--unused-ids", help="comma-separated rows known to be unused (default: found automatically)")],
                         to_field=lambda v: parse_ids(v), from_field=lambda v: None if v is None else ",".join(map(str, v))),
    "threshold": RunOpt("threshold", Annotated[float, _opt("--threshold", help="flag rows whose undertrained_score (robust sigmas of the strongest indicator) is at least this")]),
    "verify": RunOpt("verify", Annotated[Optional[int], _opt("--verify", min=0, help=_VERIFY_HELP)]),
    # audit's --verify: automatic by default (a capped random sample when the whole weights fit)
    "audit_verify": RunOpt("verify", Annotated[Optional[int], _opt("--verify", min=0, help=_VERIFY_HELP[:-1] + "; default: 50 random flagged rows, within 30x10^12 multiply-adds of prompting, when the whole weights fit in memory; 0: off)")]),
    "verify_sample": RunOpt("verify_sample", Annotated[VerifySample, _opt("--verify-sample", help="which flagged rows --verify checks: top (highest scores) or random (a seeded sample of all flags: estimates their precision)")],
                            to_field=_value, from_field=VerifySample),
    "verify_work": RunOpt("verify_work", Annotated[Optional[float], _opt("--verify-work", help="the prompting's work budget in 10^12 multiply-adds (tokens x the model's parameters): rows beyond it stay unchecked (the summary says so); counted in work, so the same rows are checked on a busy machine")]),
    "repair": RunOpt("repair_to", Annotated[Optional[Path], _opt("--repair", help="also write the model with the flagged rows your --corpus uses re-initialised (a model folder, or a rows file for large models)")]),
    "repair_init": RunOpt("repair_init", Annotated[str, _opt("--repair-init", help=f"strategy for --repair: NAME or INPUT/OUTPUT (names: {names('init').replace('auto, ', '')})")]),
    # languages
    "reference": RunOpt("reference", Annotated[str, _opt("--reference", help="language that parity divides by (a language code of the corpus)")]),
    "renyi_alpha": RunOpt("renyi_alpha", Annotated[float, _opt("--renyi-alpha", help="the order α of renyi_efficiency (Zouhar et al. 2023: 2.5)")]),
    "weights": RunOpt("weights", Annotated[Optional[Path], _opt("--weights", help="a data mix's language shares (JSON object or TSV: code, share): its expected tokens per aligned unit in tokenizers.parquet")],
                      to_field=lambda v: None if v is None else str(v), from_field=lambda v: None if v is None else Path(v)),
    "resamples": RunOpt("resamples", Annotated[int, _opt("--resamples", min=10, help="bootstrap resamples of every interval over aligned units")]),
    "seed": RunOpt("seed", Annotated[int, _opt("--seed", help="the bootstrap's seed (the same seed gives the same intervals)")]),
    "level": RunOpt("level", Annotated[float, _opt("--level", help="the intervals' coverage (0.95: 95 % intervals)")]),
    "model_work": RunOpt("model_work", Annotated[Optional[float], _opt("--model-work", min=0, help="the work the whole model may do scoring each language's aligned text (bits_per_byte, information_parity), in 10^12 multiply-adds (tokens x the model's parameters: SmolLM2-135M on 5 UDHR languages needs ~4.4); units past it are left out in every language; default: 20 in fertility --model, 0.5 in audit; 0: off")]),
    # extension
    "top": RunOpt("top", Annotated[int, _opt("--top", min=1, help="vocabulary-extension terms to add (best estimated savings first)")]),
    "init": RunOpt("init", Annotated[list[str], _opt("--init", help=f"initialisation to diagnose: auto (every training-free strategy, and recommend one), NAME or INPUT/OUTPUT (untied models); repeat or comma-separate; names: {names('init')} (distil fits each row through the model; named only)")],
                   to_field=_split_specs, from_field=list),
    "max_ngram": RunOpt("max_ngram", Annotated[int, _opt("--max-ngram", min=1, help="longest multi-word extension term, in words")]),
    "min_freq": RunOpt("min_freq", Annotated[int, _opt("--min-freq", min=1, help="least occurrences of an extension term")]),
    "no_diagnostics": RunOpt("diagnostics", Annotated[bool, _opt("--no-diagnostics", help="skip the extension's KL / new-token-mass check (no whole-model load)")],
                             to_field=lambda v: not v, from_field=lambda v: not v),
    "extend_as": RunOpt("extend_as", Annotated[str, _opt("--as", help=f"how new tokens are written ({names('extend_as')}): model (BPE merges ranked after every existing merge, Unigram pieces with a score: built only where the tokenizer would build them) or added (HF added tokens, matched anywhere in the raw text, with spaced twins)")]),
    "bpb_bytes": RunOpt("bpb_bytes", Annotated[Optional[int], _opt("--bpb-bytes", min=256, help="held-out corpus bytes for the extension's bits per byte (default: 24576 in extend, 4096 in audit)")]),
    "distil_work": RunOpt("distil_work", Annotated[Optional[float], _opt("--distil-work", min=0, help="the work distil may do inside --init auto, in 10^12 multiply-adds (tokens x the model's parameters, known before it runs: SmolLM2-135M + corpora/medical needs ~2.4; default: 20 in extend, 0 in audit); --init distil always runs it")]),
    "method": RunOpt("method", Annotated[str, _opt("--method", help=f"how new tokens are picked ({names('method')}): terms (the best words by estimated savings, each with its merge chain) or merges (continued BPE on the corpus from the model's own tokenization, up to --rows new tokens; the corpus may be a word<TAB>count list; --min-freq: the least count of a merged pair)")]),
    "rows": RunOpt("rows", Annotated[Optional[int], _opt("--rows", min=1, help="the most rows (new tokens, intermediates included) the tokenizer grows by; needed by --method merges, bounds --method terms too")]),
    "target_lang": RunOpt("target_lang", Annotated[Optional[str], _opt("--lang", help="the extension's target language (ISO 639-3, as corpora/udhr names it: hin, tam, ben): fertility and parity before/after with 95% intervals, bits per byte of each initialisation in it, English retention; auto picks on it (default: the corpus's main language, figures only)")]),
    "norm_correction": RunOpt("norm_correction", Annotated[bool, _opt("--norm-correction", help="also diagnose each initialisation with its new rows rescaled to the mean norm of the model's rows in their script (NAME+norm)")]),
    # corpus reading and where the passes run
    "sample_bytes": RunOpt("sample_bytes", Annotated[Optional[int], _opt("--sample-bytes", min=1, help="read at most N bytes of text per language")]),
    "engine": RunOpt("engine", Annotated[EngineKind, _opt("--engine", help="where corpus passes run: local processes, or Ray Data (a local Ray, or --ray-address)")],
                     to_field=_value, from_field=EngineKind),
    "workers": RunOpt("workers", Annotated[Optional[int], _opt("--workers", min=1, help="local: worker processes (default: all cores for corpora of 32 MB or more); ray: CPUs of a local Ray")]),
    "ray_address": RunOpt("ray_address", Annotated[Optional[str], _opt("--ray-address", help="an existing Ray cluster (default: $RAY_ADDRESS, else a local Ray)")]),
    "text_field": RunOpt("text_field", Annotated[str, _opt("--text-field", help="text field of .jsonl records and Parquet/Arrow/HF-dataset columns")]),
    "lang_field": RunOpt("lang_field", Annotated[str, _opt("--lang-field", help="language field of records ('' to never read one)")]),
    # the pre-fine-tune check
    "format": RunOpt("data_format", Annotated[Optional[DataFormat], _opt("--format", help="force one training-data record format (default: detected per record)")],
                     to_field=_value, from_field=lambda v: DataFormat(v) if v else None),
    "max_length": RunOpt("max_length", Annotated[Optional[int], _opt("--max-length", min=1, help="the trainer's sequence length in tokens (default: the trainer's own, e.g. TRL's max_length 1024, else the model's context)")]),
    "chat_template": RunOpt("chat_template", Annotated[Optional[Path], _opt("--chat-template", help="render the training data with this template file (.jinja) instead of the model's own")]),
    "trainer": RunOpt("trainer", Annotated[TrainerKind, _opt("--trainer", help="the trainer whose input ids, labels and loss mask to check (default trl: TRL's SFT/DPO/KTO trainers, the most used); see docs/trainers.md")],
                      to_field=_value, from_field=TrainerKind),
    "pad_token": RunOpt("pad_token", Annotated[Optional[str], _opt("--pad-token", help="the pad token you will set (tokenizer.pad_token); default: the one the trainer picks")]),
    "lf_template": RunOpt("lf_template", Annotated[Optional[str], _opt("--template", help="--trainer llamafactory: LLaMA-Factory's template name (smollm2, qwen, chatml, default, alpaca, empty); default: read off the model's chat template, as LLaMA-Factory does when template is unset")]),
    "train_on_prompt": RunOpt("train_on_prompt", Annotated[bool, _opt("--train-on-prompt", help="--trainer llamafactory: the prompts in the loss too (its train_on_prompt)")]),
    "mask_history": RunOpt("mask_history", Annotated[bool, _opt("--mask-history", help="--trainer llamafactory: only the last response in the loss (its mask_history)")]),
    "gguf_tokenizer": RunOpt("gguf_tokenizer", Annotated[GgufTokenizer, _opt("--gguf-tokenizer", help="a GGUF model's tokenizer for the check: llamacpp (the file's tokenizer as llama.cpp splits) or transformers (transformers' own GGUF conversion: what a TRL or transformers script that loads the GGUF gets; it can split digits and spaces otherwise)")],
                             to_field=_value, from_field=GgufTokenizer),
    "responses_only": RunOpt("responses_only", Annotated[bool, _opt("--responses-only", help="--trainer unsloth: its train_on_responses_only, only the assistant responses in the loss (markers read off the chat template, or --instruction-part/--response-part)")]),
    "instruction_part": RunOpt("instruction_part", Annotated[Optional[str], _opt("--instruction-part", help="--responses-only: the text that opens a user turn, e.g. '<|im_start|>user\\n'")]),
    "response_part": RunOpt("response_part", Annotated[Optional[str], _opt("--response-part", help="--responses-only: the text that opens an assistant turn, e.g. '<|im_start|>assistant\\n'")]),
    "split": RunOpt("split", Annotated[Optional[str], _opt("--split", help="check only this split of a DatasetDict or of hub-style shards (train, test, ...); default: every split, each reported on its own")]),
    "unit_field": RunOpt("unit_field", Annotated[str, _opt("--unit-field", help="field of records that aligns them across languages (parity compares the units two languages share); a FLORES Parquet table without it aligns by id")]),
    "lang": RunOpt("lang", Annotated[Optional[list[str]], _opt("--lang", help="measure only these languages (the reference too): a code, script:XXXX (ISO 15924, e.g. script:Deva), family:NAME (e.g. family:Dravidian) or set:audit; repeat or comma-separate; see docs/languages.md")],
                   to_field=lambda v: _split_specs(v or []), from_field=lambda v: list(v) or None),
    # the bounds of docs/limits.md
    "limit": RunOpt("limits", Annotated[Optional[list[str]], _opt("--limit", help=f"raise a bound, NAME=VALUE (e.g. file-bytes=8G; names: {names('limits')}); repeat for several; see docs/limits.md")],
                    to_field=lambda v: list(v or []), from_field=lambda v: list(v) or None),
}
#: the groups commands take
LOAD = ("device", "trust_pickle", "download")
SCAN = ("k", "knn", "no_map", "unused_ids", "threshold", "verify", "verify_sample", "verify_work", "repair", "repair_init")
#: audit's scan options: --verify is automatic by default
AUDIT_SCAN = tuple("audit_verify" if n == "verify" else n for n in SCAN)
EXTENSION = ("top", "init", "max_ngram", "min_freq", "no_diagnostics", "extend_as", "bpb_bytes", "distil_work",
             "norm_correction")
#: extend's own: how new tokens are picked, and how many rows
EXTEND_ONLY = ("method", "rows", "target_lang")
CORPUS = ("sample_bytes", "engine", "workers", "ray_address", "text_field", "lang_field", "limit")
#: the language measurement's statistics (fertility, compare)
LANGUAGE_STATS = ("renyi_alpha", "weights", "resamples", "seed", "level")
CHECK = ("format", "max_length", "chat_template", "trainer", "pad_token", "lf_template", "train_on_prompt",
         "mask_history", "gguf_tokenizer", "responses_only", "instruction_part", "response_part", "split")


@dataclass(frozen=True)
class Common:
    """The options every run command shares, as the command reads them (``--quiet`` and
    ``--verbose`` are applied before the command runs)."""

    #: the folder to write: ``--out``, else ``DEFAULT_OUT`` for a command that writes by default, else None
    out: Any
    #: ``--force``: replace an earlier embscope folder
    force: bool
    #: ``--json``: print the result as JSON
    as_json: bool


Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="no progress output (also: EMBSCOPE_QUIET=1)")]
Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="more detail: every step and its time, log lines")]


def _common(writes: bool) -> list[inspect.Parameter]:
    """The shared options as parameters: ``--out`` (its help says whether the command writes by
    default), ``--force``, ``--json``, ``--quiet``, ``--verbose``."""
    out_help = ("output folder (default reports/<name>-<UTC time>)" if writes else
                "write the report folder here (summary.json, the Parquet tables, index.html); default: nothing is written")
    out = Annotated[Optional[Path], typer.Option("--out", "-o", help=out_help)]
    common = {"out": (out, None), "force": (Force, False), "as_json": (Json, False), "quiet": (Quiet, False),
              "verbose": (Verbose, False)}
    return [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, annotation=a, default=d) for n, (a, d) in common.items()]


def run_command(api: Callable, *names: str, writes: bool = True) -> Callable:
    """Give a command the options every run command shares (``--out``, ``--force``, ``--json``,
    ``--quiet``, ``--verbose``) and the run options ``names`` (keys of :data:`RUN_OPTS`), each with
    the default of ``api``, the library function the command calls. The command receives ``options``
    (the chosen run options as ``api``'s keywords) and ``common`` (:class:`Common`), the progress
    mode set; ``writes``: the command writes a folder without ``--out`` (``DEFAULT_OUT``).

    >>> from embscope import api
    >>> @run_command(api.check, "k", "no_map", writes=False)
    ... def cmd(model: str, options=None, common=None):
    ...     return options, common.out
    >>> cmd(model="m", k=3, no_map=False)
    ({'k': 3, 'map': True}, None)
    >>> inspect.signature(cmd).parameters["no_map"].default  # check draws no map unless asked
    True
    """
    from embscope.output import DEFAULT_OUT

    defaults = {n: p.default for n, p in inspect.signature(api).parameters.items()}

    def wrap(fn: Callable) -> Callable:
        own = [p for p in inspect.signature(fn, eval_str=True).parameters.values() if p.name not in ("options", "common")]
        added = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, annotation=RUN_OPTS[n].annotation,
                                   default=RUN_OPTS[n].from_field(defaults[RUN_OPTS[n].field])) for n in names]
        # typer reads the order of the signature for --help: the command's own options first
        params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + _common(writes) + added

        @functools.wraps(fn)
        def command(**kw: Any) -> Any:
            setup(kw.pop("quiet", False), kw.pop("verbose", False))
            out = kw.pop("out", None)
            common = Common(out=out if out is not None else DEFAULT_OUT if writes else None,
                            force=kw.pop("force", False), as_json=kw.pop("as_json", False))
            options = {RUN_OPTS[n].field: RUN_OPTS[n].to_field(kw.pop(n)) for n in names if n in kw}
            return fn(**kw, options=options, common=common)

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
    from rich.text import Text

    from embscope.commands.console import console

    con = console(stderr=True)
    for w in warnings:
        con.print(Text(f"warning: {w}", style="yellow"))


def print_repair(res) -> None:
    """The line naming the model ``--repair`` wrote, when the run wrote one."""
    rec = res.summary.sections.repair
    if rec is not None:
        typer.echo(f"repaired model ({rec.format}, {rec.n_repaired} rows): {rec.folder}")
