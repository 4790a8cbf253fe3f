"""A disk cache for tokenizers rebuilt from GGUF metadata.

Rebuilding a 262k-piece SentencePiece vocabulary (Gemma 3) means deriving ~10⁶ merges in Python;
reading the rebuilt ``tokenizer.json`` back takes a fraction of that. The key is a sha256 over the
file's ``tokenizer.*`` metadata (names and values) plus :data:`BUILD_VERSION`, so two files with
the same tokenizer share an entry and a change to the builders invalidates old entries. Entries
live in ``$EMBSCOPE_CACHE/tokenizers`` (default ``~/.cache/embscope/tokenizers``) and are written
atomically (temporary file, then rename).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from embscope.assets import cache_dir as user_cache_dir

log = logging.getLogger(__name__)

#: bump when a builder in :mod:`embscope.tokenizer.gguf` changes what it produces
BUILD_VERSION = 1


def _default(o):
    if isinstance(o, (bytes, bytearray)):
        return o.hex()
    return str(o)


def metadata_key(fields: dict) -> str:
    """sha256 over the ``tokenizer.*`` metadata (sorted by key) and the builder version."""
    h = hashlib.sha256(f"embscope-tokenizer-v{BUILD_VERSION}".encode())
    for key in sorted(k for k in fields if k.startswith("tokenizer.")):
        h.update(key.encode("utf-8", "surrogatepass") + b"\0")
        h.update(json.dumps(fields[key], ensure_ascii=False, default=_default).encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()


def _spec_from_json(text: str) -> dict:
    """Top-level keys of a ``tokenizer.json`` except the model's vocab/merges."""
    spec = json.loads(text)
    model = spec.get("model") or {}
    model.pop("vocab", None)
    model.pop("merges", None)
    return spec


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def cached_tokenizer(fields: dict, build: Callable[[], object], *, cache_dir: Path | None = None):
    """``(tokenizer, spec)`` for GGUF tokenizer metadata: from the cache, or built and stored.

    ``spec`` is the ``tokenizer.json`` content without vocabulary and merges; it is stored next
    to the entry (``<key>.spec.json``) so a warm load does not parse the large file twice.
    """
    from tokenizers import Tokenizer

    folder = Path(cache_dir) if cache_dir is not None else user_cache_dir("tokenizers")
    key = metadata_key(fields)
    path, spec_path = folder / f"{key}.json", folder / f"{key}.spec.json"
    if path.is_file() and spec_path.is_file():
        try:
            spec = json.loads(spec_path.read_text("utf-8"))
            return Tokenizer.from_file(str(path)), spec
        except Exception as exc:  # a damaged entry is rebuilt, not fatal
            log.warning("ignoring damaged tokenizer cache entry %s (%s)", path, exc)
    tok = build()
    text = tok.to_str()
    spec = _spec_from_json(text)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _write_atomic(path, text)
        _write_atomic(spec_path, json.dumps(spec, ensure_ascii=False))
    except OSError as exc:  # read-only home: still works, just slower next time
        log.warning("cannot write the tokenizer cache in %s (%s); it will be rebuilt next time", folder, exc)
    return tok, spec
