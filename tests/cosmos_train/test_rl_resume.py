"""Every RL trainer resumes bit-equal after kill -9, tested the same way: an uninterrupted run; a second run of
the same job killed (SIGKILL) once a checkpoint of its second epoch is complete; a new process resuming it. The
trained weights and every copy kept beside them (EMA, DiffusionNFT's old policy) and the final export equal the
uninterrupted run's to the bit: the prompt order of the resumed epoch, the rollouts (from the restored RNG) and
the trainers' own state all continue where they stopped.

Each job crosses an epoch boundary after the checkpoint it resumes from, resumed after step 2 (DiffusionNFT: 12
colour prompts, 4 a rollout of one step: 3 steps an epoch; FlowGRPO: 4 of the prompts, one rollout of two steps an
epoch; DDRL: 5 data items, 4 a rollout of one step: 2 steps an epoch; GRPO: 6 prompts, 2 a step, a rollout every 2
steps, resumed after step 9, inside a generation cycle). Full fine-tuning with DiffusionNFT resumes the same way
on 2 processes under ZeRO-3, its copies partitioned (`test_zero3_copies.py`)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from diffusion_rl_helpers import write_rl_job
from grpo_helpers import grpo_job
from safetensors.torch import load_file
from sft_helpers import REPO, SHAPES, cli

from cosmos_train import tiny_models as tiny
from cosmos_train.checkpoints import is_complete

# Subprocess runs on one thread: two threads per process spin against each other on a busy 2-core machine.
ONE_THREAD = os.environ | {"OMP_NUM_THREADS": "1"}
DIFFUSION_TRAIN = {"max_steps": 4, "save_steps": 2, "resume_from_checkpoint": True}
LORA_EXPORT = "safetensors/step_4/lora/pytorch_lora_weights.safetensors"


def nft_lora_job(folder: Path, models) -> tuple[Path, list[str]]:
    job = write_rl_job(folder, models("sd3"), kind="nft", train=DIFFUSION_TRAIN)
    return job, ["model.safetensors", "ema.safetensors", "old_policy.safetensors", LORA_EXPORT]


def flow_grpo_job(folder: Path, models) -> tuple[Path, list[str]]:
    job = write_rl_job(
        folder, models("sana"), algorithm={"kl_beta": 0.04}, train=DIFFUSION_TRAIN, data={"max_prompts": 4}
    )
    return job, ["model.safetensors", "ema.safetensors", LORA_EXPORT]


def ddrl_job(folder: Path, models) -> tuple[Path, list[str]]:
    job = write_rl_job(
        folder, models("sana"), kind="ddrl", algorithm={"ema_decay": 0.9}, train=DIFFUSION_TRAIN
    )
    return job, ["model.safetensors", "ema.safetensors", LORA_EXPORT]


def grpo_lora_job(folder: Path, models) -> tuple[Path, list[str]]:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "examples" / "grpo" / "toy_rewards.py", folder)  # the reward module beside the job
    prompts = folder / "prompts.jsonl"
    prompts.write_text("".join((SHAPES / "text.jsonl").read_text().splitlines(keepends=True)[:6]))
    train = {"max_steps": 12, "save_steps": 3, "steps_per_generation": 2, "learning_rate": 1e-2}
    train |= {"resume_from_checkpoint": True}
    job = grpo_job(folder, models("qwen3"), data=prompts, train=train, extra="[lora]\nr = 4\nalpha = 8\n")
    return job, ["adapter_model.safetensors"]


# kind: (its command, job builder, the checkpoint the killed run stops after)
CASES = {
    "nft-lora": ("nft", nft_lora_job, 2),
    "flow-grpo": ("flow-grpo", flow_grpo_job, 2),
    "ddrl": ("ddrl", ddrl_job, 2),
    "grpo": ("grpo", grpo_lora_job, 9),
}


@pytest.fixture(scope="module")
def models(tiny_pipeline, tmp_path_factory):
    text_lm = tiny.save_tiny_text_lm(tmp_path_factory.mktemp("resume") / "qwen3")
    return lambda family: text_lm if family == "qwen3" else tiny_pipeline(family)


@pytest.mark.slow
@pytest.mark.parametrize(
    # DDRL resumes through FlowGRPO's RL trainer skeleton and copies (the EMA): the exhaustive tier.
    "case",
    [pytest.param(c, marks=pytest.mark.exhaustive) if c == "ddrl" else c for c in sorted(CASES)],
)
def test_sigkill_then_resume_is_bit_equal(tmp_path, models, case):
    command, build, checkpoint = CASES[case]
    (reference_job, kept), (job, _) = (
        build(tmp_path / "reference", models),
        build(tmp_path / "killed", models),
    )
    done = cli(command, "-c", reference_job, env=ONE_THREAD)
    assert done.returncode == 0, done.stderr[-3000:]

    run = tmp_path / "killed" / "run"
    exe = Path(sys.executable).with_name("cosmos-train")
    process = subprocess.Popen(
        [exe, command, "-c", job], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ONE_THREAD
    )
    deadline = time.monotonic() + 600
    while not is_complete(run / f"checkpoint-{checkpoint}") and time.monotonic() < deadline:
        assert process.poll() is None, "training ended before it could be killed"
        time.sleep(0.005)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    assert not (run / kept[0]).exists()  # the run really did not finish

    resumed = cli(command, "-c", job, env=ONE_THREAD)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming from {run / f'checkpoint-{checkpoint}'}" in resumed.stderr
    for name in kept:
        final, reference = load_file(run / name), load_file(tmp_path / "reference" / "run" / name)
        assert final.keys() == reference.keys(), name
        for key in reference:
            assert torch.equal(final[key], reference[key]), (case, name, key)
