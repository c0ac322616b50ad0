"""DDRL's math as plain functions, as cosmos-rl computes it (`wfm_trainer.py`, `t2v_model.py`), tested against its
formulas in tests/cosmos_train/test_rl_reference.py."""

from __future__ import annotations

import torch

from ...diffusion.flow import per_row
from ...diffusion.sampling import to_edm
from ..diffusion_rl.advantages import group_advantages

EDM_SIGMA_MAX = (
    200.0  # cosmos-rl's SDEConfig sigma_max: grid levels above it (a flow sigma of 1) are capped to it
)


def edm_levels(grid) -> list[float]:
    """The 2ab sampler's N + 1 EDM levels from the pipeline's grid for N + 1 steps (`grid`, Karras for
    Cosmos-Predict2.5: 200 ... 0.01 as cosmos-rl's `get_rev_ts`), its final 0 left out, capped at 200."""
    return [min(to_edm(sigma), EDM_SIGMA_MAX) for sigma in grid.sigmas[:-1].tolist()]


def ddrl_advantages(
    scores: dict[str, torch.Tensor], weights: dict[str, float], group_size: int, exp_reward: bool = False
) -> torch.Tensor:
    """Each reward normalised within its group on its own, (s - group mean) / (torch's std, ddof 1, + 1e-4), then
    averaged (weighted by the rewards' weights, Sum w A / Sum |w|); with `exp_reward`, A -> -exp(-A)
    (`t2v_model.py` `_sync_rewards_across_rollouts`, `wfm_trainer.py`)."""
    total = sum(
        weights[name] * group_advantages(values, group_size, global_std=False, ddof=1)
        for name, values in scores.items()
    )
    advantages = total / sum(abs(weights[name]) for name in scores)
    return -torch.exp(-advantages) if exp_reward else advantages


def log_ratio(sample: torch.Tensor, mu_old: torch.Tensor, mu_theta: torch.Tensor) -> torch.Tensor:
    """DDRL's per-row log-ratio mean(|x' - mu_old|^2 - |x' - mu_theta|^2), no 1 / (2 sigma^2) (`rl_training_step`)."""
    dims = tuple(range(1, sample.dim()))
    return ((sample - mu_old) ** 2 - (sample - mu_theta) ** 2).mean(dims)


def edm_data_loss(
    prediction: torch.Tensor, x0: torch.Tensor, noise: torch.Tensor, sigmas: torch.Tensor
) -> torch.Tensor:
    """The data term: mean over all elements of (s^2 + 1) / s^2 |x0 - x0_pred|^2 in EDM units (s = sigma / (1 -
    sigma)), that is (sigma^2 + (1 - sigma)^2) |v_pred - (noise - x0)|^2 in flow units
    (`compute_loss_with_epsilon_and_sigma`, `get_per_sigma_loss_weights`). Clean frames have a zero velocity error."""
    t = per_row(sigmas, x0)
    return ((t**2 + (1 - t) ** 2) * (prediction.float() - (noise - x0)) ** 2).mean()
