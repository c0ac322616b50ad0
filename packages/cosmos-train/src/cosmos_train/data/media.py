"""Media checks (cheap, at load time) and decoding (lazy, in the collator): Pillow for images, PyAV for videos."""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from cosmos_train.errors import first_line


def _reason(error: BaseException) -> str:
    """A short one-line reason; library messages often embed the absolute path, which the caller names already."""
    if isinstance(error, Image.UnidentifiedImageError):
        return "not a recognised image format"
    return first_line(getattr(error, "strerror", None) or error)


def image_problem(source: str | Path | bytes) -> str | None:
    """Why an image file (or encoded bytes) is unusable, or None. `verify()` checks structure without decoding pixels."""
    try:
        with Image.open(io.BytesIO(source) if isinstance(source, bytes) else source) as image:
            image.verify()
    except Exception as error:  # any failure to parse means the file cannot be trained on
        return _reason(error)
    return None


def video_problem(path: str | Path) -> str | None:
    """Why a video file is unusable, or None: it must have a video stream whose first frame decodes."""
    import av

    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                return "no video stream"
            for _ in container.decode(container.streams.video[0]):
                return None
            return "no decodable video frame"
    except Exception as error:  # PyAV raises many error types for damaged containers; all mean unusable
        return _reason(error)


def load_image(item: Any) -> Image.Image:
    """An RGB PIL image from a path, a PIL image, or a datasets `Image` struct ({"bytes", "path"})."""
    if isinstance(item, Image.Image):
        return item.convert("RGB")
    if isinstance(item, dict):
        item = io.BytesIO(item["bytes"]) if item.get("bytes") else item["path"]
    with Image.open(item) as image:
        return image.convert("RGB")


@dataclass
class VideoClip:
    """Decoded frames plus what the processor needs to place them in time (native fps and frame indices)."""

    frames: np.ndarray  # (T, H, W, 3) uint8
    fps: float  # native frame rate of the file
    total_frames: int
    indices: list[int]

    def metadata(self) -> dict[str, Any]:
        """Keyword form of transformers' `VideoMetadata` for these frames."""
        return {
            "total_num_frames": self.total_frames,
            "fps": self.fps,
            "duration": self.total_frames / self.fps,
            "frames_indices": list(self.indices),
            "height": int(self.frames.shape[1]),
            "width": int(self.frames.shape[2]),
            "video_backend": "pyav",
        }


def sample_frame_indices(
    total_frames: int, native_fps: float, fps: float, max_frames: int, min_frames: int = 1
) -> list[int]:
    """Frame indices at `fps` frames/s; evenly spaced over the clip when that exceeds `max_frames`.

    `min_frames` wins over `max_frames` (the Qwen-VL processors need a full temporal patch); a clip shorter
    than that repeats its last frame.
    """
    step = native_fps / fps
    if step <= 1:
        indices = list(range(total_frames))
    else:
        count = math.ceil(total_frames / step - 1e-9)
        indices = [min(int(k * step), total_frames - 1) for k in range(count)]
    if len(indices) > max_frames:
        indices = np.linspace(0, total_frames - 1, max_frames).round().astype(int).tolist()
    if len(indices) < min_frames:
        indices = np.linspace(0, total_frames - 1, min_frames).round().astype(int).tolist()
    return indices


def _decode_frames(path: str, wanted: set[int]) -> tuple[dict[int, np.ndarray], int]:
    """RGB frames at the `wanted` indices and the number of frames actually decoded."""
    import av

    frames: dict[int, np.ndarray] = {}
    count = 0
    with av.open(path) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        for index, frame in enumerate(container.decode(stream)):
            count = index + 1
            if index in wanted:
                frames[index] = frame.to_ndarray(format="rgb24")
    return frames, count


def load_video(path: str | Path, fps: float, max_frames: int, min_frames: int = 1) -> VideoClip:
    """Decode a video with PyAV, sampled at `fps` and capped at `max_frames` (see `sample_frame_indices`)."""
    import av

    path = str(path)
    with av.open(path) as container:
        stream = container.streams.video[0]
        total = stream.frames
        rate = float(stream.average_rate or stream.guessed_rate or 0)
        duration = float(stream.duration * stream.time_base) if stream.duration and stream.time_base else None
    if not total:  # some containers do not record a frame count: count by decoding
        total = _decode_frames(path, set())[1]
    if not rate:
        rate = total / duration if duration else fps
    indices = sample_frame_indices(total, rate, fps, max_frames, min_frames)
    frames, decoded = _decode_frames(path, set(indices))
    if decoded != total:  # the header's frame count was wrong: resample against what actually decodes
        total = decoded
        indices = sample_frame_indices(total, rate, fps, max_frames, min_frames)
        frames, _ = _decode_frames(path, set(indices))
    if not frames:
        raise ValueError(f"{path}: no decodable video frame")
    return VideoClip(np.stack([frames[i] for i in indices]), rate, total, indices)
