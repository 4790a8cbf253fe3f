"""What each strategy's rows do to the model, measured in stages so the costly figure is measured
where it decides something.

1. **General text** (UDHR English, shipped in ``corpora/udhr``): bits per byte of the original and
   of every strategy, and the disturbance (next-token KL, new-token mass) on its texts without a
   new term: one forward pass of the original model serves every strategy (:mod:`.bpb`).
2. **Fidelity** of every strategy on the held-out corpus contexts (:mod:`.fidelity`).
3. **Held-out corpus text, screening**: bits per byte on an evenly spread part of the held-out
   sample (:attr:`Plan.screen_bytes`) for every strategy within the disturbance bound; with the
   figures above this gives each its score (:mod:`.choose`).
4. **Confirmation**: the :attr:`Plan.confirm` best by that score are measured on the whole
   held-out sample (:attr:`Plan.corpus_bytes`, the screening texts included), with standard
   errors; ``--init auto`` picks among them.

Texts are the forward passes' cost: the original model reads the whole sample once, each
strategy only the texts that hold a new token. Strategies over the disturbance bound (never
recommended) get no corpus bits per byte.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from embscope.records import Record

if TYPE_CHECKING:  # pragma: no cover
    from embscope.extension.bpb import BitsPerByte
    from embscope.progress import Steps

#: held-out corpus bytes for bits per byte in ``extend`` (≥ 20 KB: the SE of a change is then
#: ~0.005 bits per byte on ICD lines)
CORPUS_BYTES = 24 * 1024
#: the screening part of it, measured for every strategy
SCREEN_BYTES = 4 * 1024
#: strategies measured on the whole sample
CONFIRM = 3
#: ``audit``'s smaller samples (its extension step stays within its earlier cost): stated in the
#: summary's ``bits_per_byte_original.bytes`` / ``general_bits_per_byte_original.bytes`` and in the
#: report; and no fidelity for strategies over the disturbance bound (never recommended)
AUDIT_CORPUS_BYTES = 4 * 1024
AUDIT_SCREEN_BYTES = 1536
AUDIT_CONFIRM = 2
AUDIT_GENERAL_BYTES = 5 * 1024
#: what the general text is, for the summary
GENERAL_SOURCE = "UDHR English (corpora/udhr/eng.jsonl, 31 units)"


@dataclass
class ScorePlan(Record):
    """How the held-out corpus text was measured: screened, then the best confirmed on more."""

    #: held-out corpus bytes behind the scores
    corpus_bytes: int
    #: bytes of the first (screening) sample
    screen_bytes: int
    #: strategies measured on the whole sample
    confirmed: list[str]
    #: strategies screened (those with bounded disturbance)
    screened: list[str]
    #: strategies left unscored (disturbance over the bound)
    not_scored: list[str]


@dataclass
class Measured:
    """What :func:`measure` found beside the per-strategy figures (fields of the extension record)."""

    #: precision of the forward passes (:func:`~embscope.extension.fidelity.compute_precision`)
    precision: str
    #: the original model on general text
    general_bits_per_byte_original: "BitsPerByte"
    #: what the disturbance was measured on
    kl_note: str
    #: the original model on the held-out corpus sample (None without held-out text)
    bits_per_byte_original: "BitsPerByte | None" = None
    #: new tokens per byte of that sample
    new_tokens_per_byte: float | None = None
    #: the measuring stages
    score_plan: ScorePlan | None = None


@dataclass(frozen=True)
class Plan:
    """How much text each stage reads."""

    #: held-out corpus bytes of the confirmation stage (and of the original's figure)
    corpus_bytes: int = CORPUS_BYTES
    #: bytes of the screening stage (at most ``corpus_bytes``)
    screen_bytes: int = SCREEN_BYTES
    #: strategies confirmed on the whole sample
    confirm: int = CONFIRM
    #: bytes of general text (spread over its units; None: all of it)
    general_bytes: int | None = None
    #: fidelity for strategies over the disturbance bound too (they are never recommended)
    fidelity_all: bool = True


AUDIT_PLAN = Plan(AUDIT_CORPUS_BYTES, AUDIT_SCREEN_BYTES, AUDIT_CONFIRM, AUDIT_GENERAL_BYTES, False)


def plan_for(corpus_bytes: int) -> Plan:
    """The plan for a held-out sample of ``corpus_bytes``: ``audit``'s for its sample size, else
    the default screening and confirmation around it.

    >>> plan_for(4096) == AUDIT_PLAN, plan_for(30000).screen_bytes
    (True, 4096)
    """
    if corpus_bytes == AUDIT_CORPUS_BYTES:
        return AUDIT_PLAN
    return Plan(corpus_bytes, min(SCREEN_BYTES, corpus_bytes), CONFIRM)


def general_texts() -> tuple[list[str], str]:
    """``(texts, source)``: UDHR English as shipped, else the short general English paragraph of
    :mod:`.diagnostics` (an install without the corpora)."""
    import re

    from embscope.errors import CorpusError
    from embscope.assets import corpora_root

    path = corpora_root() / "udhr" / "eng.jsonl"
    if path.is_file():
        from embscope.corpus.stream import read_texts

        try:
            return read_texts(path), GENERAL_SOURCE
        except CorpusError:
            pass
    from embscope.extension.diagnostics import HELD_OUT_TEXT

    return re.split(r"(?<=[.!?])\s+", HELD_OUT_TEXT.strip()), "a general English paragraph (diagnostics.HELD_OUT_TEXT)"


def _update(figures: dict[str, dict], found: dict[str, dict], prefix: str = "") -> None:
    for name, d in found.items():
        figures.setdefault(name, {}).update({prefix + k: v for k, v in d.items()})


def measure(lm, tok, ext_tok, new_ids: Sequence[int], rows: dict[str, dict], contexts, *, steps: "Steps",
            plan: Plan = Plan(), general: tuple[list[str], str] | None = None) -> tuple[dict[str, dict], "Measured"]:
    """``(figures per strategy, what the original model measured)`` of the stages in the module docstring.

    ``rows``: strategy → ``{"embed", "output"?}``; ``contexts``: :class:`~.contexts.Contexts`
    (held-out contexts and the held-out texts, at least ``plan.corpus_bytes`` of them).
    """
    from embscope.extension.fidelity import forward_precision

    with forward_precision():  # one precision scope for every stage (fidelity.forward_precision)
        return _measure(lm, tok, ext_tok, new_ids, rows, contexts, steps=steps, plan=plan, general=general)


def _stage(steps: "Steps", lm, precision: str, name: str, what: str):
    """One measuring stage: its step, each forward pass on the thread count that runs fastest now
    (:func:`embscope.models.fullmodel.fastest_threads`)."""
    import contextlib

    from embscope.models.fullmodel import fastest_threads

    stack = contextlib.ExitStack()
    stack.enter_context(steps.step(name, what))
    stack.enter_context(fastest_threads(int(lm.config.hidden_size), precision, lm))
    return stack


def _measure(lm, tok, ext_tok, new_ids, rows, contexts, *, steps, plan, general):
    from embscope.extension.bpb import BitsPerByte, summarize, text_losses
    from embscope.extension.choose import bounded, score
    from embscope.extension.contexts import spread, start_ids
    from embscope.extension.fidelity import compute_precision, fidelity

    names = list(rows)
    start = start_ids(tok, lm.config.bos_token_id)
    figures: dict[str, dict] = {n: {} for n in names}
    precision = compute_precision()
    texts, source = general if general is not None else general_texts()
    if plan.general_bytes is not None:
        texts = spread(texts, plan.general_bytes)
    with _stage(steps, lm, precision, "general text", f"{len(texts)} texts of {source}, {len(names)} strategies"):
        g_base, g = summarize(text_losses(lm, texts, tok, ext_tok, start, new_ids, rows), disturbance=True)
    for name, d in g.items():
        figures[name].update({k: d[k] for k in ("kl", "kl_max", "new_token_mass", "new_token_mass_max",
                                                "disturbance_positions") if k in d})
        figures[name].update({f"general_{k}": d[k] for k in ("bits_per_byte", "bits_per_byte_change",
                                                            "bits_per_byte_change_se")})
    out = Measured(precision=precision, general_bits_per_byte_original=BitsPerByte(**g_base, source=source),
                   kl_note=f"{source}: {g_base['texts'] - g_base['texts_changed']} texts without a new token, "
                           f"{next(iter(g.values()), {}).get('disturbance_positions', 0)} positions")
    ok = [n for n in names if bounded(figures[n])]
    if contexts is not None and contexts.held:
        which = names if plan.fidelity_all else ok
        with _stage(steps, lm, precision, "fidelity", f"{len(contexts.held)} held-out contexts, {len(which)} strategies"):
            _update(figures, fidelity(lm, contexts.held, {n: rows[n]["embed"] for n in which}, new_ids))
    held = list(contexts.texts) if contexts is not None else []
    held = spread(held, plan.corpus_bytes)
    if not held:
        return figures, out
    screen = spread(held, min(plan.screen_bytes, plan.corpus_bytes))
    with _stage(steps, lm, precision, "corpus text", f"{len(screen)} held-out texts, {len(ok)} strategies"):
        first = text_losses(lm, screen, tok, ext_tok, start, new_ids, {n: rows[n] for n in ok})
    per_byte = float(first.new_tokens.sum()) / max(int(first.bytes.sum()), 1)
    base, s = summarize(first)
    for name, d in s.items():
        figures[name].update(d, score_bytes=base["bytes"])
        figures[name].update(score(figures[name], per_byte) or {})
    ranked = sorted((n for n in ok if figures[n].get("score") is not None), key=lambda n: figures[n]["score"])
    top = ranked[:plan.confirm]
    rest = [t for t in held if t not in set(screen)]
    if rest and top:
        with _stage(steps, lm, precision, "corpus text, confirmed",
                    f"{len(rest)} more held-out texts, {len(top)} strategies"):
            more = text_losses(lm, rest, tok, ext_tok, start, new_ids, {n: rows[n] for n in top})
        whole = first.subset(top).join(more)
        per_byte = float(whole.new_tokens.sum()) / max(int(whole.bytes.sum()), 1)
        base, s = summarize(whole)
        for name, d in s.items():
            figures[name].update(d, score_bytes=base["bytes"])
    for name in ok:  # every score with the same ρ: the largest sample's
        figures[name].update(score(figures[name], per_byte) or {})
    out.bits_per_byte_original = BitsPerByte(**base, source="held-out corpus text (1 text in 4, never fitted on)")
    out.new_tokens_per_byte = round(per_byte, 5)
    out.score_plan = ScorePlan(corpus_bytes=base["bytes"], screen_bytes=int(first.bytes.sum()), confirmed=top,
                               screened=ok, not_scored=[n for n in names if n not in ok])
    return figures, out
