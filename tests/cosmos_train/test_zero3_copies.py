"""Full fine-tuning of diffusion models under DeepSpeed ZeRO-3 on 2 processes (gloo), by DiffusionNFT, FlowGRPO,
DDRL, flow-matching SFT and Cosmos3 action SFT: the copies kept beside the trained weights (the EMA, DiffusionNFT's old policy, the
frozen KL reference) are partitioned as the weights are, each process holding about half of each; checkpoints keep
each process's slices, resume continues them bit-equal after kill -9, and exports and validation samples gather
the weights.

Each job is compared with the same job on 2 processes under DDP, where every copy is whole. Not with 1 process:
every process seeds the same RNG and draws its own rollout noise, so no single process draws a 2-process run's
rollouts. Under DDP the rollouts are the same; ZeRO-3 differs in how gradients are reduced (flattened, partitioned
buckets), float32 rounding of order 1e-7 that Adam's normalised steps carry into the weights. Measured after 4
steps at lr 1e-3: at most 1.5e-5 on any weight, against about 3e-3 of training movement; the tolerance, 1e-4, is
30 times smaller than the movement, so a copy that missed an update or swapped in the wrong weights fails.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from action_helpers import action_job, reach2d_dataset
from diffusion_helpers import IMAGE_PAIRS, write_diffusion_job
from diffusion_rl_helpers import write_rl_job
from launch_helpers import finish, kill_all, start, two_processes
from PIL import Image
from safetensors.torch import load_file
from sft_helpers import cli_in_process

from cosmos_train.algorithms.action_sft.trainer import train_action_heads
from cosmos_train.checkpoints import is_complete
from cosmos_train.diffusion.loading import load_adapter, prepare_training
from cosmos_train.diffusion.weights import ExponentialAverage, OldPolicy, ParameterCopy

# Most of its tests launch two ranks; the rest share its module fixtures (tests/conftest.py).
pytestmark = pytest.mark.two_ranks

STEPS = 4
TRAIN = {"max_steps": STEPS, "save_steps": 2, "learning_rate": 1e-3, "resume_from_checkpoint": True}
TOLERANCE = 1e-4
COPIES = {"ema": ExponentialAverage, "old_policy": OldPolicy}  # the saved ones; the reference is the base


def nft_job(folder: Path, models) -> Path:
    # Each process takes 2 prompts x 4 samples; all three copies: the EMA, the old policy and the KL reference.
    train = TRAIN | {"per_device_train_batch_size": 2}
    return write_rl_job(
        folder, models("sd3"), kind="nft", lora=False, algorithm={"kl_beta": 0.01}, train=train
    )


def flow_grpo_job(folder: Path, models) -> Path:
    algorithm = {"kl_beta": 0.04, "ema_decay": 0.9, "ema_every": 1}
    # 2 prompts x 4 samples per process, in the two chunks of FlowGRPO's two updates per rollout.
    train = TRAIN | {"per_device_train_batch_size": 2}
    return write_rl_job(
        folder, models("sana"), lora=False, algorithm=algorithm, train=train, rollout={"train_batch_size": 4}
    )


def ddrl_job(folder: Path, models) -> Path:
    algorithm = {"kl_beta": 0.01, "ema_decay": 0.9}
    train = TRAIN | {"per_device_train_batch_size": 2}
    return write_rl_job(folder, models("sana"), kind="ddrl", lora=False, algorithm=algorithm, train=train)


def diffusion_sft_job(folder: Path, models) -> Path:
    # Flow-matching SFT's EMA, and validation samples, which every process generates from the gathered weights.
    train = TRAIN | {"per_device_train_batch_size": 2, "logging_steps": 1}
    diffusion = {
        "ema_decay": 0.9,
        "validation_prompts": ["a red square", "a blue circle"],
        "validation_steps": 2,
    }
    return write_diffusion_job(
        folder, models("sd3"), IMAGE_PAIRS, lora=False, train=train, diffusion=diffusion
    )


def action_sft_job(folder: Path, models) -> Path:
    # A Cosmos3 policy with its action heads (trained at 5x the rate) and an EMA, 2 windows per process.
    train = TRAIN | {"per_device_train_batch_size": 2, "logging_steps": 1, "save_strategy": "steps"}
    data = reach2d_dataset(folder / "reach2d")
    return action_job(folder, models("cosmos3_action"), data, action={"ema_decay": 0.9}, train=train)


# command: (its pipeline, its job, the copies it keeps)
CASES = {
    "diffusion-sft": ("sd3", diffusion_sft_job, {"ema"}),
    "nft": ("sd3", nft_job, {"ema", "old_policy", "reference"}),
    "flow-grpo": ("sana", flow_grpo_job, {"ema", "reference"}),
    "ddrl": ("sana", ddrl_job, {"ema", "reference"}),
    "action-sft": ("cosmos3_action", action_sft_job, {"ema"}),
}


@pytest.fixture(scope="module")
def models(tiny_pipeline):
    return tiny_pipeline


def launch(job: Path, command: str, backend: str) -> str:
    """Run `job` on 2 processes; its stderr."""
    _, stderr = finish(
        start([*two_processes(), command, "-c", job, "--set", f"launch.backend={backend}"]), backend
    )
    return stderr


@pytest.fixture(scope="module")
def finished(models, tmp_path_factory):
    """`finished(case, backend)` -> (the run's folder, its stderr): each job launched once for the module."""
    runs = {}

    def get(case: str, backend: str) -> tuple[Path, str]:
        if (case, backend) not in runs:
            folder = tmp_path_factory.mktemp(f"{case}-{backend}")
            stderr = launch(CASES[case][1](folder, models), case, backend)
            runs[case, backend] = (folder / "run", stderr)
        return runs[case, backend]

    return get


def copy_bytes(stderr: str) -> dict[int, dict[str, float]]:
    """{process: {copy: MiB}}, from the line each process logs before training."""
    held = {}
    for process, copies in re.findall(r"process (\d) of 2 holds weight copies \([^)]*\): (.*)", stderr):
        held[int(process)] = {name: float(mib) for name, mib in re.findall(r"(\w+) ([\d.e+-]+) MiB", copies)}
    return held


def transformer_weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "transformer" / "diffusion_pytorch_model.safetensors")


def saved_copy(model: Path, checkpoint: Path, kind: type[ParameterCopy]) -> dict[str, torch.Tensor]:
    """A copy saved in `checkpoint` (whole or in slices), read into a whole transformer as `export` does."""
    adapter = load_adapter(str(model))
    prepare_training(adapter, None)
    if getattr(adapter.transformer.config, "action_gen", False):  # action-sft trains the action heads too
        train_action_heads(adapter.transformer, fresh=False)
    copy = (
        ExponentialAverage(adapter.transformer, 0.9)
        if kind is ExponentialAverage
        else kind(adapter.transformer, 1)
    )
    copy.load(checkpoint)
    return dict(zip(copy.names, copy.shadow_params, strict=True))


def assert_close(got: dict, want: dict, label: str, atol: float = TOLERANCE) -> None:
    assert got.keys() == want.keys(), label
    for name in want:
        torch.testing.assert_close(
            got[name], want[name], rtol=0, atol=atol, msg=lambda m, n=name: f"{label} {n}: {m}"
        )


# DiffusionNFT keeps all three copies (the EMA, the old policy, the KL reference), so FlowGRPO's and DDRL's (the EMA and
# the reference, on the same RL trainer skeleton) repeat its check, as action-sft's EMA repeats diffusion-sft's (its
# trainer is diffusion SFT's, the action heads trained too): the exhaustive tier.
REPEATS = {"flow-grpo", "ddrl", "action-sft"}


@pytest.mark.slow
@pytest.mark.parametrize(
    "case", [pytest.param(c, marks=pytest.mark.exhaustive) if c in REPEATS else c for c in sorted(CASES)]
)
def test_zero3_copies_are_partitioned_and_train_as_ddp(models, finished, case):
    family, _, kept = CASES[case]
    (ddp_run, ddp_log), (zero3_run, zero3_log) = finished(case, "ddp"), finished(case, "zero3")
    whole, parts = copy_bytes(ddp_log), copy_bytes(zero3_log)
    for process in (0, 1):
        assert whole[process].keys() == parts[process].keys() == kept, (whole, parts)
        for name, mib in parts[process].items():  # each process's slice; the last one padded
            assert 0.49 <= mib / whole[process][name] <= 0.52, (process, name, mib, whole[process][name])

    checkpoint = zero3_run / f"checkpoint-{STEPS}"
    assert is_complete(checkpoint)
    for name in kept - {"reference"}:
        assert sorted(p.name for p in checkpoint.glob(f"{name}*")) == [
            f"{name}.part{r}-of-2.safetensors" for r in (0, 1)
        ]
        assert_close(
            saved_copy(models(family), checkpoint, COPIES[name]),
            saved_copy(models(family), ddp_run / f"checkpoint-{STEPS}", COPIES[name]),
            name,
        )
    assert_close(
        load_file(zero3_run / "model.safetensors"), load_file(ddp_run / "model.safetensors"), "weights"
    )
    export, reference_export = (run / "safetensors" / f"step_{STEPS}" for run in (zero3_run, ddp_run))
    assert_close(transformer_weights(export), transformer_weights(reference_export), "export (EMA)")
    for grid in sorted((zero3_run / "samples").glob("step_*/grid.png")):  # validation: 8-bit pictures
        pixels = [
            np.asarray(Image.open(run / "samples" / grid.parent.name / "grid.png"), dtype=int)
            for run in (zero3_run, ddp_run)
        ]
        assert np.abs(pixels[0] - pixels[1]).max() <= 1, grid
    base = transformer_weights(models(family))
    moved = max((transformer_weights(reference_export)[n] - base[n]).abs().max().item() for n in base)
    assert moved > 10 * TOLERANCE, f"the EMA moved only {moved}: the comparison would not tell"


@pytest.mark.slow
def test_zero3_nft_resumes_bit_equal_after_kill(tmp_path, models, finished):
    """Killed once checkpoint 2 is complete, then resumed by a new launch: the final weights, each process's
    slices of the EMA and the old policy, and the export equal an uninterrupted ZeRO-3 run's, bit for bit."""
    uninterrupted, _ = finished("nft", "zero3")
    job = nft_job(tmp_path / "killed", models)
    run = tmp_path / "killed" / "run"
    process = start(
        [*two_processes(), "nft", "-c", job, "--set", "launch.backend=zero3"], discard_output=True
    )
    deadline = time.monotonic() + 600
    while not is_complete(run / "checkpoint-2") and time.monotonic() < deadline:
        assert process.poll() is None, "training ended before it could be killed"
        time.sleep(0.01)
    kill_all(process)  # the launcher and both ranks
    assert not (run / "model.safetensors").exists()  # it really stopped before the end
    assert "resuming from" in launch(job, "nft", "zero3")
    names = ["model.safetensors", *(f"{c}.part{r}-of-2.safetensors" for c in COPIES for r in (0, 1))]
    for name in names:
        final, expected = load_file(run / name), load_file(uninterrupted / name)
        assert final.keys() == expected.keys(), name
        assert all(torch.equal(final[k], expected[k]) for k in expected), name
    final, expected = (transformer_weights(r / "safetensors" / f"step_{STEPS}") for r in (run, uninterrupted))
    assert all(torch.equal(final[k], expected[k]) for k in expected), "export"

    # `cosmos-train export` of the checkpoint reads the EMA's slices into the whole pipeline: the run's own export.
    result = cli_in_process("export", run / f"checkpoint-{STEPS}", tmp_path / "exported")
    assert result.returncode == 0, result.stderr[-2000:]
    exported = transformer_weights(tmp_path / "exported")
    assert all(torch.equal(exported[k], expected[k]) for k in expected), "cosmos-train export"
