"""Weight-free image and video rewards: what each prefers, per-clip averaging for videos, one-line errors.

JPEG sizes are checked against Pillow's own encoder output, not against our numbers."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from cosmos_train.rewards.media import (
    MEDIA_REWARDS,
    brightness,
    check_media,
    color_target,
    jpeg_compressibility,
)

RNG = np.random.default_rng(0)
FLAT = np.full((32, 32, 3), 128, dtype=np.uint8)
NOISE = RNG.integers(0, 256, (32, 32, 3), dtype=np.uint8)


def _pillow_kb(image: np.ndarray, quality: int = 95) -> float:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=quality)
    return len(buffer.getvalue()) / 1000


def test_jpeg_rewards_are_pillows_jpeg_size_and_prefer_opposite_images():
    batch = np.stack([FLAT, NOISE])
    compressible = MEDIA_REWARDS["jpeg_compressibility"](batch, ["a", "b"])
    incompressible = MEDIA_REWARDS["jpeg_incompressibility"](batch, ["a", "b"])
    assert compressible == pytest.approx([-_pillow_kb(FLAT), -_pillow_kb(NOISE)])
    assert incompressible == pytest.approx([_pillow_kb(FLAT), _pillow_kb(NOISE)])
    assert compressible[0] > compressible[1] and incompressible[1] > incompressible[0]
    assert jpeg_compressibility(batch[1:], quality=10)[0] > compressible[1]  # the quality parameter is used


def test_brightness_and_color_target_extremes():
    black, white = np.zeros((8, 8, 3), np.uint8), np.full((8, 8, 3), 255, np.uint8)
    red = np.zeros((8, 8, 3), np.uint8)
    red[..., 0] = 255
    assert brightness(np.stack([black, white])) == pytest.approx([0.0, 1.0])
    scores = color_target(np.stack([red, black, white]), target=[255, 0, 0])
    assert scores[0] == pytest.approx(1.0)
    assert scores[0] > scores[1] > 0 and scores[0] > scores[2] > 0
    assert color_target(np.stack([red]), target=[0, 0, 255])[0] < 0.5
    grey = np.full((2, 4, 4, 1), 255, np.uint8)  # one channel reads as grey
    assert brightness(grey) == pytest.approx([1.0, 1.0])
    transparent_white = np.zeros((1, 4, 4, 4), np.uint8)
    transparent_white[..., :3] = 255  # alpha 0: the colour counts, not the alpha channel
    assert brightness(transparent_white) == pytest.approx([1.0])


@pytest.mark.parametrize("name", sorted(MEDIA_REWARDS))
def test_a_video_scores_the_mean_of_its_frames(name):
    frames = RNG.integers(0, 256, (2, 3, 16, 16, 3), dtype=np.uint8)
    frames[1, 0] = 0  # frames differ, so a mean differs from any single frame's score
    reward = MEDIA_REWARDS[name]
    per_frame = [reward(clip) for clip in frames]  # each clip's frames as an image batch
    assert reward(frames, ["p", "q"]) == pytest.approx([np.mean(scores) for scores in per_frame])


@pytest.mark.parametrize(
    ("media", "message"),
    [
        ([[1, 2]], "NumPy array"),
        (np.zeros((2, 8, 8, 3), np.float32), "uint8"),
        (np.zeros((8, 8, 3), np.uint8), "B x H x W x C"),
        (np.zeros((2, 8, 8, 2), np.uint8), "(C = 1, 3 or 4)"),
        (np.zeros((0, 8, 8, 3), np.uint8), "B x H x W x C"),
    ],
)
def test_bad_media_is_a_one_line_error(media, message):
    with pytest.raises(ValueError) as raised:
        check_media(media)
    assert message in str(raised.value) and "\n" not in str(raised.value)
    with pytest.raises(ValueError):
        MEDIA_REWARDS["brightness"](media)


def test_color_target_rejects_a_bad_target():
    with pytest.raises(ValueError, match=r"three values in 0\.\.255"):
        color_target(np.zeros((1, 4, 4, 3), np.uint8), target=[300, 0])


def test_media_rewards_are_registered_apart_from_text_rewards():
    from cosmos_train.rewards import (
        MEDIA_BUILTINS,
        RewardError,
        RewardSpec,
        build_media_rewards,
        build_rewards,
        check_reward,
    )

    assert set(MEDIA_REWARDS) | {
        "ocr",
        "pickscore",
        "hps",
        "hpsv2",
        "aesthetic",
        "cosmos_reason1",
        "gen_eval",
    } == set(MEDIA_BUILTINS)
    check_reward("color_target", {"target": [0, 0, 255]}, media=True)
    with pytest.raises(ValueError, match=r"color_target: unknown parameter 'targt' \(it takes: target\)"):
        check_reward("color_target", {"targt": [0, 0, 255]}, media=True)
    with pytest.raises(
        ValueError, match=r"'brightness' scores images or videos .* text built-ins are accuracy"
    ):
        check_reward("brightness")  # a GRPO job's [rewards]
    with pytest.raises(ValueError, match="'format' scores text completions"):
        check_reward("format", media=True)
    with pytest.raises(RewardError, match="'brightness' scores images or videos"):
        build_rewards([RewardSpec("brightness", 1.0, {})])
    (reward,) = build_media_rewards([RewardSpec("color_target", 2.0, {"target": [0, 0, 255]})])
    blue = np.zeros((1, 4, 4, 3), np.uint8)
    blue[..., 2] = 255
    assert (reward.name, reward.weight, reward(blue, ["p"])) == ("color_target", 2.0, [1.0])
    with pytest.raises(RewardError, match=r"reward 'color_target' raised ValueError: media must be uint8"):
        reward(blue.astype(np.float32), ["p"])
