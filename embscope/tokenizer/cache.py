"""A disk cache for tokenizers rebuilt from GGUF metadata.

Rebuilding a 262k-piece SentencePiece vocabulary (Gemma 3) means deriving ~515k merges in Python;
the cache keeps the result. The key is a sha256 over the file's ``tokenizer.*`` metadata (names and
values) plus :data:`BUILD_VERSION`, so two files with the same tokenizer (two quantisations of one
model) share an entry and a change to the builders invalidates old entries. Entries live in
``$EMBSCOPE_CACHE/tokenizers`` (default ``~/.cache/embscope/tokenizers``) and are written atomically
(temporary file, then rename). One entry is:

- ``<key>.json``: the whole ``tokenizer.json``, readable by any HF ``tokenizers`` user;
- ``<key>.spec.json``: the same without the model's vocabulary and merges (normalizer,
  pre-tokenizer, decoder, added tokens, model options);
- for BPE models, ``<key>.merges.npy`` (each merge as the two ids of its parts, ``int32``) and,
  unless the model's pieces by id are exactly the file's ``tokenizer.ggml.tokens`` (the usual
  case), ``<key>.vocab.json`` (the pieces by id, ``null`` for an id the model vocabulary lacks).

Reading back the ``tokenizer.json`` goes through ``serde_json`` values for ~10⁶ strings (about
1.7 s for Gemma 3 on the development machine); the BPE model is instead rebuilt from the piece list
and the merge id pairs (read without importing numpy), and the rest of the tokenizer from the small
spec. The result serialises to
the same ``tokenizer.json`` as the built one (``tests/test_tokenizer_families.py`` checks it); an
entry that does not come back consistent is read from ``<key>.json`` instead.
"""

from __future__ import annotations

import array
import ast
import hashlib
import json
import logging
import operator
import os
import struct
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from embscope.assets import cache_dir as user_cache_dir

log = logging.getLogger(__name__)

#: bump when a builder in :mod:`embscope.tokenizer.gguf` changes what it produces
BUILD_VERSION = 3

#: BPE options copied from the spec into ``tokenizers.models.BPE``
_BPE_OPTIONS = ("dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk",
                "byte_fallback", "ignore_merges")


def _default(o):
    if isinstance(o, (bytes, bytearray)):
        return o.hex()
    return str(o)


def _hash_value(h, value) -> None:
    """Feed one metadata value to ``h``, fast for the large token/score arrays (10⁵–10⁶ items)."""
    if isinstance(value, list) and value and all(isinstance(v, str) for v in (value[0], value[-1])):
        try:
            h.update(b"S" + struct.pack(f"<{len(value)}Q", *map(len, value)))
            h.update("".join(value).encode("utf-8", "surrogatepass"))
            return
        except TypeError:  # not all strings after all
            pass
    elif isinstance(value, list) and value and type(value[0]) in (int, float):
        try:  # GGUF arrays hold one type: float32 scores, small integer token types
            kind = "d" if type(value[0]) is float else "q"
            h.update(kind.encode() + array.array(kind, value).tobytes())
            return
        except (TypeError, OverflowError):
            pass
    h.update(b"J" + json.dumps(value, ensure_ascii=False, default=_default).encode("utf-8", "surrogatepass"))


def metadata_key(fields: dict) -> str:
    """sha256 over the ``tokenizer.*`` metadata (sorted by key) and the builder version."""
    h = hashlib.sha256(f"embscope-tokenizer-v{BUILD_VERSION}".encode())
    for key in sorted(k for k in fields if k.startswith("tokenizer.")):
        h.update(key.encode("utf-8", "surrogatepass") + b"\0")
        _hash_value(h, fields[key])
        h.update(b"\0")
    return h.hexdigest()


def _split_json(text: str) -> tuple[dict, dict]:
    """``(spec, model)`` of a ``tokenizer.json``: everything but the model's vocab and merges, and
    the model section whole."""
    spec = json.loads(text)
    model = dict(spec.get("model") or {})
    spec["model"] = {k: v for k, v in model.items() if k not in ("vocab", "merges")}
    return spec, model


def _write_atomic(path: Path, data: str | bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _bpe_arrays(model: dict) -> tuple[list[str | None], bytes]:
    """``(pieces by id, merges as an .npy file)`` for the ``model`` section of a BPE ``tokenizer.json``."""
    import io

    import numpy as np

    vocab = model["vocab"]
    pieces: list[str | None] = [None] * (max(vocab.values(), default=-1) + 1)
    for piece, i in vocab.items():
        pieces[i] = piece
    pairs = [m if isinstance(m, list) else m.split(" ", 1) for m in model.get("merges") or []]
    ids = np.array([(vocab[a], vocab[b]) for a, b in pairs], dtype=np.int32).reshape(-1, 2)
    buf = io.BytesIO()
    np.save(buf, ids, allow_pickle=False)
    return pieces, buf.getvalue()


def _read_pairs(path: Path) -> array.array:
    """The int32 ``(M, 2)`` array ``np.save`` wrote to ``path``, flat (``a0, b0, a1, b1, …``).

    Read by hand (magic, version, header dict, raw data; numpy's ``format.py`` documents the
    layout) because importing numpy costs a warm load a tenth of a second or more."""
    data = path.read_bytes()
    if data[:6] != b"\x93NUMPY" or data[6] not in (1, 2, 3):
        raise ValueError("not an .npy file")
    start = 10 if data[6] == 1 else 12
    size = int.from_bytes(data[8:start], "little")
    header = ast.literal_eval(data[start:start + size].decode("latin-1"))
    shape = header.get("shape")
    if header.get("descr") != "<i4" or header.get("fortran_order") or not (
            isinstance(shape, tuple) and len(shape) == 2 and shape[1] == 2):
        raise ValueError(f"merge ids stored as {header}, not int32 pairs")
    ids = array.array("i")
    ids.frombytes(data[start + size:])
    if sys.byteorder == "big":
        ids.byteswap()
    if len(ids) != 2 * shape[0]:
        raise ValueError(f"{len(ids)} merge ids for shape {shape}")
    return ids


def _bpe_from_arrays(spec: dict, pieces: list[str | None], merge_ids: array.array):
    """A tokenizer equal to the cached one: the BPE model from its arrays, the rest from ``spec``."""
    from tokenizers import AddedToken, Tokenizer, models

    opts = spec["model"]
    if merge_ids and not (0 <= min(merge_ids) and max(merge_ids) < len(pieces)):
        raise ValueError(f"merge ids do not index the {len(pieces)} pieces")
    if None in pieces:
        vocab = {p: i for i, p in enumerate(pieces) if p is not None}
    else:
        vocab = dict(zip(pieces, range(len(pieces))))
    merges = []
    if len(merge_ids) > 2:  # two C-level gathers instead of 10⁶ Python indexings
        left = operator.itemgetter(*merge_ids[0::2])(pieces)
        right = operator.itemgetter(*merge_ids[1::2])(pieces)
        merges = list(zip(left, right))
    elif merge_ids:
        merges = [(pieces[merge_ids[0]], pieces[merge_ids[1]])]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges,
                               **{k: opts[k] for k in _BPE_OPTIONS if opts.get(k) is not None}))
    shell = dict(spec, added_tokens=[], model={"type": "BPE", "vocab": {}, "merges": []})
    parts = Tokenizer.from_str(json.dumps(shell))
    for part in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        if spec.get(part) is not None:
            setattr(tok, part, getattr(parts, part))
    added = spec.get("added_tokens") or []
    tok.add_tokens([AddedToken(a["content"], single_word=a.get("single_word", False), lstrip=a.get("lstrip", False),
                               rstrip=a.get("rstrip", False), normalized=a.get("normalized", True),
                               special=a.get("special", False)) for a in added])
    if any(tok.token_to_id(a["content"]) != a["id"] for a in added):
        raise ValueError("added token ids do not come back as stored")
    return tok


def _read_entry(path: Path, spec: dict, tokens: list | None):
    from tokenizers import Tokenizer

    vocab_path, merges_path = path.with_suffix(".vocab.json"), path.with_suffix(".merges.npy")
    if (spec.get("model") or {}).get("type") == "BPE" and merges_path.is_file() and (
            vocab_path.is_file() or isinstance(tokens, list)):
        try:
            pieces = json.loads(vocab_path.read_text("utf-8")) if vocab_path.is_file() else tokens
            return _bpe_from_arrays(spec, pieces, _read_pairs(merges_path))
        except Exception as exc:  # fall back to the whole tokenizer.json
            log.warning("tokenizer cache entry %s: arrays unusable (%s); reading the tokenizer.json", path, exc)
    return Tokenizer.from_file(str(path))


def cached_tokenizer(fields: dict, build: Callable[[], object], *, cache_dir: Path | None = None):
    """``(tokenizer, spec)`` for GGUF tokenizer metadata: from the cache, or built and stored.

    ``spec`` is the ``tokenizer.json`` content without vocabulary and merges; it is stored next
    to the entry (``<key>.spec.json``) so a warm load does not parse the large file.
    """
    folder = Path(cache_dir) if cache_dir is not None else user_cache_dir("tokenizers")
    key = metadata_key(fields)
    path, spec_path = folder / f"{key}.json", folder / f"{key}.spec.json"
    if path.is_file() and spec_path.is_file():
        try:
            spec = json.loads(spec_path.read_text("utf-8"))
            return _read_entry(path, spec, fields.get("tokenizer.ggml.tokens")), spec
        except Exception as exc:  # a damaged entry is rebuilt, not fatal
            log.warning("ignoring damaged tokenizer cache entry %s (%s)", path, exc)
    tok = build()
    text = tok.to_str()
    spec, model = _split_json(text)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if model.get("type") == "BPE":
            pieces, merges = _bpe_arrays(model)
            _write_atomic(path.with_suffix(".merges.npy"), merges)
            if pieces != fields.get("tokenizer.ggml.tokens"):  # else the file's own token list serves
                _write_atomic(path.with_suffix(".vocab.json"), json.dumps(pieces, ensure_ascii=False))
        _write_atomic(path, text)
        _write_atomic(spec_path, json.dumps(spec, ensure_ascii=False))
    except OSError as exc:  # read-only home: still works, just slower next time
        log.warning("cannot write the tokenizer cache in %s (%s); it will be rebuilt next time", folder, exc)
    return tok, spec
