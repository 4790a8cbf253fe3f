"""A tokenizer against its extension on text of one language: fertility, parity and the token
ratio before → after, each with a 95 % percentile-bootstrap interval over units.

- fertility = Σ tokens / Σ words (Rust et al. 2021; words of :mod:`embscope.languages.segment`);
- parity = Σ_u t_L(u) / Σ_u t_ref(u) over aligned units (Petrov et al. 2023), each language
  tokenized with the same tokenizer;
- token ratio = Σ tokens after / Σ tokens before, paired by unit (below 1: the extension saves).

Each is ``[point, lo, hi]`` (:func:`embscope.languages.bootstrap.ratio_interval`, seeded).
Example: 3 units of 10, 20, 30 words cut from 40, 60, 90 to 20, 30, 45 tokens: fertility 3.17 →
1.58, token ratio 0.5. The extension's target-language record
(:class:`embscope.extension.target.CostFigures`) holds these fields.
"""

from __future__ import annotations

from collections.abc import Sequence


def _lengths(tok, texts: Sequence[str]):
    """(n,) float64 token counts of ``texts`` (no special tokens)."""
    import numpy as np

    return np.array([len(e.ids) for e in tok.encode_batch(list(texts), add_special_tokens=False)], dtype=np.float64)


def _triple(num, den) -> list[float]:
    from embscope.languages.bootstrap import ratio_interval

    return [round(v, 5) for v in ratio_interval(num, den)]


def cost_figures(old_tok, ext_tok, texts: Sequence[str], reference: Sequence[str] | None = None) -> dict:
    """``{units, words, bytes, tokens_before, tokens_after, fertility_before, fertility_after,
    token_ratio, parity_before, parity_after}`` of ``texts`` (one unit each) with the original
    tokenizer ``old_tok`` and its extension ``ext_tok`` (``tokenizers`` objects); ``reference``:
    the aligned units of the reference language, in the same order (parity; None: no parity)."""
    import numpy as np

    from embscope.languages.segment import count_words

    words = np.array([count_words(t) for t in texts], dtype=np.float64)
    before, after = _lengths(old_tok, texts), _lengths(ext_tok, texts)
    out = {"units": len(texts), "words": int(words.sum()), "bytes": sum(len(t.encode("utf-8")) for t in texts),
           "tokens_before": int(before.sum()), "tokens_after": int(after.sum()),
           "fertility_before": _triple(before, words), "fertility_after": _triple(after, words),
           "token_ratio": _triple(after, before), "parity_before": None, "parity_after": None}
    if reference:
        out["parity_before"] = _triple(before, _lengths(old_tok, reference))
        out["parity_after"] = _triple(after, _lengths(ext_tok, reference))
    return out
