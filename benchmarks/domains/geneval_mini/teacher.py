"""The flawed teacher: the GenEval-mini base is taught from pictures that are right except for a fixed share of
some tasks' pairs, drawn wrong on purpose while their caption stays, as the arithmetic base's teacher forgets its
carries. The base then knows every shape, colour, count and place (it draws them for other captions) but maps some
captions to the wrong one systematically: a mistake a verifiable reward can correct, unlike a missing skill.

    teacher = FlawedTeacher(counting=0.7, colors=0.7)
    shown = teacher.drawn(record, vocabulary, rng)      # the record the picture shows (the caption stays `record`'s)

Its mistakes, each in its task's share of pairs (single objects and two objects are always right):
- `counting`: one object more or one fewer than the caption says (within 1..max_count);
- `colors`: the object in another of the vocabulary's colours than its caption names;
- `position`: the relation mirrored (left of <-> right of, above <-> below);
- `color_attr`: the second object in another of the vocabulary's colours than its caption names.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .domain import Vocabulary

MIRRORED = {"left of": "right of", "right of": "left of", "above": "below", "below": "above"}


@dataclass(frozen=True)
class FlawedTeacher:
    """Per task, the share of its pairs the teacher draws wrong (0: always right)."""

    counting: float = 0.0
    colors: float = 0.0
    position: float = 0.0
    color_attr: float = 0.0

    def __post_init__(self):
        for task, share in asdict(self).items():
            if not 0.0 <= share <= 1.0:
                raise ValueError(f"teacher share for {task} must lie in [0, 1], got {share}")

    def as_dict(self) -> dict[str, float]:
        return asdict(self)

    def drawn(
        self, record: dict[str, Any], vocabulary: Vocabulary, rng: np.random.Generator
    ) -> dict[str, Any]:
        """The record the teacher's picture for `record`'s caption shows: `record` itself, or in its task's share
        of pairs, the mistake above."""
        if rng.random() >= getattr(self, record["tag"], 0.0):
            return record
        shown = copy.deepcopy(record)
        if record["tag"] == "counting":
            count = record["include"][0]["count"]
            options = [n for n in (count - 1, count + 1) if 1 <= n <= vocabulary.max_count]
            shown["include"][0]["count"] = int(rng.choice(options))
            shown.pop("exclude", None)
        elif record["tag"] == "colors":
            only = shown["include"][0]
            only["color"] = str(rng.choice([c for c in vocabulary.colors if c != only["color"]]))
        elif record["tag"] == "position":
            target = shown["include"][1]
            target["position"] = [MIRRORED[target["position"][0]], *target["position"][1:]]
        elif record["tag"] == "color_attr":
            second = shown["include"][1]
            second["color"] = str(rng.choice([c for c in vocabulary.colors if c != second["color"]]))
        return shown
