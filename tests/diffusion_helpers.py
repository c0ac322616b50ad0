"""Tiny pipelines, pair data and job files shared by the diffusion trainer tests."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import torch
from sft_helpers import REPO, _toml

IMAGE_PAIRS = REPO / "examples" / "data" / "pairs"
COLORS = {"red": (220, 40, 40), "green": (40, 200, 60), "blue": (40, 60, 220), "yellow": (230, 210, 40)}


def model_section(model: Path) -> str:
    """`[model]` for a tiny pipeline, trusting the component code it ships (the tiny Cosmos-Predict2.5's
    stand-in safety checker; `cosmos_train.model_sources.custom_code_files`)."""
    trust = "trust_remote_code = true\n" if any(Path(model).glob("*/*_code.py")) else ""
    return f'[model]\nname_or_path = "{model}"\n{trust}'


def write_video_pairs(folder: Path, frames: int = 9, size: int = 32) -> Path:
    """Four short MP4s of a coloured square moving right, each with a `{"prompt": ...}` JSON. Written by the
    toolkit's `write_mp4`, whose encoding is deterministic: the same bytes in every run."""
    from cosmos_train.diffusion.media_io import write_mp4

    folder.mkdir(parents=True, exist_ok=True)
    for index, (color, rgb) in enumerate(COLORS.items()):
        name = folder / f"{index:04d}"
        pixels = np.full((frames, size, size, 3), 255, dtype=np.uint8)
        for step in range(frames):
            left = 2 + step * 2
            pixels[step, 10:22, left : left + 12] = rgb
        write_mp4(Path(f"{name}.mp4"), pixels, fps=8)
        Path(f"{name}.json").write_text(json.dumps({"prompt": f"a {color} square moving right"}))
    return folder


def write_diffusion_job(
    folder: Path,
    model: Path,
    data: Path,
    *,
    lora: bool = True,
    num_frames: int | None = None,
    train: dict | None = None,
    diffusion: dict | None = None,
    kind: str = "diffusion-sft",
    cache: bool = False,
) -> Path:
    settings = {
        "output_dir": str(folder / "run"),
        "learning_rate": 1e-2 if lora else 2e-3,
        "max_steps": 30,
        "per_device_train_batch_size": 4,
        "logging_steps": 5,
        "save_steps": 30,
        "report_to": "none",
        "seed": 0,
    } | (train or {})
    diffusion = {"max_sequence_length": 16} | (diffusion or {})
    lines = [f'kind = "{kind}"\n', model_section(model)]
    if lora:
        lines.append("[lora]\nr = 16\nalpha = 32\n")
    frames = f"num_frames = {num_frames}\n" if num_frames else ""
    data_extra = f'cache = true\ncache_dir = "{folder / "cache"}"\n' if cache else ""
    lines.append(f'[data]\npath = "{data}"\nheight = 32\nwidth = 32\n{frames}{data_extra}')
    lines.append("[diffusion]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in diffusion.items()))
    lines.append("[train]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in settings.items()))
    job = folder / "job.toml"
    job.write_text("\n".join(lines))
    return job


def fixed_loss(adapter, model, batch: dict, diffusion, seeds=(0, 1, 2, 3)) -> float:
    """The SFT loss on `batch` averaged over fixed noise seeds: comparable before and after training."""
    from cosmos_train.algorithms.diffusion_sft.trainer import flow_matching_step

    values = []
    with torch.random.fork_rng(), torch.no_grad():
        for seed in seeds:
            torch.manual_seed(seed)
            if "latents" in batch:  # cached
                latents, conditioning = batch["latents"], batch["conditioning"]
            else:
                latents = adapter.encode_pixels(batch["pixels"]).float()
                conditioning = adapter.encode_prompts(batch["prompts"])
            values.append(flow_matching_step(adapter, model, latents, conditioning, diffusion).item())
    return statistics.mean(values)
