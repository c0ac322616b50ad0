"""Actions between a dataset's units and the model's: cosmos-framework's normalisations (`resolve_action_normalization`),
shared by the training data (`cosmos_train.data.lerobot`) and the policy call (`actions.Cosmos3ActionPolicy`), so what a
policy returns is exactly what it was trained on, mapped back.

- `mean_std`: (a - mean) / std;
- `quantile`: (a - mid) / half_range over [q01, q99] (q01 -> -1, q99 -> +1), not clipped unless asked (cosmos-framework's
  `apply_forward_clamp` is off in its recipes, and a clipped value cannot be mapped back);
- `none`: unchanged. Std and the quantile range are floored at 1e-8, as cosmos-framework floors them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

NORMALIZATIONS = ("none", "mean_std", "quantile")
STATS_EPS = 1e-8


def normalization_affine(stats: Mapping[str, Any], mode: str, width: int) -> tuple[np.ndarray, np.ndarray]:
    """(offset, scale) with normalised = (a - offset) / scale."""
    keys = {"mean_std": ("mean", "std"), "quantile": ("q01", "q99")}.get(mode)
    if keys is None:
        raise ValueError(f"normalization must be one of {', '.join(NORMALIZATIONS)}, got {mode!r}")
    missing = [key for key in keys if key not in stats]
    if missing:
        raise ValueError(f"{mode} normalization needs stats {', '.join(missing)}")
    first, second = (np.asarray(stats[key], dtype=np.float64).reshape(-1) for key in keys)
    if first.shape != (width,) or second.shape != (width,):
        raise ValueError(f"stats are {first.size} wide, actions {width}")
    if mode == "mean_std":
        return first, np.maximum(second, STATS_EPS)
    return (second + first) / 2.0, np.maximum(second - first, STATS_EPS) / 2.0


def normalize_actions(actions, stats: Mapping[str, Any], mode: str, *, clip: bool = False) -> np.ndarray:
    """Actions `[..., D]` into the model's space, float32."""
    values = np.asarray(actions, dtype=np.float64)
    if mode == "none":
        return values.astype(np.float32)
    offset, scale = normalization_affine(stats, mode, values.shape[-1])
    out = (values - offset) / scale
    if clip and mode == "quantile":
        out = np.clip(out, -1.0, 1.0)
    return out.astype(np.float32)


def denormalize_actions(actions, stats: Mapping[str, Any], mode: str) -> np.ndarray:
    """The inverse of `normalize_actions` (without `clip`): model-space actions `[..., D]` in the dataset's units."""
    values = np.asarray(actions, dtype=np.float64)
    if mode == "none":
        return values.astype(np.float32)
    offset, scale = normalization_affine(stats, mode, values.shape[-1])
    return (values * scale + offset).astype(np.float32)
