"""GenEval's judging rules, apart from any detector: the six task tags, where one box lies relative to another,
and GenEval's decision for detected objects against a GenEval record. The `gen_eval` reward (Mask2Former and
CLIP, `rewards/gen_eval.py`) judges with them, and so does GenEval-mini's evaluator (`benchmarks/domains/`).

    relative_position((0, 0, 4, 4), (10, 0, 14, 4))       # {"left of"}
    judge({"circle": [Detection(...)]}, record)           # Verdict(correct, score, reasons)

A GenEval record (a line of GenEval's `*_metadata.jsonl`) has a `tag` (one of `TASKS`), an `include` list of
requests `{"class", "count", "color"?, "position"?: [relation, index of an earlier request]}` and, for counting,
an `exclude` list `{"class", "count"}` capping a class's count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

TASKS = ("single_object", "two_object", "counting", "colors", "position", "color_attr")
RELATIONS = ("left of", "right of", "above", "below")


@dataclass(frozen=True)
class Detection:
    """A detected object. `shape` is its class name (GenEval's class, or GenEval-mini's shape; None: a region
    that matches no class well, malformed); `color` its colour name (None where none was classified); `iou` the
    detector's confidence (GenEval-mini: the overlap with the best shape's template; `gen_eval`: the score)."""

    shape: str | None
    color: str | None
    box: tuple[int, int, int, int]  # x0, y0, x1, y1 (exclusive)
    area: int
    iou: float


@dataclass
class Verdict:
    correct: bool
    score: float
    reasons: list[str] = field(default_factory=list)


def relative_position(box_a: Sequence[float], box_b: Sequence[float], threshold: float = 0.1) -> set[str]:
    """Where box A lies relative to box B (x0, y0, x1, y1), as GenEval decides it: the centre offset, shrunk by
    `threshold` times the two boxes' summed sizes, then its direction: left of / right of / above / below."""
    boxes = np.array([box_a, box_b], dtype=float).reshape(2, 2, 2)
    center_a, center_b = boxes.mean(axis=-2)
    dim_a, dim_b = np.abs(np.diff(boxes, axis=-2))[..., 0, :]
    offset = center_a - center_b
    revised = np.maximum(np.abs(offset) - threshold * (dim_a + dim_b), 0) * np.sign(offset)
    if np.all(np.abs(revised) < 1e-3):
        return set()
    dx, dy = revised / np.linalg.norm(offset)
    relations = set()
    if dx < -0.5:
        relations.add("left of")
    if dx > 0.5:
        relations.add("right of")
    if dy < -0.5:
        relations.add("above")
    if dy > 0.5:
        relations.add("below")
    return relations


def judge(objects: dict[str, list[Detection]], record: dict[str, Any]) -> Verdict:
    """GenEval's decision for detected `objects` (by class name, most confident first) against a record, with
    the share of requirements met.

    For each `include`, the `count` most confident objects of the class must exist; with a `color`, that many of
    them must have it; with a `position`, each must stand in that relation (`relative_position`) to every object
    of the group it names; each `exclude` caps a class's count. `correct` is GenEval's score; `score` the share
    of requirements met (partial credit)."""
    reasons: list[str] = []
    groups: list[list[Detection] | None] = []
    met = 0
    for request in record.get("include", []):
        name, count = request["class"], request["count"]
        found = objects.get(name, [])[:count]
        matched = len(found) >= count
        if not matched:
            reasons.append(f"expected {name}>={count}, found {len(found)}")
        elif "color" in request:
            have = sum(obj.color == request["color"] for obj in found)
            if have < count:
                matched = False
                reasons.append(f"expected {request['color']} {name}>={count}, found {have}")
        if matched and "position" in request:
            relation, target = request["position"]
            targets = groups[target] if target < len(groups) else None
            if targets is None:
                matched = False
                reasons.append(f"no target for {name} to be {relation}")
            elif not all(relation in relative_position(a.box, b.box) for a in found for b in targets):
                matched = False
                reasons.append(f"expected {name} {relation} target")
        groups.append(found if matched else None)
        met += matched
    for request in record.get("exclude", []):
        name, count = request["class"], request["count"]
        if len(objects.get(name, [])) >= count:
            reasons.append(f"expected {name}<{count}, found {len(objects[name])}")
        else:
            met += 1
    total = len(record.get("include", [])) + len(record.get("exclude", []))
    return Verdict(correct=not reasons, score=met / total if total else 1.0, reasons=reasons)
