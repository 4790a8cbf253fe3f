"""The tokenizer stored in a GGUF file's metadata, rebuilt as a ``tokenizers.Tokenizer``.

GGUF keeps the vocabulary as arrays (``tokenizer.ggml.tokens``, ``.scores``, ``.token_type``,
``.merges``) plus the tokenizer model (``tokenizer.ggml.model``) and the pre-tokenizer name
(``tokenizer.ggml.pre``). llama.cpp is the reference for what these mean; each builder below
rebuilds the same segmentation with HF ``tokenizers`` parts:

- ``gpt2`` (byte-level BPE): the pre-tokenizer's regexes from :mod:`embscope.tokenizer.llamacpp_pre`,
  then GPT-2's byte-to-character table, then the merges. A file that names no pre-tokenizer (old
  conversions: GPT-NeoX, Aquila) gets GPT-2's split, which their own tokenizers use (HF
  ``ByteLevel``, GPT-NeoX's ``tokenizer.json``, Aquila's GPT-2-style BPE); llama.cpp instead falls
  back to a split of its own there and warns that generation quality degrades;
- ``llama`` (SentencePiece): ``" "`` → ``▁`` plus a leading ``▁`` (``add_space_prefix``, default on),
  then merges ranked by piece score — SentencePiece's BPE picks, among adjacent pairs whose join is
  a piece, the one with the highest score; byte fallback to ``<0xNN>`` pieces;
- ``gemma4``: BPE on raw UTF-8 with ``▁`` for spaces, split only at newlines;
- ``bert`` (WordPiece): GGUF marks word-initial pieces with ``▁`` and continuations bare, the
  reverse of BERT's ``##``; lower-casing, accent stripping and punctuation splits as BERT's;
- ``t5`` (SentencePiece Unigram): the file's precompiled normalization map and SentencePiece's
  whitespace clean-up, then Viterbi over the piece scores (no llama.cpp reference ids ship for it;
  see docs/families.md);
- anything else goes through transformers' GGUF conversion, or fails with a one-line error.

The rebuilt ``tokenizer.json`` is cached (:mod:`embscope.tokenizer.cache`) by a hash of the
tokenizer metadata, so a 262k-piece vocabulary is rebuilt once.

GGUF token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
"""

from __future__ import annotations

import logging
from pathlib import Path

from embscope.errors import ModelFileError
from embscope.formats.gguf import open_gguf
from embscope.tokenizer.backends import HFVocabulary
from embscope.tokenizer.llamacpp_pre import CUSTOM_PRE, IGNORE_MERGES, PRE_REGEXES, RAW_UTF8, pre_type

log = logging.getLogger(__name__)

NORMAL, UNKNOWN, CONTROL, USER, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


class Unsupported(Exception):
    """This builder cannot rebuild the tokenizer; try transformers' converter."""


def _added(tokens: list[str], types: list[int]):
    """Control and user-defined pieces as added tokens, matched in the raw text before the model.

    llama.cpp splits user-defined pieces out of the text always and control pieces when asked to
    parse specials; HF does the same with ``normalized=False`` added tokens.
    """
    from tokenizers import AddedToken

    return [AddedToken(tokens[i], special=(t == CONTROL), normalized=False)
            for i, t in enumerate(types) if t in (CONTROL, USER) and tokens[i]]


def _split_sequence(regexes, *, byte_level: bool):
    from tokenizers import Regex, pre_tokenizers

    parts = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in regexes]
    if byte_level:
        parts.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
    return pre_tokenizers.Sequence(parts)


def build_byte_level_bpe(fields: dict):
    """``tokenizer.ggml.model == "gpt2"``: byte-level BPE with llama.cpp's split regexes."""
    from tokenizers import Tokenizer, decoders, models

    name = fields.get("tokenizer.ggml.pre")
    kind = pre_type(name) if name else "gpt2"
    if kind is None or name in CUSTOM_PRE or kind in RAW_UTF8:
        raise Unsupported(f"pre-tokenizer {name!r}")
    if not name:
        log.warning("the GGUF file names no pre-tokenizer (tokenizer.ggml.pre); using GPT-2's split, as "
                    "the byte-level BPE tokenizers of such files do (llama.cpp falls back to its own "
                    "'default' split and warns that quality degrades)")
    tokens = fields["tokenizer.ggml.tokens"]
    types = fields.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens)
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in fields["tokenizer.ggml.merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False,
                               ignore_merges=name in IGNORE_MERGES))
    tok.pre_tokenizer = _split_sequence(PRE_REGEXES[kind], byte_level=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_tokens(_added(tokens, types))
    return tok


def _score_merges(tokens: list[str], scores: list[float], types: list[int]) -> list[tuple[str, str]]:
    """Merges that reproduce SentencePiece's score-driven BPE.

    Every piece ``t`` with a split ``t = a + b`` into two pieces yields the merge ``(a, b)``; merges
    are ranked by the score of ``t`` (higher first, then lower id). Worked example: with pieces
    ``▁t`` (score -1), ``▁the`` (-2) and ``he`` (-3), the merges rank ``(▁, t)``, ``(▁t, he)``,
    ``(h, e)``, so ``▁|t|h|e`` → ``▁t|h|e`` → ``▁t|he`` → ``▁the``, as SentencePiece does.
    """
    vocab = {t: i for i, t in enumerate(tokens)}
    ranked = []
    for i, t in enumerate(tokens):
        if types[i] in (BYTE, CONTROL, UNKNOWN) or len(t) < 2:
            continue
        for k in range(1, len(t)):
            a, b = t[:k], t[k:]
            if a in vocab and b in vocab:
                ranked.append((-scores[i], i, a, b))
    ranked.sort()
    return [(a, b) for _, _, a, b in ranked]


def build_sentencepiece(fields: dict):
    """``tokenizer.ggml.model == "llama"``: SentencePiece BPE with byte fallback."""
    from tokenizers import Tokenizer, decoders, models, normalizers

    tokens = fields["tokenizer.ggml.tokens"]
    n = len(tokens)
    types = fields.get("tokenizer.ggml.token_type") or [NORMAL] * n
    scores = fields.get("tokenizer.ggml.scores")
    if not isinstance(scores, list) or len(scores) != n:  # merge order comes from the scores alone
        raise ValueError(f"tokenizer.ggml.scores must hold one score per token ({n})")
    vocab = {t: i for i, t in enumerate(tokens)}
    unk_id = fields.get("tokenizer.ggml.unknown_token_id", 0)
    unk = tokens[unk_id] if isinstance(unk_id, int) and 0 <= unk_id < n else None
    tok = Tokenizer(models.BPE(vocab=vocab, merges=_score_merges(tokens, scores, types), unk_token=unk,
                               fuse_unk=True, byte_fallback=True))
    prefix = bool(fields.get("tokenizer.ggml.add_space_prefix", True))
    norm = [normalizers.Replace(" ", "▁")]
    if prefix:
        norm.insert(0, normalizers.Prepend("▁"))
    tok.normalizer = normalizers.Sequence(norm)
    dec = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    if prefix:
        dec.append(decoders.Strip(" ", 1, 0))
    tok.decoder = decoders.Sequence(dec)
    tok.add_tokens(_added(tokens, types))
    return tok


def build_gemma4(fields: dict):
    """``tokenizer.ggml.model == "gemma4"``: BPE on raw UTF-8, spaces as ``▁``, split at newlines."""
    from tokenizers import Tokenizer, decoders, models, normalizers

    tokens = fields["tokenizer.ggml.tokens"]
    types = fields.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens)
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in fields["tokenizer.ggml.merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = _split_sequence(PRE_REGEXES["gemma4"], byte_level=False)
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.add_tokens(_added(tokens, types))
    return tok


def build_wordpiece(fields: dict):
    """``tokenizer.ggml.model == "bert"``: WordPiece; GGUF's ``▁word``/``piece`` → BERT's ``word``/``##piece``."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

    tokens = fields["tokenizer.ggml.tokens"]
    types = fields.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens)
    vocab = {}
    for i, t in enumerate(tokens):
        if types[i] in (CONTROL, USER, UNKNOWN, UNUSED) or (t.startswith("[") and t.endswith("]")):
            key = t
        elif t.startswith("▁"):
            key = t[1:]
        else:
            key = "##" + t
        vocab.setdefault(key, i)
    unk_id = fields.get("tokenizer.ggml.unknown_token_id", 100)
    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token=tokens[unk_id], max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=True, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_tokens(_added(tokens, types))
    return tok


def build_unigram(fields: dict):
    """``tokenizer.ggml.model == "t5"``: SentencePiece Unigram (T5, XLM-R); Viterbi over piece scores.

    The text goes through the file's precompiled normalization map (``precompiled_charsmap``);
    when ``remove_extra_whitespaces`` is set, whitespace at both ends goes and inner runs of spaces
    collapse to one, as SentencePiece's normalizer does (so ``" "`` gives no token at all); spaces
    then become ``▁``, with a leading one when ``add_space_prefix`` is set. Checked against
    transformers' own XLM-R tokenizer class on the file's pieces, scores and map
    (``tests/test_tokenizer_families.py``).
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    tokens = fields["tokenizer.ggml.tokens"]
    n = len(tokens)
    types = fields.get("tokenizer.ggml.token_type") or [NORMAL] * n
    scores = fields.get("tokenizer.ggml.scores") or [0.0] * n
    unk_id = fields.get("tokenizer.ggml.unknown_token_id")
    tok = Tokenizer(models.Unigram([(t, float(sc)) for t, sc in zip(tokens, scores)],
                                   unk_id=unk_id if isinstance(unk_id, int) and 0 <= unk_id < n else None,
                                   byte_fallback=any(t == BYTE for t in types)))
    norm = []
    charsmap = fields.get("tokenizer.ggml.precompiled_charsmap")
    if charsmap:
        norm.append(normalizers.Precompiled(bytes(b & 0xFF for b in charsmap)))
    if fields.get("tokenizer.ggml.remove_extra_whitespaces", True):  # SentencePiece: strip ends, collapse runs
        norm += [normalizers.Strip(left=True, right=True), normalizers.Replace(Regex(" {2,}"), " ")]
    if norm:
        tok.normalizer = normalizers.Sequence(norm)
    prefix = bool(fields.get("tokenizer.ggml.add_space_prefix", True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always" if prefix else "never")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always" if prefix else "never")
    tok.add_tokens(_added(tokens, types))
    return tok


BUILDERS = {"gpt2": build_byte_level_bpe, "llama": build_sentencepiece, "gemma4": build_gemma4,
            "bert": build_wordpiece, "t5": build_unigram}


def _via_transformers(path: Path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name, trust_remote_code=False)
    return tok.backend_tokenizer


def transformers_vocabulary(path: Path, *, name: str):
    """The tokenizer transformers' own GGUF conversion builds from the file
    (``AutoTokenizer.from_pretrained(folder, gguf_file=...)``): what a TRL or transformers script that
    loads the GGUF tokenizes with. It can split otherwise than llama.cpp (:func:`gguf_vocabulary`):
    its byte-level BPE gets GPT-2's pre-tokenizer whatever ``tokenizer.ggml.pre`` says."""
    path = Path(path)
    try:
        tok = _via_transformers(path)
    except Exception as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise ModelFileError(f"transformers cannot convert the tokenizer in {path.name} ({first}); leave "
                             "--gguf-tokenizer at llamacpp") from None
    return HFVocabulary(tok, name)


def rebuild(path: Path, fields: dict):
    """A ``tokenizers.Tokenizer`` for the GGUF file's tokenizer (see the module docstring)."""
    model = fields.get("tokenizer.ggml.model")
    builder = BUILDERS.get(model)
    why = f"tokenizer model {model!r}"
    if builder is not None:
        try:
            return builder(fields)
        except Unsupported as exc:
            why = str(exc)
        except Exception as exc:  # damaged arrays (merges that are not pairs, missing scores)
            first = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
            raise ModelFileError(f"cannot rebuild the tokenizer in {path.name}: its token or merge "
                                 f"arrays are damaged ({first}); re-download the file") from None
    try:
        tok = _via_transformers(path)
    except Exception as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise ModelFileError(
            f"cannot rebuild the tokenizer in {path.name}: {why} (tokenizer.ggml.pre="
            f"{fields.get('tokenizer.ggml.pre')!r}) is not one llama.cpp defines, and transformers' "
            f"GGUF conversion failed ({first}); pass the model's tokenizer.json with --tokenizer") from None
    log.info("%s: %s rebuilt through transformers' GGUF conversion", path.name, why)
    return tok


def gguf_vocabulary(path: Path, *, name: str, reader=None):
    """The tokenizer stored in a GGUF file (``reader``: the file's open reader, if there is one).

    Returns ``None`` when the file carries no tokenizer.
    """
    from embscope.tokenizer.memo import identity, remembered

    path = Path(path)
    return remembered(identity(path, name), lambda: _read_gguf_vocabulary(path, name, reader))


def _read_gguf_vocabulary(path: Path, name: str, reader):
    from embscope.tokenizer.cache import cached_tokenizer

    reader = reader if reader is not None else open_gguf(path, tensors=False)
    fields = reader.fields
    if fields.get("tokenizer.ggml.model") is None or "tokenizer.ggml.tokens" not in fields:
        return None
    tok, spec = cached_tokenizer(fields, lambda: rebuild(path, fields))
    model = (spec.get("model") or {}).get("type")
    # GGUF token strings are the tokenizer's pieces, except WordPiece's (``▁w``/``w`` vs ``w``/``##w``)
    pieces = fields["tokenizer.ggml.tokens"] if model == "BPE" else None
    return HFVocabulary(tok, name, spec=spec, pieces=pieces)
