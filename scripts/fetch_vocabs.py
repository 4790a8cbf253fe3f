"""Fetch llama.cpp's vocab-only GGUF files and their reference token ids, once, into a cache.

llama.cpp tests its tokenizers on ``models/ggml-vocab-<family>.gguf`` (the vocabulary of one
model family, no weights) with ``.gguf.inp`` (test strings separated by a line
``__ggml_vocab_test__``) and ``.gguf.out`` (the ids llama.cpp's reference produced, one line per
string). Those files ship inside the llama-cpp-python source distribution. This script downloads
that sdist with pip (pinned by version and sha256), checks the hash, and extracts only the
``ggml-vocab-*`` files into ``$EMBSCOPE_CACHE/vocabs`` (default ``~/.cache/embscope/vocabs``).
The package is never installed or built. tests/test_tokenizer_families.py reads them from there.

Usage: python3 scripts/fetch_vocabs.py [--dest DIR] [--sdist FILE]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from embscope.assets import cache_dir, file_sha256  # noqa: E402

PACKAGE = "llama-cpp-python==0.3.36"
SDIST = "llama_cpp_python-0.3.36.tar.gz"
SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
MARKER = "/vendor/llama.cpp/models/ggml-vocab-"


def download(tmp: Path, package: str = PACKAGE, sdist: str = SDIST) -> Path:
    """``package``'s source distribution, downloaded by pip into ``tmp`` (never installed)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q",
           "-d", str(tmp), package]
    subprocess.run(cmd, check=True)
    return tmp / sdist


def extract(sdist: Path, dest: Path, marker: str = MARKER) -> list[Path]:
    """Extract the members whose path holds ``marker``, not in a folder below it, into ``dest`` (by
    base name)."""
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    with tarfile.open(sdist, "r:gz") as tar:
        for m in tar:
            if not m.isfile() or marker not in "/" + m.name or "/" in ("/" + m.name).split(marker, 1)[1]:
                continue  # not a member, or one in a folder below the marker's
            name = Path(m.name).name
            if "/" in name or name.startswith("."):
                continue
            src = tar.extractfile(m)
            fd, tmp = tempfile.mkstemp(dir=dest, suffix=".part")
            with os.fdopen(fd, "wb") as out:
                out.write(src.read())
            os.chmod(tmp, 0o644)
            os.replace(tmp, dest / name)
            written.append(dest / name)
    return written


def fetch(dest: Path, sdist: Path | None, *, package: str = PACKAGE, name: str = SDIST, sha256: str = SHA256,
          marker: str = MARKER, what: str = "vocab files") -> int:
    """Download (or take) the sdist, check its hash, extract the ``marker`` members into ``dest``
    once (a ``.sha256`` stamp says they are there); the exit code."""
    stamp = dest / ".sha256"
    if stamp.is_file() and stamp.read_text().strip() == sha256:
        print(f"{what} already in {dest}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        sdist = sdist or download(Path(tmp), package, name)
        got = file_sha256(sdist)
        if got != sha256:
            print(f"error: {sdist.name} has sha256 {got}, expected {sha256}; not extracting", file=sys.stderr)
            return 1
        files = extract(sdist, dest, marker)
    stamp.write_text(sha256 + "\n")
    size = sum(f.stat().st_size for f in files)
    print(f"{len(files)} files, {size / 1e6:.1f} MB in {dest}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", type=Path, default=cache_dir("vocabs"), help="target folder (default: %(default)s)")
    ap.add_argument("--sdist", type=Path, help="an already downloaded llama_cpp_python-0.3.36.tar.gz")
    args = ap.parse_args(argv)
    return fetch(args.dest, args.sdist)


if __name__ == "__main__":
    sys.exit(main())
