"""Scorer-model rewards (PickScore, HPS, aesthetic) on a tiny random CLIP built offline from transformers'
real classes, saved with save_pretrained and loaded by the rewards through from_pretrained. Scores are checked
against a direct computation with the CLIP classes, not against our own numbers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file
from tiny_clip import save_tiny_clip
from transformers import CLIPModel, CLIPProcessor

from cosmos_train.rewards import RewardError, RewardSpec, build_media_rewards, check_reward, scorers
from cosmos_train.rewards.scorers import aesthetic, hps, load_clip, pickscore

torch.set_num_threads(1)
RNG = np.random.default_rng(0)
IMAGES = RNG.integers(0, 256, (3, 20, 24, 3), dtype=np.uint8)
PROMPTS = ["a red cube", "two dogs on a beach", "a sign that says hello"]


@pytest.fixture(scope="module")
def clip_folder(tmp_path_factory):
    return str(save_tiny_clip(tmp_path_factory.mktemp("tiny-clip")))


def direct_embeddings(folder, images, prompts):
    """Normalised image and text embeddings straight from the CLIP classes, one pair at a time."""
    model, processor = CLIPModel.from_pretrained(folder).eval(), CLIPProcessor.from_pretrained(folder)
    image_rows, text_rows = [], []
    for image, prompt in zip(images, prompts, strict=True):
        inputs = processor(text=[prompt], images=[image], return_tensors="pt")
        with torch.no_grad():
            out = model(**inputs)
        image_rows.append(out.image_embeds[0].numpy())
        text_rows.append(out.text_embeds[0].numpy())
    return np.stack(image_rows), np.stack(text_rows), float(model.logit_scale.detach().exp())


def test_pickscore_and_hps_equal_a_direct_clip_computation(clip_folder):
    image, text, scale = direct_embeddings(clip_folder, IMAGES, PROMPTS)
    cosine = (image * text).sum(axis=1)
    scores = pickscore(IMAGES, PROMPTS, model=clip_folder, processor=clip_folder)
    # flow_grpo's PickScoreScorer and the cosmos-rl reward service divide by 26.
    assert scores == pytest.approx((scale * cosine / 26).tolist(), rel=1e-4, abs=1e-4)
    assert hps(IMAGES, PROMPTS, model=clip_folder) == pytest.approx(cosine.tolist(), rel=1e-4, abs=1e-5)
    assert len(set(np.round(scores, 4))) == 3  # images and prompts differ, so do scores
    # The pairing matters: another prompt for the same image gives another score.
    swapped = pickscore(IMAGES, PROMPTS[::-1], model=clip_folder, processor=clip_folder)
    assert swapped[0] != pytest.approx(scores[0])


def test_batching_does_not_change_scores_and_videos_average_frames(clip_folder):
    whole = pickscore(IMAGES, PROMPTS, model=clip_folder, processor=clip_folder)
    one_by_one = pickscore(IMAGES, PROMPTS, model=clip_folder, processor=clip_folder, batch_size=1)
    assert one_by_one == pytest.approx(whole, rel=1e-4)
    video = np.stack([IMAGES, IMAGES[::-1]])  # 2 clips x 3 frames
    clip_scores = pickscore(video, ["a red cube", "a blue ball"], model=clip_folder, processor=clip_folder)
    frames = [
        pickscore(clip, [p] * 3, model=clip_folder, processor=clip_folder)
        for clip, p in zip(video, ["a red cube", "a blue ball"], strict=True)
    ]
    assert clip_scores == pytest.approx([np.mean(f) for f in frames], rel=1e-5)


def test_aesthetic_is_the_clip_image_embedding_through_the_head(clip_folder, tmp_path):
    # LAION's layout: linear layers at layers.0, .2, .4 (dropouts between), no activations.
    head = {
        "layers.0.weight": RNG.normal(size=(8, 16)).astype(np.float32),
        "layers.0.bias": RNG.normal(size=8).astype(np.float32),
        "layers.2.weight": RNG.normal(size=(4, 8)).astype(np.float32),
        "layers.2.bias": RNG.normal(size=4).astype(np.float32),
        "layers.10.weight": RNG.normal(size=(1, 4)).astype(np.float32),  # 10 after 2: numeric order
        "layers.10.bias": RNG.normal(size=1).astype(np.float32),
    }
    save_file(head, tmp_path / "head.safetensors")
    image, _, _ = direct_embeddings(clip_folder, IMAGES, PROMPTS)
    expected = image
    for i in (0, 2, 10):
        expected = expected @ head[f"layers.{i}.weight"].T + head[f"layers.{i}.bias"]
    scores = aesthetic(IMAGES, PROMPTS, model=clip_folder, head=str(tmp_path / "head.safetensors"))
    assert scores == pytest.approx(expected[:, 0].tolist(), rel=1e-4, abs=1e-4)

    save_file({"weight": np.ones((1, 5), np.float32)}, tmp_path / "wrong.safetensors")
    with pytest.raises(scorers.ScorerLoadError, match="expects 5 features, the CLIP model gives 16"):
        aesthetic(IMAGES, PROMPTS, model=clip_folder, head=str(tmp_path / "wrong.safetensors"))


def test_models_load_once_and_build_from_the_rewards_table(clip_folder, monkeypatch):
    first = load_clip(clip_folder)
    calls = []
    original = CLIPModel.from_pretrained.__func__
    monkeypatch.setattr(
        CLIPModel,
        "from_pretrained",
        classmethod(lambda cls, *a, **k: calls.append(a) or original(cls, *a, **k)),
    )
    (reward,) = build_media_rewards(
        [RewardSpec("pickscore", 1.0, {"model": clip_folder, "processor": clip_folder})]
    )
    assert reward(IMAGES, PROMPTS) == pytest.approx(
        pickscore(IMAGES, PROMPTS, model=clip_folder, processor=clip_folder)
    )
    assert load_clip(clip_folder) is first and calls == []  # cached: no second load


def test_scorer_configuration_errors_are_one_line(clip_folder, tmp_path):
    with pytest.raises(
        ValueError, match=r"pickscore: unknown parameter 'modle' \(it takes: model, processor"
    ):
        check_reward("pickscore", {"modle": "x"}, media=True)
    with pytest.raises(
        RewardError, match=r"\[rewards\] hps: cannot load the CLIP model '.*nowhere'"
    ) as raised:
        build_media_rewards([RewardSpec("hps", 1.0, {"model": str(tmp_path / "nowhere")})])
    assert "\n" not in str(raised.value)
    with pytest.raises(RewardError, match=r"\[rewards\] aesthetic: aesthetic needs head ="):
        build_media_rewards([RewardSpec("aesthetic", 1.0, {"model": clip_folder})])
    with pytest.raises(RewardError, match="is not a file"):
        build_media_rewards(
            [RewardSpec("aesthetic", 1.0, {"model": clip_folder, "head": str(tmp_path / "x")})]
        )
    with pytest.raises(RewardError, match=r"reward 'hps' raised ValueError: 3 images but 2 prompts"):
        build_media_rewards([RewardSpec("hps", 1.0, {"model": clip_folder})])[0](IMAGES, PROMPTS[:2])
