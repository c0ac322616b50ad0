"""The `[rewards]` table of an RL job (and of `reward-serve --rewards-config`): reward names mapped to a weight, or
to a table holding `weight` and the reward's own parameters.

    [rewards]
    accuracy = 1.0
    format = { weight = 0.5, think_tag = "think" }

Declared here, with the other schemas; `cosmos_train.jobs` checks the names against the rewards registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import Field

from .sections import Section


class RewardEntry(Section):
    """A reward given as a table: its weight, and the reward's own parameters as further keys."""

    model_config = {**Section.model_config, "extra": "allow"}
    weight: float = Field(1.0, description="The reward's weight in the sum of rewards.")


RewardTable = dict[str, float | RewardEntry]


@dataclass(frozen=True)
class RewardSpec:
    """One reward of a job: its name (built-in, `module:function` or `remote:<name>`), weight and parameters."""

    name: str
    weight: float
    parameters: dict[str, Any]


def reward_specs(table: RewardTable) -> list[RewardSpec]:
    """The validated table as `RewardSpec`s, in the table's order."""
    return [
        RewardSpec(name, entry, {})
        if isinstance(entry, float)
        else RewardSpec(name, entry.weight, dict(entry.model_extra or {}))
        for name, entry in table.items()
    ]


def entry_parameters(entry: float | RewardEntry) -> dict[str, Any] | None:
    """A table entry's reward parameters (None for a bare weight)."""
    return None if isinstance(entry, float) else dict(entry.model_extra or {})
