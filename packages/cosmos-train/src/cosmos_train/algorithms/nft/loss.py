"""DiffusionNFT's math as plain functions (NVlabs/DiffusionNFT `scripts/train_nft_sd3.py`), tested against its
formulas in tests/cosmos_train/test_rl_reference.py."""

from __future__ import annotations

import torch

from ...diffusion.flow import per_row


def optimality_probability(
    advantages: torch.Tensor, adv_clip_max: float, adv_mode: str = "all"
) -> torch.Tensor:
    """r = clamp(A' / a_max / 2 + 1/2, 0, 1) with A' the advantages clipped to +-a_max, then by `adv_mode`: all A;
    positive_only max(A, 0); negative_only min(A, 0); one_only 1 where A > 0 else 0; binary sign(A)
    (`train_nft_sd3.py`; so one_only gives r = 0.6 / 0.5 at a_max 5)."""
    a = advantages.clamp(-adv_clip_max, adv_clip_max)
    if adv_mode == "positive_only":
        a = a.clamp(min=0)
    elif adv_mode == "negative_only":
        a = a.clamp(max=0)
    elif adv_mode == "one_only":
        a = (a > 0).to(a.dtype)
    elif adv_mode == "binary":
        a = torch.sign(a)
    elif adv_mode != "all":
        raise ValueError(f"unknown adv_mode {adv_mode!r}")
    return (a / adv_clip_max / 2 + 0.5).clamp(0, 1)


def nft_loss(
    v_theta: torch.Tensor,
    v_old: torch.Tensor,
    noisy: torch.Tensor,
    x0: torch.Tensor,
    sigmas: torch.Tensor,
    r: torch.Tensor,
    beta: float,
    adv_clip_max: float,
) -> torch.Tensor:
    """DiffusionNFT's policy loss on one micro-batch: a_max * mean_b[(r l+ + (1 - r) l-) / beta] with
    l+- = mean((x0+- - x0)^2) / w+-, x0+- = x_t - t v+-, v+ = beta v_theta + (1 - beta) v_old,
    v- = (1 + beta) v_old - beta v_theta, and the adaptive weights w+- = mean|x0+- - x0| in float64, floored at
    1e-5 and WITHOUT gradient."""
    t = per_row(sigmas, x0)
    x0_positive = noisy - t * (beta * v_theta + (1 - beta) * v_old)
    x0_negative = noisy - t * ((1 + beta) * v_old - beta * v_theta)
    dims = tuple(range(1, x0.dim()))
    w_positive = (x0_positive.detach().double() - x0.double()).abs().mean(dims).clamp(min=1e-5)
    w_negative = (x0_negative.detach().double() - x0.double()).abs().mean(dims).clamp(min=1e-5)
    positive = ((x0_positive - x0) ** 2).mean(dims) / w_positive
    negative = ((x0_negative - x0) ** 2).mean(dims) / w_negative
    r = r.double()
    return (adv_clip_max * (r * positive + (1 - r) * negative) / beta).mean()
