"""Cosmos3 action SFT's math against references we did not write: diffusers' "mode" timestep density (the
waver density is that density at scale 1.29), diffusers' flow-matching scheduler's time shift, and the loss
written out element by element as cosmos-framework states it."""

from __future__ import annotations

import itertools

import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.training_utils import compute_density_for_timestep_sampling

from cosmos_train.algorithms.action_sft.loss import (
    action_loss,
    action_sft_loss,
    canvas_tier,
    draw_sigmas,
    video_loss,
)


def test_waver_density_is_diffusers_mode_density_shifted_as_the_scheduler_shifts():
    torch.manual_seed(3)
    reference = compute_density_for_timestep_sampling("mode", batch_size=512, mode_scale=1.29)
    torch.manual_seed(3)
    assert torch.allclose(draw_sigmas(512, shift=1.0), reference, atol=1e-6)
    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=5.0)
    unshifted = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=1.0).sigmas[:-1]
    torch.manual_seed(3)
    u_sigmas = draw_sigmas(512, shift=1.0)
    torch.manual_seed(3)
    shifted = draw_sigmas(512, shift=5.0)
    # The same map the scheduler applies to its grid, applied to our draws.
    grid = scheduler.sigmas[:-1]
    torch.testing.assert_close(5.0 * unshifted / (1 + 4.0 * unshifted), grid, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(shifted, 5.0 * u_sigmas / (1 + 4.0 * u_sigmas))
    assert shifted.mean() > u_sigmas.mean() + 0.1  # a shift of 5 moves mass to high noise


def test_tiers():
    assert [canvas_tier(h, w) for h, w in ((192, 320), (256, 256), (480, 832), (544, 736), (720, 1280))] == [
        256, 256, 480, 480, 720,
    ]  # fmt: skip


def test_losses_element_by_element():
    generator = torch.Generator().manual_seed(0)
    c, t, h, w, steps, dim, raw = 2, 3, 2, 2, 4, 6, 3
    pred, x0, eps = (torch.randn(c, t, h, w, generator=generator) for _ in range(3))
    clean = [0]
    total = 0.0
    for ci, ti, hi, wi in itertools.product(range(c), range(t), range(h), range(w)):
        if ti not in clean:
            total += (pred[ci, ti, hi, wi] - (eps[ci, ti, hi, wi] - x0[ci, ti, hi, wi])).item() ** 2
    expected_video = total / (c * t * h * w)  # clean frames count in the denominator
    assert abs(video_loss(pred, x0, eps, clean).item() - expected_video) < 1e-6

    a_pred, a0, a_eps = (torch.randn(steps, dim, generator=generator) for _ in range(3))
    clean_steps = [0]
    total = sum(
        (a_pred[s, d] - (a_eps[s, d] - a0[s, d])).item() ** 2
        for s in range(steps)
        for d in range(raw)
        if s not in clean_steps
    )
    expected_action = total / (steps * raw)
    assert abs(action_loss(a_pred, a0, a_eps, clean_steps, raw).item() - expected_action) < 1e-6
    # Padded channels and clean steps carry nothing.
    a_pred2 = a_pred.clone()
    a_pred2[:, raw:] += 100
    a_pred2[0] += 100
    assert action_loss(a_pred2, a0, a_eps, clean_steps, raw) == action_loss(
        a_pred, a0, a_eps, clean_steps, raw
    )
    # Forward dynamics: every step clean, the action part adds 0.
    assert action_loss(a_pred, a0, a_eps, range(steps), raw) == 0

    loss = action_sft_loss(
        [torch.tensor(1.0), torch.tensor(3.0)], [torch.tensor(0.5), torch.tensor(0.0)], 10, 10
    )
    assert loss.item() == (10 * 1 + 10 * 0.5 + 10 * 3 + 0) / 2
