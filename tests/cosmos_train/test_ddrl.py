"""DDRL (`cosmos-train ddrl`) on tiny SANA: the data term holds a reward-independent statistic of the samples
(their latents' per-channel mean and std) closer to the real data's than FlowGRPO does on the same budget, the
data term reuses the rollout's sigma and noise, and a checkpointed run resumes."""

from __future__ import annotations

import math
from pathlib import Path

import diffusion_rl_helpers
import pytest
import torch
from diffusion_rl_helpers import rewards, write_rl_job
from sft_helpers import REPO

from cosmos_train.checkpoints import is_complete
from cosmos_train.diffusion.sampling import ode_sample, sigma_grid
from cosmos_train.jobs import read_job

tiny = diffusion_rl_helpers.tiny  # fixtures
_one_thread = diffusion_rl_helpers._one_thread

try:
    from cosmos_train.samples import pairs_dir

    PAIRS = pairs_dir()
except (ImportError, FileNotFoundError):
    PAIRS = REPO / "examples" / "data" / "pairs"

REAL_DATA = f'\n[real_data]\npath = "{PAIRS}"\nformat = "folder"\nheight = 32\nwidth = 32\n'
BUDGET = {"max_steps": 6}
STEPS = {"train_steps": [0, 2]}  # both algorithms train the same SDE steps (DDRL's every other step)


def latent_statistic(latents: torch.Tensor) -> torch.Tensor:
    """Per-channel mean and std over samples and positions: what the reward (brightness) never scores."""
    channels = latents.transpose(0, 1).reshape(latents.shape[1], -1)
    return torch.cat([channels.mean(1), channels.std(1)])


@torch.no_grad()
def sample_statistic(adapter, rows: int = 16) -> torch.Tensor:
    """The statistic of deterministic samples (Euler ODE, fixed noise) from the adapter's transformer."""
    generator = torch.Generator().manual_seed(1234)
    noise = torch.randn(rows, *adapter.latent_shape(32, 32), generator=generator)
    prompts = [line.strip() for line in (REPO / "examples/data/prompts/colors.txt").read_text().splitlines()]
    conditioning = adapter.encode_prompts([prompts[i % len(prompts)] for i in range(rows)])
    grid = sigma_grid(adapter, 4)
    return latent_statistic(ode_sample(adapter, adapter.transformer, noise, conditioning, grid, "euler"))


@torch.no_grad()
def data_statistic(adapter) -> torch.Tensor:
    from cosmos_train.config import PairData
    from cosmos_train.data.pairs import collate_pairs, load_pairs

    dataset, _ = load_pairs(PairData(path=str(PAIRS), height=32, width=32), video=False)
    batch = collate_pairs([dataset[i] for i in range(len(dataset))])
    return latent_statistic(adapter.encode_pixels(batch["pixels"]).float())


def test_data_term_holds_the_samples_near_the_data(tmp_path, tiny):
    """Same seed, prompts, rollouts and steps: FlowGRPO (no KL) against DDRL (its default data_beta 0.01)."""
    model = tiny("sana")
    grpo_job = write_rl_job(tmp_path / "grpo", model, algorithm={"kl_beta": 0.0, **STEPS}, train=BUDGET)
    grpo = read_job(grpo_job).run()
    ddrl_job = write_rl_job(
        tmp_path / "ddrl", model, kind="ddrl", algorithm=STEPS, train=BUDGET, extra=REAL_DATA
    )
    ddrl = read_job(ddrl_job).run()

    target = data_statistic(ddrl.adapter)
    distance = {
        name: (sample_statistic(t.adapter) - target).norm().item()
        for name, t in (("grpo", grpo), ("ddrl", ddrl))
    }
    from cosmos_train.diffusion.adapter import AdapterOptions
    from cosmos_train.diffusion.loading import load_adapter

    distance["base"] = (
        (sample_statistic(load_adapter(str(model), AdapterOptions(max_sequence_length=16))) - target)
        .norm()
        .item()
    )
    data_losses = [entry["data_loss"] for entry in ddrl.state.log_history if "data_loss" in entry]
    print("distance to the data's latent statistic:", distance)
    print("rewards grpo:", [round(r, 4) for r in rewards(grpo)])
    print("rewards ddrl:", [round(r, 4) for r in rewards(ddrl)])
    print("ddrl data loss:", [round(v, 3) for v in data_losses])
    assert len(data_losses) == BUDGET["max_steps"] and all(math.isfinite(v) for v in data_losses)
    # The random base is far from the data; the reward moves FlowGRPO's samples, the data term pulls DDRL's
    # towards the data: strictly closer than FlowGRPO's by a margin, and closer than the base's.
    assert distance["ddrl"] < distance["grpo"] - 0.05, distance
    assert distance["ddrl"] < distance["base"] - 0.05, distance


def test_data_term_reuses_the_rollout_sigma_and_noise(tmp_path, tiny):
    job = read_job(
        write_rl_job(
            tmp_path, tiny("sana"), kind="ddrl", algorithm={"data_on_first_only": True}, extra=REAL_DATA
        )
    )
    from cosmos_train.data import collate_prompts, load_prompt_list
    from cosmos_train.trainers.diffusion_rl import build_diffusion_rl_trainer

    trainer = build_diffusion_rl_trainer(job)
    prompts, _ = load_prompt_list(job.config.data)
    assert trainer.args.gradient_accumulation_steps == 2  # 4 SDE steps, every other one, one chunk of 16
    batch = collate_prompts([prompts[i] for i in range(4)])
    first, second = trainer._prepare_inputs(batch), trainer._prepare_inputs(batch)
    assert (first["step"], second["step"]) == (0, 2)
    assert "data" in first and "data" not in second  # data_on_first_only
    data = first["data"]
    assert torch.equal(data["noise"], first["noise"]) and torch.equal(
        data["noise"], first["x"]
    )  # step 0: x = noise
    assert torch.all(data["sigmas"] == first["sigma"])
    loss = trainer.compute_loss(trainer.model, first)
    assert torch.isfinite(loss) and trainer._metrics["data_loss"]


def test_ddrl_checkpoint_then_resume(tmp_path, tiny):
    job_file = write_rl_job(
        tmp_path,
        tiny("sana"),
        kind="ddrl",
        algorithm={"use_rl_sigma_and_noise": False},
        train={"max_steps": 2, "save_steps": 2, "resume_from_checkpoint": True},
        extra=REAL_DATA,
    )
    read_job(job_file).run()
    assert is_complete(tmp_path / "run" / "checkpoint-2")
    resumed = read_job(job_file, ["train.max_steps=3"]).run()
    assert resumed.state.global_step == 3
    assert (tmp_path / "run" / "safetensors" / "step_2" / "lora").is_dir()


def test_ddrl_job_needs_real_data_for_its_data_term(tmp_path, tiny):
    from cosmos_train.config import ConfigError

    with pytest.raises(ConfigError, match=r"real_data"):
        read_job(write_rl_job(tmp_path, Path(tiny("sana")), kind="ddrl"))
    job = read_job(write_rl_job(tmp_path, Path(tiny("sana")), kind="ddrl", algorithm={"data_beta": 0.0}))
    assert job.config.ddrl.kl_beta == 0 and job.config.train_timesteps() == 2
