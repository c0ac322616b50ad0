"""Cosmos3 action SFT's math as cosmos-framework computes it (`omni_mot_model.py`, `diffusion/rectified_flow.py`,
`algorithm/loss/flow_matching.py`; `../shared/reference/cosmos3-actions.md` §3.1):

- one sigma per sample, shared by the video and the actions (`independent_action_schedule=False`), drawn from the
  "waver" density, u ~ U(0, 1), t = 1 - u - 1.29 (cos^2(pi u / 2) - 1 + u) (SD3's "mode" density at scale 1.29),
  then shifted as sigma = s t / (1 + (s - 1) t) with s by the canvas tier (256: 3, 480: 5, 720: 10);
- x_t = sigma eps + (1 - sigma) x0, the velocity target eps - x0, clean frames and steps at sigma 0;
- per sample, mean((pred - v)^2 * noisy) over every element (clean ones count in the denominator), the actions
  over their first `raw_action_dim` channels only; a part with nothing noisy adds 0;
- loss = video_weight * L_video + action_weight * L_action (10 and 10 in every recipe), averaged over the batch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

WAVER_SCALE = 1.29
TIER_SHIFTS = {256: 3.0, 480: 5.0, 720: 10.0}


def canvas_tier(height: int, width: int) -> int:
    """The shift's tier of a canvas: its short side up to 256, up to 640 (the 480 tier), else 720."""
    side = min(height, width)
    return 256 if side <= 256 else 480 if side <= 640 else 720


def draw_sigmas(batch_size: int, shift: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """`batch_size` sigmas from the waver density, shifted by `shift`."""
    u = torch.rand(batch_size, generator=generator)
    t = 1 - u - WAVER_SCALE * (torch.cos(math.pi * u / 2) ** 2 - 1 + u)
    return shift * t / (1 + (shift - 1) * t)


def video_loss(prediction: torch.Tensor, x0: torch.Tensor, noise: torch.Tensor, clean_frames: Sequence[int]):
    """One sample's `[C, T, H, W]` (or `[1, C, T, H, W]`) velocity error on its noisy latent frames, averaged over
    every element."""
    prediction, x0, noise = (x.reshape(x.shape[-4:]).float() for x in (prediction, x0, noise))
    noisy = torch.ones(x0.shape[1], device=x0.device)
    noisy[list(clean_frames)] = 0
    error = (prediction - (noise - x0)) ** 2 * noisy[None, :, None, None]
    return error.mean()


def action_loss(
    prediction: torch.Tensor,
    x0: torch.Tensor,
    noise: torch.Tensor,
    clean_steps: Sequence[int],
    raw_action_dim: int,
):
    """One sample's `[T, action_dim]` velocity error on its noisy steps and first `raw_action_dim` channels,
    averaged over `T x raw_action_dim`."""
    width = raw_action_dim
    prediction, x0, noise = (x[:, :width].float() for x in (prediction, x0, noise))
    noisy = torch.ones(x0.shape[0], device=x0.device)
    noisy[list(clean_steps)] = 0
    return ((prediction - (noise - x0)) ** 2 * noisy[:, None]).mean()


def action_sft_loss(video_losses, action_losses, video_weight: float, action_weight: float) -> torch.Tensor:
    """The batch's loss: each sample's weighted sum, averaged."""
    per_sample = [
        video_weight * v + action_weight * a for v, a in zip(video_losses, action_losses, strict=True)
    ]
    return torch.stack(per_sample).mean()
