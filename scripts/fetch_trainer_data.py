"""Fetch LLaMA-Factory's demo datasets, once, into a cache.

LLaMA-Factory ships its demo datasets (``alpaca_en_demo.json``, ``glaive_toolcall_en_demo.json``,
``dpo_en_demo.json``, ``kto_en_demo.json``, ``c4_demo.jsonl``, …, with ``dataset_info.json``
describing each) in the ``data/`` folder of its source distribution, not in its wheel. This
script downloads that sdist with pip (pinned by version and sha256), checks the hash, and extracts
only ``data/*`` (no subfolders) into ``$EMBSCOPE_CACHE/llamafactory-data`` (default
``~/.cache/embscope/llamafactory-data``). The package is never installed or built from it (the
wheel is installed, without its dependencies, by requirements-dev.txt).
tests/test_llamafactory.py runs LLaMA-Factory's own processors on them beside ``check``.

The datasets are LLaMA-Factory's (Apache-2.0), see its ``data/README.md``.

Usage: python3 scripts/fetch_trainer_data.py [--dest DIR] [--sdist FILE]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from embscope.assets import cache_dir  # noqa: E402
from scripts.fetch_vocabs import fetch  # noqa: E402

PACKAGE = "llamafactory==0.9.5"
SDIST = "llamafactory-0.9.5.tar.gz"
SHA256 = "1702c0bfb864e80577a59521d2edcacd2aab05ec6aee06188fcba335a589681f"
#: the sdist's top folder, then data/: the demo files (data/mllm_demo_data/ is left out: flat names only)
MARKER = "/llamafactory-0.9.5/data/"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", type=Path, default=cache_dir("llamafactory-data"),
                    help="target folder (default: %(default)s)")
    ap.add_argument("--sdist", type=Path, help=f"an already downloaded {SDIST}")
    args = ap.parse_args(argv)
    return fetch(args.dest, args.sdist, package=PACKAGE, name=SDIST, sha256=SHA256, marker=MARKER,
                 what="LLaMA-Factory demo data")


if __name__ == "__main__":
    sys.exit(main())
