#!/usr/bin/env bash
# Set up the main environment and run the main job: `cosmos-train quickstart`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
exec uv run --frozen cosmos-train quickstart "$@"
