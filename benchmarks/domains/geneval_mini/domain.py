"""The GenEval-mini domain: flat shapes of named colours on a plain background, captioned with GenEval's six
task templates, with prompts in GenEval's own metadata format. Seeded and procedural: nothing is downloaded.

    vocabulary = Vocabulary(colors=("red", "green", "blue", "yellow"), shapes=("circle", "square", "triangle"))
    train, test = split_prompts(vocabulary, seed=0)        # GenEval records: {"tag", "include", "exclude"?, "prompt"}
    image = render(train[0], vocabulary, numpy.random.default_rng(0))   # H x W x 3 uint8 that satisfies the record

The tasks and their templates, as GenEval writes them:
- `single_object`  "a photo of a circle"                         include [{class, count 1}]
- `two_object`     "a photo of a circle and a square"            include [{A, 1}, {B, 1}]
- `counting`       "a photo of three circles"                    include [{class, count n}], exclude [{class, n + 1}]
- `colors`         "a photo of a red circle"                     include [{class, 1, color}]
- `position`       "a photo of a circle left of a square"        include [{B, 1}, {A, 1, position ["left of", 0]}]
- `color_attr`     "a photo of a red circle and a blue square"   include [{A, 1, c1}, {B, 1, c2}]
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image, ImageDraw

# GenEval's task tags, relations and position rule (shared with the `gen_eval` reward).
from cosmos_train.rewards.geneval_rules import RELATIONS, TASKS, relative_position

if TYPE_CHECKING:
    from .teacher import FlawedTeacher

NUMBERS = {2: "two", 3: "three", 4: "four"}

# Well separated in RGB, so that a pixel's nearest named colour is unambiguous; none is the white background.
NAMED_COLORS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "green": (30, 160, 50),
    "blue": (30, 60, 220),
    "yellow": (240, 210, 20),
    "purple": (140, 40, 180),
    "orange": (250, 130, 10),
    "cyan": (20, 200, 220),
    "pink": (250, 130, 200),
    "brown": (120, 70, 20),
    "black": (20, 20, 20),
}
SHAPES = ("circle", "square", "triangle", "diamond", "cross")
BACKGROUND = (255, 255, 255)


@dataclass(frozen=True)
class Vocabulary:
    """What the domain draws and says: colour names (keys of `NAMED_COLORS`), shape names (of `SHAPES`), the
    largest count, and the image size with the range of object sizes as fractions of it."""

    colors: tuple[str, ...] = ("red", "green", "blue", "yellow")
    shapes: tuple[str, ...] = ("circle", "square", "triangle")
    max_count: int = 4
    size: int = 32
    object_size: tuple[float, float] = (0.34, 0.44)

    def __post_init__(self):
        unknown = [c for c in self.colors if c not in NAMED_COLORS]
        if unknown:
            raise ValueError(f"unknown colour {unknown[0]!r}; known: {', '.join(NAMED_COLORS)}")
        unknown = [s for s in self.shapes if s not in SHAPES]
        if unknown:
            raise ValueError(f"unknown shape {unknown[0]!r}; known: {', '.join(SHAPES)}")
        if len(set(self.colors)) < 2 or len(set(self.shapes)) < 2:
            raise ValueError("the vocabulary needs at least two colours and two shapes (GenEval pairs them)")
        if not 2 <= self.max_count <= max(NUMBERS):
            raise ValueError(f"max_count must lie in 2..{max(NUMBERS)}")
        if self.size < 16:
            raise ValueError("size must be at least 16 pixels")

    def rgb(self, color: str) -> tuple[int, int, int]:
        return NAMED_COLORS[color]

    def as_dict(self) -> dict[str, Any]:
        return {
            "colors": list(self.colors),
            "shapes": list(self.shapes),
            "max_count": self.max_count,
            "size": self.size,
            "object_size": list(self.object_size),
        }


# ---------------------------------------------------------------------------------------------------------
# Prompts


def _an(word: str) -> str:
    return f"an {word}" if word[0] in "aeiou" else f"a {word}"


def _plural(shape: str) -> str:
    return shape + ("es" if shape.endswith(("s", "x", "ch", "sh")) else "s")


def all_prompts(vocabulary: Vocabulary) -> list[dict[str, Any]]:
    """Every prompt of the vocabulary, task by task, as GenEval metadata records."""
    colors, shapes = vocabulary.colors, vocabulary.shapes
    pairs = [(a, b) for a in shapes for b in shapes if a != b]
    records = [
        {"tag": "single_object", "include": [{"class": s, "count": 1}], "prompt": f"a photo of {_an(s)}"}
        for s in shapes
    ]
    records += [
        {
            "tag": "two_object",
            "include": [{"class": a, "count": 1}, {"class": b, "count": 1}],
            "prompt": f"a photo of {_an(a)} and {_an(b)}",
        }
        for a, b in pairs
    ]
    records += [
        {
            "tag": "counting",
            "include": [{"class": s, "count": n}],
            "exclude": [{"class": s, "count": n + 1}],
            "prompt": f"a photo of {NUMBERS[n]} {_plural(s)}",
        }
        for s in shapes
        for n in range(2, vocabulary.max_count + 1)
    ]
    records += [
        {
            "tag": "colors",
            "include": [{"class": s, "count": 1, "color": c}],
            "prompt": f"a photo of {_an(c)} {s}",
        }
        for c in colors
        for s in shapes
    ]
    records += [
        {
            "tag": "position",
            "include": [{"class": b, "count": 1}, {"class": a, "count": 1, "position": [relation, 0]}],
            "prompt": f"a photo of {_an(a)} {relation} {_an(b)}",
        }
        for a, b in pairs
        for relation in RELATIONS
    ]
    records += [
        {
            "tag": "color_attr",
            "include": [{"class": a, "count": 1, "color": c1}, {"class": b, "count": 1, "color": c2}],
            "prompt": f"a photo of {_an(c1)} {a} and {_an(c2)} {b}",
        }
        for a, b in pairs
        for c1 in colors
        for c2 in colors
        if c1 != c2
    ]
    return records


def split_prompts(
    vocabulary: Vocabulary, seed: int = 0, held_out: float = 0.25, min_held_out: int = 2
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Train and held-out prompts. Per task, a seeded `held_out` share of its prompts (at least
    `min_held_out`) is never trained on; a task with fewer than 4 prompts (single objects) keeps them all
    in both splits, as its held-out images are still new samples."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for task in TASKS:
        records = [r for r in all_prompts(vocabulary) if r["tag"] == task]
        if len(records) < 4:
            train += records
            test += records
            continue
        order = rng.permutation(len(records))
        cut = max(min_held_out, round(held_out * len(records)))
        test += [records[i] for i in sorted(order[:cut])]
        train += [records[i] for i in sorted(order[cut:])]
    return train, test


def balanced_by_task(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """`records` with each task's prompts repeated (in order, cycled) to the largest task's number, so every task
    has the same share, as in GenEval's own prompt set. Colour attribution alone has more prompts than the other
    five tasks together; unbalanced, training would spend most of its pictures on it."""
    by_task = {task: [r for r in records if r["tag"] == task] for task in TASKS}
    by_task = {task: rows for task, rows in by_task.items() if rows}
    largest = max(len(rows) for rows in by_task.values())
    return [rows[i % len(rows)] for rows in by_task.values() for i in range(largest)]


def write_metadata(path: str | Path, records: Iterable[dict[str, Any]]) -> Path:
    """GenEval's `{split}_metadata.jsonl`: one record per line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


# ---------------------------------------------------------------------------------------------------------
# Pictures


def shape_mask(shape: str, width: int, height: int) -> np.ndarray:
    """The filled `shape` in a `height` x `width` box, as a boolean mask: how the renderer draws it, and the
    template the evaluator matches a detected object against."""
    image = Image.new("1", (width, height), 0)
    pen = ImageDraw.Draw(image)
    right, bottom = width - 1, height - 1
    if shape == "square":
        pen.rectangle((0, 0, right, bottom), fill=1)
    elif shape == "circle":
        pen.ellipse((0, 0, right, bottom), fill=1)
    elif shape == "triangle":
        pen.polygon([(0, bottom), (right, bottom), (right / 2, 0)], fill=1)
    elif shape == "diamond":
        pen.polygon([(right / 2, 0), (right, bottom / 2), (right / 2, bottom), (0, bottom / 2)], fill=1)
    elif shape == "cross":
        left, top = round(width / 3), round(height / 3)
        pen.rectangle((left, 0, max(left, round(2 * width / 3) - 1), bottom), fill=1)
        pen.rectangle((0, top, right, max(top, round(2 * height / 3) - 1)), fill=1)
    else:
        raise ValueError(f"unknown shape {shape!r}")
    return np.asarray(image, dtype=bool)


@dataclass(frozen=True)
class PlacedObject:
    shape: str
    color: str
    box: tuple[int, int, int, int]  # x0, y0, x1, y1 (exclusive)

    @property
    def center(self) -> np.ndarray:
        x0, y0, x1, y1 = self.box
        return np.array([(x0 + x1 - 1) / 2, (y0 + y1 - 1) / 2])


def _objects_of(record: dict[str, Any], vocabulary: Vocabulary, rng: np.random.Generator) -> list[tuple]:
    """(shape, colour) per object the record asks for; unnamed colours are drawn at random."""
    objects = []
    for request in record["include"]:
        for _ in range(request["count"]):
            color = request.get("color") or vocabulary.colors[rng.integers(len(vocabulary.colors))]
            objects.append((request["class"], color))
    return objects


def place(
    record: dict[str, Any], vocabulary: Vocabulary, rng: np.random.Generator, attempts: int = 200
) -> list[PlacedObject]:
    """Boxes for the record's objects, one per cell of a layout (the whole picture for one object, two halves
    for two, four quarters for three or four), sized and shifted at random inside their cell, so objects never
    touch. A position record's pair takes the halves its relation needs, and is kept only when GenEval's
    `relative_position` finds exactly that relation."""
    size = vocabulary.size
    low, high = (round(f * size) for f in vocabulary.object_size)
    relation = next((r["position"][0] for r in record["include"] if "position" in r), None)
    for _ in range(attempts):
        wanted = _objects_of(record, vocabulary, rng)
        cells = _cells(len(wanted), size, relation, rng)
        placed = []
        for (shape, color), (x0, y0, x1, y1) in zip(wanted, cells, strict=True):
            room = min(x1 - x0, y1 - y0) - 2
            side = int(rng.integers(min(low, room), min(high, room) + 1))
            x = x0 + 1 + int(rng.integers(0, x1 - x0 - 2 - side + 1))
            y = y0 + 1 + int(rng.integers(0, y1 - y0 - 2 - side + 1))
            placed.append(PlacedObject(shape, color, (x, y, x + side, y + side)))
        # include[0] is the target B, include[1] the object A placed relative to it.
        if relation is None or relative_position(placed[1].box, placed[0].box) == {relation}:
            return placed
    raise RuntimeError(f"could not place {record['prompt']!r} in {size}x{size} pixels")


def _cells(count: int, size: int, relation: str | None, rng: np.random.Generator) -> list[tuple]:
    """`count` disjoint cells (x0, y0, x1, y1) in random order; for a relation, [B's cell, A's cell]."""
    half = size // 2
    if count == 1:
        return [(0, 0, size, size)]
    if count == 2:
        horizontal = relation in ("left of", "right of") if relation else bool(rng.integers(2))
        first, second = (
            ((0, 0, half, size), (half, 0, size, size))
            if horizontal
            else (
                (0, 0, size, half),
                (0, half, size, size),
            )
        )
        if relation in ("left of", "above"):  # A, the second object, takes the first cell
            return [second, first]
        if relation is None and rng.integers(2):
            return [second, first]
        return [first, second]
    if count > 4:
        raise ValueError(f"at most 4 objects fit a picture (got {count})")
    quarters = [(x, y, x + half, y + half) for y in (0, half) for x in (0, half)]
    return [quarters[i] for i in rng.permutation(4)[:count]]


def draw(objects: Sequence[PlacedObject], vocabulary: Vocabulary) -> np.ndarray:
    """The objects on the plain background, H x W x 3 uint8."""
    image = np.empty((vocabulary.size, vocabulary.size, 3), dtype=np.uint8)
    image[:] = BACKGROUND
    for obj in objects:
        x0, y0, x1, y1 = obj.box
        mask = shape_mask(obj.shape, x1 - x0, y1 - y0)
        image[y0:y1, x0:x1][mask] = vocabulary.rgb(obj.color)
    return image


def render(record: dict[str, Any], vocabulary: Vocabulary, rng: np.random.Generator) -> np.ndarray:
    """A picture that satisfies the record (a ground-truth image for its prompt)."""
    return draw(place(record, vocabulary, rng), vocabulary)


def write_pairs(
    folder: str | Path,
    records: Sequence[dict[str, Any]],
    count: int,
    vocabulary: Vocabulary,
    seed: int = 0,
    teacher: FlawedTeacher | None = None,
) -> Path:
    """`count` image-caption pairs for `cosmos-train diffusion-sft` (`[data]` format `folder`): `000001.png`
    with `000001.json` `{"prompt", "tag", "include", ...}`, the records cycled in a seeded order, each picture
    a fresh layout. With a `teacher` (`teacher.FlawedTeacher`), each picture shows what the teacher draws for
    the caption; a pair it drew wrong says so in its JSON (`"shown"`: the record the picture satisfies)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    mistakes = np.random.default_rng(
        [seed, 1]
    )  # its own stream: a teacher who never errs writes the same pairs
    order = np.concatenate([rng.permutation(len(records)) for _ in range(-(-count // len(records)))])
    for index in range(count):
        record = records[order[index]]
        shown = teacher.drawn(record, vocabulary, mistakes) if teacher else record
        name = f"{index + 1:06d}"
        Image.fromarray(render(shown, vocabulary, rng)).save(folder / f"{name}.png")
        (folder / f"{name}.json").write_text(
            json.dumps(record | ({"shown": shown} if shown is not record else {}))
        )
    return folder
