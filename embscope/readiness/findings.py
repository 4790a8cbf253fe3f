"""The hazards a fine-tune would hit, as findings with stable codes, severities and one-line fixes.

A severity follows the trainer (:mod:`embscope.readiness.trainers`) and the scan's verification:

==========================  ==============  =========================================================
code                        severity        when
==========================  ==============  =========================================================
``untrained-used``          error           the data uses zero rows, or rows the scan flags and
                                            prompting did not clear (warning for special rows
                                            not checked: their geometry often looks untrained
                                            when it is not; error once prompting verifies them);
                                            counts as an input and as a label, per id
``special-row-untrained``   error / warning a declared BOS/EOS/PAD row is zero or verified
                                            under-trained / flagged and not checked
``pad-is-eos``              error / info    the trainer's PAD is its EOS: an error where the
                                            collator masks labels by id (every EOS leaves the
                                            loss: the model never learns to stop), info where it
                                            pads the labels by position; error when Unsloth finds
                                            no pad token at all
``pad-in-labels``           warning         a PAD other than the EOS occurs at label positions
                                            and the collator masks it by id
``double-bos``              error / warning plain texts start with BOS and the tokenizer adds
                                            another; warning (transformers profile) for rendered
                                            conversations that start with BOS under a tokenizer
                                            that adds one (``tokenizer(rendered)`` gets two)
``id-beyond-matrix``        error           a data or declared special id at or past the matrix
``added-in-padding``        error / warning an added token past the base vocabulary in a zero
                                            or untrained row, used by the data / unused
``exceeds-context``         warning         sequences longer than the limit (``--max-length``, the
                                            trainer's default, else the config's context)
``no-labels``               warning         sequences with no position in the loss (the trainer
                                            drops them, or trains on nothing)
``unknown-tokens``          warning / info  the UNK id in the data / a byte-fallback share above
                                            :data:`BYTE_FALLBACK_SHARE`
``no-chat-template``        error           conversations but no chat template to render them with
``render-refused``          error           records the template renders past the bounds
``render-failed``           error           records the template raises on
``prompt-not-prefix``       warning         the tokenized prompt is not a prefix of prompt +
                                            completion: the trainer cuts the prompt where they
                                            diverge (TRL's ``common_prefix_length``)
``unmapped-roles``          warning         TRL hands ShareGPT's own ``from`` values (``human``,
                                            ``gpt``) to the template as roles
``trainer-drops``           warning         examples the trainer itself drops before training
                                            (LLaMA-Factory: roles that do not alternate); an
                                            error when it drops every one
``unreadable-records``      warning         records that fit no shape, bad lines
``ignored-fields``          info            record fields no reader used, by name
==========================  ==============  =========================================================

Exit codes (``check``): 1 when a finding reaches ``--fail-on`` (default ``error``), else 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from embscope.readiness.record import CODES, MAX_IDS, SEVERITIES, Finding, severity_rank

if TYPE_CHECKING:  # pragma: no cover
    from embscope.corpus.conversations import DataRead
    from embscope.readiness.encode import Encoded
    from embscope.readiness.specials import SpecialIds
    from embscope.readiness.trainers import PadChoice, Trainer
    from embscope.models.model import LoadedModel

__all__ = ["BYTE_FALLBACK_SHARE", "CODES", "MAX_IDS", "SEVERITIES", "CheckFacts", "Finding", "data_findings", "find",
           "findings_frame", "merge_splits", "severity_rank"]

#: byte-fallback tokens above this share of all tokens are worth an info line (text the vocabulary
#: spells byte by byte trains slowly)
BYTE_FALLBACK_SHARE = 0.01


@dataclass
class CheckFacts:
    """What the pre-fine-tune check's rules read: the model, its special ids, the data as the
    trainer encodes it, and the scan's flags."""

    model: "LoadedModel"
    specials: "SpecialIds"
    encoded: "Encoded"
    data: "DataRead"
    #: per row: flagged by the scan (None: no scan)
    flagged: np.ndarray | None
    #: per row: all zeros
    zero_row: np.ndarray
    #: the length limit the sequences must fit (None: unknown)
    context: int | None
    #: where ``context`` comes from
    context_from: str
    #: the model's chat template, or None
    template: str | None
    #: the trainer profile
    trainer: "Trainer | None" = None
    #: the PAD it pads with
    pad: "PadChoice | None" = None
    #: per row: the scan's ``undertrained_status`` (verified, candidate, cleared, control; None: no scan)
    status: Sequence[str | None] | None = None
    #: the split checked (None: all the data)
    split: str | None = None



def _tok(strings: Sequence[str], i: int) -> str:
    return strings[i] if 0 <= i < len(strings) else f"<id {i}>"


def _examples(enc: "Encoded", ids) -> list[int]:
    seen: list[int] = []
    for i in ids:
        for e in enc.where.get(int(i), []):
            if e not in seen:
                seen.append(e)
    return sorted(seen)[:5]


def _sides(model: "LoadedModel", enc: "Encoded", ids: Sequence[int]) -> str:
    """``used 40 times as an input and 38 as a label (tied: …)``."""
    i_n = int(sum(enc.counts[i] for i in ids if i < len(enc.counts)))
    l_n = int(sum(enc.label_counts[i] for i in ids if i < len(enc.label_counts)))
    where = ("tied: one row takes both gradients" if model.output is None else
             "untied: the input row takes the input gradient, the output row the label's softmax")
    return f"{i_n} times as an input, {l_n} as a label ({where})"


def find(f: CheckFacts) -> list[Finding]:
    """Every finding for these facts, errors first."""
    from embscope.readiness.rules import data_rules, drop_rules, length_rules, pad_rules, template_rules
    from embscope.readiness.trainers import TRAINERS, eos_id

    enc = f.encoded
    trainer = f.trainer or TRAINERS["trl"]
    strings = f.model.token_strings()
    counts = enc.counts
    out: list[Finding] = []

    def add(code, severity, message, ids=(), count=0, examples=(), fix=""):
        ids = [int(i) for i in ids]
        rows, ids = len(ids) or None, ids[:MAX_IDS]
        out.append(Finding(code=code, severity=severity, message=message, ids=ids, rows=rows,
                           tokens=[_tok(strings, i) for i in ids], count=int(count),
                           examples=[int(e) for e in examples][:5], fix=fix,
                           input_counts=[int(counts[i]) if i < len(counts) else 0 for i in ids],
                           label_counts=[int(enc.label_counts[i]) if i < len(enc.label_counts) else 0 for i in ids],
                           split=f.split))

    flagged = _flagged(f)
    _beyond_matrix(f, add)
    specials_all = _special_rows(f, add, flagged)
    pad_rules(f, trainer, add, eos_id(f.specials))
    _double_bos(f, trainer, add, strings)
    pad_rows = _added_in_padding(f, add, flagged)
    _untrained_used(f, add, flagged, set(specials_all) | set(pad_rows))
    length_rules(f, trainer, add)
    _unknown_tokens(f, add, specials_all)
    template_rules(f, trainer, add)
    drop_rules(f, trainer, add)
    data_rules(f, add)
    out.sort(key=lambda x: (-severity_rank(x.severity), CODES.index(x.code)))
    return out


def _state(f: CheckFacts, i: int) -> str | None:
    """Row ``i``'s verification status (``verified``, ``cleared``, …), None when unknown."""
    return f.status[i] if f.status is not None and i < len(f.status) else None


def _flagged(f: CheckFacts) -> "np.ndarray | None":
    """(n,) the flagged rows that prompting did not clear; a verified row counts even if the
    indicators missed it. None without a scan."""
    n, status = f.model.n_rows, f.status
    flagged = None
    if f.flagged is not None:
        flagged = np.asarray(f.flagged, dtype=bool).copy()
        if status is not None:
            for i, s in enumerate(status[:n]):
                if s == "cleared":
                    flagged[i] = False
                elif s == "verified":
                    flagged[i] = True
    return flagged


def _beyond_matrix(f: CheckFacts, add) -> None:
    """Ids at or past the matrix: in the data, or declared."""
    n, sp, enc, counts = f.model.n_rows, f.specials, f.encoded, f.encoded.counts
    beyond = np.flatnonzero(counts[n:]) + n if len(counts) > n else np.zeros(0, np.int64)
    declared_beyond = sorted({i for s in sp.sources.values() for ids in s.values() for i in ids if i >= n})
    if len(beyond) or declared_beyond:
        ids = [*beyond.tolist(), *[i for i in declared_beyond if i not in set(beyond.tolist())]]
        add("id-beyond-matrix", "error",
            f"{len(ids)} id(s) at or past the embedding's {n} rows ({int(counts[n:].sum()) if len(counts) > n else 0} "
            "occurrences in the data" + (f"; declared special ids {declared_beyond}" if declared_beyond else "") + ")",
            ids, int(counts[n:].sum()) if len(counts) > n else 0, _examples(enc, beyond),
            "resize the embedding (model.resize_token_embeddings(len(tokenizer))) or fix the declared ids")


def _special_rows(f: CheckFacts, add, flagged) -> list[int]:
    """The special rows the trainer uses (BOS, EOS, PAD) that are zero or under-trained; returns them all."""
    n, sp, enc, counts = f.model.n_rows, f.specials, f.encoded, f.encoded.counts
    role_ids = {r: [i for i in sp.ids(r) if 0 <= i < n] for r in ("bos", "eos", "pad")}
    if f.pad is not None and f.pad.id is not None and 0 <= f.pad.id < n and f.pad.id not in role_ids["pad"]:
        role_ids["pad"] = [*role_ids["pad"], f.pad.id]
    specials_all = sorted({i for ids in role_ids.values() for i in ids})

    def roles(rows):
        return ", ".join(f"{r.upper()} {i}" for r, ids in role_ids.items() for i in ids if i in rows)

    zero = [i for i in specials_all if f.zero_row[i]]
    if zero:
        add("special-row-untrained", "error", f"special row(s) all zeros: {roles(zero)}", zero,
            int(counts[zero].sum()), _examples(enc, zero),
            "re-initialise them before training (--repair OUT), or set the special token to a trained row")
    if flagged is not None:
        verified = [i for i in specials_all if flagged[i] and i not in zero and _state(f, i) == "verified"]
        weak = [i for i in specials_all if flagged[i] and i not in zero and i not in verified]
        if verified:
            add("special-row-untrained", "error",
                f"special row(s) verified under-trained by prompting: {roles(verified)} (the model cannot "
                "produce them)", verified, int(counts[verified].sum()), _examples(enc, verified),
                "re-initialise them before training (--repair OUT)")
        if weak:
            pad_only = all(i in role_ids["pad"] and i not in role_ids["bos"] + role_ids["eos"] for i in weak)
            add("special-row-untrained", "warning",
                f"special row(s) flagged as under-trained by the scan and not settled by prompting: {roles(weak)} "
                "(special rows often look untrained; prompting checks a special row where the chat template "
                "uses it)", weak, int(counts[weak].sum()), _examples(enc, weak),
                "nothing to do while it only pads (the collator keeps it out of attention and the loss)" if pad_only
                else "use a token the model was trained on for that role, or confirm it first where a chat template "
                "uses it; --repair OUT re-initialises only rows prompting verified")
    return specials_all


def _double_bos(f: CheckFacts, trainer, add, strings: Sequence[str]) -> None:
    """Texts (or rendered conversations) that start with the BOS the tokenizer adds again."""
    sp, enc = f.specials, f.encoded
    bos_name = _tok(strings, sp.prefix[0]) if sp.prefix else ""
    text_bos = sorted(set(enc.double_bos["text"]))
    if text_bos:
        add("double-bos", "error",
            f"{len(text_bos)} plain text(s) start with {bos_name!r} and the tokenizer adds another",
            sp.prefix[:1], len(text_bos), text_bos, "drop the BOS from the texts (the tokenizer adds it)")
    chat_bos = sorted(set(enc.double_bos["chat"]))
    if chat_bos and trainer.name == "transformers":
        add("double-bos", "warning",
            f"{len(chat_bos)} rendered conversation(s) start with {bos_name!r} and the tokenizer "
            f"adds another ({sp.adds_from}): tokenizing the rendered text with special tokens gives two",
            sp.prefix[:1], len(chat_bos), chat_bos,
            "tokenize with add_special_tokens=False (apply_chat_template(tokenize=True) does), or drop "
            "bos_token from the template")


def _added_in_padding(f: CheckFacts, add, flagged) -> list[int]:
    """Added tokens in padding rows (zero or untrained rows past the base vocabulary); returns those rows."""
    n, sp, enc, counts = f.model.n_rows, f.specials, f.encoded, f.encoded.counts
    pad_rows: list[int] = []
    if sp.base_size is not None:
        weak_row = f.zero_row if flagged is None else (f.zero_row | flagged[:len(f.zero_row)])
        pad_rows = [i for i, _, _ in sp.added if sp.base_size <= i < n and weak_row[i]]
        used = [i for i in pad_rows if i < len(counts) and counts[i]]
        if pad_rows and (flagged is not None or used):
            add("added-in-padding", "error" if used else "warning",
                f"{len(pad_rows)} added token(s) past the base vocabulary ({sp.base_size}) sit in zero or "
                f"untrained rows; {len(used)} of them occur in the data", [*used, *[i for i in pad_rows if i not in used]],
                int(counts[used].sum()) if used else 0, _examples(enc, used),
                "initialise the new rows (--repair OUT, or extend with --apply) before training")
    return pad_rows


def _untrained_used(f: CheckFacts, add, flagged, skip: set[int]) -> None:
    """Rows the data uses that training barely touched: zero rows always, flagged rows with a scan
    (the special and padding rows in ``skip`` have their own findings)."""
    model, enc, counts, cats = f.model, f.encoded, f.encoded.counts, f.model.categories
    k = min(len(counts), model.n_rows)
    bad = f.zero_row[:k].copy()
    if flagged is not None:
        bad |= flagged[:k]
    used = np.flatnonzero((counts[:k] > 0) & bad)
    used = sorted((int(i) for i in used if int(i) not in skip), key=lambda i: -int(counts[i]))
    normal = [i for i in used if cats[i] != "special" or f.zero_row[i] or _state(f, i) == "verified"]
    special = [i for i in used if i not in normal]
    if normal:
        zeros = sum(1 for i in normal if f.zero_row[i])
        what = ("zero" if zeros == len(normal) else "flagged as under-trained" if not zeros
                else f"flagged as under-trained or zero ({zeros} zero)")
        add("untrained-used", "error",
            f"the data uses {len(normal)} row(s) {what}: {_sides(model, enc, normal)}; the most used in "
            f"{int(enc.example_counts[normal].max())} examples: large, badly scaled gradients (NaN losses)",
            normal, int(counts[normal].sum()), _examples(enc, normal),
            "re-initialise them before training (--repair OUT)")
    if special:
        add("untrained-used", "warning",
            f"the data (or the template) uses {len(special)} special row(s) flagged as under-trained and not "
            f"settled by prompting, {_sides(model, enc, special)} (special rows often look untrained; prompting "
            "checks them where the chat template uses them)", special,
            int(counts[special].sum()), _examples(enc, special),
            "confirm them where a chat template uses them (--chat-template FILE); --repair OUT re-initialises only "
            "rows prompting verified")


def _unknown_tokens(f: CheckFacts, add, specials_all: list[int]) -> None:
    """Unknown and byte-fallback tokens."""
    model, sp, enc, counts = f.model, f.specials, f.encoded, f.encoded.counts
    unk = [i for i in ({model.vocab.unk_id} if model.vocab is not None and model.vocab.unk_id is not None else set())
           | set(sp.ids("unk")) if 0 <= i < len(counts)]
    n_unk = int(counts[unk].sum()) if unk else 0
    # an UNK that is also a BOS/EOS/PAD (SmolLM2's <|endoftext|>) is counted only outside those roles
    if n_unk and not (set(unk) & set(specials_all)):
        add("unknown-tokens", "warning",
            f"the data produces the unknown token {n_unk} times ({n_unk / max(enc.tokens, 1):.3%} of tokens): "
            "that text is lost to the model", unk, n_unk, _examples(enc, unk),
            "normalise the text, or extend the vocabulary (embscope extend)")
    byte_ids = sorted(model.vocab.byte_ids) if model.vocab is not None else []
    byte_ids = [i for i in byte_ids if i < len(counts)]
    n_bytes = int(counts[byte_ids].sum()) if byte_ids else 0
    if enc.tokens and n_bytes / enc.tokens > BYTE_FALLBACK_SHARE:
        top = sorted((i for i in byte_ids if counts[i]), key=lambda i: -int(counts[i]))
        add("unknown-tokens", "info",
            f"{n_bytes / enc.tokens:.1%} of the tokens are byte-fallback pieces: text the vocabulary spells byte "
            "by byte", top, n_bytes, (), "consider extending the vocabulary (embscope extend)")


def data_findings(f: CheckFacts) -> list[Finding]:
    """The findings about the reading itself (one data report for all splits: no split)."""
    out: list[Finding] = []

    def add(code, severity, message, ids=(), count=0, examples=(), fix=""):
        out.append(Finding(code=code, severity=severity, message=message, count=int(count),
                           examples=[int(e) for e in examples][:5], fix=fix))
    from embscope.readiness.rules import data_rules

    data_rules(f, add, force=True)
    return out


def merge_splits(per_split: dict[str, list[Finding]]) -> list[Finding]:
    """Findings of each split, one list: a finding every split has alike (the same code, severity,
    message and ids: a fact of the model, not of the data) is kept once, without a split."""
    names = list(per_split)
    key = lambda x: (x.code, x.severity, x.message, tuple(x.ids))  # noqa: E731
    common = set.intersection(*({key(x) for x in v} for v in per_split.values())) if names else set()
    out, seen = [], {}
    for name in names:
        for x in per_split[name]:
            k = key(x)
            if k not in common:
                out.append(x)
            elif k not in seen:  # the first split's copy stands for all: counts summed, examples joined
                seen[k] = x
                x.split = None
                out.append(x)
            else:
                first = seen[k]
                first.count += x.count
                first.input_counts = [a + b for a, b in zip(first.input_counts, x.input_counts)]
                first.label_counts = [a + b for a, b in zip(first.label_counts, x.label_counts)]
                first.examples = sorted(set(first.examples) | set(x.examples))[:5]
    out.sort(key=lambda x: (-severity_rank(x.severity), CODES.index(x.code)))
    return out


def findings_frame(findings: Sequence[Finding]):
    """``findings.parquet``: one row per finding."""
    import polars as pl

    return pl.DataFrame({
        "code": [x.code for x in findings], "severity": [x.severity for x in findings],
        "message": [x.message for x in findings],
        "ids": pl.Series([x.ids for x in findings], dtype=pl.List(pl.Int64)),
        "tokens": pl.Series([x.tokens for x in findings], dtype=pl.List(pl.Utf8)),
        "count": pl.Series([x.count for x in findings], dtype=pl.Int64),
        "rows": pl.Series([x.rows for x in findings], dtype=pl.Int64),
        "examples": pl.Series([x.examples for x in findings], dtype=pl.List(pl.Int64)),
        "fix": [x.fix for x in findings],
        "input_counts": pl.Series([x.input_counts for x in findings], dtype=pl.List(pl.Int64)),
        "label_counts": pl.Series([x.label_counts for x in findings], dtype=pl.List(pl.Int64)),
        "split": pl.Series([x.split for x in findings], dtype=pl.Utf8)},
        schema_overrides={"code": pl.Utf8, "severity": pl.Utf8, "message": pl.Utf8, "fix": pl.Utf8})
