"""Writing generated media: MP4 through PyAV (the same library that decodes training videos)."""

from __future__ import annotations

from pathlib import Path

import torch


def write_mp4(path: Path, frames: torch.Tensor, fps: float = 8) -> None:
    """`T x 3 x H x W` frames in [0, 1] -> an H.264 (yuv420p) MP4; odd sizes are padded to even."""
    import av
    import numpy as np

    pixels = (frames.clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
    pad_h, pad_w = pixels.shape[1] % 2, pixels.shape[2] % 2
    if pad_h or pad_w:  # yuv420p needs even sizes
        pixels = np.pad(pixels, ((0, 0), (0, pad_h), (0, pad_w), (0, 0)), mode="edge")
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=round(fps))
        stream.height, stream.width, stream.pix_fmt = pixels.shape[1], pixels.shape[2], "yuv420p"
        for frame in pixels:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode())
