"""GRPO job files shared by the GRPO tests."""

from __future__ import annotations

import json

from sft_helpers import SHAPES

TOY_REWARD = "toy_rewards:lowercase"  # examples/grpo/toy_rewards.py


def grpo_job(folder, model, *, data=None, rewards=None, train=None, extra="", data_format="jsonl"):
    data = data or SHAPES / "text.jsonl"
    settings = {
        "output_dir": str(folder / "run"),
        "max_steps": 3,
        "per_device_train_batch_size": 4,
        "num_generations": 4,
        "max_completion_length": 8,
        "learning_rate": 1e-3,
        "logging_steps": 1,
        "save_steps": 1000,
        "report_to": "none",
        "seed": 0,
    } | (train or {})
    rewards = rewards or {TOY_REWARD: 1.0}
    text = (
        f'kind = "grpo"\n[model]\nname_or_path = "{model}"\n'
        f'[data]\nformat = "{data_format}"\npath = "{data}"\nmedia_dir = "{SHAPES}"\nmax_frames = 4\n'
        "[rewards]\n" + "".join(f'"{name}" = {weight}\n' for name, weight in rewards.items())
        + "[train]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items())
        + extra
    )  # fmt: skip
    path = folder / "job.toml"
    path.write_text(text)
    return path
