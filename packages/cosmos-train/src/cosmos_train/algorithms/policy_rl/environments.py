"""Closed-loop episodes in any gymnasium environment, side by side in worker processes.

A job names its environment as rewards are named, `package.module:callable` (a class or a function returning a
`gymnasium.Env`), with keyword arguments. Each episode runs in its own copy of it; a policy call returns a chunk of
actions, of which the first `execute` are run open loop (`ChunkedEnv`) before the policy plans again from the new
frame (receding horizon). The copies run in `gymnasium.vector.AsyncVectorEnv` (one worker process per copy), or in
this process (`SyncVectorEnv`), so a rollout's K episodes per start state step together and the policy samples
every active episode's chunk in one batch.

    envs = vector_env(section, search_path, count=16, execute=4)
    episodes = run_episodes(envs, seeds, act, section)     # act(observations, tasks, rows) -> [rows, execute, ...]
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import ConfigError
from ...references import BadReferenceError, load_reference

try:
    import gymnasium
except ImportError as error:  # an optional dependency: only this kind runs environments
    raise ImportError(
        "closed-loop policy RL runs gymnasium environments: pip install 'cosmos-train[envs]'"
    ) from error


def make_env(factory: str, kwargs: dict[str, Any], search_path: str | None, execute: int):
    """One copy of the job's environment, wrapped to take action chunks (what each worker process builds)."""
    try:
        build = load_reference(factory, search_path)
    except BadReferenceError as error:
        raise ConfigError(f"[env] factory {factory!r}: {error}") from None
    env = build(**kwargs)
    if not isinstance(env, gymnasium.Env):
        raise ConfigError(f"[env] factory {factory!r} returned a {type(env).__name__}, not a gymnasium.Env")
    return ChunkedEnv(env, execute)


class ChunkedEnv(gymnasium.Wrapper):
    """Takes `[execute, *action_shape]` chunks: each `step` runs the chunk's actions in order (clipped to the action
    space) until the episode ends, returning the last observation, the summed reward and `info` with `executed`
    (the actions run)."""

    def __init__(self, env, execute: int):
        super().__init__(env)
        inner = env.action_space
        if not isinstance(inner, gymnasium.spaces.Box):
            raise ConfigError(
                f"[env] the environment's action space is {inner}, not a Box: a policy's chunk is continuous"
            )
        self.execute = execute
        self.action_space = gymnasium.spaces.Box(
            np.broadcast_to(inner.low, (execute, *inner.shape)),
            np.broadcast_to(inner.high, (execute, *inner.shape)),
            dtype=inner.dtype,
        )

    def step(self, chunk):
        inner = self.env.action_space
        total, executed = 0.0, 0
        for action in np.asarray(chunk, dtype=inner.dtype):
            observation, reward, terminated, truncated, info = self.env.step(
                np.clip(action, inner.low, inner.high)
            )
            total, executed = total + float(reward), executed + 1
            if terminated or truncated:
                break
        return observation, total, terminated, truncated, {**info, "executed": executed}


def vector_env(section, search_path: str | Path | None, count: int, execute: int):
    """`count` copies of `[env]`'s environment taking chunks of `execute` actions: one worker process each
    (`vectorization = "async"`), or all in this process ("sync")."""
    make = functools.partial(
        make_env,
        section.factory,
        dict(section.kwargs),
        None if search_path is None else str(search_path),
        execute,
    )
    if section.vectorization == "sync":
        return gymnasium.vector.SyncVectorEnv([make] * count)
    return gymnasium.vector.AsyncVectorEnv([make] * count, context=section.start_method)


@dataclass
class Episode:
    """One finished episode: its start (`seed`), whether it succeeded, the environment steps it took, its summed
    environment reward, and its progress (1 - final / initial value of `[env] progress_key`; None without)."""

    seed: int
    success: bool
    steps: int
    env_return: float
    progress: float | None


# act(observations, tasks, rows, episodes) -> chunks [len(rows), k >= execute, *action_shape], of which the first
# `execute` run: `observations` the vector env's (each value stacked over every copy), `rows` the copies still
# running, `episodes` their episodes' indexes in `seeds` (a spare copy's: len(seeds) and up).
Act = Callable[[dict[str, np.ndarray], list[str], np.ndarray, np.ndarray], np.ndarray]


def run_episodes(envs, seeds: Sequence[int], act: Act, section) -> list[Episode]:
    """One episode per seed (`reset(seed=...)`), in waves of the vector env's size; each wave steps every running
    copy with its policy chunk until all have ended. Returns the episodes in the order of `seeds`."""
    count = envs.num_envs
    episodes: list[Episode] = []
    for first in range(0, len(seeds), count):
        wave = list(seeds[first : first + count])
        padded = wave + [wave[-1]] * (count - len(wave))  # spare copies replay a start, unread
        episodes += _wave(envs, padded, act, section, first)[: len(wave)]
    return episodes


def _wave(envs, seeds: list[int], act: Act, section, first: int) -> list[Episode]:
    observations, info = envs.reset(seed=[int(s) for s in seeds])
    count = len(seeds)
    start_value = _info_values(info, section.progress_key, count)
    running = np.ones(count, dtype=bool)
    success = np.zeros(count, dtype=bool)
    steps = np.zeros(count, dtype=int)
    returns = np.zeros(count)
    final_value = start_value.copy() if start_value is not None else None
    tasks = _tasks(info, section, count)
    chunk_shape = envs.single_action_space.shape
    while running.any():
        rows = np.flatnonzero(running)
        chunks = np.zeros((count, *chunk_shape), dtype=envs.single_action_space.dtype)
        planned = np.asarray(act(observations, [tasks[i] for i in rows], rows, first + rows))
        if planned.shape[1] < chunk_shape[0]:
            raise ValueError(
                f"the policy planned {planned.shape[1]} actions; [env] execute runs {chunk_shape[0]}"
            )
        chunks[rows] = planned[:, : chunk_shape[0]]  # the first `execute` of each chunk
        observations, reward, terminated, truncated, info = envs.step(chunks)
        # Copies that had ended were reset by this step (gymnasium's next-step autoreset): only running rows count.
        steps[rows] += _info_values(info, "executed", count)[rows].astype(int)
        returns[rows] += reward[rows]
        if section.success_key is not None:
            success[rows] = _info_values(info, section.success_key, count)[rows].astype(bool)
        else:
            success[rows] = terminated[rows]
        if final_value is not None:
            final_value[rows] = _info_values(info, section.progress_key, count)[rows]
        ended = terminated | truncated
        running &= ~ended
    progress = [None] * count
    if start_value is not None:
        progress = [float(1 - f / s) if s > 0 else 0.0 for s, f in zip(start_value, final_value, strict=True)]
    return [
        Episode(int(seeds[i]), bool(success[i]), int(steps[i]), float(returns[i]), progress[i])
        for i in range(count)
    ]


def _info_values(info: dict, key: str | None, count: int) -> np.ndarray | None:
    if key is None:
        return None
    if key not in info:
        raise ValueError(
            f"[env] the environment's info has no {key!r} (it has {', '.join(sorted(k for k in info if not k.startswith('_')))})"
        )
    return np.asarray(info[key], dtype=np.float64 if key != "task" else object).reshape(count)


def _tasks(info: dict, section, count: int) -> list[str]:
    """Each copy's task text: `[env] task`, else the info's `task_key`."""
    if section.task is not None:
        return [section.task] * count
    if section.task_key not in info:
        raise ValueError(
            f"[env] the environment's reset info has no {section.task_key!r}: set [env] task_key, or a fixed [env] task"
        )
    return [str(t) for t in np.asarray(info[section.task_key], dtype=object).reshape(count)]
