#!/usr/bin/env bash
# Set up and run the whole test suite: the main environment, then the separate vLLM environment, with the install
# check (scripts/test-install.sh) beside them.
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
# The install path a user takes (plain pip, clean venvs, outside the repo; INSTALL_CHECK=0 skips it) runs beside
# the suites: it is mostly downloads and pip. Its log is printed, and its result counts, at the end.
install_pid=""
if [ "${INSTALL_CHECK:-1}" != 0 ]; then
  install_log="$(mktemp "${TMPDIR:-/tmp}/cosmos-install-check.XXXXXX.log")"
  bash scripts/test-install.sh >"$install_log" 2>&1 &
  install_pid=$!
  # A failed suite stops it too (its pip or training under the script, then the script).
  trap 'if [ -n "$install_pid" ]; then pkill -P "$install_pid" 2>/dev/null; kill "$install_pid" 2>/dev/null; fi; true' EXIT
fi
# Two pytest-xdist workers, one per core, each torch at one thread; tests/conftest.py keeps a module's tests on one
# worker and runs the launches of two ranks one at a time. TEST_WORKERS=0 runs the suite in one process.
OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" uv run --frozen pytest -n "${TEST_WORKERS:-2}" --dist loadgroup "$@"
bash scripts/test-vllm.sh
if [ -n "$install_pid" ]; then
  status=0
  wait "$install_pid" || status=$?
  install_pid=""
  cat "$install_log"
  rm -f "$install_log"
  exit "$status"
fi
