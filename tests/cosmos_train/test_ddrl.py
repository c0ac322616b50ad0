"""DDRL (`cosmos-train ddrl`) as cosmos-rl runs it: it reads data (the captions are the prompts), its data term
on the same items holds a reward-independent statistic of the samples closer to the data than the same run without
it, its rollouts of a video family are conditioned on the items' first latent frame, and a checkpointed run
resumes. The sampler's and the loss's formulas are tested against cosmos-rl's in test_rl_reference.py."""

from __future__ import annotations

import math

import diffusion_rl_helpers
import pytest
import torch
from diffusion_helpers import write_video_pairs
from diffusion_rl_helpers import PAIRS, rewards, write_rl_job

from cosmos_train.checkpoints import is_complete
from cosmos_train.jobs import read_job

tiny = diffusion_rl_helpers.tiny  # fixtures
_one_thread = diffusion_rl_helpers._one_thread

BUDGET = {"max_steps": 6}


def latent_statistic(latents: torch.Tensor) -> torch.Tensor:
    """Per-channel mean and std over samples and positions: what the reward (brightness) never scores."""
    channels = latents.transpose(0, 1).reshape(latents.shape[1], -1)
    return torch.cat([channels.mean(1), channels.std(1)])


@torch.no_grad()
def sample_statistic(trainer, items: int = 5) -> torch.Tensor:
    """The statistic of a fixed-seed rollout of every data item."""
    from cosmos_train.config import PairData
    from cosmos_train.data import collate_pairs, load_pairs

    dataset, _ = load_pairs(PairData(path=str(PAIRS), format="folder", height=32, width=32), video=False)
    batch = collate_pairs([dataset[i] for i in range(items)])
    prompts = [p for p in batch["prompts"] for _ in range(trainer.group_size)]
    with torch.random.fork_rng():
        torch.manual_seed(1234)
        rollout = trainer.rollout(prompts, [{}] * len(prompts), batch)
    return latent_statistic(rollout["latents_for_reward"]), latent_statistic(trainer.data(batch)[0])


def test_data_term_holds_the_samples_near_the_data(tmp_path, tiny):
    """Same seed, data, rollouts and steps: DDRL with its data term (data_beta 0.01) against without (0)."""
    model = tiny("sana")
    runs = {}
    for name, beta in (("without", 0.0), ("with", 0.01)):
        job = write_rl_job(tmp_path / name, model, kind="ddrl", algorithm={"data_beta": beta}, train=BUDGET)
        runs[name] = read_job(job).run()
    distance = {}
    for name, trainer in runs.items():
        samples, data = sample_statistic(trainer)
        distance[name] = (samples - data).norm().item()
    data_losses = [entry["data_loss"] for entry in runs["with"].state.log_history if "data_loss" in entry]
    print("distance to the data's latent statistic:", distance)
    print("rewards without:", [round(r, 4) for r in rewards(runs["without"])])
    print("rewards with:", [round(r, 4) for r in rewards(runs["with"])])
    print("data loss:", [round(v, 3) for v in data_losses])
    assert len(data_losses) == BUDGET["max_steps"] and all(math.isfinite(v) for v in data_losses)
    # The reward moves the samples anywhere brighter; the data term pulls them towards the data.
    assert distance["with"] < distance["without"] - 0.05, distance


def test_prompts_are_the_data_captions_and_the_data_term_rides_every_trained_step(tmp_path, tiny):
    job = read_job(write_rl_job(tmp_path, tiny("sana"), kind="ddrl", rollout={"samples_per_prompt": 2}))
    from cosmos_train.algorithms.diffusion_rl.trainer import build_diffusion_rl_trainer
    from cosmos_train.data import collate_pairs, load_pairs

    trainer = build_diffusion_rl_trainer(job)
    seen = []
    trainer.rewards[0].function = lambda media, prompts, metadata=None: (
        seen.extend(prompts) or [0.5] * len(prompts)
    )
    dataset, _ = load_pairs(job.config.data, video=False)
    batch = collate_pairs([dataset[i] for i in range(4)])
    # 4 items x 2 samples = 8 rows, one chunk of 8; steps 0 and 2 of the 4 (cosmos-rl's train_on, every other).
    assert trainer.args.gradient_accumulation_steps == 2
    first, second = trainer._prepare_inputs(batch), trainer._prepare_inputs(batch)
    assert seen == [caption for caption in batch["prompts"] for _ in range(2)]
    assert (first["step"], second["step"]) == (0, 2)
    for inputs in (first, second):
        trainer.compute_loss(trainer.model, inputs)
    assert len(trainer._metrics["data_loss"]) == 2  # data_on_first_only = false: on every trained step
    assert trainer._metrics["ratio_max"] == pytest.approx([1.0, 1.0], abs=1e-5)  # on-policy, one update


def test_video_rollouts_are_conditioned_on_the_items_first_frame(tmp_path, tiny):
    """Cosmos-Predict2.5: with one conditional frame drawn, every sample's first latent frame is the item's own."""
    pairs = write_video_pairs(tmp_path / "videos", frames=9)
    job = read_job(
        write_rl_job(
            tmp_path,
            tiny("cosmos_predict2_5"),
            kind="ddrl",
            rollout={"samples_per_prompt": 2},
            algorithm={"min_num_conditional_frames": 1, "use_same_seed": True},
            data={"path": str(pairs), "num_frames": 9},
        )
    )
    from cosmos_train.algorithms.diffusion_rl.trainer import build_diffusion_rl_trainer
    from cosmos_train.data import collate_pairs, load_pairs

    trainer = build_diffusion_rl_trainer(job)
    dataset, _ = load_pairs(job.config.data, video=True)
    batch = collate_pairs([dataset[i] for i in range(2)])
    prompts = [p for p in batch["prompts"] for _ in range(2)]
    rollout = trainer.rollout(prompts, [{}] * 4, batch)
    latents = trainer.data(batch)[0].repeat_interleave(2, 0)
    final = rollout["latents_for_reward"]
    torch.testing.assert_close(final[:, :, 0], latents[:, :, 0])  # the clean conditional frame
    assert not torch.allclose(final[:, :, 1:], latents[:, :, 1:], atol=1e-2)  # the generated ones
    assert torch.equal(rollout["noise"][0], rollout["noise"][1])  # use_same_seed: one noise per item's group
    assert not torch.equal(rollout["noise"][0], rollout["noise"][2])
    assert rollout["frames"][:, 0].all() and not rollout["frames"][:, 1:].any()

    # With 0 or 1 conditional frames allowed, the count is drawn once per batch (cosmos-rl), never per item.
    trainer.ddrl = trainer.ddrl.model_copy(update={"min_num_conditional_frames": 0})
    draws = [trainer.condition_frames(latents) for _ in range(24)]
    assert all((drawn == drawn[:1]).all() for drawn in draws)
    assert {int(drawn[0].sum()) for drawn in draws} == {0, 1}


def test_ddrl_checkpoint_then_resume(tmp_path, tiny):
    job_file = write_rl_job(
        tmp_path,
        tiny("sana"),
        kind="ddrl",
        algorithm={"use_rl_sigma_and_noise": False},
        train={"max_steps": 2, "save_steps": 2, "resume_from_checkpoint": True},
    )
    read_job(job_file).run()
    assert is_complete(tmp_path / "run" / "checkpoint-2")
    resumed = read_job(job_file, ["train.max_steps=3"]).run()
    assert resumed.state.global_step == 3
    assert (tmp_path / "run" / "safetensors" / "step_2" / "lora").is_dir()


def test_ddrl_refuses_what_it_does_not_do(tmp_path, tiny):
    from cosmos_train.config import ConfigError

    for rollout, message in (({"guidance_scale": 3.0}, "without classifier-free guidance"),
                             ({"num_frames": 9}, "DDRL samples at \\[data\\]'s size")):  # fmt: skip
        job = write_rl_job(tmp_path, tiny("sana"), kind="ddrl", rollout=rollout)
        with pytest.raises(ConfigError, match=message):
            read_job(job)


def test_sd3_grids_start_at_pure_noise_and_cap_at_edm_sigma_max(tmp_path, tiny):
    """SD3's flow grid starts at sigma = 1 (infinitely far in EDM units): the 2ab sampler starts at 200, as
    cosmos-rl's sigma_max, and DDRL runs on SD3 (it divided by zero)."""
    from cosmos_train.algorithms.ddrl.loss import EDM_SIGMA_MAX, edm_levels
    from cosmos_train.diffusion.sampling import to_edm

    assert to_edm(1.0) == math.inf and to_edm(0.5) == 1.0
    trainer = read_job(
        write_rl_job(
            tmp_path, tiny("sd3"), kind="ddrl", train={"max_steps": 1}, rollout={"sampling_steps": 3}
        )
    ).run()
    grid = trainer.grid(4)
    assert grid.sigmas[0] == 1.0
    levels = edm_levels(grid)
    assert levels[0] == EDM_SIGMA_MAX
    assert levels[1:] == pytest.approx([s / (1 - s) for s in grid.sigmas[1:-1].tolist()])
    assert math.isfinite(trainer.state.log_history[0]["loss"])
