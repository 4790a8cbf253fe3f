"""The check itself: read the training data, render and tokenize it as the trainer will, and turn
what it holds into findings (:func:`check_data`); :func:`make_context` is what building the
trainer's sequences needs, shared with ``diff``.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from embscope.models.rows import model_zero_rows
from embscope.readiness.encode import length_stats
from embscope.readiness.findings import CheckFacts, find
from embscope.readiness.options import CheckOptions
from embscope.readiness.record import CODES, SEVERITIES, CheckRecord, SplitRecord, TopId, worst

if TYPE_CHECKING:  # pragma: no cover
    from embscope.models.model import LoadedModel


class ModelTemplate(enum.Enum):
    """The default of every ``template`` parameter below: the model's own chat template, read from its
    files (:func:`~embscope.models.chat_template.read_chat_template`); ``None`` means no template."""

    MODEL = "the model's own chat template"


#: ``template=MODEL_TEMPLATE``: render with the template the model ships
MODEL_TEMPLATE = ModelTemplate.MODEL


def _context(model: "LoadedModel", max_length: int | None, trainer) -> tuple[int | None, str]:
    if max_length:
        return int(max_length), "--max-length"
    if trainer.max_length:
        return trainer.max_length, f"{trainer.name}'s {trainer.max_length_from}"
    from embscope.config import max_positions

    value, key = max_positions(model.config)
    return (value, f"config {key}") if value is not None else (None, "unknown")


def check_vocab(model: "LoadedModel", gguf_tokenizer: str = "llamacpp"):
    """The tokenizer the check tokenizes with: the model's, or for a GGUF model with
    ``gguf_tokenizer="transformers"`` the one transformers' GGUF conversion builds."""
    from embscope.errors import SpecError

    if gguf_tokenizer == "llamacpp":
        return model.vocab
    if Path(model.path).suffix != ".gguf":
        raise SpecError(f"--gguf-tokenizer transformers is for a .gguf model; {model.name} is not one (its "
                        "tokenizer files are what transformers loads): leave the option out")
    from embscope.tokenizer.gguf import transformers_vocabulary

    return transformers_vocabulary(Path(model.path), name=model.name)


def reference(model: "LoadedModel", gguf_tokenizer: str = "llamacpp") -> str:
    """Which tokenizer the check's ids follow, in words (the summary names it)."""
    import tokenizers

    path = Path(model.path)
    if path.suffix == ".gguf" and gguf_tokenizer == "transformers":
        return ("transformers' GGUF conversion (AutoTokenizer.from_pretrained(..., gguf_file=...)), as a TRL or "
                f"transformers script that loads the GGUF tokenizes (tokenizers {tokenizers.__version__})")
    if path.suffix == ".gguf":
        from embscope.formats.gguf import open_gguf
        from embscope.tokenizer.gguf import BUILDERS, CUSTOM_PRE, RAW_UTF8
        from embscope.tokenizer.llamacpp_pre import pre_type

        fields = open_gguf(path, tensors=False).fields
        kind, pre = fields.get("tokenizer.ggml.model"), fields.get("tokenizer.ggml.pre")
        ours = kind in BUILDERS and (kind != "gpt2" or (pre_type(pre) if pre else "gpt2") not in (None, *RAW_UTF8)
                                     and pre not in CUSTOM_PRE)
        if ours and kind == "gpt2":
            return (f"llama.cpp's {pre or 'gpt2'!r} pre-tokenizer and the GGUF's merges, as llama.cpp tokenizes "
                    "(transformers' GGUF loader can split otherwise: --gguf-tokenizer transformers, "
                    "docs/trainers.md)")
        if ours:
            return f"the GGUF's {kind!r} vocabulary and scores, as llama.cpp tokenizes"
        return f"transformers' GGUF conversion of the {kind!r} tokenizer (tokenizers {tokenizers.__version__})"
    if (path / "tokenizer.json").is_file():
        return f"the model's tokenizer.json (tokenizers {tokenizers.__version__})"
    return f"the model's tokenizer files ({getattr(model.vocab, 'backend', type(model.vocab).__name__)})"


def make_context(model: "LoadedModel", options: CheckOptions | None = None, *,
                 template: str | None | ModelTemplate = MODEL_TEMPLATE):
    """``(Context, PadChoice, SpecialIds, (limit, where from))``: what building the trainer's sequences
    needs for ``model`` (see :mod:`embscope.readiness.sequences`).

    ``options`` (:class:`~embscope.readiness.options.CheckOptions`; default: every field's default)
    gives the trainer, its PAD and sequence length, a GGUF model's tokenizer (:func:`check_vocab`),
    LLaMA-Factory's ``template``, ``train_on_prompt`` and ``mask_history`` and Unsloth's
    ``train_on_responses_only`` with its parts (:mod:`embscope.readiness.responses_only`). Its
    ``chat_template`` (a file path) is not read here: ``template`` is the template's text (None: no
    template), by default the model's own."""
    from embscope.readiness.sequences import Context
    from embscope.readiness.specials import special_ids
    from embscope.readiness.trainers import check_options, choose_pad, eos_id, get_trainer
    from embscope.models.chat_template import read_chat_template, special_token_strings

    options = CheckOptions() if options is None else options
    profile = get_trainer(options.trainer)
    check_options(options)
    sp = special_ids(model)
    pad = choose_pad(profile, model, sp, options.pad_token)
    if template is MODEL_TEMPLATE:
        template = read_chat_template(model)
    context, context_from = _context(model, options.max_length, profile)
    eos = eos_id(sp)
    strings = model.token_strings()
    ctx = Context(vocab=check_vocab(model, options.gguf_tokenizer), trainer=profile, template=template,
                  variables=special_token_strings(model), prefix=list(sp.prefix), suffix=list(sp.suffix),
                  pad_id=pad.id, eos_id=eos, eos_token=strings[eos] if eos is not None and 0 <= eos < len(strings) else None,
                  max_length=context if (options.max_length or profile.max_length) else None)
    if profile.name == "llamafactory":
        from embscope.readiness.llamafactory import setup_for

        bos = sp.ids("bos")
        ctx.lf = setup_for(options, template, ctx.variables, ctx.vocab, prefix=ctx.prefix, eos=eos,
                           bos=bos[0] if bos else None, cutoff=context)
    if options.responses_only:
        ctx.responses_only = _markers(ctx, sp, options)
    return ctx, pad, sp, (context, context_from)


def _markers(ctx, sp, options: CheckOptions):
    """Unsloth's response and instruction markers for this tokenizer (the parts ``options`` gives,
    else read off the chat template)."""
    from embscope.errors import SpecError
    from embscope.readiness.responses_only import detect_parts, markers
    from jinja2 import TemplateError

    from embscope.models.chat_template import render
    from embscope.models.template_budget import RenderRefused
    from embscope.readiness.trainers import eos_id

    instruction_part, response_part = options.instruction_part, options.response_part
    if instruction_part is None:
        if ctx.template is None:
            raise SpecError("--responses-only needs the chat template to find the response markers, and there is "
                            "none; pass --instruction-part and --response-part")
        specials = [c for _, c, _ in sp.added] + [v for v in ctx.variables.values() if isinstance(v, str)]
        try:
            instruction_part, response_part = detect_parts(
                lambda msgs, gen: render(ctx.template, msgs, add_generation_prompt=gen, **ctx.variables), specials)
        except (TemplateError, RenderRefused):  # the template fails on every conversation: each record's
            return None  # own rendering reports it (render-failed / render-refused), as without the option
    special = {i for i, _, flag in sp.added if flag} | {i for r in ("bos", "eos", "pad", "unk") for i in sp.ids(r)}
    bos = sp.ids("bos")
    return markers(instruction_part, response_part, lambda t: ctx.vocab.encode_batch([t])[0],
                   added={i: c for i, c, _ in sp.added}, special=special, bos=bos[0] if bos else None, eos=eos_id(sp))


def trainer_sequences(model: "LoadedModel", examples, options: CheckOptions | None = None, *,
                      template: str | None | ModelTemplate = MODEL_TEMPLATE):
    """The sequences ``options.trainer`` trains on for ``examples``
    (:class:`~embscope.corpus.shapes.Example`): token ids and per-position loss masks
    (``labels != -100``), in order (a DPO example gives its chosen then its rejected sequence).
    ``options`` and ``template`` as for :func:`make_context`.

    Example:
        >>> from embscope.corpus.shapes import to_example  # doctest: +SKIP
        >>> from embscope.readiness.options import CheckOptions  # doctest: +SKIP
        >>> ex, _ = to_example({"messages": [{"role": "user", "content": "hi"}]}, 0)  # doctest: +SKIP
        >>> trainer_sequences(model, [ex], CheckOptions(trainer="transformers"))[0].ids  # doctest: +SKIP
    """
    from embscope.readiness.sequences import build

    ctx, *_ = make_context(model, options, template=template)
    return build(list(examples), ctx)


def check_data(model: "LoadedModel", data: Sequence[str | Path], options: CheckOptions | None = None, *,
               text_field: str = "text", flagged: np.ndarray | None = None,
               status: Sequence[str | None] | None = None, engine=None,
               template: str | None | ModelTemplate = MODEL_TEMPLATE) -> CheckRecord:
    """Check ``data`` against ``model`` (see the module docstring).

    Args:
        model: the loaded model (matrices, config, tokenizer).
        data: training-data paths (files, folders, globs).
        options: how the trainer reads, renders and labels the data
            (:class:`~embscope.readiness.options.CheckOptions`, each field documented there; default:
            every field's default). Its ``chat_template`` (a file path) is not read here: pass the
            file's text as ``template``.
        text_field: the column that holds plain texts.
        flagged: per row, flagged as under-trained by the scan (None: only zero rows are checked).
        status: per row, the scan's ``undertrained_status`` (verified rows are errors, cleared rows
            are not flagged).
        engine: :class:`~embscope.corpus.backend.Engine` for the rendering and tokenizing (default:
            this process).
        template: the chat template's text to render with (default: the model's own; None: none).
    Returns:
        :class:`CheckRecord`.
    """
    from embscope.corpus.conversations import FORMATS, DataRead, iter_examples
    from embscope.errors import CorpusError, SpecError, VocabError, did_you_mean
    from embscope.readiness.engine import encode_all

    options = CheckOptions() if options is None else options
    fmt = options.data_format
    if fmt is not None and fmt not in FORMATS:
        raise SpecError(f"unknown --format {fmt!r}{did_you_mean(fmt, FORMATS)}; choose from {', '.join(FORMATS)}")
    if model.vocab is None:
        raise VocabError(f"{model.name} ships no tokenizer, so its training data cannot be tokenized; "
                         "pass a model with a tokenizer")
    t0 = time.perf_counter()
    ctx, pad, sp, (context, context_from) = make_context(model, options, template=template)
    flagged = np.asarray(flagged, dtype=bool)[:model.n_rows] if flagged is not None else None
    zero = model_zero_rows(model)
    report = DataRead()
    examples = iter_examples(data, fmt=fmt, text_field=text_field, report=report, split=options.split)
    parts = encode_all(examples, ctx, _watched(model, sp, pad, flagged, status) | zero, engine=engine)
    if sum(p.examples for p in parts.values()) == 0:
        why = ", ".join(f"{c} {r}" for r, c in [*report.rejected.most_common(3), *report.issues.totals.most_common(2)])
        raise CorpusError(f"{', '.join(map(str, data))} holds no training example ({why or 'no records'}); pass "
                          "jsonl/json/Parquet/Arrow records in the messages, conversations, alpaca, "
                          "prompt/completion, preference (chosen/rejected) or text shape")

    def facts(enc, name):
        return CheckFacts(model=model, specials=sp, encoded=enc, data=report, flagged=flagged, zero_row=zero,
                     context=context, context_from=context_from, template=ctx.template, trainer=ctx.trainer,
                     pad=pad, status=status, split=name)

    findings, enc, per_split = _findings(parts, facts)
    return CheckRecord(
        findings=findings, data=report.record(), specials=sp.record(), template=enc.template,
        examples=enc.examples, conversations=enc.conversations, tokens=enc.tokens, bytes=enc.bytes,
        lengths=length_stats(enc.lengths), context=context, context_from=context_from,
        distinct_ids=int(np.count_nonzero(enc.counts)), worst=worst(findings),
        seconds=round(time.perf_counter() - t0, 3), top_ids=_top_ids(model, enc), trainer=ctx.trainer.record(),
        pad=pad, reference=reference(model, options.gguf_tokenizer), sequences=enc.sequences,
        label_tokens=int(sum(enc.loss_tokens)), splits=per_split)


#: ids listed under ``top_ids``
TOP_IDS = 20


def _watched(model: "LoadedModel", sp, pad, flagged: np.ndarray | None, status) -> np.ndarray:
    """The rows whose example indices the encoding keeps: flagged and verified rows, the declared
    BOS/EOS/PAD/UNK, the trainer's PAD and the added tokens."""
    n = model.n_rows
    watch = np.zeros(n, dtype=bool)
    if flagged is not None:
        watch |= flagged
    if status is not None:
        watch[[i for i, s in enumerate(status[:n]) if s == "verified"]] = True
    for ids in (sp.ids(r) for r in ("bos", "eos", "pad", "unk")):
        watch[[i for i in ids if 0 <= i < n]] = True
    if pad.id is not None and 0 <= pad.id < n:
        watch[pad.id] = True
    watch[[i for i, _, _ in sp.added if 0 <= i < n]] = True
    return watch


def _findings(parts: dict, facts) -> tuple[list, Any, dict[str, SplitRecord]]:
    """``(findings, the whole data's encoding, per split)``: data without splits is one part; with
    splits each is checked on its own, findings every split shares kept once, the reading's own
    findings (one report for all splits) added."""
    from embscope.readiness.findings import data_findings, merge_splits

    keys = list(parts)
    if keys == [None]:
        return find(facts(parts[None], None)), parts[None], {}
    per = {k: find(facts(parts[k], k)) for k in keys}
    findings = merge_splits({k: list(v) for k, v in per.items()})
    findings += data_findings(facts(parts[keys[0]], None))
    findings.sort(key=lambda x: (-SEVERITIES.index(x.severity), CODES.index(x.code)))
    per_split = {k: parts[k].record(worst(per[k])) for k in keys}
    enc = parts[keys[0]]
    for k in keys[1:]:
        enc = enc.merge(parts[k])
    return findings, enc, per_split


def _top_ids(model: "LoadedModel", enc) -> list[TopId]:
    """The :data:`TOP_IDS` ids the data uses most."""
    strings, n = model.token_strings(), model.n_rows
    used = np.flatnonzero(enc.counts)
    top = used[np.argsort(-enc.counts[used], kind="stable")][:TOP_IDS]
    return [TopId(id=int(i), token=strings[i] if i < n else f"<id {i}>", count=int(enc.counts[i]),
                  labels=int(enc.label_counts[i]), examples=int(enc.example_counts[i])) for i in top]
