"""The rules of :mod:`embscope.readiness.findings` about the PAD, lengths, the template, what the
trainer drops and what the readers could not read; each calls ``add(code, severity, message, ids,
count, examples, fix)`` for what it finds, reading the :class:`~embscope.readiness.findings.CheckFacts`
``f`` and the :class:`~embscope.readiness.trainers.Trainer` profile.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def pad_rules(f: Any, trainer: Any, add, eos: int | None) -> None:
    """``pad-is-eos`` and ``pad-in-labels``, as the trainer's collator treats the PAD."""
    pad, enc = f.pad, f.encoded
    if pad is None:
        return
    if pad.new_token:
        add("pad-is-eos", "error", f"{pad.how}: there is no pad-like token and the PAD is missing or the EOS",
            [i for i in [eos] if i is not None], 0, (), trainer.pad_fix)
        return
    if pad.id is None:
        add("pad-is-eos", "warning", "the tokenizer declares no PAD and no EOS: the trainer has nothing to pad with",
            (), 0, (), "set tokenizer.pad_token (an unused special token) before training")
        return
    eos_label = int(enc.label_counts[eos]) if eos is not None and eos < len(enc.label_counts) else 0
    if pad.id == eos:
        if trainer.masks_pad_by_id or enc.pad_masked:
            whose = (f"{trainer.name}'s collator masks labels by id" if trainer.masks_pad_by_id else
                     f"{trainer.name}'s pretraining collator (DataCollatorForLanguageModeling) masks the texts' labels by id")
            add("pad-is-eos", "error",
                f"PAD is the EOS ({pad.how}: {pad.token!r} = eos): {whose}, "
                f"so all {enc.pad_masked} EOS label positions leave the loss and the model never learns to stop",
                [pad.id], enc.pad_masked, enc.pad_masked_examples,
                trainer.pad_fix if trainer.masks_pad_by_id else
                "set a pad token that is not the EOS before pretraining (tokenizer.pad_token = an unused special "
                "token), or the texts never teach the model to stop")
        else:
            add("pad-is-eos", "info",
                f"PAD is the EOS ({pad.how}: {pad.token!r} = eos); harmless under {trainer.name}: its collator pads "
                "the labels with -100 by position, so the EOS label positions stay in the loss",
                [pad.id], eos_label, (), trainer.pad_fix)
        return
    if trainer.masks_pad_by_id and enc.pad_masked:
        add("pad-in-labels", "warning",
            f"the PAD {pad.token!r} ({pad.how}) occurs at {enc.pad_masked} label positions of the data: the collator "
            "masks it by id, so those tokens are never learned", [pad.id], enc.pad_masked, enc.pad_masked_examples,
            "pad with a token the data never contains (an unused special token)")


def length_rules(f: Any, trainer: Any, add) -> None:
    enc = f.encoded
    if f.context and enc.lengths:
        lengths = np.asarray(enc.lengths)
        over = np.flatnonzero(lengths > f.context)
        if len(over):
            add("exceeds-context", "warning",
                f"{len(over)} of {len(lengths)} sequences ({len(over) / len(lengths):.1%}) are longer than the "
                f"limit of {f.context} tokens ({f.context_from}; longest {int(lengths.max())}): "
                f"{trainer.truncation}",
                (), len(over), sorted({enc.indices[i] for i in over[:50]})[:5],
                "split or drop them, or raise max_length within the model's context (--max-length N)")
    if enc.unlabelled:
        add("no-labels", "warning",
            f"{enc.unlabelled} sequence(s) have no position in the loss under {trainer.name} (they train on "
            "nothing): a prompt "
            "that fills the length limit, or a conversation without an assistant turn", (), enc.unlabelled,
            enc.unlabelled_examples, "shorten the prompts, or give each conversation an assistant turn")


def template_rules(f: Any, trainer: Any, add) -> None:
    enc, model = f.encoded, f.model
    if enc.untemplated:
        add("no-chat-template", "error",
            f"{len(enc.untemplated)} conversation(s) but {model.name} ships no chat template: the trainer "
            "cannot render them", (), len(enc.untemplated), enc.untemplated[:5], trainer.template_fix)
    if enc.refused:
        total = sum(enc.refused.values())
        msg, _ = enc.refused.most_common(1)[0]
        exs = sorted(e for v in enc.refused_examples.values() for e in v)[:5]
        add("render-refused", "error", f"{total} conversation(s) not rendered, {msg}", (), total, exs,
            "use a chat template that renders within the bounds (embscope/models/chat_template.py), or drop "
            "those records")
    if enc.render_failed:
        total = sum(enc.render_failed.values())
        msg, _ = enc.render_failed.most_common(1)[0]
        exs = sorted(e for v in enc.render_failed_examples.values() for e in v)[:5]
        add("render-failed", "error", f"the chat template fails on {total} conversation(s): {msg}", (), total,
            exs, "fix those conversations (role order, content types) or the template")
    if enc.not_prefix:
        add("prompt-not-prefix", "warning",
            f"{enc.not_prefix} example(s): the tokenized prompt is not a prefix of prompt + completion (the template "
            "renders the prompt alone differently, or tokens merge across the boundary); the trainer starts the "
            "completion where they diverge", (), enc.not_prefix, enc.not_prefix_examples,
            "end prompts on a token boundary, or use a template that renders the prompt the same either way")
    if enc.raw_roles:
        names = ", ".join(f"{r!r}" for r, _ in enc.raw_roles.most_common(4))
        how = ("renames from/value to role/content but keeps the values" if trainer.sharegpt_roles == "raw" else
               "maps human, gpt, system and tool but keeps the other values" +
               (" (those turns are not trained: only assistant turns are)"
                if trainer.chat_loss == "assistant-content" else ""))
        add("unmapped-roles", "warning",
            f"{enc.raw_roles_n} ShareGPT conversation(s) reach the template with roles {names}: {trainer.name} {how}",
            (), enc.raw_roles_n, enc.raw_roles_examples,
            "map the roles to the template's first (human → user, gpt and function_call → assistant, observation "
            "→ tool), or convert to messages")


#: the fix for each kind of drop, by a word of its reason
DROP_FIXES = (("no response marker", "pass the instruction and response parts the template writes "
               "(--instruction-part, --response-part), as to Unsloth's train_on_responses_only"),
              ("prompt alone fills", "shorten those prompts, or raise max_length (--max-length N)"),
              ("no label", "shorten the prompts or raise max_length, or give each conversation an assistant turn"),
              ("no trainable", "give each conversation an assistant turn (roles_to_train)"),
              ("longer than", "split those examples, or raise sequence_len (or excess_length_strategy: truncate)"),
              ("preference pair", "give each pair one chosen and one rejected assistant turn"))


def drop_rules(f: Any, trainer: Any, add) -> None:
    """``trainer-drops``: the examples the trainer itself drops before training, by reason."""
    enc = f.encoded
    if enc.dropped:
        total = sum(enc.dropped.values())
        reasons = enc.dropped.most_common()
        why = "; ".join(f"{n} {r}" if len(reasons) > 1 else r for r, n in reasons[:3])
        top = reasons[0][0]
        fix = next((fx for word, fx in DROP_FIXES if word in top),
                   "fix the turn order (system, then user and assistant turns in turn, ending with the assistant), "
                   "or those examples never train")
        every = enc.examples > 0 and total >= enc.examples  # nothing is left to train on: not ready
        add("trainer-drops", "error" if every else "warning",
            f"{trainer.name} drops {'every one of the ' if every else ''}{total} example(s) before training: {why}",
            (), total, enc.dropped_examples, fix)


def data_rules(f: Any, add, force: bool = False) -> None:
    if f.split is not None and not force:
        return  # the data report is one for all splits: reported once, without a split
    bad = sum(f.data.rejected.values()) + sum(f.data.issues.totals.values())
    if bad:
        reasons = [*f.data.rejected.most_common(2), *f.data.issues.totals.most_common(1)]
        text = "; ".join(f"{c} {r}" for r, c in reasons)
        exs = sorted(e for v in f.data.rejected_examples.values() for e in v)[:5]
        add("unreadable-records", "warning", f"{bad} record(s) or line(s) not read: {text}", (), bad, exs,
            "fix the records, or force a shape with --format")
    if f.data.ignored_fields:
        top = f.data.ignored_fields.most_common(8)
        text = ", ".join(f"{k!r} ({c})" for k, c in top)
        add("ignored-fields", "info",
            f"{len(f.data.ignored_fields)} record field(s) no reader used: {text}", (),
            sum(f.data.ignored_fields.values()), (),
            "nothing to do if they are metadata; otherwise rename them to a field the trainer reads")
