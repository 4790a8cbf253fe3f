"""The bottom line of a run: one short verdict per section, with its number and the next command.

:func:`bottom_line` reads the section records of a run (the ones ``summary.json`` holds) and says,
per section, what a person needs before anything else: how many rows are really under-trained and
whether their data touches them, which language pays most, what the extension saves and with which
initialisation, whether the model is ready to fine-tune on this data, what training changed. It
computes nothing new: every number is a field of a section record, named in :class:`Verdict`'s
``source``. The terminal's last lines, ``summary.json`` (``bottom_line``) and the report's first
screen all show this one record.

>>> v = Verdict(section="languages", level="note", text="Burmese pays 21.5× English", value=21.5,
...             source="languages.costs[0].parity")
>>> v.line()
'Burmese pays 21.5× English'
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from embscope.readiness.record import ROW_CODES
from embscope.records import Record

#: how a verdict reads, best first: ``ok`` nothing to do, ``note`` worth knowing, ``act`` something
#: to fix before (or after) training
LEVELS = ("ok", "note", "act")


@dataclass
class Verdict(Record):
    """One section's bottom line."""

    #: the section it sums up (tokens, languages, extension, apply, readiness, repair, diff, context)
    section: str
    #: ``ok`` (nothing to do), ``note`` (worth knowing) or ``act`` (fix it: the run's own findings
    #: say what breaks)
    level: str
    #: the verdict, one short sentence with its number
    text: str
    #: the number it turns on (rows, ×, a share); null when it has none
    value: float | None = None
    #: the record field ``value`` comes from (``tokens.geometry.flagged.verified``)
    source: str | None = None
    #: the next command to run (a shell line; CAPITALS are yours to fill: YOUR_DATA, OUT); null when
    #: there is nothing to run
    next: str | None = None

    def line(self) -> str:
        """``text → next`` as the terminal prints it."""
        return self.text + (f" → {self.next}" if self.next else "")


@dataclass
class BottomLine(Record):
    """The run's verdicts, in the report's order (the command's own section first)."""

    #: one per section that ran
    verdicts: list[Verdict] = field(default_factory=list)

    @property
    def level(self) -> str:
        """The worst level of its verdicts (``ok`` when there are none)."""
        return max((v.level for v in self.verdicts), key=LEVELS.index, default="ok")


@dataclass
class RunFacts:
    """What the run was given, for the next commands (not written: the summary's ``inputs`` and
    ``parameters`` hold it)."""

    #: the command (audit, scan, check, diff, extend, fertility, compare, run)
    command: str
    #: the model spec (None for tokenizer-only runs)
    model: str | None = None
    #: ``--corpus`` (the user's own text)
    corpora: list[str] = field(default_factory=list)
    #: ``--data`` (training data)
    data: list[str] = field(default_factory=list)
    #: the RunOptions of the run
    options: Any = None


def _q(arg: Any) -> str:
    return shlex.quote(str(arg))


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def tokens_verdict(geo, facts: RunFacts, ft=None) -> Verdict | None:
    """Under-trained rows: how many (verified by prompting where it ran, else flagged by the
    indicators), and whether the user's corpus, the chat template or the training data (``ft``, the
    check's record: its ``untrained-used`` rows) uses them."""
    if geo is None:
        return None
    f, model = geo.flagged, _q(facts.model)
    vf = geo.verification
    if vf is not None and vf.n_checked:
        n, src = f.verified, "tokens.geometry.flagged.verified"
        text = f"{_plural(n, 'row')} verified under-trained by prompting"
        # rows prompting alone flagged (the indicators did not): scan without prompting counts the rest
        alone = max(0, f.normal - f.by_indicators) if f.by_indicators else 0
        rest = [f"{f.total - alone:,} by the indicators, {alone:,} by prompting alone"] if alone else []
        rest += [f"{f.cleared:,} cleared as trained"] if f.cleared else []
        rest += [f"{f.candidates:,} not checked"] if f.candidates else []
        text += f" (of {f.total:,} flagged: {', '.join(rest)})" if rest else ""
    else:
        n, src = f.total, "tokens.geometry.flagged.total"
        split = ", ".join(f"{k:,} {c}" for c, k in sorted(f.by_category.items(), key=lambda kv: kv[0] != "normal") if k)
        text = f"{_plural(n, 'row')} flagged as under-trained by the indicators" + (f" ({split})" if split else "")
        if f.cleared:
            text += f", of which prompting cleared {f.cleared:,} (trained)"
    level, nxt, used, where = ("note" if n else "ok"), None, None, ""
    if ft is not None:  # the check's findings about flagged (or zero) rows the data uses
        used = len({i for x in ft.findings if x.code in ROW_CODES for i in x.ids})
        where = "your training data"
    elif geo.usage is not None:
        used = geo.usage.flagged_used
        where = "your corpus" + (" or the chat template" if geo.usage.template == "rendered" else "")
    them = f"the {f.total - f.cleared:,} not cleared" if f.cleared else "them"
    if used:
        text += f"; {used:,} of {them} {'is' if used == 1 else 'are'} in {where}"
        level = "act"
        if not (facts.options is not None and facts.options.repair.repair_to):  # else the run wrote the repaired model
            nxt = (f"embscope check --model {model} --data {' '.join(map(_q, facts.data))} --repair OUT" if ft is not None
                   else f"embscope scan --model {model} --corpus {' '.join(map(_q, facts.corpora))} --repair OUT")
    elif used == 0 and n:
        text += f"; none of {them} is in {where}"
    elif n and facts.model and not facts.data and facts.command != "diff":
        nxt = f"embscope check --model {model} --data YOUR_DATA"
    return Verdict(section="tokens", level=level, text=text, value=n, source=src, next=nxt)


def languages_verdicts(langs, facts: RunFacts) -> list[Verdict]:
    """Per tokenizer on the multilingual corpus: its costliest language against the reference."""
    if langs is None:
        return []
    out = []
    several = len({c.tokenizer for c in langs.costs}) > 1
    levels = [m.bootstrap_level for m in langs.corpora.values() if getattr(m, "bootstrap_level", None)]
    pct = f"{100 * levels[0]:g} %" if levels else "95 %"
    for c in langs.costs:
        if c.languages < 1:
            continue
        who = f"{c.name} ({c.language})" if c.name else c.language
        ci = (f" ({pct} interval {c.parity_lo:.1f}–{c.parity_hi:.1f})"
              if getattr(c, "parity_lo", None) is not None and getattr(c, "parity_hi", None) is not None else "")
        gini = (f"; fairness Gini {c.gini:.3f} ({c.gini_lo:.3f}–{c.gini_hi:.3f})"
                if getattr(c, "gini", None) is not None and c.gini_lo is not None and c.gini_hi is not None else "")
        text = (f"{who} pays {c.parity:.1f}×{ci} {c.reference_name or langs.reference} for the same text"
                + (f" with {c.tokenizer}" if several else "")
                + f"; {c.double:,} of {c.languages:,} other languages pay double or more" + gini)
        out.append(Verdict(section="languages", level="note" if c.parity >= 2 else "ok", text=text,
                           value=c.parity, source="languages.costs[].parity",
                           next=f"embscope extend --model {_q(facts.model)} --corpus YOUR_{c.language.upper()}_TEXT"
                           if facts.model and c.parity >= 2 else None))
    for p in getattr(langs, "comparisons", None) or []:
        n = p.a_cheaper + p.b_cheaper + p.not_distinguishable
        if not n:
            continue
        median = f"; median ratio {p.tokenizer_b}/{p.tokenizer_a} {p.median_ratio:.2f}" if p.median_ratio is not None else ""
        text = (f"{p.tokenizer_b} is cheaper than {p.tokenizer_a} on {p.b_cheaper:,} of {n:,} languages, "
                f"{p.tokenizer_a} on {p.a_cheaper:,}; {p.not_distinguishable:,} not distinguishable "
                f"({pct} paired intervals){median}")
        out.append(Verdict(section="languages", level="ok", text=text, value=p.b_cheaper,
                           source="languages.comparisons[].b_cheaper"))
    return out


def context_verdict(ctx, facts: RunFacts) -> Verdict | None:
    """The context a model is built for and what its KV cache costs there."""
    if ctx is None or not ctx.max_context:
        return None
    n = ctx.max_context
    trained = f"trained at {ctx.trained_context:,}" if ctx.trained_context else "the trained context is not stated"
    text = f"context {n:,} tokens ({trained}"
    if ctx.extension_ratio:
        text += f", {ctx.extension_ratio:g}× extension: {ctx.extension_band}"
    text += ")"
    if ctx.kv_bytes_per_token:
        text += f"; KV cache {ctx.kv_bytes_per_token * n / 2**20:,.0f} MiB per sequence at {n:,} (bf16)"
    risky = ctx.extension_band not in ("none", "up to 2x", "unknown") and not ctx.extension_declared
    return Verdict(section="context", level="note" if risky else "ok", text=text, value=n, source="context.max_context",
                   next=f"embscope rope --model {_q(facts.model)}" if risky and facts.model else None)


#: an extension saving less than this share of the corpus's tokens is not worth its new rows: the
#: bottom line never marks it a success
MIN_SAVED = 0.01


def extension_verdict(ext, facts: RunFacts, applied=None) -> Verdict | None:
    """What the extension would save, with which initialisation: the one ``applied`` (the apply
    record) wrote, else the recommended one, and the strategies ``auto`` could not try here. Under
    :data:`MIN_SAVED` it is said to be not worth it (a note, never a ✓, and no command to apply
    it). The next command writes what ``extend`` itself would: ``--apply-init auto`` (it tries every
    strategy under its own budgets), or the one strategy the run was asked to diagnose."""
    if ext is None:
        return None
    terms = f"{ext.top_n:,} new terms" + (f" ({ext.tokens_added:,} tokens with their merge chains)"
                                         if ext.tokens_added != ext.top_n else "")
    if getattr(ext, "method", "terms") == "merges":
        terms = f"{ext.tokens_added:,} merges learned from the corpus"
    text = f"{terms} save {100 * ext.saved_fraction:.1f} % of the tokens of {ext.corpus}"
    worth = ext.saved_fraction >= MIN_SAVED
    if not worth:
        text += f": under {100 * MIN_SAVED:g} %, not worth new rows"
        split = getattr(ext, "words_split_share", None)
        if split:
            text += f" ({100 * split:.0f} % of its words are cut by the pre-tokenizer, which no merge crosses)"
    elif getattr(applied, "init", None):
        text += f", initialised with {applied.init}"
        if ext.recommended and applied.init != ext.recommended:
            text += f" (asked for; the recommended one is {ext.recommended})"
    elif ext.recommended:
        text += f", initialised with {ext.recommended}"
    untried = getattr(ext, "skipped_strategies", None) or {}
    if worth and untried and applied is None:
        text += "; not tried here: " + "; ".join(f"{name} ({why})" for name, why in untried.items())
    nxt = None
    if worth and applied is None and facts.model:
        size = (f"--method merges --rows {ext.rows}" if getattr(ext, "method", "terms") == "merges"
                else f"--top {ext.top_n}")
        ext_opts = facts.options.extension if facts.options is not None else None
        asked = list(ext_opts.init if ext_opts is not None else ["auto"])
        init = asked[0] if len(asked) == 1 and asked[0] != "auto" else "auto"
        lang = ext_opts.target_lang if ext_opts is not None else None  # auto picks on the target language
        nxt = (f"embscope extend --model {_q(facts.model)} --corpus {_q(ext.corpus)} {size} "
               f"--apply OUT --apply-init {_q(init)}" + (f" --lang {_q(lang)}" if lang else ""))
    return Verdict(section="extension", level="note", text=text,
                   value=round(100 * ext.saved_fraction, 2), source="extension.saved_fraction", next=nxt)


def apply_verdict(ap, facts: RunFacts, ext=None) -> Verdict | None:
    """The extended model written; a note, not a ✓, when its extension (``ext``) saves under
    :data:`MIN_SAVED` of the corpus's tokens."""
    if ap is None:
        return None
    small = ext is not None and ext.saved_fraction < MIN_SAVED
    text = f"wrote {_plural(ap.n_added, 'new token')} ({ap.init}) to {ap.folder}"
    if small:
        text += f", which save only {100 * ext.saved_fraction:.1f} % of the corpus's tokens"
    return Verdict(section="apply", level="note" if small else "ok", text=text, value=ap.n_added,
                   source="apply.n_added",
                   next=f"fine-tune {_q(ap.folder)}, then: embscope diff {_q(ap.folder)} TUNED --data YOUR_DATA")


def readiness_verdict(ft, facts: RunFacts) -> Verdict | None:
    """Ready to fine-tune with this trainer: yes, or no and the errors that say why."""
    if ft is None:
        return None
    errors = [x for x in ft.findings if x.severity == "error"]
    warnings = [x for x in ft.findings if x.severity == "warning"]
    trainer = ft.trainer.name if ft.trainer is not None else "the trainer"
    data = " ".join(map(_q, facts.data)) or "YOUR_DATA"
    if errors:
        codes = ", ".join(dict.fromkeys(x.code for x in errors))
        text = f"ready to fine-tune with {trainer}: no, {_plural(len(errors), 'error')} ({codes})"
        repair = any(x.code in ROW_CODES for x in errors) and not (facts.options and facts.options.repair.repair_to)
        nxt = (f"embscope check --model {_q(facts.model)} --data {data} --repair OUT" if repair
               else f"fix: {errors[0].fix}")
        return Verdict(section="readiness", level="act", text=text, value=len(errors), source="readiness.findings",
                       next=nxt)
    text = f"ready to fine-tune with {trainer}: yes"
    if warnings:
        text += f", {_plural(len(warnings), 'warning')} ({', '.join(dict.fromkeys(x.code for x in warnings))})"
    return Verdict(section="readiness", level="note" if warnings else "ok", text=text, value=0,
                   source="readiness.findings",
                   next=f"train, then: embscope diff {_q(facts.model)} TUNED --data {data}")


def repair_verdict(rp, facts: RunFacts) -> Verdict | None:
    if rp is None:
        return None
    return Verdict(section="repair", level="ok", text=f"re-initialised {_plural(rp.n_repaired, 'row')} ({rp.init}) "
                   f"in {rp.folder}", value=rp.n_repaired, source="repair.n_repaired",
                   next=f"fine-tune {_q(rp.folder)} instead of {_q(facts.model)}")


def diff_verdict(d, facts: RunFacts) -> Verdict | None:
    """What training changed, and whether what it should have trained moved."""
    if d is None:
        return None
    m = d.matrices.get("input")
    parts = []
    if d.data is not None:
        parts.append(f"{d.data.used_moved:,} of the {d.data.used_rows:,} rows the data uses moved")
    elif m is not None:
        parts.append(f"{m.moved:,} of {m.rows:,} rows moved")
    if d.new_rows and m is not None:
        parts.append(f"{m.new_moved:,} of {d.new_rows:,} new rows learnt")
    errors = [x for x in d.findings if x.severity == "error"]
    warnings = [x for x in d.findings if x.severity == "warning"]
    if errors:
        level, verdict = "act", f"{_plural(len(errors), 'error')} ({', '.join(dict.fromkeys(x.code for x in errors))})"
        nxt = f"fix: {errors[0].fix}"
    else:
        level, nxt = ("note" if warnings else "ok"), None
        verdict = (f"{_plural(len(warnings), 'warning')} ({', '.join(dict.fromkeys(x.code for x in warnings))})"
                   if warnings else "no findings")
    value = d.data.used_moved if d.data is not None else (m.moved if m is not None else None)
    return Verdict(section="diff", level=level, text="; ".join(parts + [verdict]), value=value,
                   source="diff.data.used_moved" if d.data is not None else "diff.matrices.input.moved", next=nxt)


#: which section leads each command's report (and its bottom line)
LEADS = {"check": "readiness", "diff": "diff", "extend": "extension", "scan": "tokens", "fertility": "languages",
         "compare": "languages"}


def bottom_line(sections, facts: RunFacts) -> BottomLine:
    """The verdicts of ``sections`` (:class:`embscope.summary.Sections`), the command's own first."""
    out = [tokens_verdict(sections.tokens.geometry if sections.tokens is not None else None, facts, sections.readiness),
           *languages_verdicts(sections.languages, facts),
           extension_verdict(sections.extension, facts, applied=sections.apply),
           apply_verdict(sections.apply, facts, sections.extension), readiness_verdict(sections.readiness, facts),
           repair_verdict(sections.repair, facts), diff_verdict(sections.diff, facts),
           context_verdict(sections.context, facts)]
    verdicts = [v for v in out if v is not None]
    lead = LEADS.get(facts.command)
    verdicts.sort(key=lambda v: v.section != lead)  # stable: the rest keep the report's order
    return BottomLine(verdicts=verdicts)
