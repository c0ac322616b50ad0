"""Text rewards for GRPO, with TRL's reward signature: `f(prompts, completions, completion_ids, **columns)`.

Each returns one float (or `None`: "not applicable to this sample", which TRL leaves out) per completion.
Completions are plain strings for plain-text prompts and `[{"role": "assistant", "content": ...}]` for chat
prompts; every reward here takes both. The reference answer, where one is needed, is the `solution` column.

TRL's own rewards (`trl.rewards`) are reused as they are, behind `conversational`, which gives them the
chat-shaped completions they expect.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import Any

REFERENCE_COLUMN = "solution"


def completion_text(completion: str | list[dict[str, Any]]) -> str:
    """The text of one completion, plain or conversational (the last message's content)."""
    if isinstance(completion, str):
        return completion
    content = completion[-1]["content"] if completion else ""
    if isinstance(content, list):  # typed parts
        return "".join(part.get("text") or "" for part in content)
    return content


def _texts(completions: Sequence) -> list[str]:
    return [completion_text(completion) for completion in completions]


def _tag_pattern(tag: str) -> str:
    return rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>"


def tagged(text: str, tag: str) -> str | None:
    """The stripped content of the last `<tag>...</tag>` in `text`, or None."""
    found = re.findall(_tag_pattern(tag), text, flags=re.DOTALL)
    return found[-1].strip() if found else None


def format_reward(
    completions: Sequence, *, think_tag: str = "think", answer_tag: str = "answer", **_: Any
) -> list[float]:
    """1.0 when the completion is exactly `<think>...</think>` then `<answer>...</answer>` (Cosmos-Reason's
    format), whitespace around them allowed; 0.0 otherwise. An empty `think_tag` asks for the answer only."""
    parts = ([_tag_pattern(think_tag)] if think_tag else []) + [_tag_pattern(answer_tag)]
    pattern = re.compile(r"^\s*" + r"\s*".join(parts) + r"\s*$", flags=re.DOTALL)
    return [1.0 if pattern.match(text) else 0.0 for text in _texts(completions)]


def _choice_letter(text: str) -> str | None:
    """A single option letter: 'B', '(B)', 'B.', 'B) because ...' all read as 'B'."""
    found = re.match(r"^\s*\(?([A-Za-z])\)?(?:[.:)\s]|$)", text)
    return found.group(1).upper() if found else None


def single_choice_reward(
    completions: Sequence, solution: Sequence[str], *, answer_tag: str = "answer", **_: Any
) -> list[float | None]:
    """1.0 when the option letter inside the answer tag equals the reference letter (`solution`), else 0.0.

    No answer tag, or no letter in it, scores 0.0. A reference that is not a letter is `None` (not applicable).
    """
    rewards: list[float | None] = []
    for text, reference in zip(_texts(completions), solution, strict=True):
        expected = _choice_letter(str(reference))
        if expected is None:
            rewards.append(None)
            continue
        answer = tagged(text, answer_tag) if answer_tag else text
        rewards.append(1.0 if answer is not None and _choice_letter(answer) == expected else 0.0)
    return rewards


def _normalized(text: str) -> str:
    return " ".join(text.strip().lower().split()).rstrip(".")


def exact_match_reward(
    completions: Sequence, solution: Sequence[str], *, answer_tag: str | None = None, **_: Any
) -> list[float]:
    """1.0 when the completion (or its `answer_tag` content, when set) equals `solution`, ignoring case,
    repeated whitespace and a final period; 0.0 otherwise."""
    rewards = []
    for text, reference in zip(_texts(completions), solution, strict=True):
        answer = tagged(text, answer_tag) if answer_tag else text
        rewards.append(
            1.0 if answer is not None and _normalized(answer) == _normalized(str(reference)) else 0.0
        )
    return rewards


def length_reward(completions: Sequence, *, max_words: int, **_: Any) -> list[float]:
    """1.0 for at most `max_words` words, falling linearly to 0.0 at twice that."""
    rewards = []
    for text in _texts(completions):
        excess = max(0, len(text.split()) - max_words)
        rewards.append(max(0.0, 1.0 - excess / max_words))
    return rewards


def conversational(reward: Callable) -> Callable:
    """A TRL reward made to take plain-text completions too (TRL's read `completion[0]["content"]`)."""

    @functools.wraps(reward)
    def wrapped(completions: Sequence, **kwargs: Any):
        chat = [c if not isinstance(c, str) else [{"role": "assistant", "content": c}] for c in completions]
        return reward(completions=chat, **kwargs)

    return wrapped
