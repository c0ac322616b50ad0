"""FlowGRPO's math as plain functions (yifan123/flow_grpo `scripts/train_sd3.py`), tested against its formulas in
tests/cosmos_train/test_rl_reference.py."""

from __future__ import annotations

import math

import torch


def clipped_policy_loss(
    log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantages: torch.Tensor, clip_range: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """GRPO's clipped surrogate: mean over rows of max(-A r, -A clip(r, 1 - e, 1 + e)), r = exp(new - old);
    with the ratio statistics and the share of rows whose ratio is outside the clip range."""
    ratio = torch.exp(log_prob - old_log_prob)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_range, 1.0 + clip_range)
    loss = torch.maximum(unclipped, clipped).mean()
    detached = ratio.detach()
    stats = {
        "ratio_mean": detached.mean().item(),
        "ratio_min": detached.min().item(),
        "ratio_max": detached.max().item(),
        "clip_fraction": ((detached - 1.0).abs() > clip_range).float().mean().item(),
    }
    return loss, stats


def step_kl(
    mean: torch.Tensor, mean_reference: torch.Tensor, std_t: float, dt: float, form: str = "reference"
) -> torch.Tensor:
    """The KL of one SDE step to the frozen base, averaged over rows: reference: mean(|mu - mu_ref|^2) / (2 sigma_t^2)
    with sigma_t the step's diffusion coefficient WITHOUT sqrt(|dt|) (the official code); exact: the KL between the
    two Gaussian steps, whose variance is sigma_t^2 |dt| (1 / |dt| times the reference's)."""
    variance = std_t**2 if form == "reference" else std_t**2 * abs(dt)
    dims = tuple(range(1, mean.dim()))
    return (((mean - mean_reference) ** 2).mean(dims) / (2 * variance)).mean()


def rows_to_train(advantages: torch.Tensor, chunks: int) -> torch.Tensor:
    """The rows whose advantage is not 0, with dropped rows re-added at random until their count is a multiple of
    `chunks` (at least `chunks`), so that every chunk is equal and none is empty (`train_sd3.py`)."""
    kept = torch.nonzero(advantages != 0).flatten().cpu()
    dropped = torch.nonzero(advantages == 0).flatten().cpu()
    target = min(len(advantages), max(chunks, math.ceil(len(kept) / chunks) * chunks))
    extra = dropped[torch.randperm(len(dropped))[: target - len(kept)]]
    return torch.cat([kept, extra]).sort().values
