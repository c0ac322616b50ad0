"""Rewards into advantages, as the references compute them: the weighted sum of rewards, normalised within each
prompt's group of K samples (tests/cosmos_train/test_rl_reference.py)."""

from __future__ import annotations

import torch

ADVANTAGE_EPSILON = 1e-4  # (R - mean) / (std + 1e-4), in every reference


def group_advantages(
    rewards: torch.Tensor,
    group_size: int,
    global_std: bool = True,
    everyone: torch.Tensor | None = None,
    ddof: int = 0,
) -> torch.Tensor:
    """(R - the mean of the prompt's K samples) / (std + 1e-4), rows grouped K by K in order. The std is over
    `everyone` (every process's rewards, gathered; default: `rewards`) when `global_std`, else each group's own;
    `ddof` 0 is numpy's std, as DiffusionNFT's and FlowGRPO's `PerPromptStatTracker`, 1 torch's, as cosmos-rl's."""
    groups = rewards.reshape(-1, group_size)
    centred = groups - groups.mean(dim=1, keepdim=True)
    if global_std:
        std = (rewards if everyone is None else everyone).std(correction=ddof)
    else:
        std = groups.std(dim=1, keepdim=True, correction=ddof)
    return (centred / (std + ADVANTAGE_EPSILON)).reshape(-1)


def group_advantages_across(
    accelerator, rewards: torch.Tensor, group_size: int, global_std: bool = True
) -> torch.Tensor:
    """`group_advantages` of this process's rows (whole prompt groups), the global std taken over the rewards of
    every process (gathered), as the references' `accelerator.gather` before their stat tracker."""
    everyone = None
    if global_std and accelerator.num_processes > 1:
        everyone = accelerator.gather(rewards.to(accelerator.device)).cpu()
    return group_advantages(rewards, group_size, global_std, everyone)


def weighted_reward(
    scores: dict[str, torch.Tensor], weights: dict[str, float], clip: float | None = None
) -> torch.Tensor:
    """R = sum_f w_f s_f over the rewards (the references' `multi_score`); with `clip`, each score and the sum are
    clipped to +-clip first (cosmos-rl's remote calculator, 5)."""
    total = sum(
        weights[name] * (values if clip is None else values.clamp(-clip, clip))
        for name, values in scores.items()
    )
    return total if clip is None else total.clamp(-clip, clip)
