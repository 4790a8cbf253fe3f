"""Independent reference tokenizers for GGUF vocabularies that ship no llama.cpp test ids.

Each function returns ``encode_batch(texts) -> ids`` (no special tokens added), or ``None`` when the
reference cannot read the file. ``tests/test_tokenizer_families.py`` and
``scripts/families_table.py`` compare embscope's rebuilt tokenizers with them.

- :func:`transformers_gguf`: transformers' own GGUF tokenizer conversion
  (``transformers/integrations/gguf/gguf_tokenizer_mapping.py``). ``AutoTokenizer`` refuses files
  whose *model* architecture transformers lacks (``baichuan``, ``gptneox``, ``nomic-bert-moe``)
  before it looks at the tokenizer, so the conversion functions it calls are called directly.
  Known differences from the models' own tokenizers: its ``LlamaTokenizer`` adds no ``▁`` in
  front of text that starts with a space (SentencePiece does: ``" Hello"`` → ``▁ ▁Hello``), and
  its byte-level conversion turns user-defined whitespace tokens (GPT-NeoX's runs of spaces) into
  ordinary pieces; llama.cpp's reference ids show both (``llama-spm`` 31/46, ``mpt`` 41/46).
- :func:`xlmr_transformers`: transformers' ``XLMRobertaTokenizer`` class built from the file's
  pieces, scores and precompiled normalization map — the tokenizer class of XLM-R vocabularies
  (transformers' ``t5`` GGUF conversion assumes T5's special-token layout: its unknown id 2 is
  XLM-R's ``</s>``, and it drops the normalization map).
- :func:`sentencepiece_gguf`: ``sentencepiece`` itself on a model rebuilt from the file's pieces,
  scores and token types (BPE, byte fallback when the file has byte pieces, the dummy prefix from
  ``tokenizer.ggml.add_space_prefix``, no other normalization — the GGUF records none). llama.cpp's
  converter writes user-defined pieces with spaces where SentencePiece has ``▁``; they are spelled
  back. On ``llama-spm`` and ``phi-3`` this reference equals llama.cpp's ids 46/46.
"""

from __future__ import annotations

import os
from pathlib import Path

#: GGUF token type → SentencePiece piece type (both: 1 normal, 2 unknown, 3 control, 4 user-defined,
#: 5 unused, 6 byte)
_SP_TYPES = {1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 6}


def _ids(encs) -> list[list[int]]:
    return [e.ids for e in encs]


def transformers_gguf(path: Path):
    """transformers' GGUF tokenizer conversion of ``path``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer, get_gguf_tokenizer

    try:
        arch, tokenizer_dict, _ = get_gguf_tokenizer(str(path))
        tok, _ = convert_gguf_tokenizer(arch, tokenizer_dict)
    except Exception:  # a tokenizer model transformers does not convert
        return None
    tok.no_truncation()
    tok.no_padding()
    return lambda texts: _ids(tok.encode_batch(list(texts), add_special_tokens=False))


def xlmr_transformers(fields: dict):
    """transformers' ``XLMRobertaTokenizer`` on a ``t5`` (Unigram) file's pieces, scores and map."""
    from transformers import XLMRobertaTokenizer

    tokens, scores = fields["tokenizer.ggml.tokens"], fields["tokenizer.ggml.scores"]
    charsmap = fields.get("tokenizer.ggml.precompiled_charsmap")
    ref = XLMRobertaTokenizer(vocab=list(zip(tokens, scores)),
                              _spm_precompiled_charsmap=bytes(b & 0xFF for b in charsmap) if charsmap else None)
    return lambda texts: [ref(t, add_special_tokens=False)["input_ids"] for t in texts]


def sentencepiece_gguf(fields: dict):
    """``sentencepiece`` on a BPE model rebuilt from a ``llama`` (SentencePiece) file's metadata."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb

    tokens, scores = fields["tokenizer.ggml.tokens"], fields["tokenizer.ggml.scores"]
    types = fields.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    unk = fields.get("tokenizer.ggml.unknown_token_id", 0)
    m = pb.ModelProto()
    for i, (piece, score, kind) in enumerate(zip(tokens, scores, types)):
        p = m.pieces.add()
        p.piece = piece.replace(" ", "▁") if kind == 4 else piece
        p.score = score
        # SentencePiece allows one unknown piece; llama.cpp marks padding pieces unknown too (Phi-3)
        p.type = 2 if i == unk else 5 if kind == 2 else _SP_TYPES.get(kind, 1)
    spec = m.trainer_spec
    spec.model_type = pb.TrainerSpec.BPE
    spec.vocab_size = len(tokens)
    spec.byte_fallback = 6 in types
    spec.unk_id = unk
    spec.bos_id = fields.get("tokenizer.ggml.bos_token_id", -1)
    spec.eos_id = fields.get("tokenizer.ggml.eos_token_id", -1)
    spec.pad_id = fields.get("tokenizer.ggml.padding_token_id", -1)
    norm = m.normalizer_spec
    norm.name = "identity"
    norm.add_dummy_prefix = bool(fields.get("tokenizer.ggml.add_space_prefix", True))
    norm.remove_extra_whitespaces = False
    norm.escape_whitespaces = True
    sp = spm.SentencePieceProcessor(model_proto=m.SerializeToString())
    return lambda texts: sp.encode(list(texts))


# ------------------------------------------------------------------ plain continued BPE


def naive_continued_bpe(tok, texts, rows: int, min_freq: int = 2):
    """Plain continued BPE, written without embscope: the training texts tokenized by ``tok``
    itself (``encode``: its normalizer, pre-tokenizer and model), each word the run of tokens of
    one pre-token (``Encoding.word_ids``; for a tokenizer without pre-tokenizer, the tokens between
    two tokens starting with ``▁``). Every step recounts every adjacent pair inside every word,
    takes the largest count (ties: the pair whose strings sort first), and merges it everywhere,
    left to right. A pair whose result is already a token, or with an added token or ``<0xNN>``
    byte piece on one side, is never merged. Stops at ``rows`` new tokens or when no pair occurs
    ``min_freq`` times. Returns the merges as ``[(left, right)]``, in order.
    """
    import json
    import re
    from collections import Counter

    spec = json.loads(tok.to_str())
    known = set(spec["model"]["vocab"]) | {a["content"] for a in spec.get("added_tokens") or []}
    bad = {a["content"] for a in spec.get("added_tokens") or []}
    words: list[list[str]] = []
    for enc in tok.encode_batch(list(texts), add_special_tokens=False):
        current: list[str] = []
        last = object()
        for t, w in zip(enc.tokens, enc.word_ids):
            starts = (w != last) if tok.pre_tokenizer is not None else t.startswith("▁")
            if starts and current:
                words.append(current)
                current = []
            current.append(t)
            last = w
        if current:
            words.append(current)

    def usable(s):
        return s not in bad and not re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", s)

    merges: list[tuple[str, str]] = []
    banned: set = set()
    while len(merges) < rows:
        counts: Counter = Counter()
        for w in words:
            for a, b in zip(w, w[1:]):
                if usable(a) and usable(b) and (a, b) not in banned:
                    counts[(a, b)] += 1
        best = None
        for pair, c in counts.items():
            if c < min_freq:
                continue
            if best is None or c > counts[best] or (c == counts[best] and pair < best):
                best = pair
        if best is None:
            break
        if best[0] + best[1] in known:
            banned.add(best)
            continue
        known.add(best[0] + best[1])
        merges.append(best)
        for k, w in enumerate(words):
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            words[k] = out
    return merges


def with_merges(tok, merges):
    """A copy of ``tok`` (``tokenizers.Tokenizer``) with ``merges`` appended after its own and their
    results added to its vocabulary (ids after every existing one), written here without embscope."""
    import json

    from tokenizers import Tokenizer

    spec = json.loads(tok.to_str())
    model = spec["model"]
    nxt = max([*model["vocab"].values(), *(a["id"] for a in spec.get("added_tokens") or [])]) + 1
    for a, b in merges:
        if a + b not in model["vocab"]:
            model["vocab"][a + b] = nxt
            nxt += 1
    as_lists = not model["merges"] or isinstance(model["merges"][0], list)
    model["merges"] += [[a, b] if as_lists else f"{a} {b}" for a, b in merges]
    return Tokenizer.from_str(json.dumps(spec, ensure_ascii=False))
