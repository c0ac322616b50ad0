#!/usr/bin/env bash
# Set up and run the whole test suite: the main environment, with the separate vLLM environment's tests and the
# install check beside it.
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
# Two pytest-xdist workers, one per core, each torch at one thread; tests/conftest.py keeps a module's tests on one
# worker and runs the launches of two ranks one at a time. TEST_WORKERS=0 runs the suite in one process.
status=0
OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" uv run --frozen pytest -n "${TEST_WORKERS:-2}" --dist loadgroup "$@" || status=$?
# After it, side by side: the vLLM plugin tests in their own environment (scripts/test-vllm.sh) and the install path a
# user takes (scripts/test-install.sh: plain pip, clean venvs, outside the repo; INSTALL_CHECK=0 skips it). Run beside
# the suite they were starved of CPU (niced) or slowed its learning tests (not niced), and a starved export ran past
# the vLLM test's 600 s limit; after it they take about 3 minutes here (59 s and 158 s alone, their envs cached).
side_jobs=()
side_logs=()
stop_side_jobs() {
  for pid in "${side_jobs[@]}"; do
    pkill -P "$pid" 2>/dev/null || true
    kill "$pid" 2>/dev/null || true
  done
}
trap stop_side_jobs EXIT
side_job() {
  local log
  log="$(mktemp "${TMPDIR:-/tmp}/cosmos-$1.XXXXXX.log")"
  OMP_NUM_THREADS=1 bash "scripts/$1.sh" >"$log" 2>&1 &
  side_jobs+=($!)
  side_logs+=("$log")
}
side_job test-vllm
if [ "${INSTALL_CHECK:-1}" != 0 ]; then side_job test-install; fi
for i in "${!side_jobs[@]}"; do
  wait "${side_jobs[$i]}" || status=$?
  cat "${side_logs[$i]}"
  rm -f "${side_logs[$i]}"
done
side_jobs=()
exit "$status"
