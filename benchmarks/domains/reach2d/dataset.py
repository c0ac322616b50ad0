"""Reach2D demonstrations as LeRobot episodes: seeded, drawn by `world.py` and acted by the scripted expert.

    train, held_out = train_and_held_out(seed=0, train_count=64, held_out_count=16)   # disjoint episode seeds
    write_dataset("reach2d", seed=0, train_count=64, held_out_count=16)   # one LeRobot folder + split.json
    open_loop_baselines(train, held_out, chunk=8)   # the errors a learned action chunk must beat

An episode is the LeRobot writer's dict: {"task": "reach the red target", "frames": {CAMERA: uint8 [T, H, W, 3]},
"columns": {STATE: float32 [T, 2], ACTION: float32 [T, 2]}}; action t moves state t to state t + 1 (units in
`world.py`). Episode `s` lays out the world `Reach2DEnv.reset(seed=s)` does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from .expert import demonstrate
from .world import COLORS, FPS, LENGTH, World, render

CAMERA = "observation.images.top"
STATE = "observation.state"
ACTION = "action"
SPLIT_FILE = "split.json"


def episode(
    seed: int,
    size: int = 32,
    length: int = LENGTH,
    colors: tuple[str, ...] = COLORS,
    pace: float = 1.0,
    goal: str | None = None,
    distracted: float = 0.0,
) -> dict[str, Any]:
    """The expert's demonstration in the world of episode `seed` (`pace`: the expert's speed factor,
    `expert.SLOW_PACE` for the flawed one; `goal`: the colour every task names, else drawn; `distracted`: the share
    of episodes the expert goes to another target, `expert.DISTRACTED` for the flawed one)."""
    world = World.sample(seed, colors, goal)
    states, actions = demonstrate(world, length, np.random.default_rng([seed, 1]), pace, distracted)
    frames = np.stack([render(world, tip, size) for tip in states])
    return {"task": world.task, "frames": {CAMERA: frames}, "columns": {STATE: states, ACTION: actions}}


def episode_seeds(seed: int, count: int) -> list[int]:
    """`count` distinct episode seeds (below 2^31), drawn from `seed`; a longer list extends a shorter one."""
    rng, seeds = np.random.default_rng(seed), {}
    while len(seeds) < count:
        seeds.setdefault(int(rng.integers(2**31)), None)
    return list(seeds)


def episodes(
    seed: int, count: int, size: int = 32, length: int = LENGTH, colors: tuple[str, ...] = COLORS
) -> list[dict[str, Any]]:
    return [episode(s, size, length, colors) for s in episode_seeds(seed, count)]


def split_seeds(seed: int, train_count: int, held_out_count: int) -> tuple[list[int], list[int]]:
    """Train and held-out episode seeds: one stream of distinct seeds cut in two, so never shared."""
    seeds = episode_seeds(seed, train_count + held_out_count)
    return seeds[:train_count], seeds[train_count:]


def train_and_held_out(
    seed: int, train_count: int, held_out_count: int, **kw: Any
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Train and held-out episodes from disjoint seeds (`split_seeds`); `kw` as `episode` takes."""
    train, held_out = split_seeds(seed, train_count, held_out_count)
    return [episode(s, **kw) for s in train], [episode(s, **kw) for s in held_out]


def write_dataset(
    root: str | Path,
    seed: int,
    train_count: int,
    held_out_count: int,
    *,
    size: int = 32,
    length: int = LENGTH,
    fps: int = FPS,
    colors: tuple[str, ...] = COLORS,
    pace: float = 1.0,
    goal: str | None = None,
    distracted: float = 0.0,
    **writer_kw: Any,
) -> Path:
    """One LeRobot dataset at `root` (train episodes first, then held-out ones) and `root/split.json`:
    {"train": [episode indexes], "held_out": [...], "seeds": {"train": [...], "held_out": [...]}, ...} with the
    episode seeds that `Reach2DEnv.reset(seed=...)` replays (`pace`, `goal`, `distracted`: as `episode` takes them).
    One folder rather than two: one job trains on the `train` indexes and evaluates on `held_out` without a second
    dataset's metadata. `writer_kw` goes to `cosmos_train.data.lerobot.write_lerobot_dataset`."""
    from cosmos_train.data.lerobot import write_lerobot_dataset

    train, held_out = split_seeds(seed, train_count, held_out_count)
    kw = {
        "size": size,
        "length": length,
        "colors": tuple(colors),
        "pace": pace,
        "goal": goal,
        "distracted": distracted,
    }
    write_lerobot_dataset(root, [episode(s, **kw) for s in train + held_out], fps, **writer_kw)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    split = {
        "train": list(range(len(train))),
        "held_out": list(range(len(train), len(train) + len(held_out))),
        "seeds": {"train": train, "held_out": held_out},
        "seed": seed,
        "fps": fps,
        **kw,
        "colors": list(colors),
    }
    (root / SPLIT_FILE).write_text(json.dumps(split, indent=1) + "\n")
    return root


def open_loop_baselines(
    train: list[dict[str, Any]], held_out: list[dict[str, Any]], chunk: int = 8
) -> dict[str, float]:
    """Mean squared errors on the held-out windows (from frame t, 1 <= t and t + chunk < T) of the baselines a
    model must beat: for the action chunk a[t : t + chunk] (action units), the train set's mean action, the last
    action a[t - 1] repeated, and zero; for the future frames t + 1 .. t + chunk (pixels in [0, 1]), frame t
    repeated. -> {"mean_action", "copy_last_action", "zero_action", "copy_frame", "windows"}."""
    mean = np.concatenate([e["columns"][ACTION] for e in train]).mean(axis=0)
    errors: dict[str, list[float]] = {
        "mean_action": [],
        "copy_last_action": [],
        "zero_action": [],
        "copy_frame": [],
    }
    for e in held_out:
        actions = e["columns"][ACTION].astype(np.float64)
        frames = e["frames"][CAMERA].astype(np.float64) / 255
        for t in range(1, len(actions) - chunk):
            target = actions[t : t + chunk]
            errors["mean_action"].append(float(((target - mean) ** 2).mean()))
            errors["copy_last_action"].append(float(((target - actions[t - 1]) ** 2).mean()))
            errors["zero_action"].append(float((target**2).mean()))
            errors["copy_frame"].append(float(((frames[t + 1 : t + chunk + 1] - frames[t]) ** 2).mean()))
    if not errors["mean_action"]:
        raise ValueError(
            f"no held-out window of {chunk} actions (episodes need more than {chunk + 1} frames)"
        )
    return {name: float(np.mean(values)) for name, values in errors.items()} | {
        "windows": len(errors["mean_action"])
    }
