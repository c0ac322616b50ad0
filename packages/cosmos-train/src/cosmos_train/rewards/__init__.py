"""Rewards for RL jobs: built-ins, user functions by import path, and rewards hosted by the remote service.

A job's `[rewards]` table maps a reward to its weight, or to a table with `weight` and the reward's
parameters:

    [rewards]
    accuracy = 1.0
    format = { weight = 0.5, think_tag = "think", answer_tag = "answer" }
    "my_package.rewards:brevity" = 0.2
    "remote:pickscore" = 1.0

`build_rewards` turns that table into TRL reward functions, each wrapped so that a reward that raises or
returns NaN stops the run with a `RewardError` naming the reward and the offending completion.

Image and video rewards (`MEDIA_BUILTINS`: JPEG size, brightness, colour, OCR, PickScore, HPS, aesthetic, GenEval,
the Cosmos-Reason1 video critic) score generated media for diffusion RL and in the reward service
(`cosmos-train reward-serve`). `build_media_rewards` turns the same kind of table into `MediaReward`s, called as
`reward(media, prompts, metadata)`: `media` uint8 B x H x W x C (images) or B x T x H x W x C (videos), `prompts`
one per sample, and `metadata` None or one dict per sample (the prompt's record: GenEval's `tag` / `include`, an
OCR `text`, ...). A media reward function has the signature `f(media, prompts, metadata, **parameters) ->
list[float]`.

The modules: `registry` (the built-ins, the checks and the builders), `specs` (the `[rewards]` table), `text`
(GRPO's text rewards), `media` (image/video rewards that need no model), `scorers` / `ocr` / `gen_eval` /
`cosmos_reason1` (rewards with models), `geneval_rules` (GenEval's judging rules), `remote` (the service's client).
"""

from ..config.rewards import RewardEntry, RewardSpec, RewardTable, entry_parameters, reward_specs
from .registry import (
    BUILTINS,
    MEDIA_BUILTINS,
    AsyncCheckedReward,
    Builtin,
    CheckedReward,
    MediaReward,
    RewardError,
    build_media_rewards,
    build_rewards,
    check_reward,
    check_reward_name,
    check_reward_table,
    checked,
    remote_score_key,
)
from .remote import RemoteMediaReward, RemoteRewardClient, RemoteRewardError, RemoteTextReward
from .text import (
    REFERENCE_COLUMN,
    completion_text,
    conversational,
    exact_match_reward,
    format_reward,
    length_reward,
    single_choice_reward,
)

__all__ = [
    "BUILTINS",
    "MEDIA_BUILTINS",
    "REFERENCE_COLUMN",
    "AsyncCheckedReward",
    "Builtin",
    "CheckedReward",
    "MediaReward",
    "RemoteMediaReward",
    "RemoteRewardClient",
    "RemoteRewardError",
    "RemoteTextReward",
    "RewardEntry",
    "RewardError",
    "RewardSpec",
    "RewardTable",
    "build_media_rewards",
    "build_rewards",
    "check_reward",
    "check_reward_name",
    "check_reward_table",
    "checked",
    "completion_text",
    "conversational",
    "entry_parameters",
    "exact_match_reward",
    "format_reward",
    "length_reward",
    "remote_score_key",
    "reward_specs",
    "single_choice_reward",
]
