"""The options of the geometry scan (:class:`ScanOptions`): indicators, kNN graph, map, verification by prompting."""

from __future__ import annotations

from dataclasses import dataclass

from embscope.arguments import at_least, one_of
from embscope.errors import SpecError
from embscope.geometry.knn_record import METHODS
from embscope.geometry.records import SAMPLES
from embscope.records import Record

#: largest ``--threshold`` in robust sigmas: scores of real rows lie within about ±100
MAX_THRESHOLD = 1000.0


@dataclass
class ScanOptions(Record):
    """The geometry scan: indicators, kNN graph, 2-D map, verification by prompting."""

    #: run the geometry scan (indicators, kNN graph) inside the tokens section
    scan: bool = True
    #: nearest neighbours per row in the kNN graph
    k: int = 10
    #: kNN method (:data:`embscope.geometry.knn_record.METHODS`; embscope.geometry.knn)
    knn_method: str = "auto"
    #: draw the 2-D UMAP map of the kNN graph (``--no-map``: off; the slowest part of the scan on
    #: large vocabularies)
    map: bool = True
    #: ``undertrained_score`` (robust sigmas of the strongest indicator) at or above which a row is
    #: flagged (see embscope.geometry.indicators)
    threshold: float = 4.0
    #: token ids known to be unused (the Magikarp reference set); null finds them automatically
    unused_ids: list[int] | None = None
    #: check N flagged rows (and up to 100 trained controls) by prompting the whole model; 0: off;
    #: null: automatic (``audit``): a random sample when the whole weights fit the memory budget
    verify: int | None = 0
    #: which flagged rows ``verify`` checks: top (highest scores) or random (seeded sample of all flags)
    verify_sample: str = "top"
    #: the prompting's work budget, 10¹² multiply-adds (tokens × parameters; null: the automatic
    #: run's 30, else none): rows beyond it stay unchecked, so the same rows are checked at any load
    verify_work: float | None = None
    #: folder for the kNN cache (null: ``$EMBSCOPE_CACHE`` or ``~/.cache/embscope``)
    cache_dir: str | None = None

    def check(self):
        import math

        from embscope.geometry.indicators import DEFAULT_THRESHOLD
        from embscope.geometry.verify import MAX_VERIFY, SECONDS_PER_ROW_CPU

        at_least("--k", self.k, 1)
        if not math.isfinite(self.threshold) or abs(self.threshold) > MAX_THRESHOLD:
            raise SpecError(f"--threshold must be a finite number from -{MAX_THRESHOLD:g} to {MAX_THRESHOLD:g} (robust "
                            f"sigmas), got {self.threshold}; the default is {DEFAULT_THRESHOLD:g}")
        at_least("--verify", self.verify, 0)
        if self.verify is not None and self.verify > MAX_VERIFY:
            lo, hi = (round(MAX_VERIFY * s / 60) for s in SECONDS_PER_ROW_CPU)
            raise SpecError(f"--verify {self.verify} is over the cap of {MAX_VERIFY} rows (each takes "
                            f"{SECONDS_PER_ROW_CPU[0]:g}–{SECONDS_PER_ROW_CPU[1]:g} s on a CPU, so {MAX_VERIFY} rows "
                            f"take {lo}–{hi} min); pass --verify {MAX_VERIFY} or less")
        one_of("--verify-sample", self.verify_sample, SAMPLES, "a way to pick rows")
        if self.verify_work is not None and not (self.verify_work > 0 and math.isfinite(self.verify_work)):
            raise SpecError(f"--verify-work must be a positive number (10^12 multiply-adds), got {self.verify_work}")
        one_of("--knn", self.knn_method, METHODS, "a kNN method")
        if self.unused_ids is not None and any(i < 0 for i in self.unused_ids):
            raise SpecError("--unused-ids must be row numbers (0 or more)")
        return self
