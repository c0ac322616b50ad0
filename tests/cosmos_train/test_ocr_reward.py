"""The `ocr` reward: quote extraction and edit distance on their own, the reward's code path with a
pluggable engine, the one-line error without an engine, and the real RapidOCR engine (models in its wheel)
on rendered text."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont

from cosmos_train.rewards import RewardError, RewardSpec, build_media_rewards
from cosmos_train.rewards import ocr as ocr_module
from cosmos_train.rewards.ocr import edit_distance, load_engine, normalise, ocr, ocr_score, quoted_text


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ('a sign that says "hello"', "hello"),
        ('a neon sign reading "Open 24 Hours" above a door', "Open 24 Hours"),
        ("a poster with “curly quotes” on it", "curly quotes"),
        ('first "one" then "two"', "one"),
        ("no quotes at all", None),
        ('an unclosed "quote', None),
        ('empty "" quotes', None),
    ],
)
def test_quoted_text(prompt, expected):
    assert quoted_text(prompt) == expected


@pytest.mark.parametrize(
    ("a", "b", "distance"),
    [
        ("", "", 0),
        ("abc", "", 3),
        ("", "abc", 3),
        ("kitten", "sitting", 3),
        ("flaw", "lawn", 2),
        ("hello", "hello", 0),
        ("hello", "hallo", 1),
        ("abc", "cba", 2),
        ("intention", "execution", 5),
    ],
)
def test_edit_distance(a, b, distance):
    assert edit_distance(a, b) == distance == edit_distance(b, a)


def test_ocr_score():
    assert normalise(" Hello  World\n") == "helloworld"
    assert ocr_score("HELLO", "hello") == 1.0  # case and spaces do not count
    assert ocr_score("he llo", "hello") == 1.0
    assert ocr_score("the sign says hello there", "hello") == 1.0  # the target appears: distance 0
    assert ocr_score("hallo", "hello") == pytest.approx(0.8)
    assert ocr_score("", "hello") == 0.0
    assert ocr_score("a much longer unrelated text", "hi") == 0.0  # capped at the target's length
    assert ocr_score("", "") == 1.0 and ocr_score("x", "") == 0.0


def test_the_reward_reads_each_image_with_the_engine():
    images = np.stack([np.full((8, 8, 3), value, np.uint8) for value in (10, 20, 30)])
    seen = []

    def engine(image):  # "reads" the image's grey level, so each image gives its own text
        seen.append(image.shape)
        return {10: "hello", 20: "hallo", 30: ""}[int(image[0, 0, 0])]

    prompts = ['a sign that says "hello"'] * 3
    assert ocr(images, prompts, engine=engine) == pytest.approx([1.0, 0.8, 0.0])
    assert seen == [(8, 8, 3)] * 3
    # Metadata's text wins over the prompt's quote (a prompt set may keep targets beside the prompts).
    assert ocr(images[:1], ["no quote"], [{"text": "hel"}], engine=engine) == [1.0]
    # A video: each clip scores the mean over its frames.
    video = np.stack([images, images[::-1]])
    assert ocr(video, ['"hello"', '"hallo"'], engine=engine) == pytest.approx([0.6, (0.8 + 1.0 + 0.0) / 3])
    with pytest.raises(ValueError, match="quotes no text"):
        ocr(images[:1], ["a sign"], engine=engine)


def test_engine_by_import_path_through_build_media_rewards(tmp_path, monkeypatch):
    (tmp_path / "my_ocr_engine.py").write_text("def read(image):\n    return 'HELLO'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    (reward,) = build_media_rewards([RewardSpec("ocr", 1.0, {"engine": "my_ocr_engine:read"})])
    images = np.zeros((2, 8, 8, 3), np.uint8)
    # "hello" -> "help" is 2 edits: 1 - 2/4.
    assert reward(images, ['says "hello"', 'says "help"']) == pytest.approx([1.0, 0.5])
    with pytest.raises(RewardError, match=r"reward 'ocr' raised ValueError: ocr: the prompt quotes no text"):
        reward(images, ["x", "y"])


def test_without_an_engine_the_error_names_the_package(monkeypatch):
    load_engine.cache_clear()
    monkeypatch.setitem(sys.modules, "rapidocr_onnxruntime", None)
    try:
        with pytest.raises(RewardError) as raised:
            build_media_rewards([RewardSpec("ocr", 1.0, {})])
        assert str(raised.value) == (
            "[rewards] ocr: the ocr reward needs an OCR engine: "
            "pip install 'cosmos-train[ocr]' (rapidocr-onnxruntime)"
        )
        with pytest.raises(ocr_module.OcrEngineMissing, match=r"cosmos-train\[ocr\]"):
            ocr(np.zeros((1, 8, 8, 3), np.uint8), ['"x"'])
    finally:
        load_engine.cache_clear()


def render(text: str) -> np.ndarray:
    # Small and square: RapidOCR's detector scales the short side up to 736 pixels, so a wide image is slow.
    image = Image.new("RGB", (96, 96), "white")
    ImageDraw.Draw(image).text((8, 16), text, fill="black", font=ImageFont.load_default(size=24))
    return np.asarray(image)


def test_rapidocr_reads_rendered_text():
    pytest.importorskip("rapidocr_onnxruntime", reason="the ocr extra is not installed")
    images = np.stack([render("hello"), render("world")])
    scores = build_media_rewards([RewardSpec("ocr", 1.0, {})])[0](
        images, ['a sign that says "hello"', 'a sign that says "hello"']
    )
    assert scores[0] == 1.0
    assert scores[1] < 0.5  # "world" is 4 edits from "hello"
