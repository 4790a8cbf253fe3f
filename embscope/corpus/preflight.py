"""Input paths checked before a model loads: a corpus or training-data path that holds nothing
embscope reads is a one-line error in a second, not after a minute of loading and scanning.

What is refused (globs are left to the readers, which say when a pattern matches nothing):

- a file whose type the reader does not read, named as such: ``x.csv is a .csv file, which
  embscope does not read …`` with the conversion that fixes it;
- an empty file (0 bytes);
- a folder with no file of a readable type (its file types listed), or only empty ones.

A folder that holds some readable files and some others is read: the others are counted
(``ignored_files``) as before. Training data (``check --data``, ``diff --data``) also reads
``.json`` files (:func:`embscope.corpus.conversations.data_files`).

>>> from embscope.assets import corpora_root
>>> check_readable([corpora_root() / "udhr", corpora_root() / "chat" / "medical-chat.jsonl"])
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from embscope.corpus.listing import is_glob
from embscope.corpus.readers import READABLE
from embscope.errors import CorpusError

#: what to do with a file type people often have but the readers do not read
CONVERT = {
    ".csv": "convert it to .jsonl (pandas: df.to_json(path, orient='records', lines=True)) or .parquet "
            "(df.to_parquet(path))",
    ".tsv": "convert it to .jsonl (pandas: pd.read_csv(path, sep='\\t').to_json(out, orient='records', "
            "lines=True)) or .parquet",
    ".xlsx": "save it as .parquet or .jsonl (pandas: pd.read_excel(path).to_parquet(out))",
    ".pdf": "extract its text into a .txt file first",
    ".docx": "extract its text into a .txt file first",
    ".html": "extract its text into a .txt file first",
}
#: the formats training data may be in (the corpus formats and ``.json``)
TRAINING_READABLE = ".jsonl, .json, .parquet, .arrow, .txt, .md (optionally .gz/.zst/.bz2) or an HF datasets folder"


def _suffix(path: Path) -> str:
    """``.csv`` for ``x.csv``, ``.csv.gz`` for ``x.csv.gz``, ``(no suffix)`` for ``README``."""
    suffixes = [s.lower() for s in path.suffixes][-2:]
    if len(suffixes) == 2 and suffixes[-1] not in (".gz", ".zst", ".zstd", ".bz2"):
        suffixes = suffixes[-1:]
    return "".join(suffixes) or "(no suffix)"


def _unreadable(path: Path, training: bool) -> str:
    """The message for a file of a type the readers do not read."""
    what = "training data" if training else "a corpus"
    suffix = _suffix(path)
    fix = CONVERT.get(suffix.split(".gz")[0], f"pass {TRAINING_READABLE if training else READABLE} files")
    kind = f"a {suffix} file" if suffix != "(no suffix)" else "a file without a suffix"
    return f"{path} is {kind}, which embscope does not read as {what}: {fix}"


def _files(path: Path, training: bool) -> tuple[list[Path], list[str]]:
    """The readable files under ``path`` and the paths it leaves out (the readers' own listing)."""
    ignored: list[str] = []
    if training:
        from embscope.corpus.conversations import data_files

        files = data_files([path], ignored)
    else:
        from embscope.corpus.listing import list_files

        files = list_files([path], ignored)
    return [Path(f.path) for f in files], ignored


def check_readable(paths, *, training: bool = False) -> None:
    """Raise :class:`CorpusError` (one line) for a path among ``paths`` that holds nothing the
    readers read (see the module docstring); globs and missing paths are left to the readers.

    Args:
        paths: corpus or training-data paths (files, folders).
        training: the paths are training data (``.json`` is read too).
    """
    for raw in paths:
        path = Path(raw)
        if is_glob(str(raw)) or not path.exists():
            continue
        files, ignored = _files(path, training)
        if path.is_file():
            if not files:
                raise CorpusError(_unreadable(path, training))
            if path.stat().st_size == 0:
                raise CorpusError(f"{path} is empty (0 bytes): pass a file with text")
            continue
        if not files:
            kinds = Counter(_suffix(Path(p)) for p in ignored)
            held = ", ".join(f"{n:,} {k}" for k, n in kinds.most_common(4))
            raise CorpusError(f"{path} holds no file embscope reads as {'training data' if training else 'a corpus'}"
                              f" ({held or 'it is empty'}): pass "
                              f"{TRAINING_READABLE if training else READABLE} files")
        if all(f.stat().st_size == 0 for f in files):
            raise CorpusError(f"{path} holds only empty files ({len(files):,}): pass files with text")
