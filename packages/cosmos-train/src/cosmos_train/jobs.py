"""Reading a job file for a command: validation plus path resolution, shared by every trainer."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .config import JobConfig, load_job_config


@dataclass
class Job:
    config: JobConfig
    source: str  # the job file, for messages
    text: str  # the file as written, saved beside the trained model


def _resolve(base: Path, value: str | None, must_exist: bool = False) -> str | None:
    """A relative path is relative to the job file's folder (a hub id stays as it is)."""
    if value is None or Path(value).is_absolute():
        return value
    candidate = base / value
    if must_exist and not candidate.exists():
        return value
    return str(candidate.resolve())


def read_job(path: str | Path, overrides: list[str] | None = None) -> Job:
    """Validate a job file and make its relative paths absolute against the file's folder."""
    path = Path(path)
    config = load_job_config(path, overrides)
    base = path.resolve().parent
    model = config.model.model_copy(
        update={"name_or_path": _resolve(base, config.model.name_or_path, must_exist=True)}
    )
    data = config.data.model_copy(
        update={
            "path": _resolve(base, config.data.path, must_exist=config.data.format == "hf"),
            "media_dir": _resolve(base, config.data.media_dir),
        }
    )
    train = dict(config.train)
    if "output_dir" in train:
        train["output_dir"] = _resolve(base, str(train["output_dir"]))
    config = config.model_copy(update={"model": model, "data": data, "train": train})
    return Job(config, str(path), path.read_text())
