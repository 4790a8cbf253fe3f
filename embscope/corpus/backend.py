"""Which back end runs a corpus pass: :class:`Engine` (local processes or Ray) and its errors.

Kept apart from :mod:`embscope.corpus.engine` (the local pass) and
:mod:`embscope.corpus.ray_engine` (the Ray pass) so that both import it and neither imports the other
at load time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from embscope.errors import EmbscopeError
from embscope.records import Record

ENGINES = ("local", "ray")


class EngineError(EmbscopeError):
    """An engine that cannot run: unknown name, bad worker count, Ray missing or unreachable."""


@dataclass
class EngineRecord(Record):
    """Where a corpus pass ran."""

    #: ``local`` (processes on this machine) or ``ray``
    kind: str
    #: the workers asked for (null: automatic)
    workers: int | None
    #: Ray: the cluster (``local`` for a Ray started for the run); null for local passes
    ray_address: str | None = None


@dataclass(frozen=True)
class Engine:
    """Where a pass runs. ``Engine()`` is local with an automatic worker count."""

    kind: str = "local"  # "local" | "ray"
    workers: int | None = None  # local: processes (None: auto); ray: CPUs of a local Ray / actors
    ray_address: str | None = None  # ray: "ray://host:10001", "auto", host:port; None: $RAY_ADDRESS

    def __post_init__(self):
        if self.kind not in ENGINES:
            raise EngineError(f"unknown engine {self.kind!r}; use one of {', '.join(ENGINES)}")
        if self.workers is not None and self.workers < 1:
            raise EngineError(f"--workers must be at least 1 (got {self.workers})")
        if self.ray_address and self.kind != "ray":
            raise EngineError("--ray-address needs --engine ray")

    def record(self) -> EngineRecord:
        """Where the pass runs (workers as requested)."""
        return EngineRecord(kind=self.kind, workers=self.workers, ray_address=(
            self.ray_address or os.environ.get("RAY_ADDRESS") or "local") if self.kind == "ray" else None)
