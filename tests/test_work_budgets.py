"""No result depends on the machine's load: every budget counts work (rows, tokens × parameters),
and what a probe measures changes only how fast a step runs.

Each check runs the same inputs twice: as the machine is, and on a machine that looks loaded — a
clock that runs :data:`SLOW` times faster per unit of work (every wall-seconds budget would see a
machine that many times slower) and a thread probe that finds another process on the cores (one
thread). The records must be equal but for their seconds and thread counts.
"""

from __future__ import annotations

import contextlib
import re
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
#: how much slower the loaded machine's clock says each step is
SLOW = 200.0
#: record fields that measure the run, not the model (removed before the records are compared)
MEASURED = re.compile(r"seconds|threads|^load$")


@contextlib.contextmanager
def loaded_machine():
    """The clock runs SLOW times fast, and every thread probe says one thread."""
    from embscope import machine

    real_pc, real_mono = time.perf_counter, time.monotonic
    t0, m0 = real_pc(), real_mono()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(time, "perf_counter", lambda: t0 + SLOW * (real_pc() - t0))
        mp.setattr(time, "monotonic", lambda: m0 + SLOW * (real_mono() - m0))
        mp.setattr(machine, "best_threads", lambda d, dtype="float32", **kind: 1)
        yield


def _figures(record) -> object:
    """The record as JSON, without the fields that time the run."""
    from embscope.records import to_json

    def strip(v):
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if not MEASURED.search(k)}
        if isinstance(v, list):
            return [strip(x) for x in v]
        return v

    return strip(to_json(record))


@pytest.mark.slow
def test_the_extension_summary_is_the_same_on_a_loaded_machine(smollm2_model):
    """``--init auto`` with distil inside its default budget: the same strategies are measured,
    with the same figures, and the same one is recommended. (With distil's budget in seconds, the
    loaded machine left distil out: its first contexts' time × the contexts was over 180 s.)
    The 4 best terms of the medical corpus's abbreviations file (210 kB, a ninth of the corpus; the
    pass still samples: at most 300 kB), on a short held-out sample: the figures compared do not
    depend on the size of the run."""
    from embscope.extension import ExtensionOptions, suggest
    from embscope.extension.evaluate import Plan
    from embscope.extension.extension import DISTIL_WORK

    def run():
        res = suggest(smollm2_model, ROOT / "corpora" / "medical" / "abbreviations.jsonl",
                      ExtensionOptions(top=4, init=["auto"], distil_work=DISTIL_WORK), plan=Plan(300, 150, 2, 400),
                      sample_bytes=300_000)
        return _figures(res.summary)

    quiet = run()
    with loaded_machine():
        loaded = run()
    assert "distil" in quiet["strategies"] and quiet["recommended"]
    assert quiet["distil_work"] < DISTIL_WORK
    assert loaded == quiet


@pytest.mark.slow
def test_verification_checks_the_same_rows_with_the_same_verdicts_on_a_loaded_machine(smollm2_model):
    """The work budget admits the same rows (candidates first, then controls), and prompting gives
    them the same values, on one thread and a slow clock as on the machine as it is."""
    from embscope.geometry.verify import verify_rows

    m = smollm2_model
    strings = m.token_strings()
    bad = [strings.index(t) for t in ("MetaInfoClass", "swigfaiss", "kinesisfirehose", " InstancePreprocess")]
    score = np.zeros(m.n_rows)
    score[bad] = 10.0
    ind = SimpleNamespace(undertrained_score=score, flagged=score > 0, reference=SimpleNamespace(ids=[]),
                          flag_reason=["knot" if s > 0 else None for s in score])

    def run():
        # room for 6 rows: the 4 candidates and 2 of the 4 controls
        v = verify_rows(m, ind, 4, device="cpu", work_budget=6.5 * per_row)
        return _figures(v.record), v.max_prob

    from embscope.geometry.verify import build_prompts, placeholder_token, row_work
    from embscope.models.fullmodel import load_causal_lm

    per_row = row_work(load_causal_lm(m), build_prompts(m, placeholder_token(m.vocab, m.categories)))
    quiet, probs = run()
    with loaded_machine():
        loaded, loaded_probs = run()
    assert quiet["n_checked"] == 4 and quiet["controls_checked"] == 2 and quiet["stopped_at_budget"]
    assert quiet["n_verified_undertrained"] >= 3
    assert loaded == quiet and loaded_probs == probs
