"""Video frame sampling: the requested fps, the max_frames cap, the temporal-patch minimum, the right frames."""

import numpy as np
import pytest

from cosmos_train.data import load_video, sample_frame_indices


@pytest.fixture(scope="module")
def clip(tmp_path_factory, write_clip):
    """20 frames at 10 fps (2 s); frame i is gray level 10 * i + 20."""
    return write_clip(tmp_path_factory.mktemp("clip") / "clip.mp4", frames=20, fps=10)


@pytest.mark.parametrize(
    ("fps", "max_frames", "indices"),
    [
        (2, 16, [0, 5, 10, 15]),  # one frame every 0.5 s
        (4, 16, [0, 2, 5, 7, 10, 12, 15, 17]),  # every 2.5 native frames, floored
        (4, 3, [0, 10, 19]),  # capped: evenly spaced over the whole clip
        (
            30,
            16,
            np.linspace(0, 19, 16).round().astype(int).tolist(),
        ),  # above native rate: all frames, then cap
        (30, 32, list(range(20))),
    ],
)
def test_decoded_frames_follow_fps_and_max_frames(clip, fps, max_frames, indices):
    video = load_video(clip, fps=fps, max_frames=max_frames)
    assert video.indices == indices
    assert video.frames.shape == (len(indices), 32, 32, 3) and video.frames.dtype == np.uint8
    assert (video.fps, video.total_frames) == (10.0, 20)
    # The decoded pixels are the frames at those indices, not just the right number of frames.
    levels = video.frames.reshape(len(indices), -1).mean(axis=1)
    np.testing.assert_allclose(levels, [10 * i + 20 for i in indices], atol=3)
    metadata = video.metadata()
    assert metadata["frames_indices"] == indices and metadata["duration"] == pytest.approx(2.0)


def test_min_frames_wins_so_short_clips_fill_a_temporal_patch(tmp_path, write_clip):
    assert load_video(write_clip(tmp_path / "one.mp4", frames=1, fps=10), 2, 16, min_frames=2).indices == [
        0,
        0,
    ]
    assert sample_frame_indices(20, 10.0, 0.1, 16, min_frames=2) == [0, 19]
    assert sample_frame_indices(20, 10.0, 2, 1, min_frames=2) == [0, 19]
