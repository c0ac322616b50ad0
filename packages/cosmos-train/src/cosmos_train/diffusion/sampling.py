"""Sampling any adapter's flow model step by step, for the RL trainers' rollouts (`docs/diffusion-algorithms.md`).

Two samplers over the same sigma grid (1 -> 0, with the family's time shift):
- `ode_sample`: the deterministic flow ODE, Euler or Heun (2nd order, two model calls per step);
- `sde_step`: FlowGRPO's SDE step, Gaussian with a known log-probability, so a trainer can store per-step
  log-probs at rollout and recompute them under the current weights.
Classifier-free guidance runs the conditional and unconditional predictions as two calls on the same rows,
so a guided batch can never pair a row with another row's unconditional prediction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .adapter import DiffusionAdapter

SOLVERS = ("heun", "euler")


def sigma_grid(adapter: DiffusionAdapter, num_steps: int, device: torch.device | None = None) -> torch.Tensor:
    """`num_steps + 1` noise levels from 1 to 0, shifted as the family's scheduler shifts them."""
    return adapter.shift_sigmas(
        torch.linspace(1.0, 0.0, num_steps + 1, device=device, dtype=torch.float64)
    ).float()


@dataclass
class Guidance:
    """Classifier-free guidance: `scale` 1 (off) needs no unconditional conditioning."""

    scale: float = 1.0
    unconditional: dict[str, torch.Tensor] | None = None


def velocity(
    adapter: DiffusionAdapter,
    transformer: torch.nn.Module,
    latents: torch.Tensor,
    sigma: torch.Tensor | float,
    conditioning: dict[str, torch.Tensor],
    guidance: Guidance | None = None,
) -> torch.Tensor:
    """The (guided) velocity at `latents`, all rows at noise level `sigma` (a scalar or one per row)."""
    sigmas = torch.as_tensor(sigma, device=latents.device, dtype=torch.float32).expand(latents.shape[0])
    predicted = adapter.predict_velocity(transformer, latents, sigmas, conditioning).float()
    if guidance is None or guidance.scale == 1.0:
        return predicted
    unconditional = adapter.predict_velocity(transformer, latents, sigmas, guidance.unconditional).float()
    return unconditional + guidance.scale * (predicted - unconditional)


@torch.no_grad()
def ode_sample(
    adapter: DiffusionAdapter,
    transformer: torch.nn.Module,
    noise: torch.Tensor,
    conditioning: dict[str, torch.Tensor],
    grid: torch.Tensor,
    solver: str = "heun",
) -> torch.Tensor:
    """Integrate the flow ODE from `noise` (sigma = grid[0]) to clean latents (grid[-1] = 0), CFG off."""
    if solver not in SOLVERS:
        raise ValueError(f"unknown solver '{solver}'; expected one of {', '.join(SOLVERS)}")
    x = noise.float()
    for sigma, sigma_next in zip(grid[:-1].tolist(), grid[1:].tolist(), strict=True):
        step = sigma_next - sigma
        v = velocity(adapter, transformer, x, sigma, conditioning)
        if solver == "euler" or sigma_next == 0:
            x = x + step * v
            continue
        v_next = velocity(adapter, transformer, x + step * v, sigma_next, conditioning)
        x = x + step * (v + v_next) / 2
    return x


def sde_std(sigma: float, sigma_next: float, noise_level: float, sigma_max: float) -> float:
    """The standard deviation of one FlowGRPO step: a * sqrt(sigma / (1 - sigma)) * sqrt(sigma - sigma_next)
    (at sigma = 1 the grid's next level stands in, as in the reference)."""
    s = sigma_max if sigma >= 1.0 else sigma
    return noise_level * math.sqrt(s / (1 - s)) * math.sqrt(sigma - sigma_next)


def sde_mean(x: torch.Tensor, v: torch.Tensor, sigma: float, sigma_next: float, std: float) -> torch.Tensor:
    """The mean of the SDE step x_{t-dt} = x + [v + s_t^2 / (2t) (x + (1 - t) v)] (-dt)
    (`docs/diffusion-algorithms.md`)."""
    dt = sigma_next - sigma  # negative
    s2 = std**2 / (sigma - sigma_next)  # s_t^2, the diffusion coefficient squared
    return x * (1 + s2 / (2 * sigma) * dt) + v * (1 + s2 * (1 - sigma) / (2 * sigma)) * dt


def gaussian_log_prob(sample: torch.Tensor, mean: torch.Tensor, std: float) -> torch.Tensor:
    """Per-row mean log-density of `sample` under N(mean, std^2), averaged over elements (as the reference)."""
    log_prob = (
        -((sample.double() - mean.double()) ** 2) / (2 * std**2) - math.log(std) - 0.5 * math.log(2 * math.pi)
    )
    return log_prob.mean(dim=tuple(range(1, sample.dim())))


def sde_step(
    x: torch.Tensor,
    v: torch.Tensor,
    sigma: float,
    sigma_next: float,
    noise_level: float,
    sigma_max: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One stochastic step (noise from the global RNG, so a resumed run draws the same): (x_next, its
    log-probability per row)."""
    std = sde_std(sigma, sigma_next, noise_level, sigma_max)
    mean = sde_mean(x, v, sigma, sigma_next, std)
    noise = torch.randn(x.shape, device=x.device, dtype=x.dtype)
    sample = mean + std * noise
    return sample, gaussian_log_prob(sample, mean, std)


def to_uint8_media(pixels: torch.Tensor) -> torch.Tensor:
    """Decoded pixels in [-1, 1] (`B x 3 x H x W` or `B x 3 x T x H x W`) -> uint8 `B x H x W x 3` or
    `B x T x H x W x 3`, what rewards and the reward service take."""
    pixels = ((pixels.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    return pixels.permute(0, 2, 3, 1) if pixels.dim() == 4 else pixels.permute(0, 2, 3, 4, 1)


__all__ = [
    "SOLVERS",
    "Guidance",
    "gaussian_log_prob",
    "ode_sample",
    "sde_mean",
    "sde_std",
    "sde_step",
    "sigma_grid",
    "to_uint8_media",
    "velocity",
]
