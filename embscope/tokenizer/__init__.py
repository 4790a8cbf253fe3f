"""Tokenizers behind one interface.

- :mod:`~embscope.tokenizer.base`: the :class:`Vocabulary` interface and token categories;
- :mod:`~embscope.tokenizer.backends`: HF ``tokenizers``, tiktoken rank files, sentencepiece;
- :mod:`~embscope.tokenizer.gguf`: the tokenizer stored in GGUF metadata, rebuilt as llama.cpp
  reads it; :mod:`~embscope.tokenizer.llamacpp_pre`: llama.cpp's pre-tokenizer names and regexes;
  :mod:`~embscope.tokenizer.cache`: the rebuilt tokenizers, cached on disk;
- :mod:`~embscope.tokenizer.tekken`: Mistral's Tekken files;
- :mod:`~embscope.tokenizer.patterns`: split patterns of packaged tokenizers;
- :mod:`~embscope.tokenizer.load`: packaged encodings and tokenizer files → a Vocabulary (a model
  spec goes through :func:`embscope.models.vocabulary.load_vocabulary`).
"""

from embscope.tokenizer.base import CATEGORIES, Vocabulary
__all__ = ["CATEGORIES", "Vocabulary"]
