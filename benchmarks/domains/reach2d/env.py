"""Reach2D closed loop: a gymnasium environment over `world.py` (the dataset's own dynamics and pictures), the
success rate of a policy that returns action chunks, and the baselines a learned policy must beat.

    env = Reach2DEnv()
    (obs, info) = env.reset(seed=7)       # obs {"image": uint8 [H, W, 3], "state": float32 [2]}; info["task"]
    success_rate(ExpertPolicy(chunk=4), seeds=range(20))   # policy(image, state, task) -> float32 [k, 2]

`env.reset(seed=s)` lays out the world of the dataset's episode `s` (`dataset.episode(s)`), so a policy can be
scored in closed loop on exactly the held-out layouts it was scored on open loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from .world import COLORS, FPS, MAX_STEPS, World, distance, render, step

Policy = Callable[[np.ndarray, np.ndarray, str], np.ndarray]


class Reach2DEnv(gym.Env):
    """Reach the named target. Observation {"image", "state"}, action float32 [2] in [-1, 1] (a velocity:
    `world.MAX_STEP` of the square per frame at 1), reward 1 on success, which terminates; truncated after
    `max_steps` steps. The task text is in `info["task"]` and `env.task`; `goal` fixes which colour it names (else
    drawn per episode)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": FPS}

    def __init__(
        self,
        size: int = 32,
        colors: tuple[str, ...] = COLORS,
        max_steps: int = MAX_STEPS,
        render_mode: str | None = None,
        goal: str | None = None,
    ):
        self.size, self.colors, self.max_steps, self.render_mode = size, tuple(colors), max_steps, render_mode
        self.goal = goal
        self.observation_space = spaces.Dict(
            {
                "image": spaces.Box(0, 255, (size, size, 3), dtype=np.uint8),
                "state": spaces.Box(0.0, 1.0, (2,), dtype=np.float32),
            }
        )
        self.action_space = spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
        self.world: World | None = None
        self.task = ""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        episode_seed = seed if seed is not None else int(self.np_random.integers(2**32))
        self.world = World.sample(episode_seed, self.colors, self.goal)
        self.tip, self.steps, self.task = self.world.tip.copy(), 0, self.world.task
        return self._observation(), self._info()

    def step(self, action):
        if self.world is None:
            raise RuntimeError("call reset() before step()")
        self.tip = step(self.tip, action)
        self.steps += 1
        success = self.world.reached(self.tip)
        truncated = not success and self.steps >= self.max_steps
        return self._observation(), float(success), success, truncated, self._info()

    def render(self):
        return render(self.world, self.tip, self.size)

    def _observation(self) -> dict[str, np.ndarray]:
        return {"image": render(self.world, self.tip, self.size), "state": self.tip.copy()}

    def _info(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "success": self.world.reached(self.tip),
            "distance": distance(self.tip, self.world.goal_position),
        }


def rollout(env: Reach2DEnv, policy: Policy, seed: int, execute: int | None = None) -> dict[str, Any]:
    """One episode: the policy's chunk is run open loop (its first `execute` actions, all when None), then it is
    asked again from the new frame (receding horizon). A policy with `reset(seed)` is reset first.
    -> {"success", "steps", "states" float32 [steps + 1, 2]}."""
    if hasattr(policy, "reset"):
        policy.reset(seed)
    observation, info = env.reset(seed=seed)
    states, done, success = [observation["state"]], False, False
    while not done:
        chunk = np.asarray(policy(observation["image"], observation["state"], info["task"]), np.float32)
        chunk = chunk.reshape(-1, 2)[:execute]
        if len(chunk) == 0:
            raise ValueError("the policy returned no action")
        for action in chunk:
            observation, _, success, truncated, info = env.step(action)
            states.append(observation["state"])
            done = success or truncated
            if done:
                break
    return {"success": bool(success), "steps": env.steps, "states": np.stack(states)}


def success_rate(
    policy: Policy,
    seeds: Iterable[int],
    *,
    size: int = 32,
    colors: tuple[str, ...] = COLORS,
    max_steps: int = MAX_STEPS,
    execute: int | None = None,
) -> float:
    """The share of the episodes `seeds` (episode seeds, as `dataset.episode` takes) that `policy` solves."""
    env = Reach2DEnv(size=size, colors=colors, max_steps=max_steps)
    outcomes = [rollout(env, policy, seed, execute)["success"] for seed in seeds]
    if not outcomes:
        raise ValueError("no seeds")
    return sum(outcomes) / len(outcomes)


class ZeroPolicy:
    """Never moves: the floor (no episode starts solved)."""

    def __init__(self, chunk: int = 1):
        self.chunk = chunk

    def __call__(self, image, state, task) -> np.ndarray:
        return np.zeros((self.chunk, 2), dtype=np.float32)


class RandomPolicy:
    """Uniform actions in [-1, 1]: what wandering reaches by chance."""

    def __init__(self, seed: int = 0, chunk: int = 1):
        self.seed, self.chunk = seed, chunk
        self.reset(0)

    def reset(self, seed: int) -> None:
        self.rng = np.random.default_rng([self.seed, seed, 3])

    def __call__(self, image, state, task) -> np.ndarray:
        return self.rng.uniform(-1, 1, size=(self.chunk, 2)).astype(np.float32)


class CopyLastActionPolicy:
    """Repeats the last action it took (the first drawn at random): "copy the last action" in closed loop, a
    straight line at a random heading."""

    def __init__(self, seed: int = 0, chunk: int = 1):
        self.seed, self.chunk = seed, chunk
        self.reset(0)

    def reset(self, seed: int) -> None:
        self.last = np.random.default_rng([self.seed, seed, 4]).uniform(-1, 1, size=2).astype(np.float32)

    def __call__(self, image, state, task) -> np.ndarray:
        return np.repeat(self.last[None], self.chunk, axis=0)
