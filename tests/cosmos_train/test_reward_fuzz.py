"""Fuzz the reward service's enqueue endpoint with malformed bodies, generated deterministically: every one
gets a 4xx (never a 5xx or a dropped connection), nothing is queued, and the service still serves afterwards."""

from __future__ import annotations

import io
import json
import logging
import pickle

import httpx
import numpy as np
import pytest

from cosmos_train.rewards import RewardSpec, build_media_rewards
from cosmos_train.rewards.media import brightness
from cosmos_train.rewards.remote import encode_request
from cosmos_train.service.app import ENQUEUE_PATH, HEALTH_PATH, PULL_PATH, ServiceSettings, serving

TOKEN = "fuzz-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SEED = 20260
HEADER = {"prompts": ["a", "b"], "reward_fn": {"brightness": 1.0}, "media_type": "image"}
IMAGES = np.arange(2 * 8 * 8 * 3, dtype=np.uint8).reshape(2, 8, 8, 3)


def npy(array: np.ndarray, allow_pickle: bool = False) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=allow_pickle)
    return buffer.getvalue()


def npy_with_header(header: str, payload: bytes = b"", version: bytes = b"\x01\x00") -> bytes:
    """A .npy stream with a hand-written header dict (version 1.0 layout, padded to 64 bytes)."""
    text = header.encode("latin1")
    pad = (-(10 + len(text) + 1)) % 64
    return (
        b"\x93NUMPY"
        + version
        + len(text + b" " * pad + b"\n").to_bytes(2, "little")
        + text
        + b" " * pad
        + b"\n"
        + payload
    )


def line(header) -> bytes:
    return json.dumps(header).encode() + b"\n"


def malformed_bodies(rng: np.random.Generator) -> list[tuple[str, bytes]]:
    good = encode_request(HEADER, IMAGES)
    good_npy = npy(IMAGES)
    cases: list[tuple[str, bytes]] = [
        ("empty", b""),
        ("newline only", b"\n"),
        ("json line only", json.dumps(HEADER).encode()),
        ("json line and newline, no media", line(HEADER)),
        ("npy only", good_npy),
        (
            "pickled object array",
            line(HEADER) + npy(np.array([{"a": 1}, None], dtype=object), allow_pickle=True),
        ),
        (
            "pickled object images",
            line(HEADER) + npy(np.empty((2, 8, 8, 3), dtype=object), allow_pickle=True),
        ),
        ("raw pickle", line(HEADER) + pickle.dumps({"x": 1})),
        (
            "huge declared size",
            line(HEADER)
            + npy_with_header(
                "{'descr': '|u1', 'fortran_order': False, 'shape': (1000000000000, 64, 64, 3), }"
            ),
        ),
        (
            "huge declared size, some data",
            line(HEADER)
            + npy_with_header(
                "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 100000, 100000, 3), }", bytes(4096)
            ),
        ),
        (
            "negative shape",
            line(HEADER)
            + npy_with_header(
                "{'descr': '|u1', 'fortran_order': False, 'shape': (-2, 8, 8, 3), }", bytes(384)
            ),
        ),
        ("header dict garbage", line(HEADER) + npy_with_header("{'descr': '|u1', 'shape': (2,", bytes(384))),
        ("header code", line(HEADER) + npy_with_header("__import__('os').system('true')", bytes(8))),
        (
            "npy version 3",
            line(HEADER)
            + npy_with_header(
                "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 8, 8, 3), }", bytes(384), b"\x03\x00"
            ),
        ),
        (
            "npy version 9",
            line(HEADER)
            + npy_with_header(
                "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 8, 8, 3), }", bytes(384), b"\x09\x00"
            ),
        ),
        ("bad magic", line(HEADER) + b"\x93NUMPX" + good_npy[6:]),
        ("structured dtype", line(HEADER) + npy(np.zeros((2, 8, 8, 3), dtype=[("a", "u1")]))),
        ("scalar media", line(HEADER) + npy(np.uint8(3))),
        ("json array", line([1, 2]) + good_npy),
        ("json string", line("x") + good_npy),
        ("json null", line(None) + good_npy),
        ("json nested deep", b"[" * 100000 + b"\n" + good_npy),
        ("not utf-8", b"\xff\xfe{}\n" + good_npy),
        ("json line over max_header_bytes", b"{" + b" " * (70 << 10)),
        (
            "latent float16",
            line({**HEADER, "media_type": "latent"}) + npy(np.zeros((2, 4, 8, 8), np.float16)),
        ),
        (
            "latent float32",
            line({**HEADER, "media_type": "latent"}) + npy(np.zeros((2, 4, 8, 8), np.float32)),
        ),
        ("text media type", line({**HEADER, "media_type": "text"}) + good_npy),
        (  # without media_type (as cosmos-rl's world-model trainer sends), uint8 pixels are images or videos
            "no media type, 3 axes",
            line({k: v for k, v in HEADER.items() if k != "media_type"}) + npy(np.zeros((2, 8, 8), np.uint8)),
        ),
        ("no prompts", line({k: v for k, v in HEADER.items() if k != "prompts"}) + good_npy),
        ("prompts not strings", line({**HEADER, "prompts": [1, 2]}) + good_npy),
        ("prompts a string", line({**HEADER, "prompts": "ab"}) + good_npy),
        ("too few prompts", line({**HEADER, "prompts": ["a"]}) + good_npy),
        ("no reward_fn", line({k: v for k, v in HEADER.items() if k != "reward_fn"}) + good_npy),
        ("empty reward_fn", line({**HEADER, "reward_fn": {}}) + good_npy),
        ("reward_fn a list", line({**HEADER, "reward_fn": ["brightness"]}) + good_npy),
        ("unknown reward", line({**HEADER, "reward_fn": {"pickscore": 1.0}}) + good_npy),
        ("video_infos wrong length", line({**HEADER, "video_infos": [{}]}) + good_npy),
        ("video_infos not a list", line({**HEADER, "video_infos": {"video_fps": 1}}) + good_npy),
        ("metadata wrong length", line({**HEADER, "metadata": [{}]}) + good_npy),
        ("metadata not objects", line({**HEADER, "metadata": [1, 2]}) + good_npy),
        ("metadata table ragged", line({**HEADER, "metadata": {"tag": ["x"]}}) + good_npy),
        (
            "batch over max_batch",
            line({**HEADER, "prompts": ["p"] * 9}) + npy(np.zeros((9, 2, 2, 3), np.uint8)),
        ),
        ("body over max_body_bytes", line(HEADER) + npy(np.zeros((2, 200, 200, 3), np.uint8))),
        ("video sent as image", line(HEADER) + npy(np.zeros((2, 3, 8, 8, 3), np.uint8))),
        ("image sent as video", line({**HEADER, "media_type": "video"}) + good_npy),
    ]
    # float16/float32 images are pixels (cosmos-rl's remote_calculator sends them): accepted, so not here.
    for dtype in ("float64", "int64", "bool", "complex64", "uint16", "int8", "<U3"):
        cases.append((f"dtype {dtype}", line(HEADER) + npy(np.zeros((2, 8, 8, 3), dtype=dtype))))
    for shape in [
        (2,),
        (2, 8),
        (2, 8, 8),
        (2, 8, 8, 2),
        (2, 8, 8, 5),
        (2, 0, 8, 3),
        (0, 8, 8, 3),
        (2, 1, 1, 8, 8, 3),
    ]:
        cases.append((f"shape {shape}", line(HEADER) + npy(np.zeros(shape, np.uint8))))
    # Truncations at random points (never the whole body).
    for cut in sorted(rng.choice(len(good) - 1, size=120, replace=False)):
        cases.append((f"truncated at {cut}", good[:cut]))
    # Extra bytes after a valid .npy stream: the header's size no longer matches.
    for extra in rng.integers(1, 200, size=20):
        cases.append((f"{extra} trailing bytes", good + rng.bytes(int(extra))))
    # Random bytes: a whole body, a JSON line, an .npy stream, an .npy header dict.
    for size in rng.integers(0, 3000, size=40):
        cases.append((f"random body {size}", b"\x00" + rng.bytes(int(size))))  # a NUL byte: never JSON
    for size in rng.integers(1, 300, size=30):
        cases.append(
            (
                f"random json line {size}",
                b"\x01" + rng.bytes(int(size)).replace(b"\n", b"") + b"\n" + good_npy,
            )
        )
    for size in rng.integers(0, 2000, size=30):
        cases.append((f"random npy {size}", line(HEADER) + b"\x00" + rng.bytes(int(size))))
    for size in rng.integers(1, 100, size=20):
        text = "".join(chr(c) for c in rng.integers(32, 127, size=int(size)))
        cases.append((f"random npy header {size}", line(HEADER) + npy_with_header(text, bytes(384))))
    return cases


@pytest.fixture(scope="module")
def url():
    rewards = {r.name: r for r in build_media_rewards([RewardSpec("brightness", 1.0, {})])}
    settings = ServiceSettings(token=TOKEN, max_body_bytes=200 << 10, max_header_bytes=64 << 10, max_batch=8)
    with serving(settings, rewards) as base:
        yield base


def test_malformed_enqueue_bodies_get_4xx_and_the_service_keeps_serving(url, caplog):
    caplog.set_level(logging.INFO, logger="cosmos_train.service")
    cases = malformed_bodies(np.random.default_rng(SEED))
    assert len(cases) >= 300
    statuses = {}
    with httpx.Client(base_url=url, headers=AUTH, timeout=30) as client:
        for name, body in cases:
            answer = client.post(ENQUEUE_PATH, content=body)
            assert 400 <= answer.status_code < 500, (name, answer.status_code, answer.text[:300])
            detail = answer.json()["detail"]
            assert isinstance(detail, str) and detail and "\n" not in detail, (name, detail)
            statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
        # Still serving, and nothing malformed was queued.
        assert client.get(HEALTH_PATH).json() == {"status": "ok"}
        uuid = client.post(ENQUEUE_PATH, content=encode_request(HEADER, IMAGES)).json()["uuid"]
        for _ in range(500):
            answer = client.post(PULL_PATH, data={"uuid": uuid, "type": "brightness"})
            if answer.status_code != 400:
                break
        assert answer.json()["scores"] == {"brightness": pytest.approx(brightness(IMAGES))}
    logged = [json.loads(r.getMessage()) for r in caplog.records if r.name == "cosmos_train.service"]
    assert not [entry for entry in logged if entry.get("status", 0) >= 500]
    assert sum(statuses.values()) == len(cases) and set(statuses) <= {400, 413, 422}
    print(f"{len(cases)} malformed bodies: {statuses}")


def test_the_named_bounds(url):
    with httpx.Client(base_url=url, headers=AUTH, timeout=30) as client:
        over = client.post(ENQUEUE_PATH, content=line(HEADER) + npy(np.zeros((2, 200, 200, 3), np.uint8)))
        assert over.status_code == 413 and "max_body_bytes = 204800" in over.json()["detail"]
        long_line = client.post(ENQUEUE_PATH, content=b"{" + b" " * (70 << 10))
        assert long_line.status_code == 413 and "max_header_bytes = 65536" in long_line.json()["detail"]
        pickled = client.post(
            ENQUEUE_PATH, content=line(HEADER) + npy(np.empty(2, object), allow_pickle=True)
        )
        assert pickled.status_code == 422 and "never unpickles" in pickled.json()["detail"]
        huge = client.post(
            ENQUEUE_PATH,
            content=line(HEADER)
            + npy_with_header(
                "{'descr': '|u1', 'fortran_order': False, 'shape': (1000000000000, 64, 64, 3), }"
            ),
        )
        assert huge.status_code == 400 and "declares (1000000000000, 64, 64, 3)" in huge.json()["detail"]
