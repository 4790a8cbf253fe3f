"""Tokenizers behind one interface.

- :mod:`~embscope.tokenizer.base`: the :class:`Vocabulary` interface and token categories;
- :mod:`~embscope.tokenizer.backends`: HF ``tokenizers``, tiktoken rank files, sentencepiece;
- :mod:`~embscope.tokenizer.gguf`: the tokenizer stored in GGUF metadata, rebuilt;
- :mod:`~embscope.tokenizer.patterns`: every pre-tokenizer split pattern, in one place;
- :mod:`~embscope.tokenizer.load`: tokenizer specs (packaged encodings, files, models) → a Vocabulary.
"""

from embscope.tokenizer.base import CATEGORIES, Vocabulary
from embscope.tokenizer.load import load_vocabulary

__all__ = ["CATEGORIES", "Vocabulary", "load_vocabulary"]
