"""The hazards a fine-tune would hit, as findings with stable codes, severities and one-line fixes.

==========================  ========  ===============================================================
code                        severity  when
==========================  ========  ===============================================================
``untrained-used``          error     the data uses rows the scan flags as under-trained, or zero rows (warning for
                                      special tokens: their geometry often looks untrained when it is
                                      not; ``--verify`` settles it)
``special-row-untrained``   error     a declared BOS/EOS/PAD row is all zeros (warning: flagged)
``pad-is-eos``              error     a source declares PAD = EOS (a collator that masks PAD in the
                                      labels never teaches the model to stop); warning when no source
                                      declares a PAD (trainers then fall back to EOS)
``double-bos``              error     plain texts start with BOS and the tokenizer adds another;
                                      warning for rendered conversations that start with BOS under a
                                      tokenizer that adds one (``tokenizer(rendered)`` gets two;
                                      ``apply_chat_template(tokenize=True)`` does not)
``id-beyond-matrix``        error     a data or declared special id at or past the matrix's rows
``added-in-padding``        error     an added token past the base vocabulary whose row is zero or
                                      flagged, used by the data (warning when unused)
``exceeds-context``         warning   examples longer than the context (``max_length`` or the config)
``unknown-tokens``          warning   the data produces the UNK id; info for a byte-fallback share
                                      above :data:`BYTE_FALLBACK_SHARE`
``no-chat-template``        error     conversations but no chat template to render them with
``render-refused``          error     the template passed the render bounds (issue-free templates
                                      never do)
``render-failed``           error     the template raised on some conversations (``raise_exception``)
``unreadable-records``      warning   records that fit no format, bad lines
==========================  ========  ===============================================================
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from embscope.records import Record

if TYPE_CHECKING:  # pragma: no cover
    from embscope.corpus.conversations import DataReport
    from embscope.finetune.encode import Encoded
    from embscope.finetune.specials import SpecialIds
    from embscope.models.model import LoadedModel

SEVERITIES = ("info", "warning", "error")
CODES = ("untrained-used", "special-row-untrained", "pad-is-eos", "double-bos", "id-beyond-matrix",
         "added-in-padding", "exceeds-context", "unknown-tokens", "no-chat-template", "render-refused",
         "render-failed", "unreadable-records")
#: byte-fallback tokens above this share of all tokens are worth an info line (text the vocabulary
#: spells byte by byte trains slowly)
BYTE_FALLBACK_SHARE = 0.01
#: ids listed per finding
MAX_IDS = 50


@dataclass
class Finding(Record):
    """One hazard (``findings.parquet`` has one row per finding)."""

    #: stable code (see :mod:`embscope.finetune.findings`)
    code: str
    #: error, warning or info
    severity: str
    #: what is wrong, in one line
    message: str
    #: the row ids concerned (at most 50), most used first
    ids: list[int] = field(default_factory=list)
    #: their token strings (raw, untrusted: escape before display)
    tokens: list[str] = field(default_factory=list)
    #: occurrences (tokens or examples, see ``message``)
    count: int = 0
    #: a few example indices (0-based record positions in the data)
    examples: list[int] = field(default_factory=list)
    #: the fix, in one line
    fix: str = ""


def severity_rank(s: str) -> int:
    return SEVERITIES.index(s)


@dataclass
class Facts:
    """What the rules read."""

    model: "LoadedModel"
    specials: "SpecialIds"
    encoded: "Encoded"
    data: "DataReport"
    #: per row: flagged by the scan (None: no scan)
    flagged: np.ndarray | None
    #: per row: all zeros
    zero_row: np.ndarray
    #: context length the examples must fit (None: unknown)
    context: int | None
    #: where ``context`` comes from
    context_from: str
    #: the model's chat template, or None
    template: str | None


def _tok(strings: Sequence[str], i: int) -> str:
    return strings[i] if 0 <= i < len(strings) else f"<id {i}>"


def _examples(enc: "Encoded", ids) -> list[int]:
    seen: list[int] = []
    for i in ids:
        for e in enc.where.get(int(i), []):
            if e not in seen:
                seen.append(e)
    return sorted(seen)[:5]


def find(f: Facts) -> list[Finding]:
    """Every finding for these facts, errors first."""
    model, sp, enc = f.model, f.specials, f.encoded
    n = model.n_rows
    strings = model.token_strings()
    cats = model.categories
    counts = enc.counts
    out: list[Finding] = []

    def add(code, severity, message, ids=(), count=0, examples=(), fix=""):
        ids = [int(i) for i in ids][:MAX_IDS]
        out.append(Finding(code=code, severity=severity, message=message, ids=ids,
                           tokens=[_tok(strings, i) for i in ids], count=int(count),
                           examples=[int(e) for e in examples][:5], fix=fix))

    # ids at or past the matrix: in the data, or declared
    beyond = np.flatnonzero(counts[n:]) + n if len(counts) > n else np.zeros(0, np.int64)
    declared_beyond = sorted({i for s in sp.sources.values() for ids in s.values() for i in ids if i >= n})
    if len(beyond) or declared_beyond:
        ids = [*beyond.tolist(), *[i for i in declared_beyond if i not in set(beyond.tolist())]]
        add("id-beyond-matrix", "error",
            f"{len(ids)} id(s) at or past the embedding's {n} rows ({int(counts[n:].sum()) if len(counts) > n else 0} "
            "occurrences in the data" + (f"; declared special ids {declared_beyond}" if declared_beyond else "") + ")",
            ids, int(counts[n:].sum()) if len(counts) > n else 0, _examples(enc, beyond),
            "resize the embedding (model.resize_token_embeddings(len(tokenizer))) or fix the declared ids")

    # special rows the trainer uses
    special_role_ids = {r: [i for i in sp.ids(r) if 0 <= i < n] for r in ("bos", "eos", "pad")}
    specials_all = sorted({i for ids in special_role_ids.values() for i in ids})
    zero = [i for i in specials_all if f.zero_row[i]]
    if zero:
        roles = ", ".join(f"{r.upper()} {i}" for r, ids in special_role_ids.items() for i in ids if i in zero)
        add("special-row-untrained", "error", f"special row(s) all zeros: {roles}", zero,
            int(counts[zero].sum()), _examples(enc, zero),
            "re-initialise them before training (--repair OUT), or set the special token to a trained row")
    if f.flagged is not None:
        weak = [i for i in specials_all if f.flagged[i] and i not in zero]
        if weak:
            roles = ", ".join(f"{r.upper()} {i}" for r, ids in special_role_ids.items() for i in ids if i in weak)
            add("special-row-untrained", "warning",
                f"special row(s) flagged as under-trained by the scan: {roles} (special rows often look "
                "untrained; --verify N prompts the model to settle it)", weak, int(counts[weak].sum()),
                _examples(enc, weak), "check with --verify; if confirmed, --repair OUT re-initialises them")

    # PAD = EOS
    eos = set(sp.ids("eos"))
    same = {src: ids for src, s in sp.sources.items() for ids in [sorted(set(s.get("pad", ())) & eos)] if ids}
    if same:
        where = "; ".join(f"{src}: pad {ids[0]} = eos" for src, ids in same.items())
        pid = sorted({i for ids in same.values() for i in ids})
        add("pad-is-eos", "error",
            f"PAD is the EOS ({where}): a collator that masks PAD in the labels never teaches the model to stop",
            pid, int(counts[[i for i in pid if i < len(counts)]].sum()), _examples(enc, pid),
            "set a distinct pad token (tokenizer.pad_token = an unused special token, not the EOS)")
    elif not sp.ids("pad") and eos:
        add("pad-is-eos", "warning",
            "no source declares a PAD token: trainers then pad with the EOS, and masking PAD masks every EOS",
            sorted(eos), 0, (), "set a distinct pad token before training")

    # double BOS
    bos_name = _tok(strings, sp.prefix[0]) if sp.prefix else ""
    if enc.double_bos["text"]:
        add("double-bos", "error",
            f"{len(enc.double_bos['text'])} plain text(s) start with {bos_name!r} and the tokenizer adds another",
            sp.prefix[:1], len(enc.double_bos["text"]), enc.double_bos["text"],
            "drop the BOS from the texts (the tokenizer adds it)")
    if enc.double_bos["chat"]:
        add("double-bos", "warning",
            f"{len(enc.double_bos['chat'])} rendered conversation(s) start with {bos_name!r} and the tokenizer "
            f"adds another ({sp.adds_from}): tokenizing the rendered text with special tokens gives two",
            sp.prefix[:1], len(enc.double_bos["chat"]), enc.double_bos["chat"],
            "tokenize with add_special_tokens=False (apply_chat_template(tokenize=True) does), or drop "
            "bos_token from the template")

    # added tokens in padding rows
    if sp.base_size is not None and f.flagged is not None:
        pad_rows = [i for i, _, _ in sp.added if sp.base_size <= i < n and (f.zero_row[i] or f.flagged[i])]
        used = [i for i in pad_rows if i < len(counts) and counts[i]]
        if pad_rows:
            add("added-in-padding", "error" if used else "warning",
                f"{len(pad_rows)} added token(s) past the base vocabulary ({sp.base_size}) sit in zero or "
                f"untrained rows; {len(used)} of them occur in the data", [*used, *[i for i in pad_rows if i not in used]],
                int(counts[used].sum()) if used else 0, _examples(enc, used),
                "initialise the new rows (--repair OUT, or extend with --apply) before training")
    else:
        pad_rows = []

    # flagged rows the data uses
    if f.flagged is not None:
        k = min(len(counts), n)
        used = np.flatnonzero((counts[:k] > 0) & (f.flagged[:k] | f.zero_row[:k]))
        skip = set(specials_all) | set(pad_rows)
        used = [int(i) for i in used if int(i) not in skip]
        used.sort(key=lambda i: -int(counts[i]))
        normal = [i for i in used if cats[i] != "special"]
        special = [i for i in used if cats[i] == "special"]
        if normal:
            add("untrained-used", "error",
                f"the data uses {len(normal)} row(s) flagged as under-trained (or zero), {int(counts[normal].sum())} "
                f"times (the most used in {int(enc.example_counts[normal].max())} examples): large, badly scaled "
                "gradients (NaN losses)", normal, int(counts[normal].sum()), _examples(enc, normal),
                "re-initialise them before training (--repair OUT)")
        if special:
            add("untrained-used", "warning",
                f"the data (or the template) uses {len(special)} special row(s) flagged as under-trained "
                "(special rows often look untrained; --verify N settles it)", special,
                int(counts[special].sum()), _examples(enc, special), "check with --verify; then --repair OUT")

    # over-long examples
    if f.context and enc.lengths:
        lengths = np.asarray(enc.lengths)
        over = np.flatnonzero(lengths > f.context)
        if len(over):
            add("exceeds-context", "warning",
                f"{len(over)} of {len(lengths)} examples ({len(over) / len(lengths):.1%}) are longer than the "
                f"context of {f.context} tokens ({f.context_from}; longest {int(lengths.max())}): they will be "
                "truncated", (), len(over), [enc.indices[i] for i in over[:5]],
                "split or drop them, or raise the trainer's max_length within the model's context")

    # unknown and byte-fallback tokens
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

    # the template
    if enc.untemplated and f.template is None:
        add("no-chat-template", "error",
            f"{len(enc.untemplated)} conversation(s) but {model.name} ships no chat template: the trainer "
            "cannot render them", (), len(enc.untemplated), enc.untemplated[:5],
            "set tokenizer.chat_template (the instruct model's, or ChatML) or pass plain-text records")
    elif enc.untemplated:
        add("render-refused", "error", enc.template, (), len(enc.untemplated), enc.untemplated[:5],
            "use a chat template that renders within the bounds (embscope/models/chat_template.py)")
    if enc.render_failed:
        total = sum(enc.render_failed.values())
        msg, _ = enc.render_failed.most_common(1)[0]
        exs = sorted(e for v in enc.render_failed_examples.values() for e in v)[:5]
        add("render-failed", "error", f"the chat template fails on {total} conversation(s): {msg}", (), total,
            exs, "fix those conversations (role order, content types) or the template")

    # what the readers could not read
    bad = sum(f.data.rejected.values()) + sum(f.data.issues.totals.values())
    if bad:
        reasons = [*f.data.rejected.most_common(2), *f.data.issues.totals.most_common(1)]
        text = "; ".join(f"{c} {r}" for r, c in reasons)
        exs = sorted(e for v in f.data.rejected_examples.values() for e in v)[:5]
        add("unreadable-records", "warning", f"{bad} record(s) or line(s) not read: {text}", (), bad, exs,
            "fix the records, or force a format with --format")

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
        "examples": pl.Series([x.examples for x in findings], dtype=pl.List(pl.Int64)),
        "fix": [x.fix for x in findings]}, schema_overrides={"code": pl.Utf8, "severity": pl.Utf8,
                                                             "message": pl.Utf8, "fix": pl.Utf8})


def worst(findings: Sequence[Finding]) -> str | None:
    """The highest severity among ``findings`` (None when there are none)."""
    return max((x.severity for x in findings), key=severity_rank, default=None)


def as_json(findings: Sequence[Finding]) -> list[dict[str, Any]]:
    """``[{"code", "severity", "ids", "tokens", "count", "examples", "fix", "message"}, …]``."""
    return [x.to_dict() for x in findings]
