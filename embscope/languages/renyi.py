"""Rényi efficiency of a tokenizer on a language (Zouhar et al. 2023, "Tokenization and the
Noiseless Channel", ACL): how evenly the language's text spreads over the vocabulary.

With p_i the share of the language's tokens that are token i and V the tokenizer's vocabulary size,

    H_α(p) = 1 / (1 − α) · log Σ_i p_i^α,        efficiency = H_α(p) / log V

(α = 1: Shannon entropy). Zouhar et al. find α = 2.5 correlates best with downstream BLEU. Higher
is more even use (1 = uniform over all V tokens). Equal to the ``tokenization-scorer`` package's
``renyi`` metric with ``power=α`` and ``vocab=V`` on the same token ids (tests/test_tokenizers.py).

Example: counts [2, 1, 1] of a 4-token vocabulary, α = 2 → Σ p² = 0.375, H = log(1/0.375) = 0.981
(nats), / log 4 = 0.708.
"""

from __future__ import annotations

import numpy as np

#: the default order α (Zouhar et al. 2023's best predictor of BLEU)
ALPHA = 2.5


def renyi_efficiency(counts, vocab_size: int, alpha: float = ALPHA) -> float | None:
    """H_α of the token distribution ``counts`` (occurrences per token id) / log ``vocab_size``.

    >>> round(renyi_efficiency(np.array([2, 1, 1, 0]), 4, alpha=2.0), 3)
    0.708
    """
    c = np.asarray(counts, dtype=np.float64)
    total = c.sum()
    if total <= 0 or vocab_size < 2:
        return None
    p = c[c > 0] / total
    if alpha == 1.0:
        h = float(-(p * np.log(p)).sum())
    else:
        h = float(np.log(np.sum(p ** alpha)) / (1.0 - alpha))
    return h / float(np.log(vocab_size))
