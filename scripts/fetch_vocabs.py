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


def download(tmp: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q",
           "-d", str(tmp), PACKAGE]
    subprocess.run(cmd, check=True)
    return tmp / SDIST


def extract(sdist: Path, dest: Path) -> list[Path]:
    """Extract the ``ggml-vocab-*`` members (flat, by base name only) into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    with tarfile.open(sdist, "r:gz") as tar:
        for m in tar:
            if not m.isfile() or MARKER not in "/" + m.name:
                continue
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", type=Path, default=cache_dir("vocabs"), help="target folder (default: %(default)s)")
    ap.add_argument("--sdist", type=Path, help="an already downloaded llama_cpp_python-0.3.36.tar.gz")
    args = ap.parse_args(argv)
    stamp = args.dest / ".sha256"
    if stamp.is_file() and stamp.read_text().strip() == SHA256:
        print(f"vocab files already in {args.dest}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        sdist = args.sdist or download(Path(tmp))
        got = file_sha256(sdist)
        if got != SHA256:
            print(f"error: {sdist.name} has sha256 {got}, expected {SHA256}; not extracting", file=sys.stderr)
            return 1
        files = extract(sdist, args.dest)
    stamp.write_text(SHA256 + "\n")
    size = sum(f.stat().st_size for f in files)
    print(f"{len(files)} files, {size / 1e6:.1f} MB in {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
