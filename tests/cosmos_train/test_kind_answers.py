"""What every diffusion RL kind answers alike, whatever its name and wherever it comes from (issue 31):

- `cosmos-train estimate-memory` counts the weight copies the kind's trainer keeps, read from the kind's own
  section (`[flow_grpo]` of `flow-grpo`, `[toy]` of the toy kind named `toy_algorithm:TOY_KIND`): the EMA when
  `ema_decay` is set, DiffusionNFT's old policy, and under full fine-tuning the KL term's frozen reference when
  `kl_beta` > 0 (a LoRA reaches its base by disabling its adapters, so it keeps none);
- the end of every run writes the export users load, `output_dir/safetensors/step_N/` (N the final global step),
  also when no checkpoint step wrote one (`[train] save_strategy = "no"`), as the README says.
"""

from __future__ import annotations

import json
from pathlib import Path

import diffusion_rl_helpers
import pytest
from diffusion_rl_helpers import write_rl_job

tiny = diffusion_rl_helpers.tiny  # fixtures
_one_thread = diffusion_rl_helpers._one_thread

TOY = "toy_algorithm:TOY_KIND"  # tests/toy_algorithm/: a kind from another package, named by the job file
EMA, OLD_POLICY, KL_REFERENCE = "copies: EMA", "copies: old policy", "copies: KL reference"
LORA_WEIGHTS = "pytorch_lora_weights.safetensors"


def cosmos_train(*args):
    """`cosmos-train ARGS` in this process; an exception other than the CLI's exit propagates."""
    from typer.testing import CliRunner

    from cosmos_train.cli import app

    return CliRunner().invoke(app, [str(arg) for arg in args], catch_exceptions=False)


def rl_job(folder: Path, model: Path, kind: str, **settings) -> Path:
    """`write_rl_job`'s job of `kind`; the toy kind's job is written as DiffusionNFT's (the same rollout and data
    sections) with its own kind and its own section, `[toy]`."""
    if kind != TOY:
        return write_rl_job(folder, model, kind=kind, **settings)
    job = write_rl_job(folder, model, kind="nft", **settings)
    text = job.read_text().replace('kind = "nft"', f'kind = "{TOY}"', 1).replace("[nft]\n", "[toy]\n", 1)
    job.write_text(text)
    return job


# --- estimate-memory: the copies each kind keeps -------------------------------------------------------------

# case: (kind, LoRA, the kind's section, the copies its trainer keeps)
COPIES = {
    "nft-full": ("nft", False, {"ema_decay": 0.9, "kl_beta": 1e-4}, {EMA, OLD_POLICY, KL_REFERENCE}),
    "flow-grpo-full": ("flow-grpo", False, {"ema_decay": 0.9, "kl_beta": 0.04}, {EMA, KL_REFERENCE}),
    "flow-grpo-lora": ("flow-grpo", True, {"ema_decay": 0.9, "kl_beta": 0.04}, {EMA}),
    "ddrl-full": ("ddrl", False, {"ema_decay": 0.9, "kl_beta": 0.01}, {EMA, KL_REFERENCE}),
    "toy-full": (TOY, False, {"ema_decay": 0.5}, {EMA}),
}


@pytest.mark.parametrize("case", list(COPIES))
def test_estimate_memory_counts_the_copies_the_kinds_trainer_keeps(tmp_path, tiny, case):
    kind, lora, section, expected = COPIES[case]
    job = rl_job(tmp_path, tiny("sana"), kind, algorithm=section, lora=lora)
    checked = cosmos_train("validate-config", job)
    assert checked.exit_code == 0, checked.output  # a job the trainer would run

    shown = cosmos_train("estimate-memory", job, "--json")
    assert shown.exit_code == 0, shown.output
    (estimate,) = json.loads(shown.stdout)
    parts = estimate["bytes_per_device"]
    copies = {name for name in parts if name.startswith("copies: ")}
    assert copies == expected, (
        f"{case}: estimate-memory lists {sorted(copies)}, the trainer keeps {sorted(expected)}"
    )
    # Each copy holds the trained parameters in float32, whole on the one process.
    trained = estimate["parameters"]["trained"]
    assert all(parts[name] == 4 * trained for name in copies), parts


# --- the end of every run writes an export -------------------------------------------------------------------

# The smallest job the helpers allow: 2 prompts (DDRL: 2 data items) x 2 samples, 2 sampler steps, one optimizer
# step, no checkpoint.
ONE_STEP = {"max_steps": 1, "per_device_train_batch_size": 2, "save_strategy": "no"}
SMALL_ROLLOUT = {"samples_per_prompt": 2, "sampling_steps": 2, "train_batch_size": 2}


@pytest.mark.parametrize("kind", ["nft", "flow-grpo", "ddrl", TOY], ids=["nft", "flow-grpo", "ddrl", "toy"])
def test_a_run_without_checkpoints_ends_with_its_export(tmp_path, tiny, kind):
    from diffusers import DiffusionPipeline
    from safetensors.torch import load_file

    model = tiny("sana")
    algorithm = {"ema_decay": 0.5} if kind == TOY else {}
    job = rl_job(tmp_path, model, kind, rollout=SMALL_ROLLOUT, train=ONE_STEP, algorithm=algorithm)
    ran = cosmos_train("run", "-c", job)
    assert ran.exit_code == 0, ran.output[-3000:]
    run = tmp_path / "run"
    # The run finished (its final save) without writing a checkpoint.
    assert (run / "model.safetensors").is_file() and not list(run.glob("checkpoint-*"))

    export = run / "safetensors" / "step_1"
    assert export.is_dir(), (
        f"{kind}: no end-of-run export {export}; output_dir has {sorted(p.name for p in run.iterdir())}"
    )
    weights = load_file(export / "lora" / LORA_WEIGHTS)
    assert weights and all("lora" in key for key in weights), sorted(weights)[:4]
    pipeline = DiffusionPipeline.from_pretrained(model)
    pipeline.load_lora_weights(export / "lora")  # what users do with it
    assert any("lora" in name for name, _ in pipeline.transformer.named_parameters())
    # The same weights `cosmos-train export` writes from the run (the EMA where the job keeps one).
    exported = cosmos_train("export", run, tmp_path / "export")
    assert exported.exit_code == 0, exported.output
    again = load_file(tmp_path / "export" / "lora" / LORA_WEIGHTS)
    assert again.keys() == weights.keys()
    assert all(again[key].equal(weights[key]) for key in weights), kind
