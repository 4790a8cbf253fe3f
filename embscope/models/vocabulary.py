"""Any tokenizer spec → :class:`~embscope.tokenizer.base.Vocabulary`: a packaged encoding name
(``gpt2``, ``cl100k_base``, ``o200k_base``, ``qwen2``, ``llama3``), a tokenizer file, or a model
spec (alias, hub id, folder, GGUF), whose own tokenizer is read after :func:`resolve`."""

from __future__ import annotations

from pathlib import Path

from embscope.arguments import checked
from embscope.errors import SpecError, VocabError, did_you_mean
from embscope.models.resolve import Resolved, resolve
from embscope.tokenizer.base import Vocabulary
from embscope.tokenizer.load import PACKAGED_TOKENIZERS, load_folder_vocabulary, load_tokenizer_file


@checked
def load_vocabulary(spec: str) -> Vocabulary:
    """Resolve a tokenizer spec (see module docstring) to a :class:`Vocabulary`.

    >>> load_vocabulary("cl100k_base").encode("hello world")
    [15339, 1917]
    """
    if spec in PACKAGED_TOKENIZERS:
        return PACKAGED_TOKENIZERS[spec]()
    path = Path(spec).expanduser()
    if path.is_file():
        return load_tokenizer_file(path)
    try:
        resolved = resolve(spec, need_weights=False)
    except SpecError as err:
        raise SpecError(f"{err} Tokenizer-only specs: {', '.join(PACKAGED_TOKENIZERS)}"
                        f"{did_you_mean(spec, PACKAGED_TOKENIZERS)}.") from None
    vocab = model_vocabulary(resolved)
    if vocab is None:
        raise VocabError(f"{spec!r} ships no tokenizer; pass a tokenizer file or one of "
                         f"{', '.join(PACKAGED_TOKENIZERS)}")
    return vocab


def model_vocabulary(resolved: Resolved) -> Vocabulary | None:
    """The resolved model's own tokenizer, or ``None`` when it ships none."""
    if resolved.format == "gguf":
        from embscope.tokenizer.gguf import gguf_vocabulary

        return gguf_vocabulary(resolved.path, name=resolved.name, reader=resolved.gguf_reader())
    return load_folder_vocabulary(resolved.path, name=resolved.name)
