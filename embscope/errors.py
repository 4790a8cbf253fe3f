"""The exception family. Every message is one line: what is wrong, then what to do.

The CLI turns any :class:`EmbscopeError` into ``error: <message>`` and exit code 2, in one place
(``embscope.cli``); anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class EmbscopeError(Exception):
    """Base class. ``str(err)`` is shown to a library user as it is; the CLI shows
    :meth:`cli_message`, which differs only where the remedy is an option (a flag there, a keyword
    argument here)."""

    def cli_message(self) -> str:
        return str(self)


class SpecError(EmbscopeError):
    """A model or tokenizer spec that resolves to nothing (unknown alias, missing path, uncached hub id)."""


class PickleRefused(SpecError):
    """A folder whose only weights are PyTorch pickles, which can run code when loaded; refused
    unless the caller allows them. The remedy names the library keyword or the CLI flag."""

    #: how a library caller allows them, and how a command-line user does
    keyword = "trust_pickle=True"
    flag = "--trust-pickle"

    def __init__(self, folder) -> None:
        self.folder = folder
        super().__init__(self._text(self.keyword))

    def _text(self, how: str) -> str:
        return (f"{self.folder} holds only PyTorch .bin weights (pickle, which can run code when loaded); "
                f"convert them to safetensors, or pass {how} to load them with torch.load(weights_only=True)")

    def cli_message(self) -> str:
        return self._text(self.flag)


class ModelFileError(EmbscopeError):
    """A model file that is corrupt, truncated, lies about itself, or lacks the tensors we need."""


class VocabError(EmbscopeError):
    """A tokenizer that cannot be read, or that does not fit the matrix."""


class CorpusError(EmbscopeError):
    """A corpus path that holds no usable text."""


class OutputError(EmbscopeError):
    """An output folder that cannot be written. Its messages name the command-line options
    (``--out``, ``--force``, ``--apply``, ``--repair``), which :meth:`cli_message` keeps;
    ``str(err)``, what a library caller reads, names the keywords instead (``out``, ``force=True``,
    ``apply_to``, ``repair_to``).

    >>> str(OutputError("x exists; pass another --out, or --force to replace it"))
    'x exists; pass another out, or force=True to replace it'
    """

    #: the command-line option → the API keyword that does the same
    KEYWORDS = {"--out": "out", "--force": "force=True", "--apply": "apply_to", "--repair": "repair_to"}

    def __str__(self) -> str:
        import re

        text = super().__str__()
        for flag, keyword in self.KEYWORDS.items():
            text = re.sub(rf"{flag}(?![\w-])", keyword, text)
        return text

    def cli_message(self) -> str:
        return super().__str__()


class InputError(EmbscopeError):
    """An input path the operating system refuses to read (a name past PATH_MAX, a vanished file)."""


class DeviceError(EmbscopeError):
    """A device that was asked for but is not there (``--device cuda`` without a GPU)."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'qwen2-7b'?)`` for the closest choice, or ``''`` when nothing is close.

    >>> did_you_mean("qwen2-7", ["qwen2-7b", "gpt2"])
    " (did you mean 'qwen2-7b'?)"
    """
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


class ArgumentError(SpecError, TypeError):
    """A Python API argument of the wrong type (``scan(123)``, ``corpora="medical"`` where a list is
    expected, ``top=True``), refused at the call before any work; a ``TypeError`` too."""
