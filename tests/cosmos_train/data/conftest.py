"""Fixtures for the data tests: the committed `shapes` sample, clip writers and the tiny processors."""

from pathlib import Path

import numpy as np
import pytest

SHAPES = Path(__file__).resolve().parents[3] / "examples" / "data" / "shapes"


@pytest.fixture(scope="session")
def shapes_dir() -> Path:
    return SHAPES


@pytest.fixture(scope="session")
def write_clip():
    """`write_clip(path, frames, fps)`: an mpeg4 MP4 whose frame i is flat gray at level 10 * i (to tell frames apart)."""

    def write(path: Path, frames: int, fps: int, size: int = 32) -> Path:
        import av

        with av.open(str(path), "w", format="mp4") as container:
            stream = container.add_stream("mpeg4", rate=fps)
            stream.width = stream.height = size
            stream.pix_fmt = "yuv420p"
            stream.options = {"qscale": "1"}
            for index in range(frames):
                pixels = np.full((size, size, 3), 10 * index + 20, dtype=np.uint8)
                container.mux(stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")))
            container.mux(stream.encode(None))
        return path

    return write


@pytest.fixture(scope="session")
def tokenizer():
    from transformers_cosmos3 import testing as tiny

    return tiny.build_tokenizer()


@pytest.fixture(scope="session")
def cosmos_processor(tokenizer):
    from transformers_cosmos3 import testing as tiny

    return tiny.build_processor(tokenizer)
