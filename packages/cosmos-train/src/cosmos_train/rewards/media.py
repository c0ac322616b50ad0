"""Weight-free image and video rewards for diffusion RL, usable locally and in the reward service.

A media reward takes a batch as the reward service receives it, `media` uint8 of shape B x H x W x C
(images) or B x T x H x W x C (videos), plus the batch's `prompts` and optional per-sample `metadata`,
and returns one float per sample. An image reward scores a video as the mean over its frames
(`per_clip`).

    scores = MEDIA_REWARDS["jpeg_compressibility"](media, prompts)
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


def check_media(media: Any) -> np.ndarray:
    """`media` as uint8 B x H x W x C or B x T x H x W x C with 1, 3 or 4 channels, or a one-line ValueError."""
    if not isinstance(media, np.ndarray):
        raise ValueError(f"media must be a NumPy array, got {type(media).__name__}")
    if media.dtype != np.uint8:
        raise ValueError(f"media must be uint8, got {media.dtype}")
    if media.ndim not in (4, 5) or media.shape[-1] not in (1, 3, 4) or 0 in media.shape:
        raise ValueError(
            f"media must be B x H x W x C or B x T x H x W x C (C = 1, 3 or 4), got {media.shape}"
        )
    return media


def per_clip(image_reward: Callable[..., list[float]]) -> Callable[..., list[float]]:
    """An image reward that also scores videos: each clip gets the mean of its frames' scores."""

    @functools.wraps(image_reward)  # keeps the image reward's signature: its parameters are checked by name
    def reward(
        media: np.ndarray, prompts: Sequence[str] = (), metadata: Sequence[Any] | None = None, **params
    ):
        media = check_media(media)
        if media.ndim == 4:
            return image_reward(media, prompts, metadata, **params)
        batch, frames = media.shape[:2]
        flat = media.reshape(batch * frames, *media.shape[2:])
        repeat = [p for p in prompts for _ in range(frames)] if prompts else []
        meta = [m for m in metadata for _ in range(frames)] if metadata else None
        scores = np.asarray(image_reward(flat, repeat, meta, **params), dtype=np.float64)
        return scores.reshape(batch, frames).mean(axis=1).tolist()

    return reward


def _rgb(images: np.ndarray) -> np.ndarray:
    """Channels as RGB: grey repeated, alpha dropped."""
    if images.shape[-1] == 1:
        return np.repeat(images, 3, axis=-1)
    return images[..., :3]


def _jpeg_kilobytes(image: np.ndarray, quality: int) -> float:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=quality)
    return buffer.tell() / 1000


@per_clip
def jpeg_compressibility(media, prompts=(), metadata=None, quality: int = 95) -> list[float]:
    """Minus the JPEG size in kB at `quality` (DDPO): simpler images score higher."""
    return [-_jpeg_kilobytes(image, quality) for image in _rgb(media)]


@per_clip
def jpeg_incompressibility(media, prompts=(), metadata=None, quality: int = 95) -> list[float]:
    """The JPEG size in kB at `quality` (DDPO): more detailed images score higher."""
    return [_jpeg_kilobytes(image, quality) for image in _rgb(media)]


@per_clip
def brightness(media, prompts=(), metadata=None) -> list[float]:
    """Mean pixel value in [0, 1]."""
    return (_rgb(media).reshape(len(media), -1).mean(axis=1) / 255.0).tolist()


@per_clip
def color_target(media, prompts=(), metadata=None, target: Sequence[int] = (255, 0, 0)) -> list[float]:
    """1 minus the mean RGB distance to `target`, scaled to [0, 1] (1: every pixel is the target colour)."""
    goal = np.asarray(target, dtype=np.float64)
    if goal.shape != (3,) or (goal < 0).any() or (goal > 255).any():
        raise ValueError(f"target must be three values in 0..255, got {list(target)}")
    pixels = _rgb(media).reshape(len(media), -1, 3).astype(np.float64)
    distance = np.linalg.norm(pixels - goal, axis=-1).mean(axis=1)
    return (1.0 - distance / np.linalg.norm([255.0, 255.0, 255.0])).tolist()


MEDIA_REWARDS: dict[str, Callable[..., list[float]]] = {
    "jpeg_compressibility": jpeg_compressibility,
    "jpeg_incompressibility": jpeg_incompressibility,
    "brightness": brightness,
    "color_target": color_target,
}
