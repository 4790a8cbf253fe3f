#!/usr/bin/env bash
# Install embscope with the CPU build of torch, the demo assets, the compiled kernels, and (with
# --dev) the test tools,
# Embedding Atlas (the atlas extra), the reference tokenizer files (scripts/fetch_vocabs.py) and
# the trainers the check is compared with (requirements-trainers.txt, scripts/fetch_trainer_data.py).
# Usage: bash scripts/install.sh [--dev]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
$PY -m pip install -q -r requirements.txt
$PY -m pip install -q --no-deps -r requirements-assets.txt
# compile the kNN kernels and umap-learn's functions into numba's on-disk cache (machine code only,
# nothing about any model): ~40 CPU-s once, instead of inside the first audit
$PY scripts/warm_caches.py
if [[ "${1:-}" == "--dev" ]]; then
  $PY -m pip install -q -r requirements-dev.txt
  # trainers whose own code the tests compare `check` with, without their dependencies, and
  # LLaMA-Factory's demo datasets (from its sdist; its wheel lacks them)
  $PY -m pip install -q --no-deps -r requirements-trainers.txt
  $PY scripts/fetch_trainer_data.py
  # the atlas extra (tests/test_atlas_browser.py), with requirements.txt's pins as constraints:
  # pip fails rather than move a pinned package
  $PY -m pip install -q -c <(grep -v '^-e' requirements.txt) "embedding-atlas==0.26.0"
  # llama.cpp's vocab-only GGUF files + reference ids (tests/test_tokenizer_families.py), ~78 MB
  $PY scripts/fetch_vocabs.py
fi
