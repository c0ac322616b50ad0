#!/usr/bin/env bash
# Build the main environment (.venv) from uv.lock: every package editable, plus the test tools.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v uv >/dev/null 2>&1; then
  echo "installing uv (pip --user)" >&2
  python3 -m pip install --quiet --user uv
  export PATH="$HOME/.local/bin:$PATH"
fi
# Precompiled bytecode: this machine sets PYTHONDONTWRITEBYTECODE, so without it every test subprocess
# recompiles torch/transformers/TRL on import (about 1.5 s each).
uv sync --frozen --compile-bytecode
