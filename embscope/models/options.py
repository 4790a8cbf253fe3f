"""How a run resolves and loads its model (:class:`LoadOptions`, the group of ``--device``, ``--download``, ``--trust-pickle``)."""

from __future__ import annotations

from dataclasses import dataclass

from embscope.arguments import one_of
from embscope.models.resolve import DOWNLOADS
from embscope.records import Record

#: where the matrices are computed
DEVICES = ("auto", "cpu", "cuda")


@dataclass
class LoadOptions(Record):
    """How the model is resolved and loaded."""

    #: auto, cpu or cuda
    device: str = "auto"
    #: a hub model's weights: ``ranges`` (only the embedding/head tensors' bytes) or ``full`` (whole shards)
    download: str = "ranges"
    #: allow PyTorch pickle checkpoints (still loaded with ``weights_only=True``)
    trust_pickle: bool = False

    def check(self):
        one_of("--device", self.device, DEVICES, "a device")
        one_of("--download", self.download, DOWNLOADS, "a download mode")
        return self
