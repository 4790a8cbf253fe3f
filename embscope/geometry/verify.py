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

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from embscope.geometry.indicators import Indicators
    from embscope.models.model import LoadedModel

#: a row is verified under-trained when its max probability stays below this
MAX_PROB_CUT = 0.01
#: greedy steps generated per prompt
GEN_STEPS = 3
#: prompts per token row, as (name, text with {t} for the token)
PROMPTS: tuple[tuple[str, str], ...] = (
    ("repeat", "The text below is one string repeated again and again:\n" + "{t}" * 16),
    ("echo", "This device echoes its input unchanged, as these identical trials show.\n"
             + "Input: «{t}»\nOutput: «{t}»\n" * 3 + "Input: «{t}»\nOutput: «"),
    ("spell", "Each answer repeats the quoted text exactly.\n" + "Q: Say '{t}' once more.\nA: '{t}'\n" * 2
              + "Q: Say '{t}' once more.\nA: '"),
)
#: candidates per forward batch
BATCH = 16


@dataclass
class Verification:
    """What the prompting found (``summary.json`` ``geometry.verification``)."""

    #: flagged rows checked (None when the model could not be loaded)
    n_checked: int | None = None
    #: of those, rows with max_prob < MAX_PROB_CUT
    n_verified_undertrained: int | None = None
    #: n_verified_undertrained / n_checked
    precision: float | None = None
    controls_checked: int | None = None
    #: controls (trained rows) with max_prob < MAX_PROB_CUT
    controls_failed: int | None = None
    #: prompt names used
    prompts: list[str] = field(default_factory=list)
    max_prob_cut: float = MAX_PROB_CUT
    device: str | None = None
    seconds: float | None = None
    note: str | None = None
    #: row id -> max_prob (candidates and controls)
    max_prob: dict[int, float] = field(default_factory=dict, repr=False)
    #: row ids of the controls
    control_ids: list[int] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("max_prob")
        d.pop("control_ids")
        return d

    def column(self, n: int) -> list[float | None]:
        """``verify_max_prob`` per row (None where unchecked)."""
        col: list[float | None] = [None] * n
        for i, p in self.max_prob.items():
            col[i] = p
        return col


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


def max_probs(lm, prompts, rows: list[int], device: str, *, description: str = "verifying") -> dict[int, float]:
    """``max_prob`` per row: over prompts and :data:`GEN_STEPS` greedy steps, the probability of the
    row's token, batched (all prompts for one row share a length)."""
    import torch

    from embscope.progress import track

    best = {r: 0.0 for r in rows}
    batches = [(p, rows[s:s + BATCH]) for p in prompts for s in range(0, len(rows), BATCH)]
    for (name, ids, pos), chunk in track(batches, total=len(batches), description=description):
        x = torch.tensor(ids, device=device).repeat(len(chunk), 1)
        tok = torch.tensor(chunk, device=device)
        x[:, torch.as_tensor(pos, device=device)] = tok[:, None]
        with torch.no_grad():
            out = lm(input_ids=x, use_cache=True, logits_to_keep=1)
            for step in range(GEN_STEPS):
                probs = torch.softmax(out.logits[:, -1].float(), dim=-1)
                p = probs.gather(1, tok[:, None])[:, 0].cpu().tolist()
                for r, v in zip(chunk, p):
                    best[r] = max(best[r], float(v))
                if step + 1 < GEN_STEPS:
                    nxt = probs.argmax(dim=-1, keepdim=True)
                    out = lm(input_ids=nxt, past_key_values=out.past_key_values, use_cache=True, logits_to_keep=1)
    return best


def verify_rows(model: "LoadedModel", ind: "Indicators", n: int, *, seed: int = 0,
                device: str | None = None) -> Verification:
    """Prompt-check the ``n`` highest-scoring flagged normal rows and ``n`` trained controls."""
    import time

    import torch

    from embscope.models.fullmodel import load_causal_lm, why_not_causal

    t0 = time.perf_counter()
    names = [p[0] for p in PROMPTS]
    if model.vocab is None:
        return Verification(prompts=names, note=f"{model.name} ships no tokenizer: prompts cannot be built")
    reason = why_not_causal(model)
    if reason is not None:
        return Verification(prompts=names, note=f"not verified: {reason}")
    cats = np.asarray(model.categories)
    normal = cats == "normal"
    ref = np.zeros(model.n_rows, bool)
    ref[ind.reference.ids] = True
    order = np.argsort(-ind.undertrained_score)
    cands = [int(i) for i in order if ind.flagged[i] and normal[i] and not ref[i]][:n]
    trained = np.flatnonzero(normal & ~ind.flagged & ~ref & (np.arange(model.n_rows) < len(model.vocab)))
    rng = np.random.default_rng(seed)
    controls = sorted(int(i) for i in rng.choice(trained, size=min(n, len(trained)), replace=False))
    holder = placeholder_token(model.vocab, model.categories)
    prompts = build_prompts(model, holder) if holder is not None else []
    if not prompts:
        return Verification(prompts=names, note="not verified: no placeholder token survives tokenization "
                            "in the prompts")
    try:
        lm = load_causal_lm(model)
    except Exception as exc:  # noqa: BLE001 - weights that do not load are a note
        return Verification(prompts=names, note=f"not verified: the weights did not load ({type(exc).__name__}: "
                            f"{str(exc).splitlines()[0][:200] if str(exc) else ''})")
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    lm.to(dev)
    try:
        probs = max_probs(lm, prompts, cands + controls, dev)
    finally:
        lm.to("cpu")
    ver = [probs[i] < MAX_PROB_CUT for i in cands]
    failed = [probs[i] < MAX_PROB_CUT for i in controls]
    return Verification(
        n_checked=len(cands), n_verified_undertrained=int(sum(ver)),
        precision=round(sum(ver) / len(cands), 4) if cands else None,
        controls_checked=len(controls), controls_failed=int(sum(failed)),
        prompts=[p[0] for p in prompts], device=dev, seconds=round(time.perf_counter() - t0, 2),
        note=(f"max_prob < {MAX_PROB_CUT} over {len(prompts)} repetition prompts × {GEN_STEPS} greedy steps "
              f"counts as verified under-trained; controls are random trained rows"),
        max_prob={i: round(probs[i], 6) for i in cands + controls}, control_ids=controls)
