#!/usr/bin/env bash
# The install path a user takes: plain pip, one package at a time, outside the workspace.
#
#   scripts/test-install.sh            # called by scripts/test.sh; needs python3 (venv + pip) and uv
#
# 1. Build every package's sdist and wheel, then a wheel from each sdist (a file missing from an
#    sdist fails here), and check the LICENSE and the shapes and pairs samples travel along.
# 2. A clean pip venv with the CPU torch (`torch==2.13.0`, a local wheel on this machine): the shims
#    alone, then a tiny Cosmos3 checkpoint loaded with `from_pretrained` and one output each, and
#    `cosmos3-convert --help`.
# 3. cosmos-train in the same venv, run from a folder outside the repository: a tiny text LM, SFT,
#    export, generate. No torchvision imports beside this CPU torch (PyPI's is built against the CUDA
#    torch), so VLM jobs cannot run here; text jobs need none.
# 4. A second clean pip venv with PyPI's default torch and torchvision (what `pip install cosmos-train`
#    gives a user with no torch): `cosmos-train quickstart` outside the repository (VLM SFT included).
#    The first run downloads some GB into pip's cache; later runs take it from there.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/cosmos-install-check.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
CPU_TORCH="torch==2.13.0"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PIP_DISABLE_PIP_VERSION_CHECK=1
# pip's bytecode pass over every installed file (torch's alone: 32 s of CPU against 11 s without it, measured here)
# is left out: it runs beside the main suite, and Python compiles what the checks import anyway.
PIP_INSTALL=(-m pip install --quiet --no-compile)
start=$(date +%s)
passed=0

step() { echo "== [$(($(date +%s) - start))s] $*"; }
ok() { echo "   ok: $*"; passed=$((passed + 1)); }

step "build every package's sdist and wheel (uv build --all-packages)"
(cd "$ROOT" && uv build --all-packages --quiet --out-dir "$WORK/dist")
ls "$WORK"/dist/*.{whl,tar.gz} | xargs -n1 basename | sed 's/^/   /'
ok "sdists and wheels built"

step "clean pip venv with the CPU torch ($CPU_TORCH)"
python3 -m venv "$WORK/cpu"
CPU_PY="$WORK/cpu/bin/python"
"$CPU_PY" "${PIP_INSTALL[@]}" "$CPU_TORCH"
"$CPU_PY" -c "import torch; print('   torch', torch.__version__)"
ok "clean venv"

step "pip builds a wheel from each sdist (the sdist alone must be enough)"
"$CPU_PY" -m pip wheel --quiet --no-deps --wheel-dir "$WORK/from-sdist" "$WORK"/dist/*.tar.gz
ls "$WORK/from-sdist" | sed 's/^/   /'
[ "$(ls "$WORK/from-sdist" | wc -l)" -eq "$(ls "$WORK"/dist/*.tar.gz | wc -l)" ]
ok "a wheel from every sdist"

step "sdists and wheels hold the LICENSE, cosmos-train's the shapes and pairs samples and no benchmark domain"
"$CPU_PY" - "$WORK" <<'PY'
import sys, tarfile, zipfile
from pathlib import Path

work = Path(sys.argv[1])
archives = sorted(work.glob("dist/*.tar.gz")) + sorted(work.glob("dist/*.whl")) + sorted(work.glob("from-sdist/*.whl"))
for archive in archives:
    if archive.suffix == ".whl":
        names = zipfile.ZipFile(archive).namelist()
    else:
        names = tarfile.open(archive).getnames()
    assert any(n.endswith("LICENSE") for n in names), f"{archive.name}: no LICENSE"
    if archive.name.startswith("cosmos_train"):
        assert any("_sample_data/shapes/llava.json" in n for n in names), f"{archive.name}: no shapes sample"
        assert any("_sample_data/pairs/0001.png" in n for n in names), f"{archive.name}: no pairs sample"
        # Without it every job still validates, only after torch and TRL import.
        assert any("config/trainer_fields.json" in n for n in names), f"{archive.name}: no trainer_fields.json"
        # The benchmarks' domains (GenEval-mini, arithmetic) live beside their benchmarks, not in the wheel.
        domains = [n for n in names if any(f"cosmos_train/{d}" in n for d in ("geneval_mini", "arithmetic", "checksums"))]
        assert not domains, f"{archive.name}: ships benchmark domains {domains[:3]}"
    print(f"   {archive.relative_to(work)}: {len(names)} files, LICENSE ok")
PY
ok "LICENSE and sample data packaged"

# --find-links: our packages come from the wheels built from the sdists, everything else from PyPI.
pip_install() { "$1" "${PIP_INSTALL[@]}" --find-links "$WORK/from-sdist" "${@:2}"; }

step "pip install the shims alone (transformers-cosmos3, then diffusers-cosmos3)"
pip_install "$CPU_PY" transformers-cosmos3
pip_install "$CPU_PY" diffusers-cosmos3
"$CPU_PY" -m pip check
"$CPU_PY" -m pip list 2>/dev/null | grep -E '^(torch|transformers|diffusers|accelerate) ' | sed 's/^/   /'
ok "shims installed"

step "shims alone, outside the repo: tiny checkpoint, from_pretrained, one image step and logits"
mkdir -p "$WORK/user" && cd "$WORK/user"
"$WORK/cpu/bin/cosmos3-convert" --help >/dev/null
"$CPU_PY" - <<'PY'
import torch
from diffusers import DiffusionPipeline

import diffusers_cosmos3
from diffusers_cosmos3 import testing
from transformers_cosmos3 import Cosmos3ForConditionalGeneration
from transformers_cosmos3.testing import build_vision_encoder, reasoner_config

assert "site-packages" in diffusers_cosmos3.__file__, diffusers_cosmos3.__file__
# The tiny repo without a processor: transformers' video processor needs torchvision (no CPU build).
pipeline = testing.build_pipeline()
repo = diffusers_cosmos3.save_export(
    pipeline,
    "tiny-cosmos3",
    vision_encoder=build_vision_encoder(),
    reasoner_config=reasoner_config(pipeline.text_tokenizer),
)
framework = diffusers_cosmos3.convert(repo, "tiny-cosmos3-framework", to="framework")
for name, loaded in {
    "DiffusionPipeline.from_pretrained": DiffusionPipeline.from_pretrained(repo),
    "load_pipeline(raw framework checkpoint)": diffusers_cosmos3.load_pipeline(framework),
}.items():
    loaded.set_progress_bar_config(disable=True)
    video = loaded("a red cube", num_frames=1, height=32, width=32, num_inference_steps=1).video
    print(f"   {name}: one step -> {type(video).__name__}")
ids = pipeline.text_tokenizer("a red cube on a table", return_tensors="pt").input_ids
for source in (repo, framework):
    reasoner = Cosmos3ForConditionalGeneration.from_pretrained(source)
    with torch.no_grad():
        logits = reasoner(input_ids=ids).logits
    assert torch.isfinite(logits).all()
    print(f"   Cosmos3ForConditionalGeneration.from_pretrained({source.name}): logits {tuple(logits.shape)}")
PY
ok "shims load and generate"

step "pip install cosmos-train into the same venv (its torch stays the CPU one)"
echo "$CPU_TORCH" > "$WORK/keep-torch.txt"
pip_install "$CPU_PY" cosmos-train --constraint "$WORK/keep-torch.txt"
"$CPU_PY" -m pip list 2>/dev/null | grep -E '^(cosmos-train|torch|torchvision|trl|peft|deepspeed) ' | sed 's/^/   /'
if ! error=$("$CPU_PY" -c "import torchvision" 2>&1); then
  echo "   torchvision does not import beside the CPU torch: ${error##*$'\n'}"
  echo "   removing it (transformers imports a torchvision it finds installed; text jobs need none)"
  "$CPU_PY" -m pip uninstall --quiet --yes torchvision
fi
ok "cosmos-train installed"

step "cosmos-train outside the repo: make-tiny qwen3, sft (text), export, generate"
CLI="$WORK/cpu/bin/cosmos-train"
"$CLI" --help >/dev/null
"$CLI" make-tiny qwen3 tiny-qwen3 >/dev/null
printf '%s\n' '{"messages": [{"role": "user", "content": "Name a shape."}, {"role": "assistant", "content": "A red circle."}]}' \
  '{"messages": [{"role": "user", "content": "Another?"}, {"role": "assistant", "content": "A blue square."}]}' > chats.jsonl
cat > job.toml <<'TOML'
kind = "sft"

[model]
name_or_path = "tiny-qwen3"

[lora]
r = 8
alpha = 16

[data]
format = "jsonl"
path = "chats.jsonl"

[train]
output_dir = "run"
learning_rate = 1e-2
max_steps = 4
per_device_train_batch_size = 2
logging_steps = 1
report_to = "none"
TOML
"$CLI" validate-config job.toml
"$CLI" sft --config job.toml > sft.log 2>&1 || { tail -20 sft.log; exit 1; }
"$CLI" export run merged --merge-lora >/dev/null
"$CPU_PY" - <<'PY'
from transformers import AutoModelForCausalLM, AutoTokenizer

model = AutoModelForCausalLM.from_pretrained("merged")
tokenizer = AutoTokenizer.from_pretrained("merged")
ids = tokenizer("Name a shape.", return_tensors="pt").input_ids
out = model.generate(ids, max_new_tokens=4, do_sample=False)
print(f"   merged export, from_pretrained + generate: {out.shape[1] - ids.shape[1]} new tokens")
PY
ok "cosmos-train SFT + export from the installed wheels"

step "cosmos-train quickstart in a second clean venv (PyPI's default torch and torchvision)"
python3 -m venv "$WORK/default"
pip_install "$WORK/default/bin/python" cosmos-train
"$WORK/default/bin/python" -m pip list 2>/dev/null | grep -E '^(torch|torchvision) ' | sed 's/^/   /'
mkdir -p "$WORK/user2" && cd "$WORK/user2"
"$WORK/default/bin/cosmos-train" quickstart --output-dir qs > quickstart.log 2>&1 || { tail -30 quickstart.log; exit 1; }
tail -3 quickstart.log | sed 's/^/   /'
ok "quickstart from the installed wheels"

echo "install-check: $passed steps passed in $(($(date +%s) - start))s"
