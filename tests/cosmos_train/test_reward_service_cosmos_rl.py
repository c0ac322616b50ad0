"""The reward service answers cosmos-rl's real clients: each request is built here as those clients build it
(`requests`, the JSON line, `np.save` bytes, form-field pulls), and the scores are checked against what the
media are, decoded latents against diffusers' own Wan decode (`WanPipeline`'s un-normalisation), and GenEval's
top-level fields against GenEval-mini's ground-truth pictures.

The clients' wire facts (shared/reference/reward-service.md): cosmos-rl's image client sends uint8 B x H x W x C;
its `remote_calculator` float16 images, and float16 latents as "latent" (older) or "video" (newer); its
world-model trainer's `RemoteReward` float32 latents with no `media_type` and `video_infos`; the reference lays
videos out B x C x T x H x W; GenEval data travels as `geneval_tags` / `geneval_includes`; pulls are form posts.
"""

from __future__ import annotations

import functools
import io
import json
import time

import numpy as np
import pytest
import requests
import torch
from domains.geneval_mini import Vocabulary, geneval_mini, render, split_prompts

from cosmos_train.rewards import MediaReward, RewardSpec, build_media_rewards
from cosmos_train.rewards.ocr import ocr
from cosmos_train.service.app import ENQUEUE_PATH, PING_PATH, PULL_PATH, ServiceSettings, serving
from cosmos_train.service.latents import LatentDecoder

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LATENT_SHAPE = (2, 16, 2, 4, 4)  # B x C x T x H x W: Wan2.1's 16 channels; decodes to 5 frames of 32 x 32


@pytest.fixture(scope="module")
def wan_vae_folder(tmp_path_factory):
    """A tiny random Wan2.1 VAE, saved and loaded back through `from_pretrained` (as a hub id's folder would be)."""
    from cosmos_train.tiny_models.pipelines import _wan_vae

    folder = tmp_path_factory.mktemp("wan_vae")
    _wan_vae(seed=0).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def service(wan_vae_folder):
    rewards = build_media_rewards(
        [
            RewardSpec("brightness", 1.0, {}),
            RewardSpec("color_target", 1.0, {"target": [255, 0, 0]}),
        ]
    )
    hosted = {reward.name: reward for reward in rewards}
    hosted["geneval_mini"] = MediaReward(
        "geneval_mini", 1.0, geneval_mini
    )  # a GenEval reward (benchmarks/domains)
    hosted["ocr"] = MediaReward("ocr", 1.0, functools.partial(ocr, engine=lambda image: "hello"))
    hosted["fails"] = MediaReward("fails", 1.0, lambda media, prompts, metadata: 1 / 0)
    hosted["several"] = MediaReward("several", 1.0, several_keys)
    settings = ServiceSettings(token=TOKEN, max_body_bytes=8 << 20, max_batch=16, max_queue=8)
    with serving(settings, hosted, decoder=LatentDecoder.load(str(wan_vae_folder), device="cpu")) as base:
        yield base


def several_keys(media, prompts, metadata):
    """A reward answering several keys, as the reference's gen_eval does: the first is the training score."""
    means = [float(m.mean()) for m in media]
    return {
        "several_score": means,
        "several_strict": [float(m > 0) for m in means],
        "several_group": {"a": means},
    }


def post_as_cosmos_rl(base: str, meta: dict, array: np.ndarray) -> requests.Response:
    """An enqueue exactly as cosmos-rl's clients send it: JSON line, newline, `np.save` bytes, octet-stream."""
    buffer = io.BytesIO()
    np.save(buffer, array)
    return requests.post(
        base + ENQUEUE_PATH,
        data=json.dumps(meta).encode() + b"\n" + buffer.getvalue(),
        headers={"Content-Type": "application/octet-stream", **AUTH},
        timeout=10,
    )


def pull_as_cosmos_rl(base: str, uuid: str, reward: str) -> dict:
    """A pull as the clients poll: form fields `uuid` and `type`, 400 meaning not ready."""
    for _ in range(400):
        answer = requests.post(
            base + PULL_PATH, data={"uuid": uuid, "type": reward}, headers=AUTH, timeout=10
        )
        if answer.status_code == 200:
            return answer.json()
        assert answer.status_code == 400, answer.text
        time.sleep(0.05)
    raise AssertionError(f"{uuid} never scored")


def scores(base: str, meta: dict, array: np.ndarray, reward: str) -> dict:
    answer = post_as_cosmos_rl(base, meta, array)
    assert answer.status_code == 200, answer.text
    return pull_as_cosmos_rl(base, answer.json()["uuid"], reward)


def diffusers_wan_decode(folder, latents: np.ndarray) -> np.ndarray:
    """Pixels in [0, 1], B x T x H x W x C, as `WanPipeline.__call__` decodes (diffusers' pipeline_wan.py:
    latents / (1 / latents_std) + latents_mean, `vae.decode`, then `VideoProcessor.postprocess_video`)."""
    from diffusers import AutoencoderKLWan
    from diffusers.video_processor import VideoProcessor

    vae = AutoencoderKLWan.from_pretrained(folder)
    z = torch.from_numpy(latents).float()
    mean = torch.tensor(vae.config.latents_mean).view(1, vae.config.z_dim, 1, 1, 1)
    std = 1.0 / torch.tensor(vae.config.latents_std).view(1, vae.config.z_dim, 1, 1, 1)
    with torch.no_grad():
        video = vae.decode(z / std + mean, return_dict=False)[0]
    return np.stack(VideoProcessor(vae_scale_factor=8).postprocess_video(video, output_type="np"))


def test_the_latent_decoder_decodes_as_diffusers_wan_pipeline(wan_vae_folder):
    latents = np.random.default_rng(0).standard_normal(LATENT_SHAPE).astype(np.float16)
    expected = diffusers_wan_decode(wan_vae_folder, latents)
    decoded = LatentDecoder.load(str(wan_vae_folder), device="cpu").decode(latents)
    assert decoded.dtype == np.uint8 and decoded.shape == expected.shape == (2, 5, 32, 32, 3)
    # The reference service truncates to uint8 where diffusers keeps floats: at most one level apart.
    assert np.abs(decoded / 255.0 - expected).max() <= 1 / 255 + 1e-4
    assert decoded.std() > 2  # a random VAE still decodes to varied pixels, so the comparison sees them


@pytest.mark.parametrize(
    "client",
    [
        "video trainer: float16, latent",
        "newer remote_calculator: float16, video",
        "world model: float32, none",
    ],
)
def test_latents_as_each_cosmos_rl_trainer_sends_them_are_decoded_and_scored(service, wan_vae_folder, client):
    latents = np.random.default_rng(1).standard_normal(LATENT_SHAPE)
    meta = {"prompts": ["a cat", "a dog"], "reward_fn": {"brightness": 1.0}}
    if client.startswith("video trainer"):
        latents, meta["media_type"] = latents.astype(np.float16), "latent"
    elif client.startswith("newer"):
        latents, meta["media_type"] = latents.astype(np.float16), "video"
    else:
        latents, meta["video_infos"] = latents.astype(np.float32), [{"video_fps": 16.0}] * 2
    answer = scores(service, meta, latents, "brightness")
    expected = diffusers_wan_decode(wan_vae_folder, latents).reshape(2, -1).mean(axis=1)
    assert answer["scores"]["brightness"] == pytest.approx(expected.tolist(), abs=1 / 255)
    assert answer["input_info"]["media_type"] == "latent"
    assert answer["input_info"]["shape"] == list(LATENT_SHAPE)


def test_images_as_the_image_client_and_remote_calculator_send_them(service):
    images = np.random.default_rng(2).integers(0, 256, (3, 16, 16, 3), dtype=np.uint8)
    meta = {"prompts": ["a", "b", "c"], "reward_fn": {"brightness": 1.0}, "media_type": "image"}
    expected = (images.reshape(3, -1).mean(axis=1) / 255).tolist()
    assert scores(service, meta, images, "brightness")["scores"]["brightness"] == pytest.approx(expected)
    # remote_calculator: the same pixels as float16 (exact below 2048), truncated to uint8 as the reference does.
    as_float = images.astype(np.float16) + np.float16(0.25)
    assert scores(service, meta, as_float, "brightness")["scores"]["brightness"] == pytest.approx(expected)


def test_videos_in_the_reference_layout_and_in_ours(service):
    """A red clip scores 1 on `color_target` (red) only when its channels are read as channels."""
    red = np.zeros((2, 4, 8, 8, 3), dtype=np.uint8)  # B x T x H x W x C
    red[..., 0] = 255
    meta = {"prompts": ["a", "b"], "reward_fn": {"color_target": 1.0}, "media_type": "video"}
    reference = red.transpose(0, 4, 1, 2, 3)  # B x C x T x H x W, as cosmos-rl lays videos out
    for array, extra, layout in (
        (reference, {}, "BCTHW"),
        (reference, {"video_layout": "BCTHW"}, "BCTHW"),
        (red, {}, "BTHWC"),
        (red, {"video_layout": "BTHWC"}, "BTHWC"),
    ):
        answer = scores(service, {**meta, **extra}, array, "color_target")
        assert answer["scores"]["color_target"] == pytest.approx([1.0, 1.0]), layout
        assert answer["input_info"]["layout"] == layout
    # Read channels first, a last axis of 1, 3 or 4 would be the width: such a clip is read channels last unless
    # `video_layout` says otherwise.
    narrow = reference[..., :3]  # B x C x T x H x W, 3 pixels wide
    misread = scores(service, meta, narrow, "color_target")["scores"]["color_target"]
    assert max(misread) < 0.9
    told = scores(service, {**meta, "video_layout": "BCTHW"}, narrow, "color_target")
    assert told["scores"]["color_target"] == pytest.approx([1.0, 1.0])


def test_geneval_fields_at_the_top_level_reach_the_reward(service):
    vocabulary, rng = Vocabulary(), np.random.default_rng(4)
    records = split_prompts(vocabulary)[0][::24]
    pictures = np.stack([render(record, vocabulary, rng) for record in records])
    meta = {
        "prompts": [record["prompt"] for record in records],
        "reward_fn": {"geneval_mini": 1.0},
        "media_type": "image",
        "geneval_tags": [record["tag"] for record in records],
        "geneval_includes": [record["include"] for record in records],
        "geneval_only_strict": False,
    }
    assert scores(service, meta, pictures, "geneval_mini")["scores"]["geneval_mini"] == [1.0] * len(records)
    shifted = {**meta, "geneval_includes": meta["geneval_includes"][1:] + meta["geneval_includes"][:1]}
    assert min(scores(service, shifted, pictures, "geneval_mini")["scores"]["geneval_mini"]) < 1.0


def test_score_keys_errors_weights_and_ping_as_the_reference_answers(service):
    images = np.zeros((2, 8, 8, 3), dtype=np.uint8)
    meta = {"prompts": ['a sign "hello"', 'a sign "world"'], "media_type": "image"}
    answer = scores(service, {**meta, "reward_fn": {"ocr": 1.0}}, images, "ocr")
    assert set(answer["scores"]) == {"ocr", "ocr_reward"}  # the reference's key beside ours
    assert answer["scores"]["ocr"] == answer["scores"]["ocr_reward"] == pytest.approx([1.0, 0.2])
    # A reward answering several keys: all of them, its first (the training score) under its name too.
    many = scores(service, {**meta, "reward_fn": {"several": 1.0}}, images + 2, "several")
    assert many["scores"] == {
        "several": [2.0, 2.0],
        "several_score": [2.0, 2.0],
        "several_strict": [1.0, 1.0],
        "several_group": {"a": [2.0, 2.0]},
    }
    assert MediaReward("several", 1.0, several_keys)(images + 2, ["a", "b"]) == [2.0, 2.0]
    # A scoring failure is a 200 with the error and null scores (cosmos-rl's clients retry any non-2xx for ~51 min).
    failed = scores(service, {**meta, "reward_fn": {"fails": 1.0}}, images, "fails")
    assert failed["scores"] is None and "ZeroDivisionError" in failed["error"]
    # A reward whose weight is <= 0 is not scored, hosted or not.
    kept = scores(service, {**meta, "reward_fn": {"brightness": 1.0, "gen_eval": 0.0}}, images, "brightness")
    assert kept["scores"]["brightness"] == [0.0, 0.0]
    refused = post_as_cosmos_rl(service, {**meta, "reward_fn": {"cosmos_reason1": 1.0}}, images)
    assert refused.status_code == 422
    assert refused.json()["detail"].startswith(
        "unknown reward 'cosmos_reason1'; this service hosts: brightness"
    )
    for method in (requests.get, requests.post):  # no token needed, as /health
        pong = method(service + PING_PATH, data={"info_data": json.dumps({"who": "test"})}, timeout=10)
        assert pong.status_code == 200 and pong.json() == {"message": "Ping request received"}


def test_latents_the_vae_cannot_decode_are_refused_in_one_line(service):
    meta = {"prompts": ["a", "b"], "reward_fn": {"brightness": 1.0}, "media_type": "latent"}
    wrong = post_as_cosmos_rl(service, meta, np.zeros((2, 4, 2, 4, 4), dtype=np.float16))
    assert wrong.status_code == 422 and "C = 16" in wrong.json()["detail"]
    settings = ServiceSettings(token=TOKEN)
    with serving(
        settings, {"brightness": build_media_rewards([RewardSpec("brightness", 1.0, {})])[0]}
    ) as base:
        answer = post_as_cosmos_rl(base, meta, np.zeros(LATENT_SHAPE, dtype=np.float16))
    assert answer.status_code == 422 and "--latent-vae" in answer.json()["detail"]


def test_the_world_model_trainers_request_is_decoded_and_judged_by_cosmos_reason1(wan_vae_folder, tmp_path):
    """cosmos-rl's world-model trainer: float32 Wan latents, no media_type, `video_infos` with the fps, scored by the
    `cosmos_reason1` critic (a tiny random Qwen2.5-VL here) on the decoded frames; its keys as the reference's."""
    from cosmos_train.rewards.cosmos_reason1 import cosmos_reason1
    from cosmos_train.tiny_models import save_tiny_vlm

    critic = str(save_tiny_vlm(tmp_path / "critic", family="qwen2_5_vl"))
    (reward,) = build_media_rewards([RewardSpec("cosmos_reason1", 1.0, {"model": critic})])
    latents = np.random.default_rng(5).standard_normal(LATENT_SHAPE).astype(np.float32)
    prompts = ["Does the video contain any anomalies or artifacts?"] * 2
    meta = {
        "prompts": prompts,
        "reward_fn": {"cosmos_reason1": 1.0},
        "video_infos": [{"video_fps": 8.0}] * 2,
    }
    decoder = LatentDecoder.load(str(wan_vae_folder), device="cpu")
    with serving(ServiceSettings(token=TOKEN), {"cosmos_reason1": reward}, decoder=decoder) as base:
        answer = scores(base, meta, latents, "cosmos_reason1")["scores"]
    assert set(answer) == {"cosmos_reason1", "no_score", "yes_logit", "no_logit", "prediction"}
    expected = cosmos_reason1(decoder.decode(latents), prompts, [{"video_fps": 8.0}] * 2, model=critic)
    assert answer["no_score"] == pytest.approx(expected["no_score"], abs=1e-5)
    assert answer["cosmos_reason1"] == answer["no_score"] and answer["prediction"] == expected["prediction"]
    at_default_fps = cosmos_reason1(decoder.decode(latents), prompts, None, model=critic)  # 16 fps
    assert answer["no_score"] != pytest.approx(
        at_default_fps["no_score"], abs=1e-5
    )  # the fps sent reached it
