"""The diffusion RL algorithms against the formulas of their reference code, on fixed inputs. Each expected value
is computed here in NumPy (float64) from the reference's formula, citing the function it comes from:
- DiffusionNFT: NVlabs/DiffusionNFT `scripts/train_nft_sd3.py` (`main`: advantages, `adv_mode`, the loss, the
  old-policy update; `return_decay`), `flow_grpo/stat_tracking.py` (`PerPromptStatTracker.update`);
- FlowGRPO: yifan123/flow_grpo `flow_grpo/diffusers_patch/sd3_sde_with_logprob.py` (`sde_step_with_logprob`) and
  `scripts/train_sd3.py` (`main`: the KL, the trained steps, the zero-advantage filter), `flow_grpo/ema.py`;
- DDRL: nvidia-cosmos/cosmos-rl `cosmos_rl/policy/model/wfm/sampler/__init__.py` (`get_rev_ts`,
  `differential_equation_solver`, `res_x0_rk2_step`), `cosmos_rl/policy/trainer/wfm_trainer.py`
  (`rl_training_step`), `cosmos_rl/policy/model/wfm/models/t2v_model.py` (`_sync_rewards_across_rollouts`,
  `compute_loss_with_epsilon_and_sigma`).
Each of these caught a bug planted in a copy (rollouts by the current policy, advantages over the whole batch, the
time shift dropped, the wrong SDE variance, NFT's stop-gradient removed)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import diffusion_rl_helpers
import numpy as np
import pytest
import torch
from diffusion_rl_helpers import write_rl_job

from cosmos_train.algorithms.ddrl.loss import ddrl_advantages, edm_levels, log_ratio
from cosmos_train.algorithms.diffusion_rl.advantages import group_advantages
from cosmos_train.algorithms.diffusion_rl.trainer import build_diffusion_rl_trainer
from cosmos_train.algorithms.flow_grpo.loss import rows_to_train, step_kl
from cosmos_train.algorithms.flow_grpo.schema import FlowGRPOSection
from cosmos_train.algorithms.flow_grpo.trainer import draw_sde_steps
from cosmos_train.algorithms.nft.loss import nft_loss, optimality_probability
from cosmos_train.diffusion.sampling import (
    ab2_step,
    churn_eta,
    gaussian_log_prob,
    noise_grid,
    ode_sample,
    sde_std_t,
    sde_step,
)
from cosmos_train.diffusion.weights import ExponentialAverage, OldPolicy
from cosmos_train.jobs import read_job

tiny = diffusion_rl_helpers.tiny  # fixtures
_one_thread = diffusion_rl_helpers._one_thread


def sd3_grid(steps: int = 10) -> np.ndarray:
    """SD3.5's inference sigmas from diffusers' own scheduler (shift 3), the reference's rollout grid."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0)
    scheduler.set_timesteps(steps)
    return scheduler.sigmas.double().numpy()


def randn(*shape, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# --------------------------------------------------------------------------------------------------------
# Advantages (both references' `PerPromptStatTracker.update` with global_std; cosmos-rl's per-reward form)


def test_advantages_are_per_prompt_group_over_the_global_std():
    rewards = torch.tensor([0.1, 0.5, 0.3, 0.9, 0.2, 0.2, 0.8, 0.4], dtype=torch.float64)
    r = rewards.numpy().reshape(2, 4)
    expected = (r - r.mean(axis=1, keepdims=True)) / (np.std(r) + 1e-4)  # np.std: ddof 0, over all samples
    np.testing.assert_allclose(group_advantages(rewards, 4).numpy(), expected.reshape(-1), rtol=1e-12)
    per_group = (r - r.mean(axis=1, keepdims=True)) / (np.std(r, axis=1, keepdims=True) + 1e-4)
    np.testing.assert_allclose(group_advantages(rewards, 4, global_std=False).numpy(), per_group.reshape(-1))


@pytest.mark.two_ranks
def test_the_global_std_spans_every_process(tmp_path):
    """Two real processes (gloo), two prompt groups each: the std is numpy's over all 8 rewards, the means each
    group's own (`accelerator.gather`, as the references)."""
    script = tmp_path / "gather.py"
    script.write_text(
        textwrap.dedent(
            """
            import json, sys, torch
            from accelerate import Accelerator
            from cosmos_train.algorithms.diffusion_rl.advantages import group_advantages_across
            accelerator = Accelerator(cpu=True)
            rank = accelerator.process_index
            rewards = torch.tensor([[0.1, 0.5, 0.3, 0.9], [0.2, 0.2, 0.8, 0.4]][rank], dtype=torch.float64)
            advantages = group_advantages_across(accelerator, rewards, 2)
            with open(f"{sys.argv[1]}.{rank}", "w") as out:
                json.dump(advantages.tolist(), out)
            # Left to interpreter exit, a gloo thread can abort the rank ("terminate called without an
            # active exception"): release the group while Python is whole, as the trainers do.
            accelerator.wait_for_everyone()
            torch.distributed.destroy_process_group()
            """
        )
    )
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",  # a free port of its own, not 29500 (tests may run side by side)
        "--nproc_per_node",
        "2",
        str(script),
        str(tmp_path / "out"),
    ]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    import json

    got = [json.loads((tmp_path / f"out.{rank}").read_text()) for rank in range(2)]
    everyone = np.array([0.1, 0.5, 0.3, 0.9, 0.2, 0.2, 0.8, 0.4]).reshape(4, 2)
    expected = (everyone - everyone.mean(axis=1, keepdims=True)) / (np.std(everyone) + 1e-4)
    np.testing.assert_allclose(np.array(got).reshape(4, 2), expected, rtol=1e-12)


def test_ddrl_normalises_each_reward_on_its_own():
    scores = {
        "a": torch.tensor([1.0, 2.0, 4.0, 8.0, 0.0, 0.0, 1.0, 3.0], dtype=torch.float64),
        "b": torch.tensor([0.5, 0.1, 0.2, 0.9, 3.0, 1.0, 2.0, 2.0], dtype=torch.float64),
    }

    def normalised(values):  # torch's std: ddof 1
        v = values.numpy().reshape(2, 4)
        return (
            (v - v.mean(axis=1, keepdims=True)) / (np.std(v, axis=1, ddof=1, keepdims=True) + 1e-4)
        ).reshape(-1)

    expected = (normalised(scores["a"]) + normalised(scores["b"])) / 2
    weights = {"a": 1.0, "b": 1.0}
    np.testing.assert_allclose(ddrl_advantages(scores, weights, 4).numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(
        ddrl_advantages(scores, weights, 4, exp_reward=True).numpy(), -np.exp(-expected)
    )


def test_nft_adv_modes():
    a = torch.tensor([-7.0, -1.0, 0.0, 0.3, 9.0], dtype=torch.float64)
    clipped = np.clip(a.numpy(), -5, 5)
    modes = {
        "all": clipped,
        "positive_only": np.clip(clipped, 0, 5),
        "negative_only": np.clip(clipped, -5, 0),
        "one_only": (clipped > 0).astype(float),  # 1 where positive: r = 0.6 at a_max 5
        "binary": np.sign(clipped),
    }
    for mode, a_prime in modes.items():
        expected = np.clip(a_prime / 5 / 2 + 0.5, 0, 1)
        np.testing.assert_allclose(optimality_probability(a, 5.0, mode).numpy(), expected, err_msg=mode)


# --------------------------------------------------------------------------------------------------------
# DiffusionNFT's loss and its copies of the weights


def nft_inputs():
    x0, noise = randn(3, 2, 4, 4, seed=1), randn(3, 2, 4, 4, seed=2)
    sigmas = torch.tensor([0.9, 0.5, 0.1], dtype=torch.float64)
    t = sigmas.reshape(-1, 1, 1, 1)
    noisy = (1 - t) * x0 + t * noise
    v_old = (noise - x0) + 0.3 * randn(3, 2, 4, 4, seed=3)
    v_theta = (v_old + 0.2 * randn(3, 2, 4, 4, seed=4)).requires_grad_(True)
    r = torch.tensor([0.9, 0.5, 0.2], dtype=torch.float64)
    return v_theta, v_old, noisy, x0, sigmas, r


def nft_reference(v_theta, v_old, noisy, x0, sigmas, r, beta, a_max, weights=None):
    """`train_nft_sd3.py`: x0+- = x_t - t v+-, w+- = stopgrad(mean |x0+- - x0|) floored at 1e-5 (NumPy constants
    here), loss = a_max * mean_b[(r l+ + (1 - r) l-) / beta], l+- = mean((x0+- - x0)^2 / w+-)."""
    t = sigmas.reshape(-1, 1, 1, 1)
    positive = noisy - t * (beta * v_theta + (1 - beta) * v_old)
    negative = noisy - t * ((1 + beta) * v_old - beta * v_theta)
    if weights is None:
        weights = [
            torch.from_numpy(
                np.maximum(np.abs(side.detach().numpy() - x0.numpy()).mean(axis=(1, 2, 3)), 1e-5)
            )
            for side in (positive, negative)
        ]
    w_pos, w_neg = (w.reshape(-1, 1, 1, 1) for w in weights)
    l_pos = ((positive - x0) ** 2 / w_pos).mean(dim=(1, 2, 3))
    l_neg = ((negative - x0) ** 2 / w_neg).mean(dim=(1, 2, 3))
    return (a_max * (r * l_pos / beta + (1 - r) * l_neg / beta)).mean()


@pytest.mark.parametrize("beta", [1.0, 0.1])
def test_nft_loss_and_its_gradient_are_the_reference(beta):
    """The value, and the gradient with the adaptive weights held constant (their stop-gradient)."""
    inputs = nft_inputs()
    loss = nft_loss(*inputs, beta=beta, adv_clip_max=5.0)
    (gradient,) = torch.autograd.grad(loss, inputs[0])
    expected = nft_reference(*inputs, beta=beta, a_max=5.0)
    (expected_gradient,) = torch.autograd.grad(expected, inputs[0])
    assert loss.item() == pytest.approx(expected.item(), rel=1e-12)
    torch.testing.assert_close(gradient, expected_gradient, rtol=1e-10, atol=1e-12)


def test_old_policy_and_ema_decay_as_the_reference():
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    old, ema = OldPolicy(model, decay_type=1), ExponentialAverage(model, 0.9)
    with torch.no_grad():
        model.weight.fill_(1.0)
    old.update(100)  # return_decay(100, 1) = min(0.001 * 100, 0.5) = 0.1
    ema.update(3)  # EMAModuleWrapper: min((1 + 3) / (10 + 3), 0.9)
    with old.swapped_in():
        torch.testing.assert_close(model.weight, torch.full((1, 2), 0.9))
    with ema.swapped_in():
        torch.testing.assert_close(model.weight, torch.full((1, 2), 1 - 4 / 13))


def test_an_ema_without_warmup_averages_from_the_first_step():
    """`ema_warmup = false`: decay d at every step, so after n steps towards weights 1 the EMA is 1 - d^n (the ramp
    would give 1 - prod((1 + s) / (10 + s)))."""
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    ema = ExponentialAverage(model, 0.9, warmup=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    for step in range(1, 4):
        ema.update(step)
    with ema.swapped_in():
        torch.testing.assert_close(model.weight, torch.full((1, 2), 1 - 0.9**3))


@pytest.mark.parametrize("kind", ["nft", "flow-grpo"])
def test_ema_warmup_reaches_the_trainers_ema(tmp_path, tiny, kind):
    for warmup in (True, False):
        job = write_rl_job(
            tmp_path / f"{kind}-{warmup}", tiny("sd3"), kind=kind, algorithm={"ema_warmup": warmup}
        )
        trainer = build_diffusion_rl_trainer(read_job(job))
        assert trainer.ema.warmup is warmup
        assert trainer.ema.get_decay() == (0.1 if warmup else 0.9)  # at step 0: min(1 / 10, 0.9), or 0.9


def test_copies_update_on_the_references_steps(tmp_path, tiny):
    """DiffusionNFT's old policy once per rollout, after its last update (2 updates: steps 2, 4, ...), its EMA
    after every step; FlowGRPO's EMA every 8 steps ((step + 1) % 8 == 0, `EMAModuleWrapper`)."""
    nft = build_diffusion_rl_trainer(
        read_job(write_rl_job(tmp_path / "nft", tiny("sd3"), kind="nft", rollout={"updates_per_rollout": 2}))
    )
    schedule = {copy.filename: when for copy, when in nft.copy_updates.schedule}
    assert [schedule["old_policy.safetensors"](s) for s in range(1, 5)] == [False, True, False, True]
    assert all(schedule["ema.safetensors"](s) for s in range(1, 5))
    grpo = build_diffusion_rl_trainer(read_job(write_rl_job(tmp_path / "grpo", tiny("sana"))))
    (when,) = [when for copy, when in grpo.copy_updates.schedule]
    assert [s for s in range(1, 17) if when(s)] == [7, 15]


def test_nft_rollouts_come_from_the_old_policy(tmp_path, tiny):
    trainer = build_diffusion_rl_trainer(read_job(write_rl_job(tmp_path, tiny("sd3"), kind="nft")))
    adapter = trainer.adapter
    with torch.no_grad():  # the trained weights move away from the old policy (still the starting weights)
        for name, parameter in adapter.transformer.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.5)
    prompts = ["a red square", "a blue circle"]
    torch.manual_seed(7)
    rollout = trainer.rollout(prompts, [{}, {}], {})
    torch.manual_seed(7)
    noise = trainer.noise(2)
    grid, conditioning = trainer.grid(trainer.rollout_config.sampling_steps), adapter.encode_prompts(prompts)
    with trainer.old_policy.swapped_in():
        by_old = ode_sample(adapter, adapter.transformer, noise, conditioning, grid, "dpm2")
    by_current = ode_sample(adapter, adapter.transformer, noise, conditioning, grid, "dpm2")
    torch.testing.assert_close(rollout["x0"], by_old)
    assert (rollout["x0"] - by_current).abs().max() > 1e-3


# --------------------------------------------------------------------------------------------------------
# FlowGRPO's SDE step, its KL and its steps


@pytest.mark.parametrize("index", [0, 5, 9])
def test_sde_step_is_the_references(index):
    """`sde_step_with_logprob` on SD3's 10-step grid: std_t = a sqrt(s / (1 - s)) with sigmas[1] for s = 1, the
    mean, and the log-prob of the step's Gaussian (variance std_t^2 |dt|), averaged over elements."""
    sigmas, a = sd3_grid(10), 0.7
    s, s_next = sigmas[index], sigmas[index + 1]
    x, v = randn(2, 4, 8, 8, seed=5), randn(2, 4, 8, 8, seed=6)
    torch.manual_seed(11)
    sample, log_prob = sde_step(x, v, float(s), float(s_next), a, float(sigmas[1]))
    torch.manual_seed(11)
    noise = torch.randn(x.shape, dtype=x.dtype).numpy()

    std_t = a * math.sqrt(s / (1 - (sigmas[1] if s == 1 else s)))
    dt = s_next - s
    xn, vn = x.numpy(), v.numpy()
    mean = xn + (vn + std_t**2 / (2 * s) * (xn + (1 - s) * vn)) * dt
    expected = mean + std_t * math.sqrt(-dt) * noise
    variance = (std_t * math.sqrt(-dt)) ** 2
    expected_log_prob = (
        -((expected - mean) ** 2) / (2 * variance)
        - math.log(math.sqrt(variance))
        - math.log(math.sqrt(2 * math.pi))
    ).mean(axis=(1, 2, 3))
    np.testing.assert_allclose(sample.numpy(), expected, rtol=1e-10)
    np.testing.assert_allclose(log_prob.numpy(), expected_log_prob, rtol=1e-10)
    if index == 0:
        assert sde_std_t(1.0, a, float(sigmas[1])) == pytest.approx(
            0.7 * math.sqrt(1 / (1 - 0.9601293)), rel=1e-6
        )


def test_log_prob_of_a_known_gaussian():
    mean = torch.zeros(1, 3, dtype=torch.float64)
    sample = torch.tensor([[0.5, -1.0, 2.0]], dtype=torch.float64)
    expected = (-(sample.numpy() ** 2) / (2 * 0.25) - math.log(0.5) - 0.5 * math.log(2 * math.pi)).mean()
    assert gaussian_log_prob(sample, mean, 0.5).item() == pytest.approx(expected, rel=1e-12)


def test_kl_in_the_references_scaling_and_exactly():
    """`train_sd3.py`: mean((mu - mu_ref)^2) / (2 std_t^2), std_t without sqrt(dt); exact: also / |dt|."""
    mean, reference = torch.full((2, 3), 0.3), torch.zeros(2, 3)
    assert step_kl(mean, reference, 0.5, -0.1).item() == pytest.approx(0.09 / (2 * 0.25))
    assert step_kl(mean, reference, 0.5, -0.1, "exact").item() == pytest.approx(0.09 / (2 * 0.25 * 0.1))


def test_flow_grpo_trains_the_first_steps_and_fast_windows_start_early():
    assert FlowGRPOSection().trained_steps(10) == list(range(9))  # int(10 * 0.99): the last step never
    starts = {draw_sde_steps(FlowGRPOSection(sde_window=2), 10)[0] for _ in range(200)}
    assert starts == {0, 1, 2, 3}  # the window [start, start + 2) inside the first half


def test_zero_advantage_rows_are_left_out_keeping_chunks_even():
    advantages = torch.tensor([0.0, 1.0, 0.0, -1.0, 0.0, 0.5, 0.0, 0.0, 2.0, 0.0, 0.0, -0.3])
    kept = rows_to_train(advantages, chunks=4)
    assert len(kept) == 8 and set(torch.nonzero(advantages).flatten().tolist()) <= set(kept.tolist())
    assert len(rows_to_train(torch.zeros(12), chunks=4)) == 4


# --------------------------------------------------------------------------------------------------------
# DDRL's sampler


def test_ddrl_levels_are_cosmos_rls_karras_grid(tmp_path, tiny):
    """Cosmos-Predict2.5's grid for N + 1 steps, in EDM units: `get_rev_ts`'s Karras grid, 200 to 0.01, rho 7."""
    from cosmos_train.config import PipelineSection
    from cosmos_train.diffusion.loading import load_adapter

    adapter = load_adapter(
        PipelineSection(name_or_path=str(tiny("cosmos_predict2_5")), trust_remote_code=True)
    )
    levels = np.array(edm_levels(noise_grid(adapter, 21, (16, 3, 4, 4))))
    i = np.arange(21) / 20
    karras = (200 ** (1 / 7) + i * (0.01 ** (1 / 7) - 200 ** (1 / 7))) ** 7
    np.testing.assert_allclose(levels, karras, rtol=2e-4)


def test_churn_and_the_2ab_step():
    assert churn_eta(20) == pytest.approx(1 / 21)
    assert churn_eta(5) == pytest.approx(math.sqrt(1.2) - 1)
    x, x0, x0_previous = randn(1, 5, seed=8), randn(1, 5, seed=9), randn(1, 5, seed=10)
    s, t, s_previous = 10.0, 7.0, 14.0
    # `reg_x0_euler_step`: the first step.
    np.testing.assert_allclose(ab2_step(x, s, t, x0, None).numpy(), ((s - t) / s * x0 + t / s * x).numpy())
    # `res_x0_rk2_step`: h = log(s / t), c2 = log(s / s1) / h, phi1(-h) = (1 - e^-h) / h, phi2 = (1 - phi1) / h.
    h = math.log(s / t)
    c2 = math.log(s / s_previous) / h
    phi1 = (1 - math.exp(-h)) / h
    phi2 = (1 - phi1) / h
    b2 = phi2 / c2
    b1 = phi1 - b2
    expected = t / s * x.numpy() + h * (b1 * x0.numpy() + b2 * x0_previous.numpy())
    np.testing.assert_allclose(ab2_step(x, s, t, x0, (x0_previous, s_previous)).numpy(), expected, rtol=1e-12)
    # Equal predictions: the multistep step is the first-order one.
    torch.testing.assert_close(ab2_step(x, s, t, x0, (x0, s_previous)), ab2_step(x, s, t, x0, None))


def test_ddrl_log_ratio_has_no_variance_factor():
    sample, mu_old, mu_theta = randn(2, 6, seed=1), randn(2, 6, seed=2), randn(2, 6, seed=3)
    expected = ((sample - mu_old) ** 2 - (sample - mu_theta) ** 2).numpy().mean(axis=1)
    np.testing.assert_allclose(log_ratio(sample, mu_old, mu_theta).numpy(), expected)


# --------------------------------------------------------------------------------------------------------
# One loss per algorithm, from its trainer, against the reference formula on the same model outputs. Each test
# first asserts that every term of its loss (and the ratio clip's effect) is over 10 times the tolerance, so that
# dropping a term or scaling it by 10 or 1/10 fails: with the algorithms' own small KL weights the KL was 1e-7 of
# the loss or less, and FlowGRPO's clip moved it by less than the tolerance.


def perturb_lora(adapter, std: float = 0.05) -> None:
    with torch.no_grad():
        for name, parameter in adapter.transformer.named_parameters():
            if "lora_B" in name:
                parameter.add_(torch.randn_like(parameter) * std)


def first_micro_batch(trainer, batch, std: float = 0.05):
    inputs = trainer._prepare_inputs(batch)
    perturb_lora(trainer.adapter, std)  # after the rollout: the ratio moves off 1, the KL's base differs
    return inputs


def prompt_batch(job, count: int = 2):
    from cosmos_train.data import collate_prompts, load_prompt_list

    prompts, _ = load_prompt_list(job.config.data)
    return collate_prompts([prompts[i] for i in range(count)])


def test_nft_trainer_loss_is_the_reference(tmp_path, tiny):
    job = read_job(
        write_rl_job(
            tmp_path, tiny("sd3"), kind="nft", rollout={"samples_per_prompt": 2}, algorithm={"kl_beta": 1.0}
        )
    )
    trainer = build_diffusion_rl_trainer(job)
    inputs = first_micro_batch(trainer, prompt_batch(job))
    trainer.old_policy.update(500)  # halfway to the trained weights: the old policy is not the KL's base
    adapter, nft = trainer.adapter, job.config.nft
    x0, sigmas, noise = inputs["x0"].double(), inputs["sigmas"].double(), inputs["noise"].double()
    t = sigmas.reshape(-1, 1, 1, 1)
    noisy = (1 - t) * x0 + t * noise

    def v(transformer):
        with torch.no_grad():
            out = adapter.predict_velocity(
                transformer,
                noisy.float(),
                inputs["sigmas"],
                inputs["conditioning"],
                timesteps=inputs["timesteps"],
            )
        return out.double()

    v_theta = v(adapter.transformer)
    with trainer.old_policy.swapped_in():
        v_old = v(adapter.transformer)
    with trainer.reference() as reference:
        v_ref = v(reference)
    expected = nft_reference(
        v_theta, v_old, noisy, x0, sigmas, inputs["r"].double(), nft.beta, nft.adv_clip_max
    )
    kl_term = nft.kl_beta * ((v_theta - v_ref) ** 2).mean().item()
    expected = expected.item() + kl_term
    tolerance = 1e-6 * expected
    assert kl_term > 10 * tolerance  # the policy term is the rest of the loss
    loss = trainer.compute_loss(trainer.model, inputs)
    assert loss.item() == pytest.approx(expected, rel=0, abs=tolerance)


def test_flow_grpo_trainer_loss_is_the_reference(tmp_path, tiny):
    job = read_job(
        write_rl_job(tmp_path, tiny("sana"), rollout={"guidance_scale": 3.0}, algorithm={"kl_beta": 1.0})
    )
    trainer = build_diffusion_rl_trainer(job)
    inputs = first_micro_batch(trainer, prompt_batch(job, 4), std=0.2)  # a ratio well past the clip
    adapter, a = trainer.adapter, job.config.flow_grpo
    x, x_next = inputs["x"].double().numpy(), inputs["x_next"].double().numpy()
    s, s_next = inputs["sigma"], inputs["sigma_next"]

    def v(transformer):  # uncond + g (cond - uncond), SANA's form, with the grid's timestep
        from cosmos_train.diffusion.sampling import velocity

        with torch.no_grad():
            return velocity(
                adapter, transformer, inputs["x"], s, inputs["conditioning"], trainer.guidance(x.shape[0]),
                inputs["timestep"],
            ).double().numpy()  # fmt: skip

    std_t = a.noise_level * math.sqrt(s / (1 - min(s, inputs["sigma_max"])))
    dt = s_next - s

    def mean_of(velocity):
        return x + (velocity + std_t**2 / (2 * s) * (x + (1 - s) * velocity)) * dt

    mean = mean_of(v(adapter.transformer))
    with trainer.reference() as reference:
        mean_ref = mean_of(v(reference))
    variance = std_t**2 * -dt
    log_prob = (-((x_next - mean) ** 2) / (2 * variance) - 0.5 * math.log(2 * math.pi * variance)).mean(
        axis=(1, 2, 3)
    )
    ratio = np.exp(log_prob - inputs["old_log_prob"].numpy())
    advantages = np.clip(inputs["advantages"].double().numpy(), -5, 5)
    unclipped = (-advantages * ratio).mean()
    policy = np.maximum(
        -advantages * ratio, -advantages * np.clip(ratio, 1 - a.clip_range, 1 + a.clip_range)
    ).mean()
    kl = (((mean - mean_ref) ** 2).mean(axis=(1, 2, 3)) / (2 * std_t**2)).mean()
    expected = policy + a.kl_beta * kl
    tolerance = 1e-6 * expected
    # The clip acts on this batch: the ratio is well past 1 +- clip_range.
    assert min(abs(policy), policy - unclipped, a.kl_beta * kl) > 10 * tolerance
    loss = trainer.compute_loss(trainer.model, inputs)
    assert loss.item() == pytest.approx(expected, rel=0, abs=tolerance)


def test_ddrl_trainer_loss_is_the_reference(tmp_path, tiny):
    from cosmos_train.data import collate_pairs, load_pairs

    job = read_job(
        write_rl_job(
            tmp_path,
            tiny("sana"),
            kind="ddrl",
            rollout={"samples_per_prompt": 2},
            algorithm={"caption_dropout": 0.0, "kl_beta": 0.01},
        )
    )
    trainer = build_diffusion_rl_trainer(job)
    dataset, _ = load_pairs(job.config.data, video=False)
    trainer._prepare_inputs(collate_pairs([dataset[i] for i in range(4)]))
    inputs = trainer._prepare_inputs(None)  # the second trained step (2): a multistep step with a previous x0
    perturb_lora(trainer.adapter)
    adapter, d = trainer.adapter, job.config.ddrl
    assert inputs["step"] == 2 and inputs["previous"] is not None
    x, s, s_next = inputs["x"].double(), inputs["s_hat"], inputs["s_next"]

    def x0_of(transformer, x_edm, level, conditioning):  # EDM x0 from the flow model at t = s / (1 + s)
        t = level / (1 + level)
        flow = x_edm / (1 + level)
        with torch.no_grad():
            v = adapter.predict_velocity(
                transformer, flow.float(), torch.full((x_edm.shape[0],), t), conditioning
            )
        return flow - t * v.double()

    def mu_of(transformer):  # `res_x0_rk2_step` from (x^_i, s^_i) to s_{i+1}, with the rollout's previous x0
        x0 = x0_of(transformer, x, s, inputs["conditioning"]).numpy()
        previous, s_previous = inputs["previous"][0].double().numpy(), inputs["previous"][1]
        h = math.log(s / s_next)
        phi1 = (1 - math.exp(-h)) / h
        b2 = ((1 - phi1) / h) / (math.log(s / s_previous) / h)
        return s_next / s * x.numpy() + h * ((phi1 - b2) * x0 + b2 * previous)

    sample, mu_old = inputs["sample"].double().numpy(), inputs["mu_old"].double().numpy()
    mu_theta = mu_of(adapter.transformer)
    with trainer.reference() as reference:
        mu_ref = mu_of(reference)
    ratio = np.exp(((sample - mu_old) ** 2 - (sample - mu_theta) ** 2).mean(axis=(1, 2, 3)))
    advantages = np.clip(inputs["advantages"].double().numpy(), -5, 5)
    unclipped = (-advantages * ratio).mean()
    policy = np.maximum(
        -advantages * ratio, -advantages * np.clip(ratio, 1 - d.clip_range, 1 + d.clip_range)
    ).mean()
    kl = ((mu_ref - mu_theta) ** 2).mean()
    # `compute_loss_with_epsilon_and_sigma`: x_s = x0 + s eps at the step's churned level, weight (s^2 + 1) / s^2.
    clean, eps = inputs["clean"].double(), inputs["noise"].double()
    x0_pred = x0_of(adapter.transformer, clean + s * eps, s, inputs["conditioning"])
    data = ((s**2 + 1) / s**2 * (clean - x0_pred) ** 2).mean().item()
    expected = d.loss_scale * (policy + d.kl_beta * kl + d.data_beta * data)
    tolerance = 1e-5 * expected  # the trainer's float32 2ab step and data term: 6e-8 off here
    terms = (abs(policy), policy - unclipped, d.kl_beta * kl, d.data_beta * data)
    assert d.loss_scale * min(terms) > 10 * tolerance
    loss = trainer.compute_loss(trainer.model, inputs)
    assert loss.item() == pytest.approx(expected, rel=0, abs=tolerance)


def test_the_weighted_reward_sum_and_its_clip():
    """R = sum_f w_f s_f (the references' `multi_score`); with cosmos-rl's clip, each score and the sum to +-clip."""
    from cosmos_train.algorithms.diffusion_rl.advantages import weighted_reward

    scores = {"a": torch.tensor([1.0, -8.0, 3.0]), "b": torch.tensor([2.0, 0.5, 9.0])}
    weights = {"a": 1.0, "b": 0.5}
    torch.testing.assert_close(weighted_reward(scores, weights), torch.tensor([2.0, -7.75, 7.5]))
    # Clipped at 5: a -> [1, -5, 3], b -> [2, 0.5, 5]; sums [2, -4.75, 5.5] -> [2, -4.75, 5].
    torch.testing.assert_close(weighted_reward(scores, weights, clip=5.0), torch.tensor([2.0, -4.75, 5.0]))


def test_same_latent_gives_each_prompt_group_one_noise():
    """FlowGRPO's `same_latent` and DDRL's `use_same_seed`: K samples of a prompt start from one noise."""
    from cosmos_train.algorithms.diffusion_rl.trainer import DiffusionRLTrainer

    trainer = SimpleNamespace(
        latent_shape=lambda: (2, 3), adapter=SimpleNamespace(device="cpu"), group_size=2
    )
    torch.manual_seed(0)
    shared = DiffusionRLTrainer.noise(trainer, 6, same_per_group=True)
    assert torch.equal(shared[0], shared[1]) and torch.equal(shared[4], shared[5])
    assert not torch.equal(shared[1], shared[2])
    own = DiffusionRLTrainer.noise(trainer, 6)
    assert not torch.equal(own[0], own[1])
