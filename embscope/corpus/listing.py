"""Corpus paths → the files to read, in corpus order: files, folders, HF dataset folders, globs.

A folder is walked recursively in sorted order, hidden entries skipped. A folder saved by HF
``datasets`` (``state.json`` next to ``dataset_info.json``) is read through the file list in its
``state.json`` (``_data_files``), so cache files that ``Dataset.map`` leaves beside the data
(``cache-*.arrow``) are not read twice; a ``DatasetDict`` folder (``dataset_dict.json``) is one
such folder per split. The ``datasets`` package is not needed: the files are read with pyarrow.

A symbolic link inside a folder is followed only when its target lies inside the same folder; one
that points outside is counted (``symlinks_outside_root``) and not read.

A path with ``*``, ``?`` or ``[`` is a glob (``data/**/*.jsonl.zst``; ``**`` recurses without
descending into linked folders), expanded in sorted order. Several paths may be given; their files
are read in the order given.
"""

from __future__ import annotations

import functools
import glob
import os
from pathlib import Path

from embscope.corpus.readers import COMPRESSIONS, TABLE_FORMATS, TEXT_FORMATS, FileIssues, SourceFile
from embscope.formats.files import read_json

#: the largest ``state.json`` / ``dataset_dict.json`` read (real ones are kilobytes; each is read
#: whole, through the bounded JSON reader: a sparse 3 GiB file or one nested 200,000 deep is an error)
META_BYTES = 16 << 20


def classify(path: Path) -> tuple[str | None, str | None]:
    """``(format, compression)`` from the suffixes: ``eng.jsonl.zst`` → ``("jsonl", "zst")``; a
    FLORES release file (``dev.eng_Latn``, :mod:`embscope.corpus.flores`) is ``("flores", None)``."""
    return _classify_name(Path(path).name)


@functools.lru_cache(maxsize=4096)
def _classify_name(name: str) -> tuple[str | None, str | None]:
    """:func:`classify` of a file name (it reads the name only; cached: a folder of 512 files is
    listed once per corpus pass)."""
    from embscope.corpus.flores import flores_name

    if flores_name(name):
        return "flores", None
    suffixes = [s.lower() for s in Path(name).suffixes]
    comp = COMPRESSIONS.get(suffixes[-1]) if suffixes else None
    if comp:
        suffixes = suffixes[:-1]
        return (TEXT_FORMATS.get(suffixes[-1]) if suffixes else None), comp
    last = suffixes[-1] if suffixes else ""
    return TEXT_FORMATS.get(last) or TABLE_FORMATS.get(last), None


def stem(path: str | Path) -> str:
    """File name without format and compression suffixes: ``eng.jsonl.gz`` → ``eng``."""
    name = Path(path).name
    for _ in range(2):
        p = Path(name)
        if p.suffix.lower() in COMPRESSIONS or p.suffix.lower() in TEXT_FORMATS or p.suffix.lower() in TABLE_FORMATS:
            name = p.stem
    return name


def is_glob(path: str) -> bool:
    return any(c in path for c in "*?[")


def _hf_data_files(folder: Path) -> list[Path] | None:
    """The data files of a folder saved by ``datasets.save_to_disk``, or None when it is not one."""
    state = folder / "state.json"
    if not state.is_file():
        return None
    meta = read_json(state, what="datasets state file", max_bytes=META_BYTES, fix="fix or remove it")
    try:
        names = [d["filename"] for d in meta.get("_data_files", [])]
    except (KeyError, TypeError, AttributeError):
        return None
    return [folder / n for n in names if isinstance(n, str) and "/" not in n and "\\" not in n]


def _outside(p: Path, real_root: Path | None) -> bool:
    """True for a symlink (or a file below one) under the corpus folder whose target lies outside
    it (``real_root``: the folder's resolved path, resolved once per walk; None: it did not resolve)."""
    try:
        real = p.resolve()
        return real_root is None or (real != real_root and real_root not in real.parents)
    except (OSError, RuntimeError):  # a link loop
        return True


def _walk(root: Path, out: list[SourceFile], ignored: list[str], issues: FileIssues | None) -> None:
    hf_dirs: dict[Path, list[Path]] = {}
    emitted: set[Path] = set()
    linked: dict[Path, bool] = {root: False}  # folder -> a link lies between the root and it
    try:
        real_root: Path | None = root.resolve()  # once per walk, not twice per file
    except (OSError, RuntimeError):  # a link loop: every file counts as outside
        real_root = None

    def through_link(folder: Path) -> bool:
        if folder not in linked:
            linked[folder] = folder.is_symlink() or through_link(folder.parent)
        return linked[folder]

    # sorted by components (Path's own order), compared as tuples of strings: far cheaper
    for p in sorted(root.rglob("*"), key=lambda q: q.parts):
        rel = p.relative_to(root).parts
        if any(part.startswith(".") for part in rel) or not p.is_file():
            continue
        # a path with no link between the root and it lies inside the root: only the others are
        # resolved (one resolve per file cost ~60 µs; a 512-file corpus is walked once per pass)
        if (p.is_symlink() or through_link(p.parent)) and _outside(p, real_root):
            if issues is not None:
                issues.add(p, "symlinks_outside_root")
            continue
        folder = p.parent
        if folder not in hf_dirs:
            hf_dirs[folder] = _hf_data_files(folder) or []
        listed = hf_dirs[folder]
        if listed:  # an HF dataset folder: only its listed data files, in listed order
            if folder not in emitted:
                emitted.add(folder)
                out.extend(SourceFile(str(f), str(root), "arrow", None) for f in listed
                           if f.is_file() and not _outside(f, real_root))
            elif p not in listed and p.suffix.lower() not in {".json"}:
                ignored.append(str(p))
            continue
        fmt, comp = classify(p)
        if fmt:
            out.append(SourceFile(str(p), str(root), fmt, comp))
        elif p.name not in {"dataset_info.json", "state.json", "dataset_dict.json"}:
            ignored.append(str(p))


def _match(parts: tuple[str, ...], pattern: tuple[str, ...]) -> bool:
    """Path components against glob components, ``**`` matching any number of them."""
    import fnmatch

    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_match(parts[i:], pattern[1:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], pattern[0]) and _match(parts[1:], pattern[1:])


def expand_glob(pattern: str) -> list[str]:
    """The paths a glob matches, sorted; ``**`` recurses without following symlinked folders (so
    links that point back up cannot make the walk exponential), and hidden entries are skipped.

    >>> expand_glob("corpora/udhr/en*.jsonl")
    ['corpora/udhr/eng.jsonl']
    """
    if "**" not in pattern:
        return sorted(glob.glob(pattern))
    parts = Path(pattern).parts
    n = next(i for i, part in enumerate(parts) if is_glob(part))
    base = Path(*parts[:n]) if n else Path(".")
    rest = parts[n:]
    found = []
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        rel = Path(dirpath).relative_to(base).parts
        for name in dirnames + [f for f in filenames if not f.startswith(".")]:
            if _match(rel + (name,), rest):
                found.append(str(base / Path(*rel, name)) if n else str(Path(*rel, name)))
    return sorted(found)


def list_files(paths, ignored: list[str] | None = None, issues: FileIssues | None = None) -> list[SourceFile]:
    """Expand corpus paths (files, folders, globs; one or a list) into readable files, in order.

    ``ignored`` collects files with suffixes the reader does not read; ``issues`` counts links
    that point outside their corpus folder (not followed). A path that matches nothing is
    returned as no files; the caller decides whether that is an error.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    ignored = ignored if ignored is not None else []
    out: list[SourceFile] = []
    for raw in paths:
        text = os.path.expanduser(str(raw))
        matches = expand_glob(text) if is_glob(text) else [text]
        for m in matches:
            p = Path(m)
            if p.is_dir():
                _walk(p, out, ignored, issues)
            elif p.is_file():
                fmt, comp = classify(p)
                if fmt:
                    out.append(SourceFile(str(p), str(p) if not is_glob(text) else str(p.parent), fmt, comp))
                else:
                    ignored.append(str(p))
    seen: set[str] = set()
    return [f for f in out if not (f.path in seen or seen.add(f.path))]
