"""Tiny pipelines and job files shared by the FlowGRPO and DDRL tests."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from diffusion_helpers import model_section
from sft_helpers import REPO, _toml

PROMPTS = REPO / "examples" / "data" / "prompts" / "colors.txt"
PAIRS = REPO / "examples" / "data" / "pairs"  # five coloured images with captions: DDRL's data


@pytest.fixture
def tiny(tiny_pipeline):
    return tiny_pipeline


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    return None


def write_rl_job(
    folder: Path,
    model: Path,
    *,
    kind: str = "flow-grpo",
    rollout: dict | None = None,
    algorithm: dict | None = None,
    train: dict | None = None,
    extra: str = "",
    lora: bool = True,
    brightness: float = 1.0,
    data: dict | None = None,
) -> Path:
    """A small FlowGRPO / DDRL / DiffusionNFT job with the brightness reward, 32x32 samples: on the colour prompts,
    or for DDRL on the coloured image pairs (their captions are the prompts, and its data term's images)."""
    settings = {
        "output_dir": str(folder / "run"),
        "learning_rate": 1e-2,
        "max_steps": 10,
        "per_device_train_batch_size": 4,
        "logging_steps": 1,
        "save_steps": 1000,
        "report_to": "none",
        "seed": 0,
    } | (train or {})
    rollout = {
        "samples_per_prompt": 4,
        "sampling_steps": 4,
        "train_batch_size": 8,  # two chunks: FlowGRPO's two updates per rollout take one each
        "guidance_scale": 1.0,
        "height": 32,
        "width": 32,
        "max_sequence_length": 16,
    } | (rollout or {})
    given = data or {}
    data = {"path": str(PROMPTS)} | given
    if kind == "ddrl":  # data items, at [data]'s size; no warm-up (cosmos-rl's 50 steps) in these short runs
        data = {"path": str(PAIRS), "format": "folder", "height": 32, "width": 32} | given
        rollout = {k: v for k, v in rollout.items() if k not in ("height", "width")}
        settings = {"warmup_steps": 0} | settings
    section = kind.replace("-", "_")
    lines = [f'kind = "{kind}"\n', model_section(model)]
    if lora:
        lines.append("[lora]\nr = 16\nalpha = 32\n")
    lines.append("[data]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in data.items()))
    lines.append(f"[rewards]\nbrightness = {brightness}\n")
    lines.append("[rollout]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in rollout.items()))
    lines.append(f"[{section}]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in (algorithm or {}).items()))
    lines.append("[train]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in settings.items()))
    folder.mkdir(parents=True, exist_ok=True)
    job = folder / "job.toml"
    job.write_text("\n".join(lines) + extra)
    return job


def rewards(trainer) -> list[float]:
    return [entry["reward"] for entry in trainer.state.log_history if "reward" in entry]


def rises(curve: list[float], window: int = 3) -> tuple[float, float, float]:
    """(mean of the first `window` rewards, mean of the last `window`, std of the first `window`)."""
    first, last = curve[:window], curve[-window:]
    return statistics.mean(first), statistics.mean(last), statistics.pstdev(first)
