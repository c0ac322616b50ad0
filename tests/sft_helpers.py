"""Job files and runs shared by the SFT tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHAPES = REPO / "examples" / "data" / "shapes"


def write_job(
    folder: Path,
    model: Path,
    *,
    lora: bool = True,
    data: str = "llava",
    train: dict | None = None,
    extra: str = "",
) -> Path:
    """A small job file for the tiny models on the bundled shapes sample."""
    data_path = {"llava": SHAPES / "llava.json", "jsonl": SHAPES / "chat.jsonl"}[data]
    settings = {
        "output_dir": str(folder / "run"),
        "learning_rate": 5e-3,
        "max_steps": 12,
        "per_device_train_batch_size": 4,
        "logging_steps": 1,
        "save_steps": 6,
        "report_to": "none",
        "seed": 0,
        "dataloader_num_workers": 0,
    } | (train or {})
    lines = ['kind = "sft"\n', f'[model]\nname_or_path = "{model}"\n']
    if lora:
        lines.append("[lora]\nr = 8\nalpha = 16\n")
    lines.append(
        f'[data]\nformat = "{data}"\npath = "{data_path}"\nmedia_dir = "{SHAPES}"\nmax_length = 512\n'
    )
    lines.append("[train]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in settings.items()))
    job = folder / "job.toml"
    job.write_text("\n".join(lines) + extra)
    return job


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


def cli(*args, env=None, timeout=900, **kwargs):
    exe = Path(sys.executable).with_name("cosmos-train")
    return subprocess.run(
        [str(exe), *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env, **kwargs
    )


def cli_in_process(*args) -> subprocess.CompletedProcess:
    """`cosmos-train ARGS` run in this process by typer's CliRunner: the exit code and both streams, as `cli`
    returns them, without a new interpreter importing torch again (for commands that stop before training)."""
    from typer.testing import CliRunner

    from cosmos_train.cli import app

    result = CliRunner().invoke(app, [str(arg) for arg in args])
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def losses(trainer) -> list[float]:
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


def write_ragged_chats(path: Path, count: int, seed: int = 0, max_words: int = 60) -> Path:
    """Text conversations of very different lengths (what packing is for)."""
    import json
    import random

    rng = random.Random(seed)
    words = ["red", "green", "blue", "cube", "sphere", "moves", "left", "right", "robot", "arm", "table"]
    with open(path, "w") as handle:
        for _ in range(count):
            question = " ".join(rng.choice(words) for _ in range(rng.randint(1, max_words)))
            answer = " ".join(rng.choice(words) for _ in range(rng.randint(1, max_words)))
            messages = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
            handle.write(json.dumps({"messages": messages}) + "\n")
    return path


def tensorboard_steps(log_dir: Path, tag: str = "train/loss") -> list[int]:
    """The global steps at which a run logged `tag` to TensorBoard in `log_dir` (`report_to = "tensorboard"`
    with `TENSORBOARD_LOGGING_DIR` set, one folder per process to tell runs apart)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir))
    events.Reload()
    return [event.step for event in events.Scalars(tag)]
