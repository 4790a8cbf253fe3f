"""Tokenizers read once per process: a file read again is the vocabulary already built.

A process often reads one tokenizer many times: ``diff`` reads each folder's tokenizer in several
steps, a notebook or a training callback calls again and again, a test suite loads the demo models
in every test. Parsing a 262k-token ``tokenizer.json`` (or rebuilding a GGUF's) takes seconds, so
the built vocabulary is kept, keyed by the file's identity (:func:`identity`: real path, inode,
size, mtime in ns, and the name given), the :data:`KEPT` last used. A file rewritten in place
changes its mtime (and mostly its size), so it is read again. embscope never changes a vocabulary
once built, so one object serves every caller.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from embscope.formats.files import file_identity

#: vocabularies kept (a 262k-token tokenizer parses into ~100 MB)
KEPT = 4

_LOADED: OrderedDict[tuple, Any] = OrderedDict()


def identity(path: Path, name: str) -> tuple:
    """What makes two reads of ``path`` the same tokenizer: the file's identity
    (:func:`~embscope.formats.files.file_identity`) and the name the vocabulary is given."""
    return (*file_identity(path), name)


def remembered(key: tuple, build: Callable[[], Any]) -> Any:
    """``build()`` for ``key``, built once while the key stays among the :data:`KEPT` last used
    (an error is not kept: the next call builds again)."""
    hit = _LOADED.get(key)
    if hit is not None:
        _LOADED.move_to_end(key)
        return hit
    out = build()
    _LOADED[key] = out
    while len(_LOADED) > KEPT:
        _LOADED.popitem(last=False)
    return out

