"""Check flagged rows against the model itself: can it repeat the token when asked to?

Magikarp's verification (Land & Bartolo 2024, §3.3): a token the model was trained on is easy to
repeat — put it in a prompt that repeats it several times and ask for one more copy, and the model
predicts it with high probability. An under-trained token cannot be predicted even there. For each
token and prompt the model greedily generates :data:`GEN_STEPS` tokens; ``max_prob`` is the largest
probability it gives the token over those steps and over all prompts. A token is *verified
under-trained* when ``max_prob < MAX_PROB_CUT`` (0.01, the cut of Magikarp's reports).

Prompts (Magikarp-style, repetition with a placeholder): each is built once with a placeholder
token (a long alphabetic token that encodes as itself, also when doubled), encoded, and the
placeholder's ids replaced by the candidate's id — so every candidate gets a prompt of the same
length, which batches without padding:

- ``repeat``: a line saying the text below repeats one string, then the token 16 times;
- ``echo``: a device that echoes its input, 3 shots of ``Input: «T»`` / ``Output: «T»``;
- ``spell``: 2 shots of ``Q: Say 'T' once more.`` / ``A: 'T'``.

Controls: as many random *trained* rows (normal, unflagged, not in the reference set) are checked
the same way; ``controls_failed`` counts those that would be "verified" too — the false-alarm rate
of the check itself. ``precision = n_verified_undertrained / n_checked`` among the flagged rows.

Only for causal LMs whose whole weights load here (:func:`embscope.models.fullmodel.why_not_loadable`);
others get a note. Runs on the GPU when there is one.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from embscope.geometry.records import SAMPLES, SpecialRow, SpecialsInContext, VerificationRecord
from embscope.geometry.token_probs import (CONTEXT_TOKENS, GEN_STEPS, MAX_PROB_CUT, RECHECK_FACTOR,
                                           in_context_probs, prompt_probs, row_tokens)

if TYPE_CHECKING:  # pragma: no cover
    from embscope.geometry.indicators import Indicators
    from embscope.models.model import LoadedModel

#: prompts per token row, as (name, text with {t} for the token)
PROMPTS: tuple[tuple[str, str], ...] = (
    ("repeat", "The text below is one string repeated again and again:\n" + "{t}" * 16),
    ("echo", "This device echoes its input unchanged, as these identical trials show.\n"
             + "Input: «{t}»\nOutput: «{t}»\n" * 3 + "Input: «{t}»\nOutput: «"),
    ("spell", "Each answer repeats the quoted text exactly.\n" + "Q: Say '{t}' once more.\nA: '{t}'\n" * 2
              + "Q: Say '{t}' once more.\nA: '"),
)
#: the most flagged rows one run may check (``--verify``): 0.1–9 s per row on 2 busy CPU cores for
#: SmolLM2-135M / Gemma-3-270M (:data:`SECONDS_PER_ROW_CPU`), so the cap is 3 min–5 hours there
MAX_VERIFY = 2000
#: seconds per checked row on this project's shared 2-core CPU machine, for the cap's message.
#: SmolLM2-135M with shared prefixes on the thread count :func:`~embscope.models.fullmodel.fastest_threads`
#: picks (1 there, under load ~3.5): 0.08 CPU-s for a trained row (it leaves after the first
#: step), 0.52 for an under-trained one (every prompt and step); 0.11 and 0.58 with whole prompts.
#: The upper end is the old worst case, kept because Gemma-3-270M was not measured again: wall
#: 8.6 s for SmolLM2-135M at load 13 with 2 contended threads, 3.8 s for Gemma-3-270M at load 15
#: (docs/undertrained.md)
SECONDS_PER_ROW_CPU = (0.1, 9.0)
#: ``audit`` without ``--verify``: this many random flagged rows, when the whole weights fit ...
AUTO_VERIFY = 50
#: ... within this much work, in 10¹² multiply-adds (:func:`row_work`; SmolLM2-135M's 50 + 50 + 50
#: rows are at most 2.1, a 1.5B model's 24: the budget bounds a model it was not sized for)
AUTO_WORK = 30.0
#: trained controls checked at most (as many as the rows checked, up to this)
MAX_CONTROLS = 100


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """Wilson score interval for a binomial share ``k / n`` (95 % with ``z = 1.96``; Wilson 1927,
    "Probable inference, the law of succession, and statistical inference", JASA 22:209).

    ``centre = (p + z²/2n) / (1 + z²/n)``, ``half = z·√(p(1−p)/n + z²/4n²) / (1 + z²/n)``.
    Example: 45 of 100 → (0.356, 0.548); 100 of 100 → (0.963, 1.0).
    """
    import math

    if n <= 0:
        return None
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return round(max(0.0, c - h), 4), round(min(1.0, c + h), 4)


@dataclass
class Verification:
    """What the prompting found: its record (``summary.json`` ``geometry.verification``, fields
    documented on :class:`~embscope.geometry.records.VerificationRecord`) and the per-row
    probabilities the columns and the verdict lists are built from."""

    #: the summary's record
    record: VerificationRecord
    #: row id -> max_prob (candidates, controls and specials)
    max_prob: dict[int, float] = field(default_factory=dict, repr=False)
    #: row ids of the controls
    control_ids: list[int] = field(default_factory=list, repr=False)

    @property
    def max_prob_cut(self) -> float:
        return self.record.max_prob_cut

    @property
    def checked(self) -> bool:
        """The prompting ran (a model that could not be loaded or prompted checked nothing)."""
        return self.record.n_checked is not None

    def column(self, n: int) -> list[float | None]:
        """``verify_max_prob`` per row (None where unchecked)."""
        col: list[float | None] = [None] * n
        for i, p in self.max_prob.items():
            col[i] = p
        return col

    def verified_ids(self) -> list[int]:
        """Rows prompting confirmed as under-trained (controls excluded)."""
        ctrl = set(self.control_ids)
        return sorted(i for i, p in self.max_prob.items() if p < self.max_prob_cut and i not in ctrl)


def placeholder_token(vocab, categories, limit: int = 20000) -> int | None:
    """A long, alphabetic, normal token whose text encodes to itself, also when written twice."""
    cands = []
    for i in range(min(len(vocab), len(categories))):
        if categories[i] != "normal":
            continue
        b = vocab.token_bytes(i)
        if not b or len(b) < 5:
            continue
        s = b.decode("utf-8", "replace").strip()
        if s.isascii() and s.isalpha() and b[:1] != b" " and len(set(s)) >= 5:
            cands.append((-len(set(s)), -len(s), i))
    for _, _, i in sorted(cands)[:limit]:
        text = vocab.token_bytes(i).decode("utf-8")
        if vocab.encode(text) == [i] and vocab.encode(text * 2) == [i, i]:
            return i
    return None


def build_prompts(model: "LoadedModel", holder: int) -> list[tuple[str, list[int], np.ndarray]]:
    """``(name, ids, positions of the placeholder)`` per prompt; BOS first when the model uses one."""
    text = model.vocab.token_bytes(holder).decode("utf-8")
    bos = model.config.get("bos_token_id")
    use_bos = isinstance(bos, int) and str(model.config.get("model_type", "")).startswith("gemma")
    out = []
    for name, tmpl in PROMPTS:
        ids = model.vocab.encode(tmpl.format(t=text))
        if use_bos:
            ids = [bos] + ids
        pos = np.flatnonzero(np.asarray(ids) == holder)
        if len(pos) == tmpl.count("{t}"):  # the placeholder survived tokenization in every slot
            out.append((name, ids, pos))
    return out


#: corpus texts searched for special tokens to check in context
CONTEXT_TEXTS = 8


def context_texts(model: "LoadedModel", wanted: set[int], texts: Sequence[str] | None) -> tuple[list[list[int]], str]:
    """Token ids of the rendered chat template and of up to :data:`CONTEXT_TEXTS` corpus texts that
    contain a wanted id; and where they came from (``template``, ``template+data``, ``data``, ``none``)."""
    from embscope.geometry.usage import render_chat_template

    out: list[list[int]] = []
    src = []
    text, _ = render_chat_template(model)
    if text is not None:
        ids = model.vocab.encode(text)
        bos = model.config.get("bos_token_id")
        if isinstance(bos, int) and (not ids or ids[0] != bos) and str(model.config.get("model_type", "")).startswith("gemma"):
            ids = [bos] + ids
        out.append(ids)
        src.append("template")
    found = 0
    for t in texts or ():
        if found >= CONTEXT_TEXTS:
            break
        ids = model.vocab.encode(t)[:CONTEXT_TOKENS]
        if wanted & set(ids[1:]):
            out.append(ids)
            found += 1
    if found:
        src.append("data")
    return out, "+".join(src) or "none"


def family_rows(ind: "Indicators", categories, n: int) -> list[int]:
    """The ``n`` highest-scoring normal rows that an indicator reached but its gate stopped
    (reason ``family`` or ``drift``, not flagged): checked too, so that one the model cannot
    produce is found."""
    cats = np.asarray(categories)
    fam = [i for i, r in enumerate(ind.flag_reason) if r is not None and ("family" in r or "drift" in r)
           and cats[i] == "normal" and not ind.flagged[i]]
    score = np.asarray(ind.undertrained_score)
    return sorted(fam, key=lambda i: -float(score[i]))[:n]


def pick_rows(ind: "Indicators", categories, n: int, n_vocab: int, *, sample: str = "top",
              seed: int = 0) -> tuple[list[int], list[int], int]:
    """``(candidates, controls, pool)``: ``n`` flagged normal rows (not in the reference set) by
    ``sample`` — the highest scores, or a seeded uniform sample — and ``min(n, MAX_CONTROLS)``
    random trained rows (normal, unflagged, not a family row, not in the reference, inside the
    tokenizer)."""
    if sample not in SAMPLES:
        from embscope.errors import SpecError

        raise SpecError(f"--verify-sample must be one of {', '.join(SAMPLES)}, got {sample!r}")
    cats = np.asarray(categories)
    n_rows = len(cats)
    normal = cats == "normal"
    ref = np.zeros(n_rows, bool)
    ref[list(ind.reference.ids)] = True
    flagged = np.asarray(ind.flagged, bool)
    pool = np.flatnonzero(flagged & normal & ~ref)
    rng = np.random.default_rng(seed)
    if sample == "top":
        score = np.asarray(ind.undertrained_score)[pool]
        cands = [int(i) for i in pool[np.argsort(-score, kind="stable")][:n]]
    else:
        cands = sorted(int(i) for i in rng.choice(pool, size=min(n, len(pool)), replace=False))
    family = np.array([r is not None and ("family" in r or "drift" in r) for r in ind.flag_reason], bool)
    trained = np.flatnonzero(normal & ~flagged & ~family & ~ref & (np.arange(n_rows) < n_vocab))
    controls = sorted(int(i) for i in rng.choice(trained, size=min(n, MAX_CONTROLS, len(trained)), replace=False))
    return cands, controls, len(pool)


def row_work(lm, prompts) -> float:
    """10¹² multiply-adds one row's prompting costs at most: :func:`~.token_probs.row_tokens` ×
    the model's parameters (a forward pass multiplies each parameter once per token; the shared
    prefixes, the key/value reads and the float32 re-check of the rows near the cut are left out).
    A count of work, never of seconds: the same rows fit the budget on every machine and load."""
    params = sum(p.numel() for p in lm.parameters())  # tied weights once
    return row_tokens(prompts) * params / 1e12


def within_budget(groups, per_row: float, budget: float | None) -> list[list[int]]:
    """``groups`` (rows in order of priority: candidates, controls, family rows) cut where their
    work would pass ``budget`` (10¹² multiply-adds; None: no cut). Whole groups first: a row of a
    later group is taken only once every row before it fits.

    >>> within_budget([[1, 2, 3], [4, 5]], 1.0, 4.0)
    [[1, 2, 3], [4]]
    """
    if budget is None:
        return [list(g) for g in groups]
    room = int(budget // per_row) if per_row > 0 else sum(len(g) for g in groups)
    out = []
    for g in groups:
        out.append(list(g)[:max(room, 0)])
        room -= len(out[-1])
    return out


def verify_rows(model: "LoadedModel", ind: "Indicators", n: int, *, sample: str = "top", seed: int = 0,
                device: str | None = None, texts: Sequence[str] | None = None,
                work_budget: float | None = None) -> Verification:
    """Prompt-check ``n`` flagged normal rows (:func:`pick_rows`), the trained controls, the ``n``
    highest-scoring family rows (:func:`family_rows`), and — in context (:func:`in_context_probs`)
    — the special tokens the chat template or ``texts`` use.

    ``work_budget`` (10¹² multiply-adds, :func:`row_work`): the rows beyond it (candidates first,
    then controls, then family rows) stay unchecked and are left out of ``n_checked``; the record
    says so. It counts work, not seconds, so which rows are checked never depends on the load.
    """
    import time

    import torch

    from embscope.models.fullmodel import why_not_causal

    t0 = time.perf_counter()
    names = [p[0] for p in PROMPTS]
    base = {"sample": sample, "seed": seed, "prompts": names, "max_prob_cut": MAX_PROB_CUT,
            "work_budget": None if work_budget is None else float(work_budget)}
    if model.vocab is None:
        return Verification(VerificationRecord(**base, note=f"{model.name} ships no tokenizer: prompts cannot be "
                                                            "built"))
    reason = why_not_causal(model)
    if reason is not None:
        return Verification(VerificationRecord(**base, note=f"not verified: {reason}"))
    cands, controls, pool = pick_rows(ind, model.categories, n, len(model.vocab), sample=sample, seed=seed)
    families = family_rows(ind, model.categories, n)
    holder = placeholder_token(model.vocab, model.categories)
    prompts = build_prompts(model, holder) if holder is not None else []
    if not prompts:
        return Verification(VerificationRecord(**base, pool=pool, note="not verified: no placeholder token "
                                                "survives tokenization in the prompts"))
    lm, why = _load(model)
    if lm is None:
        return Verification(VerificationRecord(**base, pool=pool, note=f"not verified: {why}"))
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    per_row = row_work(lm, prompts)
    checked, ctrl, fam = within_budget((cands, controls, families), per_row, work_budget)
    probs, specials, run = _prompt(model, ind, lm, prompts, checked + ctrl + fam, dev, texts)
    ver = [probs[i] < MAX_PROB_CUT for i in checked]
    failed = [probs[i] < MAX_PROB_CUT for i in ctrl]
    stopped = len(checked) < len(cands) or len(ctrl) < len(controls) or len(fam) < len(families)
    sp_probs = {r.id: r.max_prob for r in specials.rows} if specials is not None else {}
    k = int(sum(ver))
    what = (f"all {pool:,} normal rows the indicators flag" if len(checked) >= pool else
            f"the highest-scoring of the {pool:,} normal rows the indicators flag" if sample == "top" else
            f"a seeded random sample of the {pool:,} normal rows the indicators flag")
    record = VerificationRecord(
        **{**base, "prompts": [p[0] for p in prompts]},
        n_checked=len(checked), n_verified_undertrained=k,
        precision=round(k / len(checked), 4) if checked else None,
        precision_ci95=list(wilson(k, len(checked)) or []) or None,
        pool=pool, controls_checked=len(ctrl), controls_failed=int(sum(failed)),
        device=dev, seconds=round(time.perf_counter() - t0, 2),
        seconds_per_row=round(run["prompt_seconds"] / max(1, len(checked) + len(ctrl) + len(fam)), 3),
        work=round(per_row * (len(checked) + len(ctrl) + len(fam)), 4), stopped_at_budget=stopped,
        specials=specials, forward_dtype=run["forward_dtype"], threads=run["threads"],
        rechecked_float32=run["rechecked_float32"],
        family_checked=len(fam), family_verified=int(sum(probs[i] < MAX_PROB_CUT for i in fam)),
        note=(f"{len(checked)} rows, {what}: max_prob < {MAX_PROB_CUT} over {len(prompts)} repetition prompts × "
              f"{GEN_STEPS} greedy steps counts as verified under-trained; controls are random trained rows"
              + (f"; stopped at the work budget of {work_budget:g}×10¹² multiply-adds" if stopped else "")))
    max_prob = {**{i: round(probs[i], 6) for i in checked + ctrl + fam}, **sp_probs}
    return Verification(record, max_prob=max_prob, control_ids=ctrl)


def verify_specials(model: "LoadedModel", ind: "Indicators", *, device: str | None = None,
                    texts: Sequence[str] | None = None) -> Verification:
    """Check only the special tokens the chat template (and ``texts``) use, in context
    (:func:`_check_specials`): what ``check`` and ``diff`` run before they warn about a special row,
    so that a row prompting clears is trained for them as for ``audit`` (no flagged normal row, no
    control is prompted: that is ``--verify N``). A model that cannot be loaded gets a note."""
    import time

    import torch

    from embscope.models.fullmodel import fastest_threads, why_not_causal

    t0 = time.perf_counter()
    base = {"sample": "top", "prompts": [], "max_prob_cut": MAX_PROB_CUT}
    reason = "ships no tokenizer" if model.vocab is None else why_not_causal(model)
    if reason is not None:
        return Verification(VerificationRecord(**base, note=f"special rows not verified: {reason}"))
    lm, why = _load(model)
    if lm is None:
        return Verification(VerificationRecord(**base, note=f"special rows not verified: {why}"))
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    lm.to(dev)
    try:
        with fastest_threads(int(lm.config.hidden_size), "float32", lm) if dev == "cpu" else nullcontext():
            specials, _ = _check_specials(model, ind, lm, None, dev, texts)
    finally:
        lm.to("cpu")
    sp_probs = {r.id: r.max_prob for r in specials.rows} if specials is not None else {}
    record = VerificationRecord(
        **base, n_checked=0, n_verified_undertrained=0, device=dev, seconds=round(time.perf_counter() - t0, 2),
        specials=specials, forward_dtype="float32",
        note=("only the special tokens the chat template" + (" and the data use" if texts else " uses") + " were "
              "checked, in context; --verify N also prompts N flagged rows"))
    return Verification(record, max_prob=sp_probs)


def _load(model: "LoadedModel"):
    """``(the whole causal LM, None)``, or ``(None, why)`` when its weights do not load (a note, not an error)."""
    from embscope.models.fullmodel import load_causal_lm

    try:
        return load_causal_lm(model), None
    except Exception as exc:  # noqa: BLE001 - weights that do not load are a note
        return None, f"the weights did not load ({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''})"


def _prompt(model: "LoadedModel", ind: "Indicators", lm, prompts, rows: list[int], dev: str, texts):
    """``(probs, specials, run)``: max_prob per row (candidates, controls and family rows in one
    stream of batches), the special tokens checked in context, and how it ran (``prompt_seconds``,
    ``forward_dtype``, ``threads``, ``rechecked_float32``). On a CPU the body runs in the precision
    and on the thread count measured fastest here (:mod:`embscope.machine`), the band around the
    cut re-checked in float32."""
    import time

    import torch

    from embscope.models.forward import fast_dtype, low_precision_copy
    from embscope.models.fullmodel import fastest_threads

    lm.to(dev)
    t1 = time.perf_counter()
    try:
        dtype = fast_dtype(lm) if dev == "cpu" else torch.float32
        body = str(dtype).replace("torch.", "")
        low = low_precision_copy(lm, dtype) if dtype != torch.float32 else None
        nets = [m for m in (lm, low) if m is not None]
        with fastest_threads(int(lm.config.hidden_size), body, *nets) if dev == "cpu" else nullcontext() as used:
            probs, rechecked = prompt_probs(lm, low, prompts, rows, dev)
            prompt_seconds = time.perf_counter() - t1
            specials, n_re = _check_specials(model, ind, lm, low, dev, texts)
        threads = max(used) if used else None
        del low
    finally:
        lm.to("cpu")
    return probs, specials, {"prompt_seconds": prompt_seconds, "forward_dtype": body, "threads": threads,
                             "rechecked_float32": rechecked + n_re}


def _check_specials(model: "LoadedModel", ind: "Indicators", lm, low, device: str,
                    texts: Sequence[str] | None) -> tuple[SpecialsInContext | None, int]:
    """The ``specials`` block of :class:`~embscope.geometry.records.VerificationRecord` and how many
    of them the float32 re-check decided: every special token the rendered chat template or the
    corpus uses, checked where it is used (flagged or not: a template token appears in every chat example, so its state matters
    either way). With ``low`` (the bf16-body copy) the values come from it, and the ids within a
    factor :data:`RECHECK_FACTOR` of the cut are measured again on ``lm`` (:func:`prompt_probs`)."""
    cats = model.categories
    special = {i for i, c in enumerate(cats) if c == "special"}
    if not special:
        return None, 0
    ids_list, source = context_texts(model, special, texts)
    used = special & {t for ids in ids_list for t in ids[1:]}
    if not used:
        return None, 0
    probs = in_context_probs(lm if low is None else low, ids_list, used, device)
    band = {i for i, p in probs.items() if MAX_PROB_CUT / RECHECK_FACTOR <= p < MAX_PROB_CUT * RECHECK_FACTOR}
    if low is not None and band:
        probs.update(in_context_probs(lm, [ids for ids in ids_list if band & set(ids[1:])], band, device))
    else:
        band = set()
    strings = model.token_strings()
    rows = [SpecialRow(id=int(i), token=strings[i], max_prob=float(round(p, 6)), verified=bool(p < MAX_PROB_CUT),
                       flagged=bool(ind.flagged[i])) for i, p in sorted(probs.items())]
    record = SpecialsInContext(source=source, checked=len(rows), verified=sum(r.verified for r in rows), rows=rows)
    return record, len(band)
