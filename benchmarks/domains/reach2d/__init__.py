"""Reach2D: a procedural robot domain for Cosmos3's action modes (policy, forward and inverse dynamics), small
enough that a tiny model learns it on CPU and a trivial baseline cannot solve it: a point "arm tip" must reach the
target whose colour the task text names, among 3 coloured discs, seen as a 32 x 32 picture.

    from domains.reach2d import train_and_held_out, write_dataset, Reach2DEnv, success_rate, ExpertPolicy

Demonstrations (`dataset.py`) and the closed-loop environment (`env.py`) share `world.py` (dynamics, drawing);
`expert.py` is the scripted expert that writes one and solves the other. Units and parameters: README.md.
"""

from .dataset import (
    ACTION,
    CAMERA,
    SPLIT_FILE,
    STATE,
    episode,
    episode_seeds,
    episodes,
    open_loop_baselines,
    split_seeds,
    train_and_held_out,
    write_dataset,
)
from .env import (
    CopyLastActionPolicy,
    RandomPolicy,
    Reach2DEnv,
    ZeroPolicy,
    rollout,
    success_rate,
)
from .expert import ExpertPolicy, demonstrate, expert_action
from .world import (
    COLORS,
    FPS,
    LENGTH,
    MAX_STEP,
    MAX_STEPS,
    PALETTE,
    SUCCESS_RADIUS,
    World,
    locate,
    render,
    step,
    task_color,
    task_text,
)

__all__ = [
    "ACTION",
    "CAMERA",
    "COLORS",
    "FPS",
    "LENGTH",
    "MAX_STEP",
    "MAX_STEPS",
    "PALETTE",
    "SPLIT_FILE",
    "STATE",
    "SUCCESS_RADIUS",
    "CopyLastActionPolicy",
    "ExpertPolicy",
    "RandomPolicy",
    "Reach2DEnv",
    "World",
    "ZeroPolicy",
    "demonstrate",
    "episode",
    "episode_seeds",
    "episodes",
    "expert_action",
    "locate",
    "open_loop_baselines",
    "render",
    "rollout",
    "split_seeds",
    "step",
    "success_rate",
    "task_color",
    "task_text",
    "train_and_held_out",
    "write_dataset",
]
