"""Reach2D's world: a point mass (the arm tip) in the unit square among coloured target discs. The dataset and
the environment both step and draw through this module, so their dynamics and pictures cannot drift apart.

Units. Positions are (x, y) in [0, 1], x to the right and y downwards (image rows), one pixel 1 / size. An action
is a velocity command in [-1, 1] per axis; the tip moves `action * MAX_STEP` per frame (no damping, no inertia),
clipped to the square. The state is the tip's position. Both are float32 and the step is computed in float32, so
replaying stored actions reproduces stored states bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FPS = 10
LENGTH = 24  # frames of a demonstration: 2.4 s; the slowest expert's longest reach takes about 20
MAX_STEPS = LENGTH - 1  # actions of a closed-loop episode: as many frames as a demonstration
MAX_STEP = 0.05  # units per frame at |action| = 1 per axis (1.6 px at 32 x 32): about half of each
# demonstration is motion, the rest holding still on the target
TARGET_RADIUS = 0.08  # 2.6 px at 32 x 32: a disc of ~20 pixels whose colour survives the tip on top of it
TIP_RADIUS = 0.04
SUCCESS_RADIUS = 0.06  # the tip's centre this close to the named target's centre: the tip is on the disc
MIN_TARGET_GAP = 0.25  # between target centres: discs never touch
MIN_START_DISTANCE = 0.25  # from the tip's start to every target: no episode starts solved
MAX_START_DISTANCE = 0.75  # ... and at most this: the slowest expert arrives in time, and no target is nearer
# by construction than the others (a policy that ignores the text reaches about 1 in 3)
TARGET_MARGIN = 0.15  # targets lie in [margin, 1 - margin]^2, wholly inside the picture
TIP_MARGIN = 0.05

# Well apart in RGB and from the white tip and the dark background.
PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (230, 40, 40),
    "green": (40, 200, 60),
    "blue": (50, 90, 245),
    "yellow": (235, 215, 30),
}
COLORS = ("red", "green", "blue")  # the default targets of every world
TIP_COLOR = (255, 255, 255)
BACKGROUND = (20, 20, 28)


def task_text(color: str) -> str:
    return f"reach the {color} target"


def task_color(task: str) -> str:
    """The colour a task text names (`task_text`'s inverse)."""
    color = task.removeprefix("reach the ").removesuffix(" target")
    if color not in PALETTE:
        raise ValueError(f"not a reach2d task: {task!r}")
    return color


@dataclass(frozen=True)
class World:
    """One episode's layout: the tip's start, the targets' centres [n, 2] and colours, and which one to reach."""

    tip: np.ndarray  # float32 [2]
    targets: np.ndarray  # float32 [n, 2]
    colors: tuple[str, ...]
    goal: int

    @property
    def task(self) -> str:
        return task_text(self.colors[self.goal])

    @property
    def goal_position(self) -> np.ndarray:
        return self.targets[self.goal]

    @classmethod
    def sample(cls, seed: int, colors: tuple[str, ...] = COLORS, goal: str | None = None) -> World:
        """The world of episode `seed` (rejection-sampled, deterministic): targets apart, the tip neither on nor far
        from any. The goal is drawn among `colors`, or is `goal` (the same layout either way)."""
        if goal is not None and goal not in colors:
            raise ValueError(f"goal {goal!r} is not one of the colors {colors}")
        unknown = [c for c in colors if c not in PALETTE]
        if unknown or not 1 <= len(colors) <= len(PALETTE) or len(set(colors)) != len(colors):
            raise ValueError(f"colors must be distinct names of {', '.join(PALETTE)}; got {colors}")
        rng = np.random.default_rng([seed, 0])
        while True:
            targets = rng.uniform(TARGET_MARGIN, 1 - TARGET_MARGIN, size=(len(colors), 2))
            tip = rng.uniform(TIP_MARGIN, 1 - TIP_MARGIN, size=2)
            gaps = np.linalg.norm(targets[:, None] - targets[None], axis=-1)[np.triu_indices(len(colors), 1)]
            starts = np.linalg.norm(targets - tip, axis=-1)
            apart = (gaps >= MIN_TARGET_GAP).all()
            if apart and (starts >= MIN_START_DISTANCE).all() and (starts <= MAX_START_DISTANCE).all():
                break
        drawn = int(rng.integers(len(colors)))
        return cls(
            tip=tip.astype(np.float32),
            targets=targets.astype(np.float32),
            colors=tuple(colors),
            goal=drawn if goal is None else tuple(colors).index(goal),
        )

    def reached(self, tip: np.ndarray) -> bool:
        return distance(tip, self.goal_position) <= SUCCESS_RADIUS


def distance(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(np.asarray(a, np.float64) - np.asarray(b, np.float64)))


def step(tip: np.ndarray, action: np.ndarray) -> np.ndarray:
    """The next tip position: `action` clipped to [-1, 1] per axis, times MAX_STEP, clipped to the square."""
    action = np.clip(np.asarray(action, dtype=np.float32).reshape(2), -1, 1)
    moved = np.asarray(tip, dtype=np.float32) + np.float32(MAX_STEP) * action
    return np.clip(moved, np.float32(0), np.float32(1)).astype(np.float32)


def _coverage(size: int, center: np.ndarray, radius: float, supersample: int) -> np.ndarray:
    """The share of each pixel a disc covers, from `supersample`^2 points per pixel: sub-pixel positions show.
    Only the pixels of the disc's bounding box are sampled (the rest are 0): the same values, a fraction of the work."""
    coverage = np.zeros((size, size), dtype=np.float64)
    first = [max(0, int(np.floor((c - radius) * size))) for c in center]
    stop = [min(size, int(np.ceil((c + radius) * size)) + 1) for c in center]
    if stop[0] <= first[0] or stop[1] <= first[1]:
        return coverage
    points = [
        (np.arange(a * supersample, b * supersample) + 0.5) / (size * supersample)
        for a, b in zip(first, stop, strict=True)
    ]
    inside = ((points[0][None, :] - center[0]) ** 2 + (points[1][:, None] - center[1]) ** 2) <= radius**2
    rows, cols = stop[1] - first[1], stop[0] - first[0]
    box = inside.reshape(rows, supersample, cols, supersample).mean(axis=(1, 3))
    coverage[first[1] : stop[1], first[0] : stop[0]] = box
    return coverage


def render(world: World, tip: np.ndarray | None = None, size: int = 32, supersample: int = 4) -> np.ndarray:
    """The picture, H x W x 3 uint8 (H = W = size): targets, then the tip (at `tip`, else the world's start) on top,
    anti-aliased. Deterministic: pure numpy."""
    if size < 16:
        raise ValueError("size must be at least 16 pixels")
    tip = world.tip if tip is None else tip
    image = np.empty((size, size, 3), dtype=np.float64)
    image[:] = BACKGROUND
    for center, color in zip(world.targets, world.colors, strict=True):
        alpha = _coverage(size, np.asarray(center, np.float64), TARGET_RADIUS, supersample)[..., None]
        image = image * (1 - alpha) + np.asarray(PALETTE[color], np.float64) * alpha
    alpha = _coverage(size, np.asarray(tip, np.float64), TIP_RADIUS, supersample)[..., None]
    image = image * (1 - alpha) + np.asarray(TIP_COLOR, np.float64) * alpha
    return np.rint(image).astype(np.uint8)


def pixel(position: np.ndarray, size: int) -> tuple[int, int]:
    """(row, column) of the pixel that holds `position`."""
    x, y = (min(int(v * size), size - 1) for v in position)
    return y, x


def locate(image: np.ndarray, color: str, tolerance: float = 40.0) -> np.ndarray | None:
    """The centre (x, y) of the pixels of `color` in a rendered picture, or None when none shows: how a policy that
    sees only the picture finds a target (the tip covering part of the disc biases it slightly away from the tip)."""
    height, width = image.shape[:2]
    near = (
        np.linalg.norm(image.astype(np.float64) - np.asarray(PALETTE[color], np.float64), axis=-1) < tolerance
    )
    if not near.any():
        return None
    rows, cols = np.nonzero(near)
    return np.array([(cols.mean() + 0.5) / width, (rows.mean() + 0.5) / height], dtype=np.float32)
