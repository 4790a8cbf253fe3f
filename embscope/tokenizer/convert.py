"""A HF ``tokenizers.Tokenizer`` for any vocabulary, for the code that needs one.

Vocabulary extension (:mod:`embscope.extension.candidates`) pre-tokenizes with, adds tokens to and
re-encodes through a ``tokenizers.Tokenizer``. Tokenizer files of other formats are rebuilt as one
that encodes the same ids:

- sentencepiece ``.model`` (Llama 2, Mistral's ``.model.v1``…``v7``): the pieces, scores and types
  go through the GGUF builders of :mod:`embscope.tokenizer.gguf` — BPE models through the
  score-ranked merges, Unigram models through Viterbi over the scores — with the model's own
  normalizer settings (dummy prefix, whitespace clean-up, precompiled map) read from its protobuf;
- tiktoken encodings (Mistral's Tekken, OpenAI's rank files): byte-level BPE over GPT-2's byte
  table with the encoding's split pattern; each token of rank ``r`` with a split ``t = a + b`` into
  two ranked tokens yields the merge ``(a, b)`` at priority ``r``, so the pair whose join has the
  lowest rank merges first, as tiktoken's ``_byte_pair_merge`` does; a pre-token that is itself a
  token is emitted whole (``ignore_merges``), as tiktoken does. Special tokens keep their ids.

``tests/test_tokenizer_families.py`` checks the rebuilt tokenizers against sentencepiece and
mistral-common, id for id.
"""

from __future__ import annotations

import re

from embscope.errors import VocabError
from embscope.tokenizer.backends import (HFVocabulary, SentencePieceVocabulary, TiktokenVocabulary,
                                         bytes_to_unicode)
from embscope.tokenizer.base import Vocabulary


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def _proto_fields(buf: bytes) -> dict[int, list]:
    """Protocol-buffer fields of one message: number → values (ints, or bytes for length-delimited)."""
    out: dict[int, list] = {}
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = _varint(buf, pos)
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise VocabError(f"unexpected protobuf wire type {wire} in a sentencepiece model; the file is damaged")
        out.setdefault(number, []).append(value)
    return out


def sentencepiece_settings(proto: bytes) -> dict:
    """What a sentencepiece ``ModelProto`` says beyond its pieces (``sentencepiece_model.proto``):
    ``model_type`` (1 Unigram, 2 BPE; ``TrainerSpec`` field 3), and from ``NormalizerSpec``
    ``precompiled_charsmap`` (2), ``add_dummy_prefix`` (3), ``remove_extra_whitespaces`` (4),
    with the proto's defaults (Unigram; true; true)."""
    top = _proto_fields(proto)
    trainer = _proto_fields(top[2][-1]) if 2 in top else {}
    norm = _proto_fields(top[3][-1]) if 3 in top else {}
    return {"model_type": trainer.get(3, [1])[-1],
            "precompiled_charsmap": norm.get(2, [b""])[-1],
            "add_dummy_prefix": bool(norm.get(3, [1])[-1]),
            "remove_extra_whitespaces": bool(norm.get(4, [1])[-1])}


def _from_sentencepiece(vocab: SentencePieceVocabulary):
    from tokenizers import Regex, normalizers

    from embscope.tokenizer.gguf import build_sentencepiece, build_unigram

    sp = vocab.sp
    n = sp.get_piece_size()
    settings = sentencepiece_settings(sp.serialized_model_proto())
    types = [2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i)
             else 5 if sp.is_unused(i) else 1 for i in range(n)]
    fields = {"tokenizer.ggml.tokens": [sp.id_to_piece(i) for i in range(n)],
              "tokenizer.ggml.scores": [sp.get_score(i) for i in range(n)],
              "tokenizer.ggml.token_type": types,
              "tokenizer.ggml.unknown_token_id": sp.unk_id(),
              "tokenizer.ggml.add_space_prefix": settings["add_dummy_prefix"],
              "tokenizer.ggml.remove_extra_whitespaces": settings["remove_extra_whitespaces"],
              "tokenizer.ggml.precompiled_charsmap": settings["precompiled_charsmap"]}
    if settings["model_type"] == 1:
        return build_unigram(fields)
    if settings["model_type"] != 2:
        raise VocabError(f"{vocab.name}: a sentencepiece model of type {settings['model_type']} (word or "
                         "character) has no HF tokenizers equivalent here; pass a BPE or Unigram model")
    tok = build_sentencepiece(fields)
    before = []  # the model's own normalization, ahead of the space handling the builder sets
    if settings["precompiled_charsmap"]:
        before.append(normalizers.Precompiled(settings["precompiled_charsmap"]))
    if settings["remove_extra_whitespaces"]:
        before += [normalizers.Strip(left=True, right=True), normalizers.Replace(Regex(" {2,}"), " ")]
    if before:
        tok.normalizer = normalizers.Sequence(before + [tok.normalizer])
    return tok


def tiktoken_merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """BPE merges equivalent to tiktoken's ranks: every split of a ranked token into two ranked
    tokens, ordered by the token's rank (then by the ranks of its parts)."""
    out = []
    for token, rank in ranks.items():
        for k in range(1, len(token)):
            a, b = token[:k], token[k:]
            ra, rb = ranks.get(a), ranks.get(b)
            if ra is not None and rb is not None:
                out.append((rank, ra, rb, a, b))
    out.sort()
    return [(a, b) for _, _, _, a, b in out]


def _from_tiktoken(vocab: TiktokenVocabulary):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    enc = vocab.enc
    ranks = enc._mergeable_ranks  # tiktoken keeps the ranks it was built from here
    table = bytes_to_unicode()

    def spell(b: bytes) -> str:
        return "".join(table[x] for x in b)

    model_vocab = {spell(t): i for t, i in ranks.items()}
    specials = sorted(enc._special_tokens.items(), key=lambda kv: kv[1])
    for text, i in specials:
        model_vocab.setdefault(text, i)
    merges = [(spell(a), spell(b)) for a, b in tiktoken_merges(ranks)]
    tok = Tokenizer(models.BPE(vocab=model_vocab, merges=merges, fuse_unk=False, byte_fallback=False,
                               ignore_merges=True))
    # Oniguruma (HF's regex engine) reads "{1,3}+" as "({1,3})+", not as a possessive {1,3} (Python's
    # regex, tiktoken's): cl100k's digit triples would become whole digit runs. Nothing follows the
    # counted repeat inside its alternative, so the greedy form matches the same.
    pattern = re.sub(r"(\{\d+(?:,\d*)?\})\+", r"\1", enc._pat_str)
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.add_tokens([AddedToken(text, special=True, normalized=False) for text, _ in specials])
    return tok


def hf_tokenizer(vocab: Vocabulary):
    """A ``tokenizers.Tokenizer`` that encodes as ``vocab`` does (see the module docstring)."""
    if isinstance(vocab, HFVocabulary):
        return vocab.tok
    if isinstance(vocab, SentencePieceVocabulary):
        return _from_sentencepiece(vocab)
    if isinstance(vocab, TiktokenVocabulary):
        return _from_tiktoken(vocab)
    raise VocabError(f"{vocab.name}: no HF tokenizers equivalent for a {vocab.backend} vocabulary")
