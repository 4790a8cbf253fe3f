"""The bounds every run works under: what a corpus, a language count, an option or a hub read may
cost at most.

Untrusted input must never exhaust memory or time: a 90 KB Parquet file can decompress to a
gigabyte, a corpus can carry 20,000 distinct ``lang`` values, ``--max-ngram 100000`` asks for
n-grams no corpus has. Each bound below is a default that a real run does not reach; reaching it
is a one-line error (options) or a counted, reported skip (corpus data), never a silent cut. Every
bound is raised with ``--limit NAME=VALUE`` (repeatable; sizes take ``K``/``M``/``G``/``T``, powers
of 1024), and the table of them is ``docs/limits.md``.

>>> parse_limits(["file-bytes=8G", "languages=5000"]).file_bytes == 8 * 2**30
True
>>> parse_limits(["languages=many"])
Traceback (most recent call last):
...
embscope.errors.SpecError: --limit languages=many: the value must be a whole number (sizes may end in K, M, G or T)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from embscope.errors import SpecError, did_you_mean

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


@dataclass(frozen=True)
class Limits:
    """The bounds of one run (``--limit NAME=VALUE`` names a field with ``-`` for ``_``)."""

    #: decompressed bytes read from one corpus file; the rest of the file is skipped (counted as
    #: ``files_cut_at_file_bytes``). 4 GiB: far above a shard, and about a minute of tokenising
    file_bytes: int = 4 << 30
    #: decompressed bytes read from all corpus files of one pass; later files are skipped
    #: (counted as ``files_past_corpus_bytes``)
    corpus_bytes: int = 64 << 30
    #: decompressed bytes per compressed byte of a file (checked once it has given 4 MiB): a
    #: file past it is a decompression bomb, and its rest is skipped (``files_over_ratio``).
    #: Text compresses 3-10x with zstd -19, repetitive logs about 30x; bombs 1,000-30,000x
    ratio: int = 200
    #: distinct languages measured per pass; later ones are measured together as ``other``
    #: (counted in ``languages_folded``). Each language holds a vocabulary-sized count array
    languages: int = 1000
    #: bytes of text the scan holds in memory for ``--corpus`` (all corpora and languages
    #: together); the rest is not read, and a warning names the corpus. 128 MiB keeps a scan of
    #: SmolLM2-135M under 1 GB of memory, and is plenty to find which flagged rows a text produces
    scan_bytes: int = 128 << 20
    #: largest ``--top`` (extension candidates): each one is a row of the extended matrix
    top: int = 100_000
    #: largest ``--max-ngram`` (words per extension term): the counted n-grams grow with it
    max_ngram: int = 8
    #: seconds the range reads of one hub file may take in all (HEAD, header, tensors): an hour
    #: reads a 2.5 GB tensor (Qwen2-72B's embedding) at 0.7 MB/s
    hub_file_seconds: int = 3600
    #: seconds all the hub range reads of one run may take together
    hub_run_seconds: int = 7200
    #: slowest transfer accepted from the hub, bytes per second, averaged over
    #: :data:`embscope.models.hub_remote.RATE_WINDOW` seconds (a server trickling bytes to keep
    #: the read timeout from firing reaches it in one window)
    hub_min_rate: int = 32 << 10
    #: bytes a hub GGUF's metadata and tensor table may take (read before its tensors): a
    #: 262k-token vocabulary takes under 10 MB
    gguf_metadata_bytes: int = 64 << 20
    #: bytes of a ``tokenizer.json`` (checked before it is read): parsing takes about 40 times the
    #: file in memory (a 206 MB one peaked at 8.1 GB); Gemma 3's 262k-token one is 33 MB
    tokenizer_bytes: int = 128 << 20
    #: BPE merges of a ``tokenizer.json`` (checked before the tokenizer is built): about one per
    #: token in real vocabularies (GPT-2 50k, Llama 3 280k, Gemma 3 514k)
    merges: int = 1 << 22

    @classmethod
    def names(cls) -> list[str]:
        return [f.name.replace("_", "-") for f in dataclasses.fields(cls)]


def parse_size(text: str) -> int:
    """``"8G"`` → 8589934592, ``"1000"`` → 1000; ``ValueError`` for anything else."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = t[-1:] if t[-1:] in _UNITS and t[-1:] else ""
    number = t[:-1] if unit else t
    if not number.isdigit() or len(number) > 19:
        raise ValueError(text)
    return int(number) * _UNITS[unit]


def parse_limits(items: Iterable[str] = ()) -> Limits:
    """``["file-bytes=8G", ...]`` → :class:`Limits`; a one-line :class:`SpecError` for a bad item."""
    values: dict[str, int] = {}
    names = Limits.names()
    for item in items:
        name, sep, raw = str(item).partition("=")
        name = name.strip().lower()
        if not sep:
            raise SpecError(f"--limit {item!r} must be NAME=VALUE, e.g. file-bytes=8G; names: {', '.join(names)}")
        if name not in names:
            raise SpecError(f"--limit {name!r} is not a limit{did_you_mean(name, names)}; names: {', '.join(names)}")
        try:
            value = parse_size(raw)
        except ValueError:
            raise SpecError(f"--limit {item}: the value must be a whole number (sizes may end in K, M, G "
                            "or T)") from None
        if value < 1:
            raise SpecError(f"--limit {item}: the value must be at least 1")
        values[name.replace("-", "_")] = value
    return Limits(**values)


def check_at_most(option: str, value: int, limit: int, name: str) -> None:
    """A one-line error when ``value`` of ``option`` passes ``limit`` (raised by ``--limit name=N``)."""
    if value > limit:
        raise SpecError(f"{option} {value} is above the limit of {limit:,}; pass a smaller value, or raise "
                        f"the limit with --limit {name}={value}")


#: the bounds of the run in progress (:func:`using`); readers deep in the stack (the tokenizer
#: loader) read them with :func:`active` instead of taking them through every call
_ACTIVE: ContextVar[Limits | None] = ContextVar("embscope_limits", default=None)


def active() -> Limits:
    """The bounds of the run in progress (:func:`using`), else the defaults."""
    return _ACTIVE.get() or Limits()


@contextmanager
def using(limits: Limits) -> Iterator[Limits]:
    """Make ``limits`` the :func:`active` bounds inside the ``with`` block."""
    token = _ACTIVE.set(limits)
    try:
        yield limits
    finally:
        _ACTIVE.reset(token)
