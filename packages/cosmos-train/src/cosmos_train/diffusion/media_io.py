"""Generated media as people and rewards see them: 8-bit pixels (`to_uint8`), and samples written to a folder
(`write_samples`: a PNG grid of images or one MP4 per video, with `samples.json`), the one layout of validation
samples and evaluations. MP4s go through PyAV, the library that decodes training videos."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch


def to_uint8(
    pixels: torch.Tensor, channel_dim: int, low: float = 0.0, truncate: bool = False
) -> torch.Tensor:
    """Pixels in [low, 1] (decoded latents: [-1, 1]; pipeline outputs: [0, 1]) with their colour channels at
    `channel_dim` -> uint8 with the channels last (`... x H x W x 3`: what rewards, the reward service and image
    files take). Rounded to the nearest value, or with `truncate` cut as the reference reward service's
    `.to(torch.uint8)` does."""
    pixels = pixels.float().clamp(low, 1)
    # The two forms keep the references' operations in order, so results match them bit for bit.
    scaled = (pixels - low) / (1 - low) * 255 if truncate else ((pixels - low) * (255 / (1 - low))).round()
    return scaled.to(torch.uint8).movedim(channel_dim, -1)


# libx264's macroblock-tree rate control reads uninitialised memory in its SIMD code on small frames (seen at
# 32x32, 48x48, 48x80, 80x80 and 96x96; not at 64x64 or 240x416 and up): the same frames then encode to other
# bytes, and decode to other pixels, from one process to the next. Off, the encoding is a function of the frames
# and of x264's thread count (which did not change the bytes at 48x48 and under: 1, 2 and 8 threads agreed).
X264_OPTIONS = {"x264-params": "mbtree=0"}


def write_mp4(path: Path, frames: np.ndarray, fps: float = 8) -> None:
    """`T x H x W x 3` uint8 frames -> an H.264 (yuv420p) MP4; odd sizes are padded to even. The same frames
    give the same file (`X264_OPTIONS`)."""
    import av

    pad_h, pad_w = frames.shape[1] % 2, frames.shape[2] % 2
    if pad_h or pad_w:  # yuv420p needs even sizes
        frames = np.pad(frames, ((0, 0), (0, pad_h), (0, pad_w), (0, 0)), mode="edge")
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=round(fps), options=X264_OPTIONS)
        stream.height, stream.width, stream.pix_fmt = frames.shape[1], frames.shape[2], "yuv420p"
        for frame in frames:
            container.mux(
                stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24"))
            )
        container.mux(stream.encode())


def write_samples(
    folder: Path, media: np.ndarray, records: list[dict[str, Any]], fps: float = 8, columns: int = 8
) -> torch.Tensor | None:
    """Write uint8 samples (`B x H x W x 3` images or `B x T x H x W x 3` videos) under `folder`: `grid.png`
    (images, `columns` a row) or `000.mp4`, `001.mp4`, ... (videos), and `samples.json` (`records`: one dict per
    sample, its prompt and whatever else was measured). Returns the image grid (`3 x H x W` in [0, 1]), or None."""
    folder.mkdir(parents=True, exist_ok=True)
    grid = None
    if media.ndim == 4:
        from torchvision.utils import make_grid, save_image

        images = torch.from_numpy(np.ascontiguousarray(media)).permute(0, 3, 1, 2).float() / 255
        grid = make_grid(images, nrow=min(len(images), columns))
        save_image(grid, folder / "grid.png")
    else:
        for index, frames in enumerate(media):
            write_mp4(folder / f"{index:03d}.mp4", frames, fps=fps)
    (folder / "samples.json").write_text(json.dumps(records, indent=1))
    return grid
