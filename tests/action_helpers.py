"""Action-sft job files on a Reach2D LeRobot dataset, shared by the action tests."""

from __future__ import annotations

import json
from pathlib import Path

CHUNK = 4


def reach2d_dataset(folder: Path) -> Path:
    """Three short Reach2D episodes (two to train on) as a LeRobot v3.0 dataset."""
    from domains.reach2d import write_dataset

    return write_dataset(folder, seed=0, train_count=2, held_out_count=1, length=12)


def action_job(folder, model, data, action=None, train=None, data_extra=None):
    """An action-sft job on Reach2D's 2-D actions (`pusht`'s width), 4-action windows from episodes 0 and 1."""
    action = {"mode": "policy", "chunk_size": CHUNK, "domain": "pusht", "resolution_tier": 256} | (
        action or {}
    )
    train = {
        "output_dir": str(folder / "run"), "max_steps": 4, "per_device_train_batch_size": 2,
        "learning_rate": 1e-3, "logging_steps": 1, "save_strategy": "no", "report_to": "none", "seed": 0,
    } | (train or {})  # fmt: skip
    data_section = {
        "path": str(data), "cameras": ["observation.images.top"], "action_columns": ["action"],
        "state_columns": ["observation.state"], "episodes": [0, 1], "stride": 4,
    } | (data_extra or {})  # fmt: skip

    def table(values):
        return "".join(f"{key} = {json.dumps(value)}\n" for key, value in values.items())

    text = (
        f'kind = "action-sft"\n[model]\nname_or_path = "{model}"\n[data]\n{table(data_section)}'
        f"[action]\n{table(action)}[train]\n{table(train)}"
    )
    path = folder / "job.toml"
    path.write_text(text)
    return path
