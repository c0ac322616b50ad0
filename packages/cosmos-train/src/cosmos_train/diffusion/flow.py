"""Rectified-flow arithmetic shared by every family and every diffusion trainer (`docs/diffusion-algorithms.md`).

x_sigma = (1 - sigma) * x0 + sigma * noise, and the model predicts v = noise - x0. Latent frames marked in
`condition_frames` (`B x T` bool, video families) stay clean and carry no loss.
"""

from __future__ import annotations

import torch
from diffusers.training_utils import compute_density_for_timestep_sampling, compute_loss_weighting_for_sd3


def per_row(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """`B` values shaped to broadcast over `like`'s non-batch dimensions."""
    return values.reshape(-1, *([1] * (like.dim() - 1))).to(like)


def frame_mask(condition_frames: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor | None:
    """`B x T` clean-frame flags as a float mask broadcastable over `B x C x T x H x W` latents."""
    if condition_frames is None:
        return None
    return condition_frames[:, None, :, None, None].to(like)


def add_noise(
    x0: torch.Tensor, noise: torch.Tensor, sigmas: torch.Tensor, condition_frames: torch.Tensor | None = None
) -> torch.Tensor:
    sigma = per_row(sigmas, x0)
    return keep_clean_frames((1 - sigma) * x0 + sigma * noise, x0, condition_frames)


def keep_clean_frames(
    x: torch.Tensor, clean_values: torch.Tensor, condition_frames: torch.Tensor | None
) -> torch.Tensor:
    """`x` with the frames marked in `condition_frames` taken from `clean_values` (unchanged without any)."""
    clean = frame_mask(condition_frames, x)
    return x if clean is None else clean * clean_values + (1 - clean) * x


def sample_sigmas(
    batch_size: int, density: str, logit_mean: float, logit_std: float, mode_scale: float
) -> torch.Tensor:
    """Noise levels in (0, 1) before the family's time shift (diffusers' densities; "uniform" otherwise)."""
    return compute_density_for_timestep_sampling(
        weighting_scheme=density,
        batch_size=batch_size,
        logit_mean=logit_mean,
        logit_std=logit_std,
        mode_scale=mode_scale,
    )


def flow_matching_loss(
    prediction: torch.Tensor,
    x0: torch.Tensor,
    noise: torch.Tensor,
    sigmas: torch.Tensor,
    condition_frames: torch.Tensor | None = None,
    weighting: str = "none",
) -> torch.Tensor:
    """Mean squared error to the velocity target over the noisy elements, per-sample weighted (SD3 schemes)."""
    error = (prediction.float() - (noise - x0).float()) ** 2
    weight = per_row(compute_loss_weighting_for_sd3(weighting, sigmas), error)
    noisy = torch.ones_like(error)
    clean = frame_mask(condition_frames, error)
    if clean is not None:
        noisy = noisy * (1 - clean)
    return (weight * error * noisy).sum() / noisy.sum().clamp(min=1)


def euler_step(
    latents: torch.Tensor, velocity: torch.Tensor, sigma: float, sigma_next: float
) -> torch.Tensor:
    """One deterministic flow ODE step from `sigma` to `sigma_next`."""
    return latents + (sigma_next - sigma) * velocity
