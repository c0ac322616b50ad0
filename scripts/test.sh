#!/usr/bin/env bash
# Set up and run the whole test suite: the main environment, then the separate vLLM environment.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

# The Redis store's tests start a real redis-server (Debian's package) on a loopback port.
if ! command -v redis-server >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null) ||
      echo "warning: could not install redis-server; the Redis store tests will be skipped" >&2
  else
    echo "warning: redis-server is missing (apt-get install redis-server); the Redis store tests will be skipped" >&2
  fi
fi

export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# DeepSpeed on CPU: its op builder must not look for CUDA, and it compiles into the project.
export DS_ACCELERATOR=cpu TORCH_EXTENSIONS_DIR="$PWD/.torch_extensions"

uv run --frozen ruff check .
uv run --frozen ruff format --check .
uv run --frozen pytest "$@"
bash scripts/test-vllm.sh
# The install path a user takes (plain pip, clean venvs, outside the repo); INSTALL_CHECK=0 skips it.
if [ "${INSTALL_CHECK:-1}" != 0 ]; then bash scripts/test-install.sh; fi
