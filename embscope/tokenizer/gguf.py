"""The tokenizer stored in a GGUF file's metadata, rebuilt as a ``tokenizers.Tokenizer``."""

from __future__ import annotations

from pathlib import Path

from embscope.errors import ModelFileError
from embscope.loaders.gguf import open_gguf
from embscope.tokenizer.backends import HFVocabulary
from embscope.tokenizer.patterns import GGUF_PRE_PATTERNS


def _byte_level_bpe(tokens: list[str], merges: list[str], types: list[int], pre: str | None):
    """A ``tokenizers.Tokenizer`` for GGUF's ``gpt2`` tokenizer model (byte-level BPE).

    GGUF token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
    split = GGUF_PRE_PATTERNS.get(pre or "")
    if split is not None:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    elif pre == "smollm":  # SmolLM's tokenizer.json: single digits, then GPT-2's byte-level regex
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    special = [AddedToken(tokens[i], special=True, normalized=False)
               for i, t in enumerate(types) if t in (3, 4)]
    tok.add_special_tokens(special)
    return tok


def gguf_vocabulary(path: Path, *, name: str, reader=None):
    """The tokenizer stored in a GGUF file (``reader``: the file's open reader, if there is one).

    Byte-level BPE (``tokenizer.ggml.model == "gpt2"``) is rebuilt directly from the token, merge
    and type arrays; other tokenizer models go through transformers' GGUF converter.
    """
    path = Path(path)
    reader = reader if reader is not None else open_gguf(path)
    fields = reader.fields
    model = fields.get("tokenizer.ggml.model")
    if model == "gpt2" and "tokenizer.ggml.merges" in fields:
        tokens = fields["tokenizer.ggml.tokens"]
        types = fields.get("tokenizer.ggml.token_type") or [1] * len(tokens)
        pre = fields.get("tokenizer.ggml.pre")
        try:
            tok = _byte_level_bpe(tokens, fields["tokenizer.ggml.merges"], types, pre)
        except Exception as exc:  # merges that are not "a b" pairs of known tokens
            raise ModelFileError(f"cannot rebuild the tokenizer inside {path.name}: {_first_line(exc)}; "
                                 "the file is damaged") from None
        return HFVocabulary(tok, name)
    if model is None:
        return None
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name, trust_remote_code=False)
    except Exception as exc:
        raise ModelFileError(f"cannot read the tokenizer inside {path.name}: {_first_line(exc)}") from None
    return HFVocabulary(tok.backend_tokenizer, name)


def _first_line(exc: BaseException) -> str:
    if isinstance(exc, KeyError):  # transformers' converter looks up fields by name
        return f"the tokenizer metadata lacks {exc}"
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
