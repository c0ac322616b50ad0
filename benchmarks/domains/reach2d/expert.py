"""Reach2D's scripted expert: straight at the named target at a bounded speed, with a little seeded noise so the
demonstrations are not all alike, and still once there. It writes the dataset (from the world's true goal) and
runs closed loop as `ExpertPolicy` (finding the goal in the picture, as a learned policy must).
"""

from __future__ import annotations

import numpy as np

from .world import MAX_STEP, PALETTE, World, distance, locate, step, task_color

ARRIVED = 0.02  # the expert stops this close to the goal's centre (well inside SUCCESS_RADIUS)
NOISE = 0.1  # standard deviation of the noise added to each action, in action units (0.005 of the square)
# Each episode's top speed, drawn uniformly, in action units: demonstrations differ in pace.
SPEEDS = (0.7, 1.0)
# The flawed expert's pace (`demonstrate(pace=...)`): its top speed times this. It still reaches every target it
# has the time for, but an episode lasts MAX_STEPS actions and the far starts need more (closed loop it succeeds in
# 0.875 of episodes; the policy it teaches on 64 demonstrations, 0.44 held out: benchmarks/cosmos3_policy_rl.py
# --flaw slow). A systematic mistake, though one whose size varies little between a policy's samples. (At 0.4 the
# expert succeeds in 0.47, the policy it taught in none.)
SLOW_PACE = 0.6
# The distracted expert's share of episodes that go to another target than the task's (`demonstrate(distracted=)`):
# drawn per episode, so on enough demonstrations (256) the policy it teaches picks the wrong one as a coin flip of its
# own noise (0.44 held out: benchmarks/cosmos3_policy_rl.py's base), and a success reward can tell it which.
DISTRACTED = 0.4
# The coin-flip expert's share (`demonstrate(distracted=COIN_FLIP)`): half its demonstrations go to the other target, so
# its data cannot say which target the task names; only a success reward can. The policy it teaches on 256
# demonstrations succeeds in 0.25 of 48 held-out starts, and NFT at the benchmark's setting did not raise it in 12
# steps (README: `benchmarks/cosmos3_policy_rl.py --flaw coin_flip`, a pilot; not shipped).
COIN_FLIP = 0.5


def expert_action(
    tip: np.ndarray,
    goal: np.ndarray,
    rng: np.random.Generator,
    speed: float = 1.0,
    noise: float = NOISE,
) -> np.ndarray:
    """The action towards `goal`: the one that lands on it, scaled down to `speed` when longer, plus noise;
    zero once within ARRIVED. float32 [2] in [-1, 1]."""
    if distance(tip, goal) <= ARRIVED:
        return np.zeros(2, dtype=np.float32)
    action = (np.asarray(goal, np.float64) - np.asarray(tip, np.float64)) / MAX_STEP
    norm = float(np.linalg.norm(action))
    if norm > speed:
        action *= speed / norm
    action = action + rng.normal(0.0, noise, size=2)
    return np.clip(action, -1, 1).astype(np.float32)


def demonstrate(
    world: World, length: int, rng: np.random.Generator, pace: float = 1.0, distracted: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """The expert's states and actions, float32 [length, 2] each: action t moves state t to state t + 1 (the last
    action is the one the expert would take next). `pace` scales its top speed (the flawed expert's `SLOW_PACE`);
    with probability `distracted` it goes to another target than the one the task names (a distracted expert's
    `DISTRACTED`)."""
    speed = float(rng.uniform(*SPEEDS)) * pace
    goal = world.goal_position
    # Drawn only when distracted: the right expert's random streams stay as they were.
    if distracted > 0 and rng.random() < distracted:
        others = [i for i in range(len(world.targets)) if i != world.goal]
        goal = world.targets[others[int(rng.integers(len(others)))]]
    states = np.empty((length, 2), dtype=np.float32)
    actions = np.empty((length, 2), dtype=np.float32)
    tip = world.tip
    for t in range(length):
        states[t] = tip
        actions[t] = expert_action(tip, goal, rng, speed)
        tip = step(tip, actions[t])
    return states, actions


class ExpertPolicy:
    """The expert as a policy that sees only what a learned one does (picture, state, task): it finds the named
    colour in the picture and plans a chunk of `chunk` actions through the world's dynamics. With
    `ignore_task=True` it chases a target of a colour drawn at random per episode: what a policy that reads the
    picture but not the text can reach (about 1 in n targets). `pace` scales its top speed, as `demonstrate`'s."""

    def __init__(self, seed: int = 0, chunk: int = 1, ignore_task: bool = False, pace: float = 1.0):
        self.seed, self.chunk, self.ignore_task, self.pace = seed, chunk, ignore_task, pace
        self.reset(0)

    def reset(self, seed: int) -> None:
        self.rng = np.random.default_rng([self.seed, seed, 2])
        self.speed = float(self.rng.uniform(*SPEEDS)) * self.pace
        self.color: str | None = None

    def __call__(self, image: np.ndarray, state: np.ndarray, task: str) -> np.ndarray:
        if self.color is None:
            shown = [c for c in PALETTE if locate(image, c) is not None]
            self.color = shown[self.rng.integers(len(shown))] if self.ignore_task else task_color(task)
        goal = locate(image, self.color)
        chunk = np.zeros((self.chunk, 2), dtype=np.float32)
        if goal is None:
            return chunk
        tip = np.asarray(state, np.float32)
        for i in range(self.chunk):
            chunk[i] = expert_action(tip, goal, self.rng, self.speed)
            tip = step(tip, chunk[i])
        return chunk
