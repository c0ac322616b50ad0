"""The `[rewards]` table's types, declared with the other schemas (`cosmos_train.config.rewards`)."""

from ..config.rewards import RewardEntry, RewardSpec, RewardTable, entry_parameters, reward_specs

__all__ = ["RewardEntry", "RewardSpec", "RewardTable", "entry_parameters", "reward_specs"]
