"""``EmbscopeCallback``: the vocabulary audit inside a transformers / TRL training loop.

One line in a training script::

    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, callbacks=[EmbscopeCallback()])

- **before the first step** (``on_train_begin``): ``check``'s findings on the trainer's own first
  batches (:mod:`~embscope.integrations.batches`: the real collator's ``input_ids`` and ``labels``)
  with the model's rows; a finding at ``fail_on`` or worse raises :class:`TrainingHazard` with its
  line, before any step runs; the others are logged once. The new rows are those an
  ``extend --apply`` manifest in the model's folder names (or ``new_ids``);
- **every ``every`` steps** (``on_step_end``): the rows that matter against step 0
  (:mod:`~embscope.integrations.watch`), logged through the trainer's own ``logs`` (so
  ``report_to`` — TensorBoard, W&B, … — and ``trainer.state.log_history`` carry ``embscope/…``);
  non-finite or exploding rows stop training (``control.should_training_stop``) with one line;
  new rows that cannot move get one warning with the fix;
- **at the end** (``on_train_end``): the report ``embscope diff`` writes (what training changed),
  into ``<output_dir>/embscope/``, against a copy of the step-0 matrices; its figures are appended
  to ``trainer.state.log_history``.

Cost: the step-0 copy of the matrices (written once to a temporary folder, removed at the end), a
float32 copy of at most ``new + 4096 + 1024`` rows on their device, one ``(V,)`` norm pass per check,
and a forward hook that marks the ids each training batch feeds the embedding.
"""

from __future__ import annotations

import logging
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from transformers import TrainerCallback

from embscope.errors import EmbscopeError, SpecError, did_you_mean
from embscope.integrations import batches as batch_checks
from embscope.integrations import live
from embscope.integrations import watch as watching

logger = logging.getLogger("embscope")

#: checks at most every this many steps by default, and at least ten in a shorter run
EVERY = 50
#: steps after which trainable new rows that never moved are worth a warning
PATIENCE = 200
#: the report folder under ``args.output_dir``
REPORT = "embscope"
FAIL_ON = ("error", "warning", "info", "never")


class TrainingHazard(EmbscopeError):
    """A ``check`` finding at the callback's ``fail_on`` severity, raised before the first step."""


def default_every(max_steps: int) -> int:
    """:data:`EVERY`, or a tenth of a run shorter than ten times that.

    >>> default_every(100_000), default_every(200), default_every(5)
    (50, 20, 1)
    """
    if max_steps and max_steps > 0:
        return max(1, min(EVERY, max_steps // 10))
    return EVERY


class EmbscopeCallback(TrainerCallback):
    """Watch the vocabulary rows while a transformers ``Trainer`` (or TRL's) trains (module docstring).

    Args:
        every: check every N optimizer steps (default :func:`default_every` of the run's steps).
        fail_on: stop before the first step on a ``check`` finding of this severity or worse
            (``error``, ``warning``, ``info``; ``never`` only logs).
        batches: batches of the train dataloader read before the first step.
        new_ids: ids of the new token rows (default: the ``embscope_extension.json`` manifest that
            ``extend --apply`` wrote into the model's folder, if there is one).
        manifest: that manifest, when it lives elsewhere.
        tokens: a ``tokens.parquet`` of an earlier ``scan``/``audit`` of the model: its flagged and
            verified rows join the findings (``untrained-used``), as in ``check``.
        report: write ``embscope diff``'s report into ``<output_dir>/embscope/`` at the end.
        languages: the multilingual corpus of that report's per-language drift (``None``: none).
        sample: rows watched besides the new and used ones (a seeded sample).
        patience: steps after which trainable new rows that never moved get a warning.
    Example:
        >>> cb = EmbscopeCallback(every=10, fail_on="never")
        >>> cb.every, cb.fail_on
        (10, 'never')
    """

    def __init__(self, *, every: int | None = None, fail_on: str = "error", batches: int = batch_checks.BATCHES,
                 new_ids: Sequence[int] | None = None, manifest: str | Path | None = None,
                 tokens: str | Path | None = None, report: bool = True, languages: str | Path | None = "udhr",
                 sample: int = watching.SAMPLE, patience: int = PATIENCE) -> None:
        if fail_on not in FAIL_ON:
            raise SpecError(f"fail_on={fail_on!r} is not a severity{did_you_mean(str(fail_on), FAIL_ON)}; pass one of "
                            f"{', '.join(FAIL_ON)}")
        for name, value, low in (("every", every, 1), ("batches", batches, 0), ("sample", sample, 0),
                                 ("patience", patience, 1)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
                raise SpecError(f"{name}={value!r} must be a whole number ≥ {low}")
        if new_ids is not None and any(isinstance(i, bool) or not isinstance(i, (int, np.integer)) or i < 0
                                       for i in new_ids):
            raise SpecError("new_ids must be token ids (whole numbers ≥ 0)")
        _check_paths(manifest, tokens)
        self.every, self.fail_on, self.batches, self.sample, self.patience = every, fail_on, batches, sample, patience
        self.new_ids = list(new_ids) if new_ids is not None else None
        self.manifest, self.tokens, self.report, self.languages = manifest, tokens, report, languages
        self._reset()

    def _reset(self) -> None:
        """The state of one training run (set again by each ``on_train_begin``)."""
        #: the findings before the first step, each check's figures, and the end report's record
        self.findings: list = []
        self.checks: list[watching.Check] = []
        self.alerts: list[watching.Alert] = []
        self.diff = None
        self.report_folder: Path | None = None
        self._watch: watching.Watch | None = None
        self._pending: dict[str, float] | None = None
        self._said: set[str] = set()
        self._tmp: Path | None = None
        self._hook = None
        self._every = self.every or EVERY
        self._strings: list[str] = []
        self._weak: set[int] = set()
        #: seconds spent before the first step (``begin``) and at the end (``end``: the report)
        self.seconds: dict[str, float] = {}
        #: what the end report compares the trained rows with (the base model's folder, or the
        #: step the run started from when that is not known), in words
        self.compared_with: str | None = None
        self._base: Path | None = None
        self._capture: batch_checks.Capture | None = None
        self._loaded = None
        self._tokenizer = None

    # -- before the first step -------------------------------------------------------------------------------

    def on_train_begin(self, args, state, control, model=None, processing_class=None, train_dataloader=None,
                       **kwargs):
        t0 = time.perf_counter()
        _first_in_line(self)
        self._cleanup()
        self._reset()
        if not _main_process(args, state):  # under DDP only the main process checks and writes
            return control
        self._every = self.every or default_every(int(getattr(state, "max_steps", 0) or 0))
        try:
            self._begin(model, processing_class, train_dataloader, int(getattr(state, "global_step", 0) or 0))
        except TrainingHazard:
            raise
        except Exception as exc:  # noqa: BLE001 - a monitor never ends a training run on its own failure
            self._cleanup()
            self._watch = None
            logger.warning("embscope: the callback is off for this run: %s: %s", type(exc).__name__, exc)
            return control
        self.seconds["begin"] = round(time.perf_counter() - t0, 3)
        logger.info("embscope: watching %d rows (%d new) every %d steps (%.1f s to set up); the end report compares "
                    "with %s", len(self._watch.ids), int(self._watch.new.sum()), self._every, self.seconds["begin"],
                    self.compared_with)
        return control

    def _begin(self, model, processing_class, train_dataloader, step: int) -> None:
        """The step-0 copy, the findings on the first batches, the watched rows and the hook."""
        from embscope.changes.manifest import read_token_ids
        from embscope.models.load import load_model

        mats = live.matrices(model)
        manifest = self._manifest(model)
        new = set(self.new_ids or [])
        if manifest is not None:
            new |= set(read_token_ids(manifest))
        self._tmp = Path(tempfile.mkdtemp(prefix="embscope-step0-"))
        base = live.write_matrices(model, processing_class, self._tmp / "base", manifest=manifest)
        self._base, self.compared_with = base, "the weights at step 0"
        if step:  # resumed from a checkpoint: the step-0 copy is that checkpoint, not the base model
            self._base, self.compared_with = _resumed_base(model, base, step)
        loaded = load_model(str(base), device="cpu", tokens_past_rows=True)
        self._strings = loaded.token_strings()
        counts = None
        if processing_class is not None and train_dataloader is not None and self.batches:
            if batch_checks.is_stream(train_dataloader):  # reading ahead would consume the trainer's items
                self._loaded, self._tokenizer = loaded, processing_class
                self._capture = batch_checks.Capture(model, self.batches)
                logger.info("embscope: the training data is a stream (IterableDataset): the check reads the first %d "
                            "batches the trainer draws, after the first step", self.batches)
            else:
                counts = self._check_batches(loaded, processing_class, batch_checks.sample_batches(
                    train_dataloader, self.batches))
        self._watch = watching.start(mats, sorted(new), counts, sample=self.sample)
        self._hook = mats.embed.register_forward_pre_hook(_seen_hook(self._watch))

    def _manifest(self, model) -> Path | None:
        from embscope.changes.manifest import MANIFEST, find

        if self.manifest is not None:
            return find(self.manifest)
        folder = live.source_folder(model)
        return folder / MANIFEST if folder is not None and (folder / MANIFEST).is_file() else None

    def _check_batches(self, loaded, tokenizer, got, *, when: str = "stops before the first step") -> np.ndarray:
        """``check``'s findings on the first batches ``got``; raises :class:`TrainingHazard` at ``fail_on``."""
        from embscope.api import read_tokens_table
        from embscope.models.rows import model_zero_rows
        from embscope.readiness.record import reaches
        from embscope.tables import scan_flags

        pad = tokenizer.pad_token_id
        bos = getattr(tokenizer, "bos_token_id", None)
        enc = batch_checks.encode(got, pad_id=pad, n_rows=loaded.n_rows, bos_id=bos)
        flagged, status = (None, None) if self.tokens is None else scan_flags(read_tokens_table(self.tokens),
                                                                                loaded.n_rows)
        self.findings = batch_checks.findings(loaded, enc, pad_id=pad, pad_how="the tokenizer's pad_token, as the "
                                              "trainer set it up", flagged=flagged, status=status)
        self._weak = set(np.flatnonzero(model_zero_rows(loaded)).tolist())
        if flagged is not None:
            self._weak |= set(np.flatnonzero(flagged).tolist())
        for f in self.findings:
            line = f"embscope check [{f.severity}] {f.code}: {f.message}" + (f"; fix: {f.fix}" if f.fix else "")
            (logger.warning if f.severity in ("error", "warning") else logger.info)(line)
        if self.fail_on != "never" and reaches(self.findings, self.fail_on):
            worst = self.findings[0]
            self._cleanup()
            raise TrainingHazard(f"{worst.code} ({worst.severity}) in the first {enc.sequences} training sequences: "
                                 f"{worst.message}" + (f"; fix: {worst.fix}" if worst.fix else "")
                                 + f" (EmbscopeCallback(fail_on={self.fail_on!r}) {when})")
        return enc.counts

    # -- every N steps ---------------------------------------------------------------------------------------

    def on_step_end(self, args, state, control, **kwargs):
        if self._capture is not None and self._capture.batches:  # a stream: the batches the trainer drew
            capture, self._capture = self._capture, None
            capture.remove()
            loaded, self._loaded = self._loaded, None
            try:
                self._check_batches(loaded, self._tokenizer, capture.batches,
                                    when=f"stops at step {state.global_step}: the data is a stream, checked on the "
                                    "batches the trainer drew")
            except TrainingHazard:
                raise
            except Exception as exc:  # noqa: BLE001 - a monitor never ends a training run on its own failure
                logger.warning("embscope: no check of the first batches: %s: %s", type(exc).__name__, exc)
        if self._watch is None or state.global_step % self._every:
            return control
        self._run_check(state, control)
        return control

    def _run_check(self, state, control) -> watching.Check | None:
        try:
            c = watching.check(self._watch, state.global_step)
        except Exception as exc:  # noqa: BLE001 - a monitor never ends a training run on its own failure
            logger.warning("embscope: the callback is off from step %d: %s: %s", state.global_step,
                           type(exc).__name__, exc)
            self._watch = None
            return None
        self.checks.append(c)
        self._pending = c.logs()
        control.should_log = True
        for a in watching.alerts(c, self._watch, self._strings, said=self._said, weak=self._weak,
                                 patience=self.patience):
            self.alerts.append(a)
            logger.warning(a.line)
            if a.kind == "stop":
                control.should_training_stop = True
        return c

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self._pending and logs is not None:
            logs.update(self._pending)
            if state.log_history and state.log_history[-1].get("step") == state.global_step:
                state.log_history[-1].update(self._pending)
            self._pending = None
        return control

    # -- at the end ------------------------------------------------------------------------------------------

    def on_train_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        t0 = time.perf_counter()
        try:
            if self._watch is None:
                return control
            if not self.checks or self.checks[-1].step != state.global_step:
                self._run_check(state, control)
            if not self.checks:
                return control
            entry: dict[str, Any] = {f"{k}_final": v for k, v in self.checks[-1].logs().items()}
            if self.report:
                entry.update(self._report(args, model, processing_class))
            self.seconds["end"] = round(time.perf_counter() - t0, 3)
            state.log_history.append({**entry, "embscope/seconds_begin": self.seconds.get("begin", 0.0),
                                      "embscope/seconds_end": self.seconds["end"], "step": state.global_step})
            return control
        finally:
            self._cleanup()

    def _report(self, args, model, tokenizer) -> dict[str, Any]:
        """``embscope diff`` of the step-0 copy against the model now, into ``<output_dir>/embscope``."""
        import embscope

        tuned = self._tmp / "tuned"
        if hasattr(model, "peft_config"):
            model.save_pretrained(str(tuned))  # the adapter, read as `embscope diff BASE ADAPTER` reads it
        else:
            live.write_matrices(model, tokenizer, tuned)
        out = Path(args.output_dir) / REPORT
        try:
            res = embscope.diff(str(self._base), str(tuned), out=out, force=True, languages=self.languages,
                                verbose=False)
        except EmbscopeError as exc:
            logger.warning("embscope: no end report: %s", exc)
            return {"embscope/report": f"not written: {exc}"}
        self.diff, self.report_folder = res.summary.sections.diff, out
        rec = self.diff
        inp = rec.matrices.get("input")
        codes = ", ".join(f"{f.code} ({f.severity})" for f in rec.findings) or "none"
        logger.info("embscope: training moved %s rows (compared with %s); findings: %s; report: %s",
                    inp.moved if inp else 0, self.compared_with, codes, out)
        return {"embscope/compared_with": self.compared_with, "embscope/rows_moved": float(inp.moved if inp else 0),
                "embscope/new_rows_moved_final_report": float(self._new_moved_in(res.tables.get("diff"))),
                "embscope/findings": codes, "embscope/report": str(out)}

    def _new_moved_in(self, table) -> int:
        """The watched new rows the end report finds moved (``in_moved``, against the step-0 copy, as
        the live ``new_rows_moved`` counts them): the report's own ``new`` rows are those past BASE's
        vocabulary, and the step-0 copy already holds the new rows."""
        if table is None or self._watch is None or "in_moved" not in table.columns:
            return 0
        import polars as pl

        ids = self._watch.ids[self._watch.new].tolist()
        return table.filter(pl.col("token_id").is_in(ids) & pl.col("in_moved").fill_null(False)).height

    def _cleanup(self) -> None:
        if getattr(self, "_capture", None) is not None:
            self._capture.remove()
            self._capture = None
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


def _check_paths(manifest, tokens) -> None:
    """``manifest=`` and ``tokens=`` must name files that exist: checked when the callback is made,
    not at train begin (where a failure could only switch the callback off)."""
    from embscope.changes.manifest import MANIFEST

    if manifest is not None:
        p = Path(manifest).expanduser()
        if not (p / MANIFEST if p.is_dir() else p).is_file():
            raise SpecError(f"manifest={str(manifest)!r} is not {MANIFEST} or a folder holding one; pass the folder "
                            "`embscope extend --apply` wrote (or leave it out: one in the model's folder is found)")
    if tokens is not None and not Path(tokens).expanduser().is_file():
        raise SpecError(f"tokens={str(tokens)!r} does not exist; pass the tokens.parquet of an earlier "
                        "embscope scan or audit of the model")


def _main_process(args, state) -> bool:
    """Whether this process checks and writes: the main one of a distributed run (every process
    holds the same rows; one report, written once)."""
    zero = getattr(state, "is_world_process_zero", None)
    if zero is not None:
        return bool(zero)
    return int(getattr(args, "process_index", 0) or 0) == 0


def _resumed_base(model, step0: Path, step: int) -> tuple[Path, str]:
    """The end report's BASE for a run resumed at ``step``: the folder the model was loaded from,
    when it holds weights (the base, as before the first run); else the step-0 copy, named as the
    checkpoint it is."""
    from embscope.models.resolve import resolve

    folder = live.source_folder(model)
    if folder is not None:
        try:
            resolve(str(folder))
            return folder, f"the base model in {folder} (training resumed at step {step})"
        except EmbscopeError:
            pass
    return step0, (f"the checkpoint training resumed from (step {step}), not the base model (its folder is not "
                   "known)")


def _seen_hook(w: watching.Watch):
    """A forward pre-hook for the embedding: marks the ids of each training batch in ``w.seen``."""

    def hook(module, inputs):
        if module.training and inputs and hasattr(inputs[0], "dtype") and not inputs[0].is_floating_point():
            ids = inputs[0].reshape(-1)
            w.seen[ids[(ids >= 0) & (ids < w.n_rows)].to(w.seen.device)] = True

    return hook


def _first_in_line(cb: EmbscopeCallback) -> None:
    """Move ``cb`` to the front of the trainer's callback list, so the reporting callbacks
    (TensorBoard, W&B, …) see the ``embscope/…`` keys it adds to ``logs`` in ``on_log``. The list
    is the calling ``CallbackHandler``'s; without one (another caller) nothing changes."""
    frame = sys._getframe(2)  # _first_in_line ← on_train_begin ← CallbackHandler.call_event
    handler = frame.f_locals.get("self")
    callbacks = getattr(handler, "callbacks", None)
    if isinstance(callbacks, list) and cb in callbacks:
        callbacks.remove(cb)
        callbacks.insert(0, cb)
