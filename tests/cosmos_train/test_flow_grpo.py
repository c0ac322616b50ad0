"""FlowGRPO (`cosmos-train flow-grpo`) on tiny offline pipelines: the SDE log-prob recomputed under unchanged
weights equals the stored one (ratio 1) on every trained step, with and without CFG; the clipped objective
clips; FlowGRPO raises the brightness reward on tiny SANA by a clear margin; a checkpointed run resumes."""

from __future__ import annotations

import diffusion_rl_helpers
import pytest
import torch
from diffusion_rl_helpers import rewards, rises, write_rl_job

from cosmos_train.algorithms.flow_grpo.loss import clipped_policy_loss
from cosmos_train.checkpoints import is_complete
from cosmos_train.jobs import read_job

tiny = diffusion_rl_helpers.tiny  # fixtures
_one_thread = diffusion_rl_helpers._one_thread

# --- units -----------------------------------------------------------------------------------------------


def test_clipped_objective_clips_the_ratio():
    advantages = torch.tensor([1.0, 1.0, -1.0, -1.0], dtype=torch.float64)
    old = torch.zeros(4, dtype=torch.float64)
    new = torch.tensor([0.5, -0.5, 0.5, -0.5], dtype=torch.float64, requires_grad=True)
    loss, stats = clipped_policy_loss(new, old, advantages, clip_range=0.1)
    loss.backward()
    ratio = new.detach().exp()
    # Positive advantage: the ratio's gain is capped at 1 + e (no gradient past it), its loss is not.
    # Negative advantage: the ratio's fall is capped at 1 - e, its rise is not.
    expected = torch.stack([-1.1 * torch.ones(()), -ratio[1], 1.1 * torch.ones(()), 0.9 * torch.ones(())])
    expected = torch.maximum(-advantages * ratio, expected)
    assert loss.item() == pytest.approx(expected.mean().item())
    assert new.grad[0] == 0 and new.grad[3] == 0  # clipped rows carry no gradient
    assert new.grad[1] != 0 and new.grad[2] != 0
    assert stats["clip_fraction"] == 1.0
    inside, stats = clipped_policy_loss(old + 0.01, old, advantages, clip_range=0.1)
    assert stats["clip_fraction"] == 0.0 and inside.item() == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("guidance", [1.0, 3.0], ids=["no-cfg", "cfg"])
def test_recomputed_log_prob_equals_the_rollout_one(tmp_path, tiny, guidance):
    """Under unchanged weights, every trained micro-batch recomputes the stored log-prob: ratio 1."""
    job = read_job(
        write_rl_job(
            tmp_path,
            tiny("sana"),
            rollout={"guidance_scale": guidance, "train_batch_size": 3, "samples_per_prompt": 2},
            algorithm={"kl_beta": 0.04, "timestep_fraction": 1.0},
            train={"per_device_train_batch_size": 3},
        )
    )
    assert job.config.rollout.updates_per_rollout == 2  # the reference's: one chunk each
    from cosmos_train.algorithms.diffusion_rl.trainer import build_diffusion_rl_trainer
    from cosmos_train.data import collate_prompts, load_prompt_list

    trainer = build_diffusion_rl_trainer(job)
    adapter = trainer.adapter
    prompts, _ = load_prompt_list(job.config.data)
    with torch.no_grad():  # a trained LoRA, so the KL's reference (adapters off) differs from the policy
        for name, parameter in adapter.transformer.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.05)
    batch = collate_prompts([prompts[i] for i in range(3)])
    micro_batches = []
    for _ in range(2 * trainer.args.gradient_accumulation_steps):
        micro_batches.append(trainer._prepare_inputs(batch))
    # 2 chunks of 3 rows (6 samples), each over the 4 SDE steps in order: the first update takes chunk 1.
    assert [b["step"] for b in micro_batches] == [0, 1, 2, 3] * 2
    assert trainer.args.gradient_accumulation_steps == 4 and not trainer._buffer
    for inputs in micro_batches:
        loss = trainer.compute_loss(trainer.model, inputs)
        assert torch.isfinite(loss)
    metrics = trainer._metrics
    assert max(abs(r - 1) for r in metrics["ratio_min"] + metrics["ratio_max"]) < 1e-5, metrics
    assert max(metrics["clip_fraction"]) == 0.0
    assert min(metrics["kl"]) > 0  # the reference is the base, not the policy


def test_recompute_detects_a_mismatched_guidance(tmp_path, tiny):
    """The check above can fail: recomputing without the rollout's guidance moves the ratio off 1."""
    job = read_job(
        write_rl_job(
            tmp_path,
            tiny("sana"),
            rollout={"guidance_scale": 3.0, "train_batch_size": 4, "samples_per_prompt": 2},
            algorithm={"kl_beta": 0.0, "train_steps": [1]},
            train={"per_device_train_batch_size": 4},
        )
    )
    from cosmos_train.algorithms.diffusion_rl.trainer import build_diffusion_rl_trainer
    from cosmos_train.data import collate_prompts, load_prompt_list

    trainer = build_diffusion_rl_trainer(job)
    prompts, _ = load_prompt_list(job.config.data)
    inputs = trainer._prepare_inputs(collate_prompts([prompts[i] for i in range(4)]))
    trainer.rollout_config = trainer.rollout_config.model_copy(update={"guidance_scale": 1.0})
    trainer.compute_loss(trainer.model, inputs)
    assert (
        abs(trainer._metrics["ratio_max"][0] - 1) > 1e-4 or abs(trainer._metrics["ratio_min"][0] - 1) > 1e-4
    )


# --- proof of learning -------------------------------------------------------------------------------------


def test_flow_grpo_learns_brightness_on_tiny_sana(tmp_path, tiny):
    """The reward is brightness with weight -1 (darker scores higher): the tiny DC-AE decodes all-zero latents to
    brightness 0.77, about where its samples start (0.75), so brightness itself has little room upwards on this
    pipeline (+0.02 in 16 steps) while downwards it has plenty."""
    job = read_job(
        write_rl_job(
            tmp_path, tiny("sana"), algorithm={"kl_beta": 0.0}, train={"max_steps": 20}, brightness=-1.0
        )
    )
    trainer = job.run()
    curve = rewards(trainer)
    first, last, _ = rises(curve)
    initial_std = trainer.state.log_history[0]["reward_std"]  # of the first rollout's samples
    print("flow-grpo -brightness on tiny sana:", [round(r, 4) for r in curve], "initial std", initial_std)
    assert len(curve) == 10  # one reward per rollout, two optimizer steps each
    assert last - first > max(5 * initial_std, 0.02), (curve, initial_std)


def test_checkpoint_then_resume(tmp_path, tiny):
    job_file = write_rl_job(
        tmp_path,
        tiny("sana"),
        algorithm={"kl_beta": 0.04, "sde_window": 2},
        train={"max_steps": 2, "save_steps": 2, "resume_from_checkpoint": True},
        lora=False,
    )
    read_job(job_file).run()
    checkpoint = tmp_path / "run" / "checkpoint-2"
    assert is_complete(checkpoint) and (checkpoint / "ema.safetensors").is_file()
    resumed = read_job(job_file, ["train.max_steps=4"]).run()
    assert resumed.state.global_step == 4
    assert is_complete(tmp_path / "run" / "checkpoint-4")
    assert (tmp_path / "run" / "safetensors" / "step_4").is_dir()


@pytest.mark.slow
def test_the_second_update_of_a_rollout_moves_the_ratio_and_clips(tmp_path, tiny):
    """With the reference's two updates per rollout the second recomputes log-probs under weights the first one
    changed: the ratio leaves 1 and the clip range (FlowGRPO's 1e-4) acts, as in the reference."""
    job = write_rl_job(
        tmp_path, tiny("sana"), rollout={"sampling_steps": 4},
        algorithm={"train_steps": [0, 1], "kl_beta": 0.0}, train={"max_steps": 4, "save_steps": 2},
    )  # fmt: skip
    trainer = read_job(job).run()
    history = [entry for entry in trainer.state.log_history if "clip_fraction" in entry]
    assert len(history) == 4 and trainer.args.gradient_accumulation_steps == 2  # 1 chunk x 2 steps each
    first, second = history[0], history[1]  # one rollout: its first update, then its second
    assert first["ratio_min"] == pytest.approx(1.0, abs=1e-5) and first["clip_fraction"] == 0.0
    assert abs(second["ratio_max"] - 1) > 1e-4 or abs(second["ratio_min"] - 1) > 1e-4
    assert second["clip_fraction"] > 0.0


def test_updates_must_split_the_rollout_and_checkpoints_fall_between_rollouts(tmp_path, tiny):
    from typer.testing import CliRunner

    from cosmos_train.cli import app

    uneven = write_rl_job(
        tmp_path / "a", tiny("sana"), rollout={"train_batch_size": 16}
    )  # 16 samples: 1 chunk
    result = CliRunner().invoke(app, ["validate-config", str(uneven)])
    assert (
        result.exit_code == 2
        and "updates_per_rollout = 2 must divide the rollout's 1 chunks of train_batch_size samples"
        in result.stderr
    )
    inside = write_rl_job(tmp_path / "b", tiny("sana"), train={"save_steps": 3})  # fmt: skip
    result = CliRunner().invoke(app, ["validate-config", str(inside)])
    assert (
        result.exit_code == 2
        and "save_steps = 3 must be a multiple of [rollout] updates_per_rollout" in result.stderr
    )
