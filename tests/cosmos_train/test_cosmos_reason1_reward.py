"""The cosmos_reason1 video critic on a tiny random Qwen2.5-VL built offline (transformers' real classes, saved
with save_pretrained and loaded through from_pretrained). Scores are checked against a direct computation with
transformers' model and processor, written here from the reference service's recipe, not against our numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor

from cosmos_train.rewards import RewardError, RewardSpec, build_media_rewards
from cosmos_train.rewards.cosmos_reason1 import (
    SYSTEM_PROMPT,
    cosmos_reason1,
    frame_size,
    preload,
    sample_frames,
)
from cosmos_train.rewards.scorers import ScorerLoadError
from cosmos_train.tiny_models import save_tiny_vlm

pytestmark = pytest.mark.usefixtures("one_torch_thread")

NAME = "cosmos_train.rewards.cosmos_reason1:cosmos_reason1"
RNG = np.random.default_rng(0)
VIDEOS = RNG.integers(0, 256, (2, 4, 32, 32, 3), dtype=np.uint8)  # 2 clips x 4 frames of 32 x 32
PROMPTS = ["Does the video contain any anomalies or artifacts?", "a ball rolls off a table"]
# The tiny processor's patches are 8 px, merged 2 x 2: 16 px a side. The reference's smallest frame is
# 16 merged patches x temporal patch 2 = 8192 px: 32 x 32 grows by sqrt(8) and rounds up to 96 x 96.
SIDE = 96


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return str(save_tiny_vlm(tmp_path_factory.mktemp("tiny-qwen2-5-vl"), family="qwen2_5_vl"))


@pytest.fixture(scope="module")
def direct(folder):
    """(yes_logit, no_logit) for one 4-frame clip, straight from transformers' classes."""
    model = AutoModelForImageTextToText.from_pretrained(folder).eval()
    processor = AutoProcessor.from_pretrained(folder)
    yes_id = processor.tokenizer.encode("Yes", add_special_tokens=False)[0]
    no_id = processor.tokenizer.encode("No", add_special_tokens=False)[0]

    def logits(video: np.ndarray, prompt: str, fps: float = 16.0) -> tuple[float, float]:
        frames = [Image.fromarray(f).resize((SIDE, SIDE), Image.Resampling.BICUBIC) for f in video]
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": prompt}]},
        ]
        text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert text.endswith("<|im_start|>assistant\n") and prompt in text and SYSTEM_PROMPT in text
        inputs = processor(
            text=[text],
            videos=[frames],
            video_metadata=[{"total_num_frames": len(frames), "fps": fps}],
            return_tensors="pt",
        )
        with torch.no_grad():
            last = model(**inputs).logits[0, -1]
        return float(last[yes_id]), float(last[no_id])

    return logits


def test_scores_equal_a_direct_forward_pass_through_build_media_rewards(folder, direct):
    [reward] = build_media_rewards([RewardSpec(NAME, 1.0, {"model": folder})])
    scores = reward.scores(VIDEOS, PROMPTS)
    # The reward's own score is no_score; the reference service's four keys follow, no_score first.
    assert list(scores) == [NAME, "no_score", "yes_logit", "no_logit", "prediction"]
    assert scores[NAME] == scores["no_score"] == reward(VIDEOS, PROMPTS)
    for index, (video, prompt) in enumerate(zip(VIDEOS, PROMPTS, strict=True)):
        yes, no = direct(video, prompt)
        no_score = torch.softmax(torch.tensor([yes, no], dtype=torch.float64), dim=0)[1].item()
        assert scores["yes_logit"][index] == pytest.approx(yes, abs=1e-4)
        assert scores["no_logit"][index] == pytest.approx(no, abs=1e-4)
        assert scores["no_score"][index] == pytest.approx(no_score, abs=1e-4)
        assert scores["prediction"][index] == ("Bad" if yes > no else "Good")
        assert 0.0 < scores["no_score"][index] < 1.0


def test_prediction_follows_the_sign_of_yes_minus_no(folder):
    scores = cosmos_reason1(VIDEOS, PROMPTS, model=folder)
    for yes, no, no_score, prediction in zip(
        scores["yes_logit"], scores["no_logit"], scores["no_score"], scores["prediction"], strict=True
    ):
        assert prediction == ("Bad" if yes > no else "Good")
        assert no_score == pytest.approx(1 / (1 + math.exp(yes - no)), abs=1e-12)
        assert (no_score > 0.5) == (no > yes)


def test_the_prompt_and_the_frames_reach_the_model(folder):
    same_video = np.stack([VIDEOS[0], VIDEOS[0]])
    by_prompt = cosmos_reason1(same_video, PROMPTS, model=folder)
    assert by_prompt["yes_logit"][0] != pytest.approx(by_prompt["yes_logit"][1], abs=1e-6)
    assert by_prompt["no_logit"][0] != pytest.approx(by_prompt["no_logit"][1], abs=1e-6)
    by_video = cosmos_reason1(VIDEOS, [PROMPTS[0]] * 2, model=folder)
    assert by_video["yes_logit"][0] == pytest.approx(
        by_prompt["yes_logit"][0], abs=1e-6
    )  # same input, same out
    assert by_video["yes_logit"][1] != pytest.approx(by_video["yes_logit"][0], abs=1e-6)
    assert by_video["no_logit"][1] != pytest.approx(by_video["no_logit"][0], abs=1e-6)
    # `question` asks the same text of every video, whatever the prompts.
    asked = cosmos_reason1(VIDEOS, ["x", "y"], model=folder, question=PROMPTS[0])
    assert asked["yes_logit"] == pytest.approx(by_video["yes_logit"], abs=1e-6)


def test_the_sample_fps_and_the_sampled_frames_reach_the_model(folder, direct):
    video = RNG.integers(0, 256, (1, 8, 32, 32, 3), dtype=np.uint8)
    default = cosmos_reason1(video, ["p"], model=folder)
    assert cosmos_reason1(video, ["p"], [{"video_fps": 16.0}], model=folder) == default
    assert cosmos_reason1(video, ["p"], [{"tag": "other"}], model=folder) == default  # no video_fps: `fps`
    slow = cosmos_reason1(video, ["p"], [{"video_fps": 1.0}], model=folder)
    assert cosmos_reason1(video, ["p"], model=folder, fps=1.0) == slow
    # At 1 fps the two temporal patches are 2 s apart: Qwen2.5-VL's temporal positions, so the logits, change.
    assert slow["yes_logit"][0] != pytest.approx(default["yes_logit"][0], abs=1e-6)
    assert slow["yes_logit"][0] == pytest.approx(direct(video[0], "p", fps=1.0)[0], abs=1e-4)
    # max_frames = 2: every 4th frame (0 and 4) at 16 / 4 fps is what the model sees.
    sparse = cosmos_reason1(video, ["p"], model=folder, max_frames=2)
    assert (sparse["yes_logit"][0], sparse["no_logit"][0]) == pytest.approx(
        direct(video[0][[0, 4]], "p", fps=4.0), abs=1e-4
    )


def test_frame_subsampling_keeps_at_most_max_frames_an_even_count():
    indices, fps = sample_frames(400, 16.0)  # interval (400 - 1) // 160 + 1 = 3
    assert indices == list(range(0, 400, 3)) and len(indices) == 134
    assert fps == pytest.approx(16.0 / 3)
    indices, fps = sample_frames(403, 24.0)  # 135 frames at interval 3: the last is dropped
    assert indices == list(range(0, 402, 3)) and len(indices) == 134 and fps == pytest.approx(8.0)
    assert sample_frames(160, 16.0) == (list(range(160)), 16.0)
    assert sample_frames(161, 16.0) == (list(range(0, 160, 2)), 8.0)  # 81 -> 80
    assert sample_frames(5, 10.0) == ([0, 1, 2, 3], 10.0)
    assert sample_frames(1, 16.0) == ([], 16.0)
    assert sample_frames(100, 16.0, max_frames=10) == (list(range(0, 100, 10)), 1.6)
    for total in range(1, 700, 7):
        indices, _ = sample_frames(total, 16.0)
        assert len(indices) <= 160 and len(indices) % 2 == 0


def test_frames_are_resized_within_the_token_budget():
    assert frame_size(32, 32, 4, factor=16) == (SIDE, SIDE)
    height, width = frame_size(480, 832, 80)  # Cosmos-Reason1: 28 px per merged patch
    assert height % 28 == 0 and width % 28 == 0
    assert height * width * 80 / (2 * 28 * 28) <= 9216
    assert abs(width / height - 832 / 480) < 0.1


def test_images_short_clips_and_bad_inputs_fail_in_one_line(folder, tmp_path):
    [reward] = build_media_rewards([RewardSpec(NAME, 1.0, {"model": folder})])
    with pytest.raises(RewardError, match=r"scores videos .* not images") as error:
        reward(VIDEOS[:, 0], PROMPTS)
    assert "\n" not in str(error.value)
    with pytest.raises(RewardError, match="at least 2 frames"):
        reward(VIDEOS[:, :1], PROMPTS)
    with pytest.raises(RewardError, match="2 videos but 1 prompts"):
        reward(VIDEOS, PROMPTS[:1])
    with pytest.raises(RewardError, match="video_fps must be a positive number"):
        reward(VIDEOS, PROMPTS, [{"video_fps": 0}, {}])
    with pytest.raises(ScorerLoadError, match="cannot load the cosmos_reason1") as error:
        preload(model=str(tmp_path / "missing"))
    assert "\n" not in str(error.value)
    preload(model=folder)  # loads (cached) without error
