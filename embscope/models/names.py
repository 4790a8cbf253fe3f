"""Which tensor is the input embedding, which the output head — by architecture-aware patterns.

Checkpoints name these tensors differently per family; we match the known suffixes, in priority
order, and never hard-code one name:

============  ======================================  ================================
family        input embedding                         output head (when untied)
============  ======================================  ================================
Llama, Qwen2, ``model.embed_tokens.weight``           ``lm_head.weight``
Mistral,
Gemma, Phi-3
GPT-2         ``transformer.wte.weight`` (``wte``)     tied
BERT          ``embeddings.word_embeddings.weight``    ``cls.predictions.decoder.weight``
Falcon, Bloom ``transformer.word_embeddings.weight``   ``lm_head.weight``
GPT-NeoX      ``gpt_neox.embed_in.weight``             ``embed_out.weight``
Phi-1/2       ``model.embed_tokens.weight`` /          ``lm_head.linear.weight``
              ``transformer.embd.wte.weight``
Meta/Mistral  ``tok_embeddings.weight``                 ``output.weight``
originals
GGUF          ``token_embd.weight``                    ``output.weight``
============  ======================================  ================================
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from embscope.errors import ModelFileError

# Suffix patterns, most specific first. Position/type embeddings never match.
EMBED_PATTERNS = [
    r"(^|\.)embed_tokens\.weight$",
    r"(^|\.)word_embeddings\.weight$",
    r"(^|\.)wte\.weight$",
    r"(^|\.)embed_in\.weight$",
    r"(^|\.)tok_embeddings\.weight$",
    r"^token_embd\.weight$",
    r"(^|\.)embedding\.weight$",
]
OUTPUT_PATTERNS = [
    r"(^|\.)lm_head\.weight$",
    r"(^|\.)lm_head\.linear\.weight$",
    r"(^|\.)embed_out\.weight$",
    r"^output\.weight$",
    r"(^|\.)cls\.predictions\.decoder\.weight$",
]
# Vision/audio towers of multimodal checkpoints carry their own embeddings; skip them.
_SKIP = re.compile(r"(vision|visual|audio|image|patch|position|token_type|mtp)", re.I)


def _pick(names: Iterable[str], patterns: list[str]) -> str | None:
    names = [n for n in names if not _SKIP.search(n)]
    for pat in patterns:
        hits = sorted((n for n in names if re.search(pat, n)), key=len)
        if hits:
            return hits[0]
    return None


def find_embedding_names(names: Iterable[str], *, where: str) -> tuple[str, str | None]:
    """Return ``(embed_name, output_name_or_None)`` among checkpoint tensor names.

    >>> find_embedding_names(["model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"], where="x")
    ('model.embed_tokens.weight', 'lm_head.weight')
    """
    names = list(names)
    embed = _pick(names, EMBED_PATTERNS)
    if embed is None:
        if not names:
            raise ModelFileError(f"{where} holds no tensors; is this a language-model checkpoint?")
        sample = ", ".join(sorted(names)[:5])
        raise ModelFileError(f"no input-embedding tensor found in {where} (tensors: {sample}, …); "
                             "is this a language-model checkpoint?")
    return embed, _pick(names, OUTPUT_PATTERNS)
