"""Options shared by several commands, declared once, and the few helpers every command uses."""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from embscope.errors import SpecError


class Device(str, enum.Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


ModelOpt = Annotated[str, typer.Option("--model", "-m", help="alias (`embscope models`), HF hub id, model folder or .gguf file")]
Out = Annotated[Optional[Path], typer.Option("--out", "-o", help="output folder (default reports/<name>-<UTC time>)")]
Force = Annotated[bool, typer.Option("--force", help="replace the output folder if an earlier embscope run wrote it")]
DeviceOpt = Annotated[Device, typer.Option("--device", help="where to compute: auto (GPU when present), cpu or cuda")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="no progress output (also: EMBSCOPE_QUIET=1)")]
Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="more detail: every step and its time, log lines")]
Json = Annotated[bool, typer.Option("--json", help="print the result as JSON on stdout")]
class Download(str, enum.Enum):
    ranges = "ranges"
    full = "full"


DownloadOpt = Annotated[Download, typer.Option("--download", help="a hub model's weights: ranges (only the embedding and head tensors' bytes, cached under the embscope cache) or full (the whole shards holding them, into the HF cache)")]
TrustPickle = Annotated[bool, typer.Option("--trust-pickle", help="allow PyTorch .bin checkpoints (loaded with weights_only=True)")]
Corpus = Annotated[Path, typer.Option("--corpus", "-c", help="corpus: a folder or .txt/.md/.jsonl/.parquet file, or a shipped name (medical, udhr)")]
K = Annotated[int, typer.Option("--k", min=1, max=1000, help="nearest neighbours per row in the kNN graph")]
Threshold = Annotated[float, typer.Option("--threshold", help="flag rows whose undertrained_score (robust sigmas of the strongest indicator) is at least this")]
#: the default of --threshold (embscope.geometry.indicators.DEFAULT_THRESHOLD)
THRESHOLD = 4.0
Verify = Annotated[int, typer.Option("--verify", min=0, help="prompt the whole model on the top N flagged rows and N trained controls (causal LMs that fit in memory)")]
Repair = Annotated[Optional[Path], typer.Option("--repair", help="also write the model with the flagged rows your --corpus uses re-initialised (a model folder, or a rows file for large models)")]
RepairInit = Annotated[str, typer.Option("--repair-init", help="strategy for --repair: NAME or INPUT/OUTPUT (mean, subword-mean, ...)")]
UnusedIds = Annotated[Optional[str], typer.Option("--unused-ids", help="comma-separated rows known to be unused (default: found automatically)")]
NoMap = Annotated[bool, typer.Option("--no-map", help="skip the 2-D UMAP map")]
Reference = Annotated[str, typer.Option("--reference", help="language that parity divides by")]
SampleBytes = Annotated[Optional[int], typer.Option("--sample-bytes", min=1, help="read at most N bytes of text per language")]


class EngineKind(str, enum.Enum):
    local = "local"
    ray = "ray"


EngineOpt = Annotated[EngineKind, typer.Option("--engine", help="where corpus passes run: local processes, or Ray Data (a local Ray, or --ray-address)")]
Workers = Annotated[Optional[int], typer.Option("--workers", min=1, help="local: worker processes (default: all cores for corpora of 32 MB or more); ray: CPUs of a local Ray")]
RayAddress = Annotated[Optional[str], typer.Option("--ray-address", help="an existing Ray cluster (default: $RAY_ADDRESS, else a local Ray)")]
TextField = Annotated[str, typer.Option("--text-field", help="text field of .jsonl records and Parquet/Arrow/HF-dataset columns")]
LangField = Annotated[str, typer.Option("--lang-field", help="language field of records ('' to never read one)")]


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
