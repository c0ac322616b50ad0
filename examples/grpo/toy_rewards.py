"""A toy reward for the tiny GRPO recipes: learnable in seconds by a tiny random model.

A reward is any function with TRL's signature: keyword arguments `prompts`, `completions` (strings, or
`[{"role": "assistant", "content": ...}]` for chat prompts), `completion_ids` and one list per dataset
column; it returns one float (or None) per completion. A job names it by import path; the job file's
folder is searched too, so `"toy_rewards:lowercase"` finds this file from a job beside it.
"""

from cosmos_train.rewards.text import completion_text


def lowercase(completions, **_):
    """The fraction of the completion's characters that are lowercase ASCII letters."""
    texts = [completion_text(completion) for completion in completions]
    return [sum("a" <= char <= "z" for char in text) / max(1, len(text)) for text in texts]
