"""GenEval's reward (`cosmos_train.rewards.gen_eval`), as the cosmos-rl reference reward service computes it.

The rules are checked on constructed detections against hand-computed values; the plumbing on a tiny random
Mask2Former (a real transformers model and image processor, saved and loaded through from_pretrained) and the tiny
random CLIP of `tiny_clip.py`, against the detector's and CLIP's own outputs read directly in the test."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from tiny_clip import save_tiny_clip
from transformers import (
    CLIPModel,
    CLIPProcessor,
    Mask2FormerConfig,
    Mask2FormerForUniversalSegmentation,
    Mask2FormerImageProcessor,
    SwinConfig,
)

from cosmos_train.rewards import RewardSpec, build_media_rewards
from cosmos_train.rewards import gen_eval as ge
from cosmos_train.rewards.geneval_rules import Detection
from cosmos_train.rewards.scorers import ScorerLoadError

pytestmark = pytest.mark.usefixtures("one_torch_thread")

KEYS = ["gen_eval_score", "gen_eval_reward", "gen_eval_strict", "gen_eval_group"]
LABELS = ["person", "dog", "mouse", "cat"]  # "mouse" is GenEval's "computer mouse"


def obj(name, box=(0, 0, 10, 10), score=0.9, color=None):
    x0, y0, x1, y1 = box
    return Detection(shape=name, color=color, box=box, area=(x1 - x0) * (y1 - y0), iou=score)


def values(objects, record, only_strict=False):
    out = ge.score_record(objects, record, only_strict)
    return out["gen_eval_score"], out["gen_eval_reward"], out["gen_eval_strict"]


# ---------------------------------------------------------------------------------------------------------
# The rules on constructed detections


@pytest.mark.parametrize(
    ("found", "expected"),
    [
        (0, (0.0, 0.0, 0.0)),
        (1, (0.5, 0.0, 0.0)),  # too few: 1 - |2 - 1| / 2
        (2, (1.0, 1.0, 1.0)),
        (3, (0.5, 1.0, 0.0)),  # too many: GenEval's rule passes (at least 2), strict fails
        (5, (-0.5, 1.0, 0.0)),  # 1 - |2 - 5| / 2: the partial score goes below 0
    ],
)
def test_counts(found, expected):
    record = {"tag": "counting", "include": [{"class": "dog", "count": 2}]}
    objects = {"dog": [obj("dog", (20 * i, 0, 20 * i + 10, 10)) for i in range(found)]} if found else {}
    assert values(objects, record) == pytest.approx(expected)


def test_colours():
    record = {"tag": "colors", "include": [{"class": "car", "count": 1, "color": "red"}]}
    assert values({"car": [obj("car", color="red")]}, record) == (1.0, 1.0, 1.0)
    # Wrong colour: parts [1 (count), 0 (colour)].
    assert values({"car": [obj("car", color="blue")]}, record) == (0.5, 0.0, 0.0)
    # GenEval's rule reads the most confident car only; the partial score counts both cars: parts [0, 0].
    two = [obj("car", color="red"), obj("car", (20, 0, 30, 10), 0.5, color="blue")]
    assert values({"car": two}, record) == (0.0, 1.0, 0.0)
    assert values({"car": two[::-1]}, record) == (0.0, 0.0, 0.0)
    # Two colour requests: car [1, 1]; dog found twice for one asked: [0, 0.0].
    attr = {
        "tag": "color_attr",
        "include": [
            {"class": "car", "count": 1, "color": "red"},
            {"class": "dog", "count": 1, "color": "blue"},
        ],
    }
    dogs = [obj("dog", color="blue"), obj("dog", (20, 0, 30, 10), color="blue")]
    assert values({"car": [obj("car", color="red")], "dog": dogs}, attr) == (0.5, 1.0, 0.0)


def position_record(relation):
    return {
        "tag": "position",
        "include": [{"class": "dog", "count": 1}, {"class": "cat", "count": 1, "position": [relation, 0]}],
    }


# (dx, dy) of the cat's box from the dog's (both 20 x 20): the margin is 0.1 x (20 + 20) = 4 on each axis, and
# a relation needs the shrunk offset over half the offset: |d| - 4 > |d| / 2, so |d| = 9 holds, |d| = 8 does not.
SHIFTS = {"left of": (-1, 0), "right of": (1, 0), "above": (0, -1), "below": (0, 1)}


@pytest.mark.parametrize("relation", list(SHIFTS))
@pytest.mark.parametrize(("distance", "holds"), [(9, True), (8, False), (30, True)])
def test_positions_with_the_margin(relation, distance, holds):
    dx, dy = SHIFTS[relation]
    dog = obj("dog", (50, 50, 70, 70))
    cat = obj("cat", (50 + dx * distance, 50 + dy * distance, 70 + dx * distance, 70 + dy * distance))
    score, reward, strict = values({"dog": [dog], "cat": [cat]}, position_record(relation))
    assert (reward, strict) == ((1.0, 1.0) if holds else (0.0, 0.0))
    # Parts: dog [1], cat [1, 1] when it holds; [1, 1, 0, 1] when not (the reference's extra 1.0).
    assert score == pytest.approx(1.0 if holds else 0.75)
    opposite = {"left of": "right of", "right of": "left of", "above": "below", "below": "above"}[relation]
    assert values({"dog": [dog], "cat": [cat]}, position_record(opposite))[1] == 0.0


def test_position_without_its_target():
    # No dog: dog [0]; cat [1, 0 (no target)].
    cat = obj("cat", (0, 0, 20, 20))
    assert values({"cat": [cat]}, position_record("left of")) == pytest.approx((1 / 3, 0.0, 0.0))
    # Two cats for one asked: cat [0, 0.0] (a count miss with a position adds a single 0.0).
    dog, cats = obj("dog", (60, 0, 80, 20)), [cat, obj("cat", (0, 40, 20, 60))]
    assert values({"dog": [dog], "cat": cats}, position_record("left of")) == pytest.approx((1 / 3, 1.0, 0.0))


def test_group_sentinel_and_only_strict():
    record = {"tag": "colors", "include": [{"class": "car", "count": 1, "color": "red"}]}
    objects = {"car": [obj("car", color="red")]}
    out = ge.score_record(objects, record)
    assert list(out) == KEYS
    assert out["gen_eval_group"] == {tag: 1.0 if tag == "colors" else -10.0 for tag in ge.TAGS}
    strict_only = ge.score_record(objects, record, only_strict=True)
    assert strict_only["gen_eval_reward"] == 0.0
    assert strict_only["gen_eval_group"] == {tag: 0.0 if tag == "colors" else -10.0 for tag in ge.TAGS}
    assert (strict_only["gen_eval_score"], strict_only["gen_eval_strict"]) == (1.0, 1.0)
    # An unknown tag: -10.0 everywhere.
    assert set(ge.score_record(objects, {**record, "tag": "other"})["gen_eval_group"].values()) == {-10.0}


def test_exclude_is_ignored_as_the_reference_service_does():
    record = {
        "tag": "counting",
        "include": [{"class": "dog", "count": 2}],
        "exclude": [{"class": "dog", "count": 3}],
    }
    dogs = [obj("dog", (20 * i, 0, 20 * i + 10, 10)) for i in range(3)]
    assert values({"dog": dogs}, record)[1] == 1.0


def fake_result(scores, labels, size=(8, 8)):
    """A post-processed result: one binary map per segment, segment i covering row i."""
    maps = torch.zeros(len(scores), *size)
    for i in range(len(scores)):
        maps[i, i % size[0], : i % size[1] + 1] = 1
    info = [
        {"id": i, "label_id": label, "score": s}
        for i, (s, label) in enumerate(zip(scores, labels, strict=True))
    ]
    return {"segmentation": maps, "segments_info": info}


def test_counting_threshold_order_and_cap():
    assert ge.confidence_threshold({"tag": "counting"}) == 0.9
    assert ge.confidence_threshold({"tag": "two_object"}) == ge.confidence_threshold({}) == 0.3
    result = fake_result([0.5, 0.95, 0.3, 0.2, 0.91], [1, 1, 1, 1, 2])
    id2label = dict(enumerate(LABELS))
    counting = ge.segments_from_result(result, id2label, 0.9)
    assert {k: [s.detection.iou for s in v] for k, v in counting.items()} == {
        "dog": [0.95],
        "computer mouse": [0.91],
    }
    other = ge.segments_from_result(result, id2label, 0.3)
    assert [s.detection.iou for s in other["dog"]] == [0.95, 0.5]  # 0.3 itself is not above 0.3
    first = other["dog"][0]
    assert first.detection.box == (0, 1, 2, 2) and first.detection.area == 2 and first.mask.sum() == 2
    many = ge.segments_from_result(fake_result([0.5 + i / 100 for i in range(20)], [0] * 20), id2label, 0.3)
    assert [s.detection.iou for s in many["person"]] == [0.5 + i / 100 for i in range(19, 3, -1)]


def test_bad_records_and_videos_are_refused():
    images = np.zeros((1, 8, 8, 3), dtype=np.uint8)
    for metadata in (None, [{"tag": "colors"}], [{"tag": "x", "include": [{"class": "dog", "count": 0}]}]):
        with pytest.raises(ValueError, match="gen_eval") as info:
            ge.gen_eval(images, ["p"], metadata)
        assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="videos"):
        ge.gen_eval(np.zeros((1, 2, 8, 8, 3), dtype=np.uint8), ["p"], [{"include": []}])


# ---------------------------------------------------------------------------------------------------------
# Plumbing with tiny random models


@pytest.fixture(scope="module")
def detector_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-mask2former")
    backbone = SwinConfig(
        embed_dim=16,
        depths=[1, 1, 1, 1],
        num_heads=[1, 1, 1, 1],
        image_size=64,
        window_size=4,
        out_features=["stage1", "stage2", "stage3", "stage4"],
    )
    config = Mask2FormerConfig(
        backbone_config=backbone,
        feature_size=32,
        mask_feature_size=32,
        hidden_dim=32,
        encoder_feedforward_dim=64,
        encoder_layers=1,
        decoder_layers=2,
        num_attention_heads=2,
        dim_feedforward=64,
        num_queries=12,
        id2label=dict(enumerate(LABELS)),
        label2id={name: i for i, name in enumerate(LABELS)},
    )
    torch.manual_seed(0)
    model = Mask2FormerForUniversalSegmentation(config).eval()
    with torch.no_grad():  # distinct queries, so segments differ in class, score and shape
        for parameter in model.parameters():
            parameter.normal_(0, 0.3)
        model.class_predictor.weight.normal_(0, 2)
        model.class_predictor.bias[2] += 0.4  # some "mouse" segments above 0.3 too
        model.model.transformer_module.queries_features.weight.normal_(0, 10)
        model.model.transformer_module.queries_embedder.weight.normal_(0, 10)
    model.save_pretrained(folder)
    Mask2FormerImageProcessor(
        size={"shortest_edge": 64, "longest_edge": 96}, size_divisor=32
    ).save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def clip_folder(tmp_path_factory):
    return str(
        save_tiny_clip(tmp_path_factory.mktemp("tiny-clip"), seed=4)
    )  # a seed whose colours vary by crop


IMAGES = np.random.default_rng(0).integers(0, 256, (3, 48, 40, 3), dtype=np.uint8)


def direct_segments(folder, image):
    """(GenEval name, score, mask) per segment, straight from the model and processor, one image at a time."""
    model = Mask2FormerForUniversalSegmentation.from_pretrained(folder).eval()
    processor = Mask2FormerImageProcessor.from_pretrained(folder)
    with torch.no_grad():
        outputs = model(**processor(images=[image], return_tensors="pt"))
    result = processor.post_process_instance_segmentation(
        outputs, threshold=0.0, target_sizes=[image.shape[:2]], return_binary_maps=True
    )[0]
    names = {"mouse": "computer mouse"}
    return [
        (
            names.get(LABELS[s["label_id"]], LABELS[s["label_id"]]),
            s["score"],
            result["segmentation"][s["id"]].numpy() > 0,
        )
        for s in result["segments_info"]
    ]


def test_detections_are_the_processors(detector_folder):
    found = ge.detect(IMAGES, [0.0] * len(IMAGES), detector_folder)
    for image, by_class in zip(IMAGES, found, strict=True):
        direct = direct_segments(detector_folder, image)
        assert sum(len(v) for v in by_class.values()) == len(direct) > 0
        for name, segments in by_class.items():
            expected = sorted((s for s in direct if s[0] == name), key=lambda s: -s[1])
            assert [s.detection.iou for s in segments] == pytest.approx([s[1] for s in expected], abs=1e-5)
            for segment, (_, _, mask) in zip(segments, expected, strict=True):
                assert np.array_equal(segment.mask, mask)
                rows, cols = np.nonzero(mask)
                assert segment.detection.box == (cols.min(), rows.min(), cols.max() + 1, rows.max() + 1)


def test_gen_eval_through_build_media_rewards(detector_folder, clip_folder, monkeypatch):
    seen = []
    real = ge.score_record
    monkeypatch.setattr(
        ge, "score_record", lambda objects, *rest: seen.append(objects) or real(objects, *rest)
    )
    direct = [direct_segments(detector_folder, image) for image in IMAGES]
    persons = sum(score > 0.3 for name, score, _ in direct[0] if name == "person")
    mice = sum(score > 0.3 for name, score, _ in direct[1] if name == "computer mouse")
    assert persons > 0 and mice > 0  # the tiny model finds both classes above 0.3
    metadata = [
        {"tag": "single_object", "include": [{"class": "person", "count": persons}]},  # exact: strict passes
        {"tag": "colors", "include": [{"class": "computer mouse", "count": mice + 1, "color": "red"}]},
        {"tag": "counting", "include": [{"class": "person", "count": 1}]},  # threshold 0.9
    ]
    [reward] = build_media_rewards(
        [
            RewardSpec(
                "cosmos_train.rewards.gen_eval:gen_eval",
                1.0,
                {"detector": detector_folder, "clip": clip_folder, "batch_size": 2},
            )
        ]
    )
    out = reward.scores(IMAGES, ["a", "b", "c"], metadata)
    assert list(out) == ["cosmos_train.rewards.gen_eval:gen_eval", *KEYS]
    assert out["cosmos_train.rewards.gen_eval:gen_eval"] == out["gen_eval_score"]
    assert all(len(out[key]) == 3 for key in KEYS[:3])
    assert all(value <= 1.0 for value in out["gen_eval_score"])
    assert set(out["gen_eval_reward"]) | set(out["gen_eval_strict"]) <= {0.0, 1.0}
    assert out["gen_eval_group"].keys() == set(ge.TAGS)
    for tag, column in out["gen_eval_group"].items():
        assert column == [
            r if m["tag"] == tag else -10.0 for r, m in zip(out["gen_eval_reward"], metadata, strict=True)
        ]
    assert (out["gen_eval_score"][0], out["gen_eval_reward"][0], out["gen_eval_strict"][0]) == (1.0, 1.0, 1.0)
    assert out["gen_eval_reward"][1] == 0.0  # one mouse short
    # What the rules read: the detections above each record's threshold, most confident first.
    for objects, segments, record in zip(seen, direct, metadata, strict=True):
        threshold = 0.9 if record["tag"] == "counting" else 0.3
        expected = {}
        for name, score, _ in sorted(segments, key=lambda s: -s[1]):
            if score > threshold:
                expected.setdefault(name, []).append(score)
        assert objects.keys() == expected.keys()
        for name, scores in expected.items():
            assert [d.iou for d in objects[name]] == pytest.approx(scores, abs=1e-5)
    # Colours only where asked: all the mice of the colour record (fewer than its count), nothing else.
    assert all(d.color in ge.COLORS for d in seen[1]["computer mouse"])
    assert all(d.color is None for name, found in seen[1].items() if name != "computer mouse" for d in found)
    assert all(d.color is None for found in seen[0].values() for d in found)


def test_colours_are_clips_zero_shot_on_the_grey_masked_crop(clip_folder):
    rng = np.random.default_rng(1)
    image = rng.integers(0, 256, (24, 28, 3), dtype=np.uint8)
    segments = []
    for seed in range(6):  # blobs of solid colours on noise
        mask = np.random.default_rng(seed).random((24, 28)) > 0.6
        mask[:4] = mask[:, :3] = False
        image[mask] = rng.integers(0, 256, 3)
        rows, cols = np.nonzero(mask)
        box = (cols.min(), rows.min(), cols.max() + 1, rows.max() + 1)
        segments.append(ge.Segment(Detection("dog", None, box, int(mask.sum()), 0.5), mask))
    got = ge.classify_colors(image, segments, "dog", clip_folder)
    # Directly: the reference's crop (PIL composite over #999, then the box) and clip_benchmark's classifier.
    model, processor = (
        CLIPModel.from_pretrained(clip_folder).eval(),
        CLIPProcessor.from_pretrained(clip_folder),
    )
    with torch.no_grad():
        weights = []
        for color in ge.COLORS:
            texts = [
                f"a photo of a {color} dog",
                f"a photo of a {color}-colored dog",
                f"a photo of a {color} object",
            ]
            tokens = processor.tokenizer(texts, padding=True, return_tensors="pt")
            embedding = model(**tokens, pixel_values=torch.zeros(1, 3, 16, 16)).text_embeds.mean(0)
            weights.append(embedding / embedding.norm())
        expected = []
        for segment in segments:
            picture = Image.composite(
                Image.fromarray(image), Image.new("RGB", (28, 24), "#999"), Image.fromarray(segment.mask)
            ).crop(segment.detection.box)
            assert np.array_equal(np.asarray(ge.color_crops(image, [segment])[0]), np.asarray(picture))
            pixels = processor(images=[picture], return_tensors="pt")["pixel_values"]
            image_embedding = model(
                **processor.tokenizer(["x"], return_tensors="pt"), pixel_values=pixels
            ).image_embeds
            expected.append(ge.COLORS[int((image_embedding @ torch.stack(weights).T).argmax())])
    assert got == expected
    assert len(set(got)) > 1  # the crops differ, so a wrong crop would show


def test_preload_names_a_bad_path(detector_folder, clip_folder, tmp_path):
    ge.preload(detector=detector_folder, clip=clip_folder, only_strict=True)
    missing = str(tmp_path / "no-such-detector")
    with pytest.raises(ScorerLoadError, match="no-such-detector") as info:
        ge.preload(detector=missing, clip=clip_folder)
    assert "\n" not in str(info.value)
    with pytest.raises(ScorerLoadError, match="CLIP"):
        ge.preload(detector=detector_folder, clip=missing)


def test_the_service_answers_gen_eval_for_a_request_built_as_cosmos_rls_clients_build_it(
    detector_folder, clip_folder
):
    """`gen_eval` hosted by the reward service: GenEval's fields at the top level of the JSON line (as cosmos-rl's
    clients send them), the four keys answered as the reference answers them."""
    import io
    import json

    import httpx

    from cosmos_train.service.app import ENQUEUE_PATH, PULL_PATH, ServiceSettings, serving

    metadata = [
        {"tag": "single_object", "include": [{"class": "person", "count": 1}]},
        {"tag": "colors", "include": [{"class": "computer mouse", "count": 1, "color": "red"}]},
        {"tag": "counting", "include": [{"class": "person", "count": 2}]},
    ]
    parameters = {"detector": detector_folder, "clip": clip_folder}
    [reward] = build_media_rewards([RewardSpec("gen_eval", 1.0, parameters)])
    expected = reward.scores(IMAGES, ["a", "b", "c"], metadata)
    header = {
        "prompts": ["a", "b", "c"],
        "reward_fn": {"gen_eval": 1.0},
        "media_type": "image",
        "geneval_tags": [m["tag"] for m in metadata],
        "geneval_includes": [m["include"] for m in metadata],
        "geneval_only_strict": False,
    }
    buffer = io.BytesIO()
    np.save(buffer, IMAGES)
    body = json.dumps(header).encode() + b"\n" + buffer.getvalue()
    auth = {"Authorization": "Bearer t"}
    with serving(ServiceSettings(token="t"), {"gen_eval": reward}) as base:
        uuid = httpx.post(base + ENQUEUE_PATH, content=body, headers=auth).json()["uuid"]
        for _ in range(400):
            answer = httpx.post(base + PULL_PATH, data={"uuid": uuid, "type": "gen_eval"}, headers=auth)
            if answer.status_code != 400:
                break
    assert answer.status_code == 200, answer.text
    assert answer.json()["scores"] == expected  # floats survive JSON exactly
    assert set(answer.json()["scores"]) == {"gen_eval", *KEYS}
