"""The options of the post-fine-tune diff (:class:`DiffOptions`): what it compares the run's model with."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from embscope.errors import SpecError
from embscope.records import Record


@dataclass
class DiffOptions(Record):
    """The post-fine-tune diff: what it compares the run's model with."""

    #: the fine-tuned model (any model spec, or a PEFT adapter folder) diffed against the model (diff)
    tuned: str | None = None
    #: the manifest ``extend --apply`` wrote: the initial rows of the tokens added (null: the one in the
    #: model's folder, else the model's mean row)
    manifest: str | None = None

    def check(self):
        if self.manifest is not None and not Path(self.manifest).expanduser().exists():
            raise SpecError(f"--manifest {self.manifest}: no such file or folder; pass the embscope_extension.json "
                            "of `extend --apply` (or its folder)")
        return self
