"""`cosmos-train estimate-memory` against what training really takes, on a CPU.

What is measured: each job trains 2 optimizer steps in a child process of its own (plain SFT, full fine-tuning,
float32, no gradient checkpointing). The child imports every library the run needs (torch, transformers, TRL,
datasets, the trainer), reads the job, and takes its resident set size (RSS) as the baseline; it then runs the
job and reports its peak RSS (`VmHWM`) minus that baseline: the model's weights, its gradients, AdamW's state
and the activations, plus the little the run allocates besides (the tokenised data, Python objects). That is
what the estimate's peak claims for one device; it must agree within 20%.

Two sizes, each dominated by a different part: a small model on many tokens (activations), and a larger model
on few tokens (weights, gradients and optimizer state).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import memory_table  # benchmarks/ (pytest's pythonpath): the README's memory table
import pytest

CHILD = r"""
import json, os, sys
import torch, transformers, trl, datasets  # noqa: F401  (imported before the baseline)
from cosmos_train.jobs import read_job
import cosmos_train.algorithms.sft.trainer  # noqa: F401

def rss():
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

def peak_rss():
    # VmHWM: this process image's own peak. Not ru_maxrss, which Linux carries from the parent across fork (or vfork)
    # and exec, so it reported the pytest worker's peak whenever that was the larger.
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith("VmHWM:"))

job = read_job(sys.argv[1])
baseline = rss()
job.run()
print("MEASURED", json.dumps({"baseline": baseline, "peak": peak_rss()}))
"""

SIZES = {
    # name: (model sizes, per-device batch, tokens per row)
    "activations": (
        {"hidden": 256, "head_dim": 64, "heads": 4, "kv_heads": 2, "layers": 4, "intermediate": 768},
        8,
        512,
    ),
    "weights": (
        {"hidden": 1024, "head_dim": 64, "heads": 16, "kv_heads": 8, "layers": 8, "intermediate": 3072},
        2,
        64,
    ),
}


def make_job(folder: Path, sizes: dict, batch: int, tokens: int) -> Path:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from transformers_cosmos3.testing import Sizes, build_tokenizer, text_config

    tokenizer = build_tokenizer()
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(**text_config(tokenizer, Sizes(**sizes))))
    model.save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    # Every conversation longer than max_length, so every row is cut to it (the estimate's assumption).
    with open(folder / "chats.jsonl", "w") as handle:
        for index in range(batch * 2):
            messages = [
                {"role": "user", "content": f"question {index} " + "ab " * tokens},
                {"role": "assistant", "content": "cd " * tokens},
            ]
            handle.write(json.dumps({"messages": messages}) + "\n")
    job = folder / "job.toml"
    job.write_text(
        f"""kind = "sft"
[model]
name_or_path = "{folder / "model"}"
dtype = "float32"
[data]
format = "jsonl"
path = "{folder / "chats.jsonl"}"
max_length = {tokens}
train_on = "all"
[train]
output_dir = "{folder / "run"}"
max_steps = 2
per_device_train_batch_size = {batch}
activation_checkpointing = false
bf16 = false
save_strategy = "no"
report_to = "none"
disable_tqdm = true
dataloader_num_workers = 0
"""
    )
    return job


@pytest.mark.parametrize("size", list(SIZES))
def test_estimate_within_20_percent_of_the_measured_peak(tmp_path, size):
    from cosmos_train import memory

    job_file = make_job(tmp_path, *SIZES[size])
    job, backend = memory.read_job(job_file)
    estimate = memory.estimate(job, 1, backend)
    env = os.environ | {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(job_file)], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("MEASURED"))
    values = json.loads(line.split(" ", 1)[1])
    measured = values["peak"] - values["baseline"]
    ratio = estimate.peak / measured
    print(
        f"{size}: estimated {estimate.peak / 2**20:.0f} MiB, measured {measured / 2**20:.0f} MiB, ratio {ratio:.2f}"
    )
    print(estimate.table())
    assert 0.8 <= ratio <= 1.2, f"{size}: estimate {estimate.peak} vs measured {measured} ({ratio:.2f})"


def test_cli_help_and_a_missing_file(tmp_path):
    from typer.testing import CliRunner

    from cosmos_train.cli import app

    runner = CliRunner()
    shown = runner.invoke(app, ["estimate-memory", "--help"])
    assert shown.exit_code == 0 and "--processes" in shown.output and "--device-memory" in shown.output
    missing = tmp_path / "nope.toml"
    failed = runner.invoke(app, ["estimate-memory", str(missing)])
    assert failed.exit_code == 2
    assert str(missing) in failed.output and "no such config file" in failed.output


# --- as users call it: offline, on the shipped recipes and configs, in the unit they give -----------------------

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "examples" / "model_configs"
README_COLUMNS = ["LoRA, ddp", "LoRA, zero3", "full, ddp", "full, zero3"]


def cosmos_train(*args):
    from typer.testing import CliRunner

    from cosmos_train.cli import app

    return CliRunner().invoke(app, [str(arg) for arg in args], catch_exceptions=False)


def readme_cells() -> dict[tuple[str, str, str], str]:
    """The README's memory table: {(model, kind, column): '83 GB **no**'}."""
    lines = (REPO / "README.md").read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| model | kind | LoRA, ddp |"))
    columns = [cell.strip() for cell in lines[header].strip("|").split("|")]
    cells = {}
    for line in lines[header + 2 :]:
        if not line.startswith("|"):
            break
        row = dict(zip(columns, (cell.strip() for cell in line.strip("|").split("|")), strict=True))
        cells |= {(row["model"], row["kind"], column): row[column] for column in README_COLUMNS}
    return cells


def test_sizes_are_read_and_said_in_the_unit_given():
    from cosmos_train.memory import Size, format_size, parse_size

    assert parse_size("80GB") == Size(80 * 10**9, "GB")  # as GPUs are sold, and as the README's table counts
    assert parse_size("80 gb") == parse_size("80G") == Size(80 * 10**9, "GB")
    assert parse_size("80GiB") == parse_size("80Gi") == Size(80 * 2**30, "GiB")
    assert parse_size("1.5TB") == Size(15 * 10**11, "TB") and parse_size("512MiB") == Size(2**29, "MiB")
    assert parse_size("85899345920") == Size(85899345920, "B")
    for bad in ("80 GXB", "GB", "-1GB", "80 gigs"):
        with pytest.raises(ValueError, match="cannot read a memory size"):
            parse_size(bad)
    assert str(parse_size("80GB")) == "80 GB" and str(parse_size("80GiB")) == "80 GiB"
    # Each size in the largest unit it fills, never a row of zeros.
    assert format_size(83_420_000_000) == "83.4 GB" and format_size(3 * 2**20, binary=True) == "3.0 MiB"
    assert format_size(1536) == "1.5 kB" and format_size(12) == "12 B" and format_size(0) == "0 B"


# The README's cells checked through the CLI: the full fine-tuning ones of the language models (0.1 s each), and one
# LoRA cell of each family and the SD3.5 cell nearest the 80 GB line (PEFT on an 8B model, T5-XXL and the MMDiT on
# the meta device take seconds); benchmarks/memory_table.py writes them all the same way.
README_MODELS = memory_table.MODELS  # the table's model -> (family, its hub id, its shipped configs)
CHECKED = {("sft", "LoRA, zero3"), ("diffusion-sft", "LoRA, ddp"), ("nft", "full, ddp")}


def test_the_readme_table_is_the_benchmarks_table():
    """benchmarks/memory_table.py writes the README's table from the shipped configs: the same models, each with
    its configs under examples/model_configs/."""
    assert {model for model, _, _ in readme_cells()} == set(README_MODELS)
    for family, _, folder in README_MODELS.values():
        assert (CONFIGS / folder / ("config.json" if family == "language" else "model_index.json")).is_file()


@pytest.mark.parametrize(
    "cell",
    [
        cell
        for cell in readme_cells()
        if (README_MODELS[cell[0]][0] == "language" and cell[2].startswith("full"))
        or ((cell[1], cell[2]) in CHECKED and not cell[0].startswith("Qwen3-8B"))
    ],
    ids=lambda cell: f"{cell[0].split(' ')[0]}-{cell[1]}-{cell[2]}".replace(", ", "-"),
)
def test_a_readme_row_reproduces_offline_from_the_cli(tmp_path, cell):
    """The README's cell from `cosmos-train estimate-memory JOB --model-config examples/model_configs/NAME`: the
    table's job naming the hub model, estimated offline with the shipped configs (no weights, no data), on 8
    processes; 80GB is 80 x 10^9 bytes, so the 83 GB job does not fit."""
    model, kind, column = cell
    _, hub_id, folder = README_MODELS[model]
    lora, backend = column.split(", ")
    job = tmp_path / "job.toml"
    job.write_text(memory_table.job_text(kind, hub_id, lora == "LoRA", backend, tmp_path / "out"))
    shown = cosmos_train(
        "estimate-memory",
        job,
        "--model-config",
        CONFIGS / folder,
        "--processes",
        8,
        "--device-memory",
        "80GB",
    )
    assert shown.exit_code == 0, shown.output
    gb, verdict = readme_cells()[cell].split(" ", 1)[0], readme_cells()[cell].rsplit(" ", 1)[1]
    said = "fits in 80 GB per device" if verdict == "fits" else "does NOT fit in 80 GB per device"
    peak = re.search(rf"{said} \(peak ([0-9.]+) GB\)", shown.stdout)
    assert peak, f"{cell}: the README says {readme_cells()[cell]}; estimate-memory says\n{shown.stdout}"
    assert f"{float(peak.group(1)):.0f}" == gb, (
        f"{cell}: the README says {gb} GB, estimate-memory {peak.group(0)}"
    )
    assert f"model {CONFIGS / folder}" in shown.stdout and "GiB" not in shown.stdout


def test_the_verdict_is_said_in_the_unit_given(tmp_path):
    """80GiB (85.9 GB) holds the 83 GB job that 80GB does not; the rows are then in GiB."""
    job = tmp_path / "job.toml"
    job.write_text(memory_table.job_text("sft", "Qwen/Qwen3-8B", False, "ddp", tmp_path / "out"))
    common = (job, "--model-config", CONFIGS / "qwen3-8b", "--processes", 8, "--device-memory")
    gb, gib = (
        cosmos_train("estimate-memory", *common, "80GB"),
        cosmos_train("estimate-memory", *common, "80GiB"),
    )
    assert "does NOT fit in 80 GB per device (peak 83." in gb.stdout, gb.stdout
    assert "fits in 80 GiB per device (peak 77." in gib.stdout and " GB" not in gib.stdout, gib.stdout


def test_a_tiny_model_reads_in_units_a_person_can_read(tmp_path):
    """No row of zeros: each part in the largest unit it fills (MB, kB, B for a tiny model)."""
    from cosmos_train import memory

    job_file = make_job(tmp_path, {**SIZES["activations"][0], "layers": 1}, 1, 16)
    job, backend = memory.read_job(job_file)
    estimate = memory.estimate(job, 1, backend)
    assert estimate.peak < 10**8  # a tiny model: the old table printed every row as 0.000 GiB
    table = estimate.table()
    rows = [line for line in table.splitlines() if line.startswith("  ")]
    assert len(rows) == len(estimate.parts) + 1, table
    for line, size in zip(rows, [*estimate.parts.values(), estimate.peak], strict=True):
        found = re.search(r"  ([0-9.]+) (B|kB|MB|GB)$", line)
        assert found, line
        value, unit = float(found.group(1)), found.group(2)
        assert (value > 0) == (size > 0), line
        assert 1 <= value < 1000 or unit == "B", line  # the largest unit the size fills
        scale = {"B": 1, "kB": 10**3, "MB": 10**6, "GB": 10**9}[unit]
        assert abs(value * scale - size) <= 0.05 * scale, (line, size)


# Every full-size recipe (a hub model, data on a cluster) estimates here, offline: with the shipped configs of the
# README's models, else with the configs (only) of a tiny model of its family (`make-tiny` kinds) standing in.
FULL_SIZE = {
    "sft/cosmos3_nano_lora.toml": "cosmos3",
    "sft/qwen3_vl_8b_full.toml": "qwen3_vl",
    "grpo/cosmos3_nano_video.toml": "cosmos3",
    "grpo/qwen3_math.toml": "qwen3-8b",
    "diffusion_sft/cosmos3_nano_lora.toml": "cosmos3_pipeline",
    "diffusion_sft/cosmos_predict2_5_lora.toml": "cosmos_predict2_5",
    "diffusion_sft/sana_lora.toml": "sana",
    "diffusion_sft/sd35_medium_lora.toml": "sd3.5-medium",
    "diffusion_rl/cosmos_predict2_5_ddrl.toml": "cosmos_predict2_5",
    "diffusion_rl/sd35_medium_flow_grpo.toml": "sd3.5-medium",
    "action_sft/cosmos3_policy_libero.toml": "cosmos3_action",
    "action_sft/cosmos3_policy_droid.toml": "cosmos3_action",
    "action_sft/cosmos3_forward_dynamics_droid.toml": "cosmos3_action",
}


def config_only_copy(model: Path, folder: Path) -> Path:
    """A model's configuration without its weights (or tokenizer): config.json, model_index.json, each component's
    config.json, and a custom component's code."""
    for path in model.rglob("*"):
        if path.name in ("config.json", "model_index.json") or path.suffix == ".py":
            (folder / path.relative_to(model)).parent.mkdir(parents=True, exist_ok=True)
            (folder / path.relative_to(model)).write_bytes(path.read_bytes())
    return folder


def test_every_full_size_recipe_is_listed():
    recipes = {
        f"{path.parent.name}/{path.name}"
        for path in (REPO / "examples").glob("*/*.toml")
        if not path.name.startswith("tiny_")
    }
    assert recipes == set(FULL_SIZE)


@pytest.mark.parametrize("recipe", list(FULL_SIZE))
def test_a_full_size_recipe_estimates_offline_from_configs_alone(tmp_path, tiny_pipeline, recipe):
    """No data checks (the recipes' data are not here, and memory does not depend on them), no hub (the model's
    configuration folder in place of its hub id), no weights."""
    import tomllib

    from cosmos_train import tiny_models

    path = REPO / "examples" / recipe
    job = tomllib.loads(path.read_text())
    stand_in = FULL_SIZE[recipe]
    extra = []
    if (CONFIGS / stand_in).is_dir():
        folder = CONFIGS / stand_in
    else:
        family = tiny_models.PIPELINE_KINDS.get(stand_in)
        model = tiny_pipeline(family) if family else tiny_models.save_tiny_model(stand_in, tmp_path / "model")
        folder = config_only_copy(model, tmp_path / "configs")
        assert not [p for p in folder.rglob("*") if p.suffix in (".safetensors", ".bin")]
        if stand_in == "cosmos_predict2_5":  # the tiny one ships its stand-in safety checker's code
            extra = ["--set", "model.trust_remote_code=true"]
    data = job["data"].get("path")
    assert data and (job["data"].get("format") == "hf" or not (path.parent / data).exists()), data
    shown = cosmos_train(
        "estimate-memory", path, "--model-config", folder, "--processes", 8, *extra, "--json"
    )
    assert shown.exit_code == 0, shown.output
    (estimate,) = json.loads(shown.stdout)
    assert estimate["model"] == str(folder) and estimate["kind"] == job["kind"]
    assert estimate["peak_bytes_per_device"] > 0 and estimate["parameters"]["trained"] > 0


def test_model_config_must_be_a_folder_of_the_right_kind(tmp_path):
    recipe = REPO / "examples" / "diffusion_sft" / "sd35_medium_lora.toml"
    missing = cosmos_train("estimate-memory", recipe, "--model-config", tmp_path / "nope")
    assert missing.exit_code == 2 and f"--model-config {tmp_path / 'nope'}: no such folder" in missing.output
    # A language model's configs for a pipeline job: said as for a job naming that folder.
    wrong = cosmos_train("estimate-memory", recipe, "--model-config", CONFIGS / "qwen3-8b")
    assert wrong.exit_code == 2 and "has no model_index.json: it is not a diffusers pipeline" in wrong.output
