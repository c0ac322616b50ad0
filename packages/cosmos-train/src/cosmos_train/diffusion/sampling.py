"""Sampling any adapter's flow model step by step, for the RL trainers' rollouts (`docs/diffusion-algorithms.md`).

Rollouts follow the pipeline's own inference: the noise levels and the timesteps the transformer is fed come from
the pipeline's scheduler (`noise_grid`: `scheduler.set_timesteps`, never re-derived here), and classifier-free
guidance takes the family's form (`DiffusionAdapter.guide`, with its negative prompt).
- `ode_sample`: the deterministic flow ODE on that grid, with the pipeline's own scheduler (`pipeline`),
  DPM-Solver++(2M) (`dpm2`, one model call per step), Euler, or Heun (two calls per step);
- `sde_step`: FlowGRPO's SDE step, Gaussian with a known log-probability, so a trainer can store per-step
  log-probs at rollout and recompute them under the current weights.
Classifier-free guidance is one transformer call, as the pipelines batch it: the rows twice, their conditioning
then the unconditional one (`DiffusionAdapter.stack_conditioning`), the output split in halves (`chunk(2)`), so
row i's unconditional prediction is row `rows + i`'s. Where the adapter cannot stack the two conditionings, or
`Guidance.batched` is off (`[rollout] batched_guidance = false`, less peak memory), it is two calls on the same
rows; both ways give the same velocity.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import torch

from ..config.sections import SOLVERS
from .adapter import DiffusionAdapter


@dataclass(frozen=True)
class NoiseGrid:
    """The pipeline's inference grid for `steps` steps: `sigmas` (noisiest first, `steps + 1` levels, the last the
    scheduler's final one, 0 for flow schedulers) and `timesteps`, what the pipeline feeds its transformer at the
    first `steps` levels. `scheduler` is set to this grid (copy it before stepping: multistep schedulers keep
    state)."""

    sigmas: torch.Tensor
    timesteps: torch.Tensor
    scheduler: Any

    @property
    def steps(self) -> int:
        return len(self.timesteps)


def noise_grid(adapter: DiffusionAdapter, num_steps: int, latent_shape: tuple[int, ...]) -> NoiseGrid:
    """The grid the pipeline samples `num_steps` steps on, for latents of `latent_shape` (one sample's)."""
    scheduler = copy.deepcopy(adapter.pipeline.scheduler)
    scheduler.set_timesteps(num_steps, device="cpu", **adapter.grid_kwargs(num_steps, latent_shape))
    sigmas = (
        scheduler.sigmas.detach().double().cpu()
    )  # the solvers' coefficients in float64, as the references
    return NoiseGrid(sigmas, scheduler.timesteps.detach().cpu(), scheduler)


@dataclass
class Guidance:
    """Classifier-free guidance: `scale` 1 (off) needs no unconditional conditioning. `batched`: the conditional
    and unconditional rows in one transformer call (False: two calls, for a lower peak memory)."""

    scale: float = 1.0
    unconditional: dict[str, torch.Tensor] | None = None
    batched: bool = True


def predict_in_parts(
    adapter: DiffusionAdapter,
    transformer: torch.nn.Module,
    latents: torch.Tensor,
    sigmas: torch.Tensor,
    conditioning: dict[str, torch.Tensor],
    condition_frames: torch.Tensor | None = None,
    timesteps: torch.Tensor | None = None,
    max_rows: int | None = None,
) -> torch.Tensor:
    """`adapter.predict_velocity` in transformer calls of at most `max_rows` rows (None: one call), so sampling a
    large rollout holds one part's activations at a time. Per-row tensors (first dimension = rows) are cut; a
    conditioning tensor shared by all rows goes whole to every call."""
    rows = latents.shape[0]
    if max_rows is None or rows <= max_rows:
        return adapter.predict_velocity(
            transformer, latents, sigmas, conditioning, condition_frames=condition_frames, timesteps=timesteps
        )

    def rows_of(value: torch.Tensor | None, part: slice) -> torch.Tensor | None:
        return value[part] if value is not None and value.dim() and value.shape[0] == rows else value

    parts = []
    for start in range(0, rows, max_rows):
        part = slice(start, start + max_rows)
        parts.append(
            adapter.predict_velocity(
                transformer,
                latents[part],
                sigmas[part],
                {key: rows_of(value, part) for key, value in conditioning.items()},
                condition_frames=rows_of(condition_frames, part),
                timesteps=rows_of(timesteps, part),
            )
        )
    return torch.cat(parts)


def velocity(
    adapter: DiffusionAdapter,
    transformer: torch.nn.Module,
    latents: torch.Tensor,
    sigma: torch.Tensor | float,
    conditioning: dict[str, torch.Tensor],
    guidance: Guidance | None = None,
    timestep: torch.Tensor | float | None = None,
    condition_frames: torch.Tensor | None = None,
    max_rows: int | None = None,
) -> torch.Tensor:
    """The (guided) velocity at `latents`, all rows at noise level `sigma`, which the pipeline's scheduler calls
    `timestep` (fed to the transformer when given); `condition_frames` (video families) as `predict_velocity`.
    `max_rows` caps the rows of one transformer call (`predict_in_parts`; a batched guided call counts both)."""
    rows = latents.shape[0]
    sigmas = torch.as_tensor(sigma, device=latents.device, dtype=torch.float32).expand(rows)
    timesteps = None if timestep is None else torch.as_tensor(timestep, device=latents.device).expand(rows)

    def predict(x, levels, rows_conditioning, frames, steps) -> torch.Tensor:
        return predict_in_parts(
            adapter, transformer, x, levels, rows_conditioning, frames, steps, max_rows
        ).float()

    if guidance is None or guidance.scale == 1.0:
        return predict(latents, sigmas, conditioning, condition_frames, timesteps)
    stacked = None
    if guidance.batched:
        stacked = adapter.stack_conditioning(conditioning, guidance.unconditional)
    if stacked is None:
        conditional = predict(latents, sigmas, conditioning, condition_frames, timesteps)
        unconditional = predict(latents, sigmas, guidance.unconditional, condition_frames, timesteps)
    else:

        def twice(value: torch.Tensor | None) -> torch.Tensor | None:
            return None if value is None else torch.cat([value, value])

        both = predict(twice(latents), twice(sigmas), stacked, twice(condition_frames), twice(timesteps))
        conditional, unconditional = both.chunk(2)
    return adapter.guide(conditional, unconditional, guidance.scale)


@torch.no_grad()
def ode_sample(
    adapter: DiffusionAdapter,
    transformer: torch.nn.Module,
    noise: torch.Tensor,
    conditioning: dict[str, torch.Tensor],
    grid: NoiseGrid,
    solver: str = "dpm2",
    guidance: Guidance | None = None,
    max_rows: int | None = None,
) -> torch.Tensor:
    """Integrate the flow ODE on `grid` from `noise` to clean latents, `max_rows` rows per transformer call."""
    if solver not in SOLVERS:
        raise ValueError(f"unknown solver '{solver}'; expected one of {', '.join(SOLVERS)}")
    x = noise.float()
    if solver == "pipeline":
        scheduler = copy.deepcopy(grid.scheduler)
        for index, timestep in enumerate(grid.timesteps):
            v = velocity(
                adapter,
                transformer,
                x,
                grid.sigmas[index],
                conditioning,
                guidance,
                timestep,
                max_rows=max_rows,
            )
            x = scheduler.step(v, timestep, x, return_dict=False)[0]
        return x
    sigmas, previous = grid.sigmas, None
    for index, timestep in enumerate(grid.timesteps):
        sigma, sigma_next = sigmas[index], sigmas[index + 1]
        v = velocity(adapter, transformer, x, sigma, conditioning, guidance, timestep, max_rows=max_rows)
        if solver == "euler" or (solver == "heun" and sigma_next == 0):
            x = x + (sigma_next - sigma) * v
        elif solver == "heun":
            euler = x + (sigma_next - sigma) * v
            v_next = velocity(
                adapter,
                transformer,
                euler,
                sigma_next,
                conditioning,
                guidance,
                grid.timesteps[index + 1],
                max_rows=max_rows,
            )
            x = x + (sigma_next - sigma) * (v + v_next) / 2
        else:
            x, previous = dpm_solver_2m_step(x, x - sigma * v, sigmas, index, previous)
    return x


def dpm_solver_2m_step(
    x: torch.Tensor, x0: torch.Tensor, sigmas: torch.Tensor, index: int, previous: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """One step of DPM-Solver++(2M) (Lu et al. 2022, the midpoint form diffusers' DPMSolverMultistepScheduler
    uses) in flow units, alpha = 1 - sigma, from level `index` to `index + 1`, given the data prediction `x0` here
    and the previous step's (`previous`). First order on the first step and on the last one to sigma 0.
    Returns (x at the next level, `x0` for the next step)."""

    def alpha_sigma_lambda(level: int):
        sigma = sigmas[level]
        alpha = 1.0 - sigma
        return alpha, sigma, torch.log(alpha) - torch.log(sigma)

    alpha_t, sigma_t, lambda_t = alpha_sigma_lambda(index + 1)
    _, sigma_s, lambda_s = alpha_sigma_lambda(index)
    h = lambda_t - lambda_s
    if previous is None or sigma_t == 0:
        return (sigma_t / sigma_s) * x - (alpha_t * (torch.exp(-h) - 1.0)) * x0, x0
    lambda_previous = alpha_sigma_lambda(index - 1)[2]
    r = (lambda_s - lambda_previous) / h
    derivative = (1.0 / r) * (x0 - previous)
    step = alpha_t * (torch.exp(-h) - 1.0)
    return (sigma_t / sigma_s) * x - step * x0 - 0.5 * step * derivative, x0


def sde_std_t(sigma: float, noise_level: float, sigma_max: float) -> float:
    """FlowGRPO's diffusion coefficient sigma_t = a * sqrt(sigma / (1 - sigma)); at sigma = 1 the denominator takes
    `sigma_max`, the grid's SECOND level, as the reference's `sde_step_with_logprob` does (so sqrt(1 / (1 - sigma_max))).
    Grids that start just below 1 (SANA's 0.9997) get the same substitution at their first level, whose
    coefficient would otherwise be some 40 times the next one's."""
    return noise_level * math.sqrt(sigma / (1 - min(sigma, sigma_max)))


def sde_std(sigma: float, sigma_next: float, noise_level: float, sigma_max: float) -> float:
    """The standard deviation of one FlowGRPO step from `sigma` to `sigma_next`: sigma_t * sqrt(-dt)."""
    return sde_std_t(sigma, noise_level, sigma_max) * math.sqrt(sigma - sigma_next)


def sde_mean(x: torch.Tensor, v: torch.Tensor, sigma: float, sigma_next: float, std_t: float) -> torch.Tensor:
    """The mean of FlowGRPO's SDE step, x + [v + sigma_t^2 / (2 sigma) (x + (1 - sigma) v)] dt with dt = sigma_next -
    sigma < 0 (`sde_step_with_logprob`)."""
    dt = sigma_next - sigma
    return x * (1 + std_t**2 / (2 * sigma) * dt) + v * (1 + std_t**2 * (1 - sigma) / (2 * sigma)) * dt


def gaussian_log_prob(sample: torch.Tensor, mean: torch.Tensor, std: float) -> torch.Tensor:
    """Per-row log-density of `sample` under N(mean, std^2), AVERAGED over elements (as the reference)."""
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
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One stochastic FlowGRPO step (noise from `generator`, else the global RNG, so a resumed run draws the same):
    (x_next, its log-probability per row)."""
    mean = sde_mean(x, v, sigma, sigma_next, sde_std_t(sigma, noise_level, sigma_max))
    std = sde_std(sigma, sigma_next, noise_level, sigma_max)
    sample = mean + std * torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)
    return sample, gaussian_log_prob(sample, mean, std)


# ---------------------------------------------------------------------------------------------------------
# DDRL's "2ab" sampler (cosmos-rl `wfm/sampler`), in EDM units: x = x0 + s * noise, s = sigma / (1 - sigma).


def to_edm(sigma: torch.Tensor | float) -> torch.Tensor | float:
    """A flow noise level sigma in EDM units, s = sigma / (1 - sigma) (flow x = EDM x / (1 + s)); pure noise
    (sigma = 1, where SD3's grids start) is infinitely far: callers cap it at their sigma_max."""
    if not isinstance(sigma, torch.Tensor) and sigma >= 1:
        return math.inf
    return sigma / (1 - sigma)


def to_flow(s: torch.Tensor | float) -> torch.Tensor | float:
    """An EDM noise level s as a flow sigma = s / (1 + s)."""
    return s / (1 + s)


def churn_eta(steps: int, s_churn: float = 1.0) -> float:
    """EDM churn of the "2ab" sampler: eta = min(s_churn / (N + 1), sqrt(1.2) - 1) (`differential_equation_solver`)."""
    return min(s_churn / (steps + 1), math.sqrt(1.2) - 1)


def ab2_step(
    x: torch.Tensor,
    s: float,
    s_next: float,
    x0: torch.Tensor,
    previous: tuple[torch.Tensor, float] | None,
) -> torch.Tensor:
    """The deterministic "2ab" step of DDRL's sampler from EDM level `s` (after churn) to `s_next`, given the data
    prediction `x0` here and `previous` = (the previous step's x0, its level after churn), None on the first step:
    first order x0-Euler, then 2nd-order Adams-Bashforth in log-sigma (cosmos-rl `reg_x0_euler_step`,
    `res_x0_rk2_step`): x' = (s'/s) x + h (b1 x0 + b2 x0_prev), h = log(s / s'), c2 = log(s / s_prev) / h,
    phi1(-h) = (1 - e^-h) / h, phi2(-h) = (1 - phi1) / h, b2 = phi2 / c2, b1 = phi1 - b2."""
    if previous is None:
        return (s_next / s) * x + (1 - s_next / s) * x0
    x0_previous, s_previous = previous
    h = math.log(s / s_next)
    c2 = math.log(s / s_previous) / h
    phi1 = -math.expm1(-h) / h
    phi2 = (1 - phi1) / h
    b2 = phi2 / c2
    b1 = phi1 - b2
    return (s_next / s) * x + h * (b1 * x0 + b2 * x0_previous)


__all__ = [
    "SOLVERS",
    "Guidance",
    "NoiseGrid",
    "ab2_step",
    "churn_eta",
    "gaussian_log_prob",
    "noise_grid",
    "ode_sample",
    "sde_mean",
    "sde_std",
    "sde_std_t",
    "sde_step",
    "to_edm",
    "to_flow",
    "velocity",
]
