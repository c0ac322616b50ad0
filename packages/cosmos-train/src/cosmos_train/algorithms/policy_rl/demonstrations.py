"""DDRL's data in closed loop: the windows of a LeRobot dataset (`[data]`) as the policy's training samples.

A window of the export's chunk (`chunk_size + 1` frames, `chunk_size` actions, the state at its first frame when the
policy puts a state row first) becomes what a policy call's rollout would have produced: the clean latents of every
frame, and the action rows in the model's units (normalised with the export's statistics, as the policy's own
actions are denormalised, whatever the dataset's meta says). The data term then noises both at a trained step's
level (`PolicyRLTrainer.data_loss`).
"""

from __future__ import annotations

import torch

from ...errors import ConfigError, DataError
from .policy import CosmosPolicy, PolicyCall


class Demonstrations:
    """The `[data]` windows, each encoded once when `[data] cache` is set."""

    def __init__(self, section, policy: CosmosPolicy, source: str = "[data]"):
        from ...data.lerobot import ActionSpec, LeRobotFolder

        settings = policy.settings
        if section.normalization != policy.normalization:
            raise ConfigError(
                f"{source} normalization {section.normalization!r}: the policy's actions are in "
                f"{policy.normalization!r} units (its action_settings.json), and the demonstrations must be too"
            )
        if settings.use_state and not section.state_columns:
            raise ConfigError(
                f"{source} state_columns: the policy puts the state first (use_state); name them"
            )
        self.policy = policy
        # Read raw, normalised here with the export's statistics (the dataset's own might differ).
        self.spec = ActionSpec(
            cameras=tuple(section.cameras),
            action_columns=tuple(section.action_columns),
            state_columns=tuple(section.state_columns) if settings.use_state else (),
            chunk_size=settings.chunk_size,
            layout=section.layout,
            representation=section.representation,
            normalization="none",
            tolerance_s=section.tolerance_s,
        )
        try:
            self.folder = LeRobotFolder(section.path)
            self.folder.check(self.spec)
            self.windows = self.folder.windows(self.spec, section.episodes, stride=section.stride)
        except DataError as error:
            raise ConfigError(f"{source} {error}") from None
        if not self.windows:
            raise ConfigError(f"{source} {section.path}: no window of {settings.chunk_size + 1} frames")
        self.cache: dict[tuple[int, int], tuple[PolicyCall, torch.Tensor, torch.Tensor]] | None = (
            {} if section.cache else None
        )

    def __len__(self) -> int:
        return len(self.windows)

    def draw(self, count: int, shift: int = 0) -> list[tuple[PolicyCall, torch.Tensor, torch.Tensor]]:
        """`count` windows drawn at random (the global RNG), each index moved by `shift` (modulo their number), as
        (call, x0, a0)."""
        picks = torch.randint(len(self.windows), (count,)).tolist()
        return [self.sample(self.windows[(i + shift) % len(self.windows)]) for i in picks]

    def sample(self, key: tuple[int, int]) -> tuple[PolicyCall, torch.Tensor, torch.Tensor]:
        if self.cache is not None and key in self.cache:
            return self.cache[key]
        window = self.folder.read_window(self.spec, *key)
        sample = self.policy.demonstration(window.frames, window.actions, window.task, window.state)
        if self.cache is not None:
            self.cache[key] = sample
        return sample


def stacked(samples: list[tuple[PolicyCall, torch.Tensor, torch.Tensor]]):
    """(calls, x0 `[B, ...]`, a0 `[B, ...]`) of drawn windows."""
    calls, x0, a0 = zip(*samples, strict=True)
    return list(calls), torch.stack(x0), torch.stack(a0)
