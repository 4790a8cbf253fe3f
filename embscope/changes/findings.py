"""What a fine-tune did to the vocabulary that it should not have, as findings with stable codes.

======================  ===============  ===================================================================
code                    severity         when
======================  ===============  ===================================================================
``vocab-mismatch``      error            the tokenizers disagree on shared ids (or TUNED lost rows, or its
                                         tokenizer has tokens past its rows, or the manifest's terms are
                                         not at its ids): the rows compared are not the same tokens
``row-exploded``        error            a tuned row is NaN/Inf, or its norm grew past :data:`EXPLODE` × the
                                         larger of its reference norm and BASE's median row norm
``new-row-unmoved``     error / warning  a token added past BASE's vocabulary that training left at its
                                         initial row (input, or head when untied; an all-zero new row
                                         never counts as moved); a warning when --data is given and never
                                         produces the token; an error when new rows without a recorded
                                         initial row look untrained: a fresh N(0, σ²) draw
                                         (:func:`random_like`) or copies of BASE rows (:func:`copies_of`)
``used-row-frozen``     error / warning  rows the data uses that did not move: error when at least
                                         :data:`FROZEN_SHARE` of them (frozen embeddings: LoRA without
                                         ``modules_to_save``), else a warning; a frozen head alone (untied)
                                         is a warning
``untrained-still``     error / warning  rows BASE's scan flags as under-trained (prompting did not clear
                                         them) that the data uses and that training did not move; a
                                         warning for special rows prompting has not verified
``tie-broken``          error / warning  BASE ties the head to the embedding, TUNED's differ: error when
                                         TUNED's config still says ``tie_word_embeddings`` (loading it
                                         re-ties them and drops one trained matrix), else a warning
``nothing-moved``       error / warning  no row of either matrix moved and no other finding says so
                                         (``new-row-unmoved`` and ``used-row-frozen`` name it when TUNED
                                         has new rows or --data uses rows); an error, alone, when TUNED is
                                         BASE itself (the same files): nothing was trained
======================  ===============  ===================================================================

The finding record is the check's (:class:`embscope.readiness.record.Finding`): ``examples`` are
0-based positions of training records holding the ids, as there. Every ``count`` is a number of rows:
the rows the finding concerns (``tie-broken``: the rows that moved in either matrix, where the two
can differ; ``vocab-mismatch``: the ids that are not the same token, the rows lost or past the
tokenizer).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from embscope.readiness.record import MAX_IDS, SEVERITIES, Finding

if TYPE_CHECKING:  # pragma: no cover
    from embscope.changes.record import AdapterInfo

CODES = ("vocab-mismatch", "row-exploded", "new-row-unmoved", "used-row-frozen", "untrained-still",
         "tie-broken", "nothing-moved")
#: a row "exploded" when its norm is this many times the larger of its reference norm and BASE's median
#: row norm (an under-trained row that grows to a normal norm has not exploded)
EXPLODE = 10.0
#: used rows unmoved at or above this share: the embedding (or head) was frozen
FROZEN_SHARE = 0.5


@dataclass
class MatrixFacts:
    """One matrix's per-row results (arrays over TUNED's rows)."""

    name: str
    moved: np.ndarray
    change: np.ndarray
    finite: np.ndarray
    exploded: np.ndarray
    tuned_norm: np.ndarray
    floor: float
    #: (BASE's stored format, TUNED's, their lineage) as the floor was measured
    formats: tuple[str, str, str] = ("?", "?", "")


@dataclass
class DiffFacts:
    """What the diff's rules read: TUNED's token strings and what training did to each matrix."""

    #: token strings of TUNED's rows
    strings: Sequence[str]
    matrices: list[MatrixFacts]
    #: bool per TUNED row: added past BASE
    new: np.ndarray
    #: per TUNED row: occurrences in the data (None: no data)
    counts: np.ndarray | None
    #: id → example indices (from the data)
    where: dict[int, list[int]]
    #: per BASE row: flagged by BASE's scan (None: no scan)
    flagged: np.ndarray | None
    #: rows both have for the same token
    shared: int
    #: [(id, base token, tuned token)] where the tokenizers disagree, and their count
    mismatches: list[tuple[int, str, str]] = field(default_factory=list)
    n_mismatches: int = 0
    #: BASE rows TUNED does not have
    lost_rows: int = 0
    #: tokens of TUNED's tokenizer past TUNED's rows (an id with no row: the lookup fails), and the rows
    tokens_past_rows: int = 0
    rows: int = 0
    #: new rows that look like a fresh N(0, σ²) draw, when nothing records their initial rows
    random_like: list[int] = field(default_factory=list)
    #: {new row: the BASE row it is a copy of}, when nothing records their initial rows
    copies: dict[int, int] = field(default_factory=dict)
    #: TUNED is BASE itself (the same file or folder)
    same: bool = False
    #: per TUNED row: prompting verified BASE's row under-trained; BASE's row is a special token
    verified: np.ndarray | None = None
    special: np.ndarray | None = None
    #: [(id, term, tuned token)] where the manifest's term is not TUNED's token
    manifest_mismatches: list[tuple[int, str, str]] = field(default_factory=list)
    base_tied: bool = True
    tuned_tied: bool = True
    #: TUNED's config ``tie_word_embeddings`` (None when it says nothing)
    config_tie: bool | None = None
    #: the adapter, when TUNED is one (for the fixes)
    adapter: "AdapterInfo | None" = None



def _examples(where: dict[int, list[int]], ids) -> list[int]:
    out: set[int] = set()
    for i in ids:
        out.update(where.get(int(i), []))
    return sorted(out)[:5]


def find(f: DiffFacts) -> list[Finding]:
    """Every finding for these facts, errors first."""
    out: list[Finding] = []
    s = f.strings

    def tok(i: int) -> str:
        return s[i] if 0 <= i < len(s) else f"<id {i}>"

    def add(code, severity, message, ids=(), count=0, fix=""):
        ids = [int(i) for i in ids]
        rows, ids = len(ids) or None, ids[:MAX_IDS]
        out.append(Finding(code=code, severity=severity, message=message, ids=ids, tokens=[tok(i) for i in ids],
                           count=int(count), examples=_examples(f.where, ids), fix=fix, rows=rows))

    counts = f.counts
    used = (counts[:len(f.new)] > 0) if counts is not None else None
    by_use = (lambda ids: sorted(ids, key=lambda i: -int(counts[i]))) if counts is not None else (lambda ids: list(ids))
    _vocab_mismatch(f, add)
    _exploded(f, add)
    nothing = bool(f.matrices) and not any(m.moved.any() for m in f.matrices)
    if f.same:
        add("nothing-moved", "error", "TUNED is BASE itself (the same files): nothing was trained", (), 0,
            "pass the checkpoint training wrote (its output_dir, or the adapter folder) as TUNED")
        out.sort(key=lambda x: (-SEVERITIES.index(x.severity), CODES.index(x.code)))
        return out
    looks = set(f.random_like) | set(f.copies)
    _new_unmoved(f, add, used, by_use, nothing, skip=looks)
    if looks:
        _untrained_looking(f, add, tok)
    if used is not None:
        _used_frozen(f, add, used, by_use, nothing)
    if used is not None and f.flagged is not None:
        _untrained_still(f, add, used, by_use)
    if f.base_tied and not f.tuned_tied:
        _tie_broken(f, add)
    if nothing and not any(x.code in ("new-row-unmoved", "used-row-frozen") for x in out):
        add("nothing-moved", "warning", f"no row of the embedding{' or the head' if len(f.matrices) > 1 else ''} "
            f"moved past the noise floor ({_formats(f.matrices[0])}): {STILL}", (), 0,
            "pass the checkpoint training wrote (or the adapter folder)"
            + ("" if used is not None else ", and --data to see which rows it used"))
    out.sort(key=lambda x: (-SEVERITIES.index(x.severity), CODES.index(x.code)))
    return out


def _vocab_mismatch(f: DiffFacts, add) -> None:
    """The rows compared are not the same tokens (other tokens at shared ids, lost rows, manifest terms)."""
    if f.n_mismatches or f.lost_rows or f.manifest_mismatches or f.tokens_past_rows:
        bits = []
        if f.tokens_past_rows:
            bits.append(f"TUNED's tokenizer has {f.tokens_past_rows} token(s) past its {f.rows} rows (ids {f.rows} and "
                        "up have no row: looking them up fails; resize_token_embeddings(len(tokenizer)) was not run "
                        "or not saved)")
        if f.n_mismatches:
            shown = "; ".join(f"{i}: {b!r} → {t!r}" for i, b, t in f.mismatches[:3])
            bits.append(f"{f.n_mismatches} shared id(s) are other tokens in TUNED ({shown})")
        if f.lost_rows:
            bits.append(f"TUNED has {f.lost_rows} row(s) fewer than BASE")
        if f.manifest_mismatches:
            shown = "; ".join(f"{i}: {m!r} vs {t!r}" for i, m, t in f.manifest_mismatches[:3])
            bits.append(f"{len(f.manifest_mismatches)} manifest term(s) are not TUNED's token at their id ({shown})")
        ids = [i for i, _, _ in f.mismatches] + [i for i, _, _ in f.manifest_mismatches]
        add("vocab-mismatch", "error", "the rows compared are not the same tokens: " + "; ".join(bits), ids,
            f.n_mismatches + f.lost_rows + len(f.manifest_mismatches) + f.tokens_past_rows,
            "diff against the BASE (and --manifest) TUNED was trained from: the same tokenizer, tokens only added at the end")


def _exploded(f: DiffFacts, add) -> None:
    """Rows that hold NaN/Inf or grew past EXPLODE× their base norm."""
    for m in f.matrices:
        bad = np.flatnonzero(~m.finite | m.exploded)
        if len(bad):
            nonfinite = int((~m.finite).sum())
            worst = bad[np.argsort(-np.where(np.isfinite(m.tuned_norm[bad]), m.tuned_norm[bad], np.inf), kind="stable")]
            add("row-exploded", "error",
                f"{len(bad)} {m.name} row(s) blew up: {nonfinite} hold NaN/Inf, {len(bad) - nonfinite} grew past "
                f"{EXPLODE:g}× their base norm and the median row norm", worst, len(bad),
                "lower the learning rate of the embedding (or clip gradients), re-initialise those rows before "
                "training (embscope scan --repair), and check for a NaN loss")


def _untrained_looking(f: DiffFacts, add, tok) -> None:
    """New rows with no recorded initial rows that look never trained: a fresh random draw, or
    copies of BASE rows. Nothing shows training moved them, so it is an error (a CI gate must not
    pass them as learnt)."""
    ids = sorted(set(f.random_like) | set(f.copies))
    n_new = int(np.count_nonzero(f.new))
    parts = []
    if f.copies:
        shown = ", ".join(f"{i} {tok(i)!r} = row {j} {tok(j)!r}" for i, j in sorted(f.copies.items())[:3])
        more = f", +{len(f.copies) - 3} more" if len(f.copies) > 3 else ""
        parts.append(f"{len(f.copies)} are copies of existing rows ({shown}{more})")
    if f.random_like:
        parts.append(f"{len(f.random_like)} look like a fresh random initialisation (norms alike, no component "
                     "along BASE's mean row)")
    add("new-row-unmoved", "error",
        f"{len(ids)} of {n_new} new token row(s) look untrained and nothing records their initial rows: "
        + "; ".join(parts) + ". Nothing shows that training moved them", ids, len(ids),
        "pass --manifest (the embscope_extension.json extend --apply wrote), or diff against the checkpoint saved "
        "right after the tokens were added (its rows are the initial ones); if training never reached them, "
        "train the embedding and head for them (PEFT: modules_to_save=['embed_tokens', 'lm_head'])")


def _new_unmoved(f: DiffFacts, add, used, by_use, nothing: bool = False, skip=frozenset()) -> None:
    """New tokens whose rows stayed where they were initialised (split by whether the data uses them);
    ``nothing``: no row moved at all, which the message says (one finding, not two); ``skip``: rows
    :func:`_untrained_looking` names."""
    n = len(f.new)
    new_ids = np.flatnonzero(f.new)
    if len(new_ids):
        still = np.zeros(n, dtype=bool)
        for m in f.matrices:
            still |= f.new & ~m.moved
        still[list(skip)] = False
        ids = np.flatnonzero(still)

        def where(sub) -> str:
            """``in the input`` / ``in the input (12) and the head (3)``: which matrices kept them."""
            per = [(m.name, int((~m.moved[sub]).sum())) for m in f.matrices]
            per = [(name, k) for name, k in per if k]
            if len(f.matrices) == 1:
                return "in the input embedding"
            return "in " + " and ".join(f"the {'head' if name == 'output' else 'input'} ({k})" for name, k in per)

        if len(ids):
            fix = ("make the embedding and head trainable for them (PEFT: modules_to_save=['embed_tokens', "
                   "'lm_head'] or trainable_token_indices=[their ids]; a full fine-tune trains them)")
            tail = f"; no row moved at all ({_formats(f.matrices[0])}): {STILL}" if nothing else ""
            if nothing:
                fix = "pass the checkpoint training wrote (or the adapter folder); if it is that one, " + fix
            if used is not None:
                used_ids = np.asarray([i for i in ids if used[i]], dtype=np.int64)
                unused = np.asarray([i for i in ids if not used[i]], dtype=np.int64)
                if len(used_ids):
                    add("new-row-unmoved", "error",
                        f"{len(used_ids)} of {len(new_ids)} new token(s) the data uses stayed at their initial rows "
                        f"{where(used_ids)}: the model never learnt them{tail}", by_use(used_ids), len(used_ids), fix)
                if len(unused):
                    add("new-row-unmoved", "warning",
                        f"{len(unused)} of {len(new_ids)} new token(s) stayed at their initial rows {where(unused)} and "
                        f"the data never produces them: nothing could train them{tail}", unused, len(unused),
                        "tokenize the data with TUNED's tokenizer (the one with the new tokens), or drop the tokens")
            else:
                add("new-row-unmoved", "error",
                    f"{len(ids)} of {len(new_ids)} new token(s) stayed at their initial rows {where(ids)}{tail}",
                    ids, len(ids), fix + "; pass --data to see whether the data produces them")


#: what a TUNED in which no row moved is (the end of ``nothing-moved`` and of the findings it explains)
STILL = "TUNED holds BASE's rows (re-saved, or not the checkpoint training wrote), or the embedding was frozen"


def _formats(m: MatrixFacts) -> str:
    """``Q8_0 → BF16, floor 0.00248``: what the noise floor of a matrix was measured between."""
    return f"{m.formats[0]} → {m.formats[1]}, floor {m.floor:.3g}"


def _used_frozen(f: DiffFacts, add, used, by_use, nothing: bool = False) -> None:
    """Old rows the data uses that did not move, per matrix (a frozen embedding or head, updates below
    the formats' rounding, or no gradient); ``nothing``: no row moved at all."""
    old_used = used.copy()
    old_used[f.new] = False
    old_used[f.shared:] = False
    n_used = int(old_used.sum())
    for m in f.matrices:
        frozen = np.flatnonzero(old_used & ~m.moved)
        if not len(frozen) or not n_used:
            continue
        share = len(frozen) / n_used
        head = m.name == "output"
        severity = "error" if share >= FROZEN_SHARE and not head else "warning"
        what = "the head" if head else "the embedding"
        sixteen = m.formats[1] in ("BF16", "F16")
        if nothing:
            why = f"no row moved at all ({_formats(m)}): {STILL}"
        elif share >= FROZEN_SHARE:
            why = f"{what} looks frozen (LoRA without modules_to_save?)"
        elif m.floor > 0:  # the two formats' rounding hides a change below the floor
            why = (f"their change stayed below the noise floor ({_formats(m)})"
                   + (": a small learning rate on 16-bit weights rounds updates away" if sixteen else
                      f": a change smaller than {m.formats[0]}'s rounding cannot be told from it"))
        else:  # the formats add no noise: the rows did not change at all
            why = ("their rows are bit for bit BASE's: they got no gradient (a token that only ends a sequence feeds "
                   "no prediction; one outside the loss mask gets none as a label)")
        add("used-row-frozen", severity,
            f"{len(frozen)} of the {n_used} rows the data uses ({share:.0%}) did not move in the {m.name}: {why}",
            by_use(frozen), len(frozen),
            "train the embedding" + (" and head" if not head else "") + " (PEFT: modules_to_save=['embed_tokens', "
            "'lm_head'], or trainable_token_indices for the rows that matter)"
            + ("; in 16-bit weights, a larger learning rate for them or fp32 master weights" if sixteen else ""))


def _untrained_still(f: DiffFacts, add, used, by_use) -> None:
    """Rows BASE's scan flags that the data uses and training did not move."""
    n, counts = len(f.new), f.counts
    k = min(len(f.flagged), f.shared)
    cand = np.zeros(n, dtype=bool)
    cand[:k] = f.flagged[:k] & used[:k]
    still = np.zeros(n, dtype=bool)
    for m in f.matrices:
        still |= cand & ~m.moved
    ids = np.flatnonzero(still)
    special = f.special if f.special is not None else np.zeros(n, dtype=bool)
    verified = f.verified if f.verified is not None else np.zeros(n, dtype=bool)
    weak = np.asarray([i for i in ids if special[i] and not verified[i]], dtype=np.int64)
    ids = np.asarray([i for i in ids if i not in set(weak.tolist())], dtype=np.int64)
    if len(ids):
        add("untrained-still", "error",
            f"{len(ids)} row(s) BASE's scan flags as under-trained are used by the data and did not move: "
            f"TUNED still has their untrained rows ({int(counts[ids].sum())} uses in the data)", by_use(ids), len(ids),
            "re-initialise them before training (embscope check --data D --repair OUT) and train the embedding")
    if len(weak):
        add("untrained-still", "warning",
            f"{len(weak)} special row(s) BASE's scan flags are used by the data and did not move "
            f"({int(counts[weak].sum())} uses); special rows often look untrained when they are not, and prompting "
            "could not settle these (it checks a special row where BASE's chat template uses it)", by_use(weak),
            len(weak), "leave them unless prompting verifies them (embscope audit --model BASE checks the chat "
            "template's rows): re-initialising a trained chat-template row breaks the model")


def _tie_broken(f: DiffFacts, add) -> None:
    """BASE ties the head to the embedding and TUNED's two differ."""
    if f.config_tie:
        add("tie-broken", "error",
            "BASE ties the head to the embedding; TUNED's two differ, but its config still says "
            "tie_word_embeddings=true: loading it re-ties them and one trained matrix is lost" + _tie_detail(f), (),
            _either_moved(f),
            "save with tie_word_embeddings=false, or train embed_tokens with ensure_weight_tying=True (PEFT)")
    else:
        add("tie-broken", "warning", "BASE ties the head to the embedding; in TUNED they differ" + _tie_detail(f),
            (), _either_moved(f), "intended? otherwise train with ensure_weight_tying=True (PEFT) or tie them "
            "before saving")


def _either_moved(f: DiffFacts) -> int:
    """Rows that moved in the embedding or the head: where a broken tie can make the two differ."""
    moved = np.zeros(len(f.new), dtype=bool)
    for m in f.matrices:
        moved |= m.moved
    return int(moved.sum())


def _tie_detail(f: DiffFacts) -> str:
    """What each matrix did, from the record: ``: the embedding moved in 12 rows, the head in all 49,345``."""
    per = {m.name: int(m.moved.sum()) for m in f.matrices}
    n = len(f.new)

    def rows(k: int) -> str:
        return "kept BASE's rows" if k == 0 else f"moved in all {n:,} rows" if k == n else f"moved in {k:,} of {n:,} rows"

    parts = [f"the {'head' if name == 'output' else 'embedding'} {rows(k)}" for name, k in per.items()]
    how = ""
    if f.adapter is not None:
        saved = [p for p in [*f.adapter.embed, *f.adapter.output] if "modules_to_save" in p]
        how = " (the adapter saves its own copy: " + "; ".join(saved) + ")" if saved else ""
    return (": " + ", ".join(parts) if parts else "") + how


#: rows compared per block when looking for copies: a (4096, d) float32 block
COPY_BLOCK = 4096


def copies_of(new: np.ndarray, rows, shared: int, floor: float) -> dict[int, int]:
    """``{j: i}``: new rows ``new[j]`` (k, d) that are copies of a BASE row ``i < shared`` of
    ``rows`` (a :class:`embscope.changes.rows.Rows`): the nearest BASE row by cosine, then
    ‖new − base‖ / ‖base‖ at most ``floor`` (the matrix's noise floor: what ``moved`` reads as no
    change; at least 1e-6).

    >>> from embscope.changes.rows import Dense
    >>> import torch
    >>> base = Dense(torch.eye(4) + 0.1, "F32")
    >>> copies_of(np.stack([base.take([2])[0].numpy(), np.ones(4, np.float32)]), base, 4, 0.0)
    {0: 2}
    """
    import torch

    new = np.asarray(new, dtype=np.float32)
    if not len(new) or not shared:
        return {}
    t = torch.from_numpy(new)
    tn = t / t.norm(dim=1, keepdim=True).clamp_min(1e-30)
    best = torch.full((len(new),), -2.0)
    arg = torch.zeros(len(new), dtype=torch.long)
    for a in range(0, shared, COPY_BLOCK):
        b = rows.block(a, min(a + COPY_BLOCK, shared)).cpu()
        cos = tn @ (b / b.norm(dim=1, keepdim=True).clamp_min(1e-30)).T  # (k, block)
        val, idx = cos.max(dim=1)
        better = val > best
        best[better], arg[better] = val[better], idx[better] + a
    src = rows.take(arg.numpy()).cpu().double().numpy()
    rel = np.linalg.norm(new.astype(np.float64) - src, axis=1) / np.maximum(np.linalg.norm(src, axis=1), 1e-30)
    tol = max(float(floor), 1e-6)
    return {j: int(arg[j]) for j in range(len(new)) if np.linalg.norm(src[j]) > 0 and rel[j] <= tol}


def random_like(rows: np.ndarray, mean: np.ndarray) -> bool:
    """Whether ``rows`` (k, d) look like one fresh draw of N(0, σ²) rather than trained rows: every
    row's cosine with BASE's mean row within 4/√d of 0 (a trained vocabulary shares a large mean
    direction; a random row's cosine with any fixed vector is ~N(0, 1/d)), its entries' mean within
    4σ/√d of 0, and the rows' norms within ×1.5 of each other (one σ).

    >>> rng = np.random.default_rng(0)
    >>> mean = np.ones(256, np.float32)
    >>> random_like(rng.normal(0, 0.02, (20, 256)), mean), random_like(rng.normal(0.1, 0.02, (20, 256)), mean)
    (True, False)
    """
    rows = np.asarray(rows, dtype=np.float64)
    if rows.ndim != 2 or not len(rows) or not np.isfinite(rows).all():
        return False
    d = rows.shape[1]
    norms = np.linalg.norm(rows, axis=1)
    mnorm = float(np.linalg.norm(mean))
    if norms.min() <= 0 or mnorm <= 0 or norms.max() > 1.5 * norms.min():
        return False
    cos = rows @ np.asarray(mean, dtype=np.float64) / (norms * mnorm)
    sigma = norms / np.sqrt(d)
    return bool((np.abs(cos) < 4 / np.sqrt(d)).all() and (np.abs(rows.mean(axis=1)) < 4 * sigma / np.sqrt(d)).all())
