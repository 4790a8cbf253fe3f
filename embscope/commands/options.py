"""Options shared by several commands, written once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from embscope.errors import SpecError

Out = Annotated[Optional[Path], typer.Option("--out", "-o", help="output folder (default reports/<model>-<UTC time>)")]
Device = Annotated[str, typer.Option(help="auto (GPU when present), cpu or cuda")]
TrustPickle = Annotated[bool, typer.Option("--trust-pickle", help="allow PyTorch .bin checkpoints (loaded with weights_only=True)")]
Force = Annotated[bool, typer.Option("--force", help="replace the output folder if it exists")]


def parse_ids(text: str | None) -> list[int] | None:
    """``"1,2, 5"`` → ``[1, 2, 5]``; ``None`` stays ``None``."""
    if text is None:
        return None
    try:
        return [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        raise SpecError(f"--unused-ids must be comma-separated integers, got {text!r}") from None
