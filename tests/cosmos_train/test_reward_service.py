"""The reward service (`cosmos_train.service`, `cosmos-train reward-serve`) over real HTTP on loopback:
auth, bounds, off-loop scoring, expiry and re-pull, logs, metadata, the client end to end, and a SIGKILL
restart while a client polls."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from cosmos_train.cli import app as cli
from cosmos_train.rewards import RewardSpec, build_media_rewards
from cosmos_train.rewards.media import brightness
from cosmos_train.rewards.remote import RemoteRewardClient, RemoteRewardError, encode_request
from cosmos_train.service.app import ENQUEUE_PATH, HEALTH_PATH, PULL_PATH, ServiceSettings, serving

TOKEN = "service-token-7f3a"
WRONG_TOKEN = "not-the-service-token"  # no hex run, so no request uuid can contain it
AUTH = {"Authorization": f"Bearer {TOKEN}"}
RNG = np.random.default_rng(0)
IMAGES = RNG.integers(0, 256, (3, 16, 16, 3), dtype=np.uint8)
VIDEOS = RNG.integers(0, 256, (2, 4, 16, 16, 3), dtype=np.uint8)


def echo_metadata(media, prompts, metadata):
    """Scores each sample with its metadata's `n`, so a test sees what metadata arrived."""
    return [float(m["n"]) if m else -1.0 for m in (metadata or [None] * len(media))]


def explode(media, prompts, metadata):
    raise ValueError("cannot score this batch")


class Gate:
    """A reward that blocks until opened: a slow scorer on demand."""

    def __init__(self):
        self.opened = threading.Event()

    def __call__(self, media, prompts, metadata):
        assert self.opened.wait(20), "gate never opened"
        return [1.0] * len(media)


def hosted(**extra):
    built = build_media_rewards(
        [RewardSpec(n, 1.0, {}) for n in ("brightness", "jpeg_compressibility", "color_target")]
    )
    return {r.name: r for r in built} | {"echo": echo_metadata, "explode": explode, **extra}


def settings(**bounds) -> ServiceSettings:
    return ServiceSettings(
        **{
            "token": TOKEN,
            "max_body_bytes": 1 << 20,
            "max_batch": 8,
            "max_queue": 4,
            "result_ttl": 30.0,
            **bounds,
        }
    )


@pytest.fixture
def url():
    with serving(settings(), hosted()) as base:
        yield base


def client_for(base: str, **options) -> RemoteRewardClient:
    options = {
        "token": TOKEN,
        "timeout": 5.0,
        "backoff": 0.02,
        "max_backoff": 0.1,
        "poll_timeout": 10.0,
        **options,
    }
    return RemoteRewardClient(base + ENQUEUE_PATH, base + PULL_PATH, **options)


def enqueue(base: str, header: dict, media: np.ndarray, headers=AUTH) -> httpx.Response:
    return httpx.post(base + ENQUEUE_PATH, content=encode_request(header, media), headers=headers)


def image_header(reward="brightness", size=3, **fields) -> dict:
    return {
        "prompts": [f"p{i}" for i in range(size)],
        "reward_fn": {reward: 1.0},
        "media_type": "image",
        **fields,
    }


def pull_until_ready(base: str, uuid: str, reward: str, deadline: float = 10.0) -> httpx.Response:
    end = time.monotonic() + deadline
    while True:
        answer = httpx.post(base + PULL_PATH, data={"uuid": uuid, "type": reward}, headers=AUTH)
        if answer.status_code != 400 or time.monotonic() > end:
            return answer
        time.sleep(0.02)


# --- auth ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": TOKEN},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": "Bearer"},
    ],
    ids=["none", "wrong", "no-scheme", "basic", "longer", "empty"],
)
def test_every_route_but_health_needs_the_token(url, headers):
    assert httpx.get(url + HEALTH_PATH).json() == {"status": "ok"}
    body = encode_request(image_header(), IMAGES)
    for method, path, kwargs in [
        ("POST", ENQUEUE_PATH, {"content": body}),
        ("POST", PULL_PATH, {"data": {"uuid": "x", "type": "brightness"}}),
        ("GET", ENQUEUE_PATH, {}),
        ("GET", "/no/such/route", {}),
        ("POST", HEALTH_PATH, {}),
    ]:
        answer = httpx.request(method, url + path, headers=headers, **kwargs)
        assert answer.status_code == 401, (method, path, answer.text)
        assert answer.json() == {"detail": "missing or wrong bearer token"}
    assert enqueue(url, image_header(), IMAGES).status_code == 200  # the right token passes


def test_no_auth_service_accepts_requests_without_a_token():
    with serving(settings(token=None), hosted()) as base:
        assert enqueue(base, image_header(), IMAGES, headers={}).status_code == 200


# --- the client, end to end ---------------------------------------------------------------------------


def test_client_scores_image_and_video_batches(url):
    client = client_for(url)
    assert client.score("brightness", ["a", "b", "c"], IMAGES) == pytest.approx(brightness(IMAGES))
    assert client.score("brightness", ["a", "b"], VIDEOS) == pytest.approx(
        [np.mean(brightness(clip)) for clip in VIDEOS]
    )
    # Two batches in flight at once (the next rollout runs meanwhile), fetched later, each its own scores.
    first = client.submit("jpeg_compressibility", ["a", "b", "c"], IMAGES)
    second = client.submit("brightness", ["a", "b"], VIDEOS[:, 0])
    assert first.uuid != second.uuid
    assert client.fetch(second) == pytest.approx(brightness(VIDEOS[:, 0]))
    expected = build_media_rewards([RewardSpec("jpeg_compressibility", 1.0, {})])[0](IMAGES, ["a", "b", "c"])
    assert client.fetch(first) == pytest.approx(expected)
    assert client.fetch(first) == pytest.approx(expected)  # a result can be pulled again


def test_reward_parameters_and_metadata_reach_the_reward(url):
    client = client_for(url)
    metadata = [{"n": 3}, {"n": 5}, {"n": 7}]
    assert client.score("echo", ["a", "b", "c"], IMAGES, metadata=metadata) == [3.0, 5.0, 7.0]
    # A table of per-sample columns, as RemoteTextReward sends dataset columns.
    assert client.score("echo", ["a", "b", "c"], IMAGES, metadata={"n": [1, 2, 4]}) == [1.0, 2.0, 4.0]
    # GenEval tags travel in video_infos with the reference service's clients.
    infos = [{"n": 9, "tag": "counting"}, {"n": 8, "tag": "colors"}]
    assert client.score("echo", ["a", "b"], VIDEOS, video_infos=infos) == [9.0, 8.0]
    assert client.score("echo", ["a", "b", "c"], IMAGES) == [-1.0, -1.0, -1.0]


def test_pull_answers(url):
    uuid = enqueue(url, image_header(), IMAGES).json()["uuid"]
    ready = pull_until_ready(url, uuid, "brightness")
    assert ready.status_code == 200
    body = ready.json()
    assert set(body) == {"scores", "input_info", "duration", "type"} and body["type"] == "brightness"
    assert body["scores"] == {"brightness": pytest.approx(brightness(IMAGES))}
    assert body["input_info"] == {
        "shape": [3, 16, 16, 3],
        "dtype": "uint8",
        "media_type": "image",
        "layout": "BHWC",
    }
    as_json = httpx.post(url + PULL_PATH, json={"uuid": uuid, "type": "brightness"}, headers=AUTH)
    assert as_json.json() == body  # JSON pulls as well as form pulls

    def pull(**fields):
        return httpx.post(url + PULL_PATH, data=fields, headers=AUTH)

    assert pull(uuid=uuid, type="color_target").status_code == 422  # not enqueued for that reward
    assert pull(uuid="nope", type="brightness").status_code == 404
    assert "unknown or expired uuid nope" in pull(uuid="nope", type="brightness").text
    assert pull(uuid=uuid).status_code == 422
    failed = enqueue(url, image_header("explode"), IMAGES).json()["uuid"]
    answer = pull_until_ready(url, failed, "explode")  # a 200, as the reference answers a scoring failure
    assert answer.status_code == 200 and answer.json()["scores"] is None
    assert "cannot score this batch" in answer.json()["error"]
    with pytest.raises(
        RemoteRewardError, match=r"could not score the batch: reward 'explode' raised ValueError"
    ):
        client_for(url).score("explode", ["a", "b", "c"], IMAGES)


def test_missing_score_key_and_bad_requests_fail_loudly_in_the_client(url):
    with pytest.raises(RemoteRewardError, match=r"enqueue refused \(HTTP 422: unknown reward 'pickscore'"):
        client_for(url).score("pickscore", ["a", "b", "c"], IMAGES)
    with pytest.raises(RemoteRewardError, match=r"HTTP 401"):
        client_for(url, token="wrong").score("brightness", ["a", "b", "c"], IMAGES)
    with pytest.raises(RemoteRewardError, match=r"HTTP 422: 2 prompts for a batch of 3"):
        client_for(url).score("brightness", ["a", "b"], IMAGES)


def test_a_bad_media_shape_is_refused_as_sent(url):
    """The refusal names the array as the client sent it (dtype, shape, media_type, video_layout) and what is
    accepted, never the transposed array it was read as."""
    answer = enqueue(url, image_header(size=1), np.zeros((1, 8, 8, 5), np.uint8))
    assert answer.status_code == 422
    assert answer.json()["detail"] == (
        "media sent as uint8 (1, 8, 8, 5) (media_type 'image'): an image is B x H x W x C or B x C x H x W, "
        "uint8 (or float16/float32 pixels with media_type 'image'), C = 1, 3 or 4, no empty axis"
    )
    answer = enqueue(
        url,
        image_header(size=1, media_type="video", video_layout="BTHWC"),
        np.zeros((1, 2, 8, 8, 5), np.uint8),
    )
    assert answer.status_code == 422
    assert answer.json()["detail"].startswith(
        "media sent as uint8 (1, 2, 8, 8, 5) (media_type 'video', video_layout 'BTHWC'): a video is uint8 "
        "B x T x H x W x C or B x C x T x H x W"
    )
    answer = enqueue(url, image_header(size=1, media_type=None), np.zeros((1, 8, 3), np.uint8))
    assert answer.json()["detail"].startswith(
        "media sent as uint8 (1, 8, 3) (no media_type): uint8 pixels are"
    )


# --- bounds -------------------------------------------------------------------------------------------


def test_bounds_answer_4xx_naming_the_bound(url):
    big = np.zeros((2, 512, 512, 3), np.uint8)  # 1.5 MiB > max_body_bytes
    answer = enqueue(url, image_header(size=2), big)
    assert answer.status_code == 413 and "max_body_bytes = 1048576" in answer.json()["detail"]
    chunked = httpx.post(
        url + ENQUEUE_PATH, content=iter([encode_request(image_header(size=2), big)]), headers=AUTH
    )
    assert chunked.status_code == 413 and "max_body_bytes = 1048576" in chunked.json()["detail"]
    answer = enqueue(url, image_header(size=9), np.zeros((9, 4, 4, 3), np.uint8))
    assert answer.status_code == 413 and "a batch of 9 exceeds max_batch = 8" in answer.json()["detail"]
    with pytest.raises(RemoteRewardError, match="max_batch = 8"):
        client_for(url).score("brightness", ["p"] * 9, np.zeros((9, 4, 4, 3), np.uint8))


def test_queue_bound_and_a_slow_scorer_never_blocks_enqueues():
    gate = Gate()
    with serving(settings(max_queue=2), hosted(slow=gate)) as base:
        slow = enqueue(base, image_header("slow"), IMAGES).json()["uuid"]
        start = time.monotonic()
        quick = enqueue(base, image_header("brightness"), IMAGES)
        assert quick.status_code == 200 and time.monotonic() - start < 2  # answered while the scorer blocks
        assert httpx.get(base + HEALTH_PATH).status_code == 200
        full = enqueue(base, image_header(), IMAGES)
        assert full.status_code == 429
        assert "the queue is full: 2 batches waiting (max_queue = 2)" in full.json()["detail"]
        not_ready = httpx.post(base + PULL_PATH, data={"uuid": slow, "type": "slow"}, headers=AUTH)
        assert not_ready.status_code == 400 and not_ready.json()["detail"] == "not ready"
        gate.opened.set()
        assert pull_until_ready(base, slow, "slow").json()["scores"] == {"slow": [1.0, 1.0, 1.0]}
        assert pull_until_ready(base, quick.json()["uuid"], "brightness").status_code == 200
        assert enqueue(base, image_header(), IMAGES).status_code == 200  # room again


def test_results_can_be_pulled_again_until_they_expire():
    with serving(settings(result_ttl=0.5), hosted()) as base:
        uuid = enqueue(base, image_header(), IMAGES).json()["uuid"]
        first = pull_until_ready(base, uuid, "brightness")
        again = httpx.post(base + PULL_PATH, data={"uuid": uuid, "type": "brightness"}, headers=AUTH)
        assert first.status_code == again.status_code == 200 and first.json() == again.json()
        time.sleep(0.6)
        gone = httpx.post(base + PULL_PATH, data={"uuid": uuid, "type": "brightness"}, headers=AUTH)
        assert gone.status_code == 404 and "expire 0.5 s after scoring" in gone.json()["detail"]
        with pytest.raises(RemoteRewardError, match="does not know"):
            client_for(base).pull("brightness", uuid, expected=3)


# --- logs ---------------------------------------------------------------------------------------------


def test_one_json_log_line_per_request_and_never_the_token(url, caplog):
    caplog.set_level(logging.INFO, logger="cosmos_train.service")
    uuid = enqueue(url, image_header(), IMAGES).json()["uuid"]
    pull_until_ready(url, uuid, "brightness")
    httpx.post(
        url + PULL_PATH,
        data={"uuid": uuid, "type": "brightness"},
        headers={"Authorization": f"Bearer {WRONG_TOKEN}"},
    )
    httpx.get(url + HEALTH_PATH + "?token=" + TOKEN)
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "cosmos_train.service"]
    requests = [line for line in lines if "path" in line]
    assert {"method", "path", "status", "duration_ms", "uuid"} <= set(requests[0])
    assert requests[0] | {"duration_ms": 0, "time": 0, "client": ""} == {
        "method": "POST",
        "path": ENQUEUE_PATH,
        "status": 200,
        "uuid": uuid,
        "duration_ms": 0,
        "time": 0,
        "client": "",
    }
    assert [r["status"] for r in requests][-2:] == [401, 200]
    assert all(r["uuid"] == uuid for r in requests if r["path"] == PULL_PATH and r["status"] == 200)
    assert TOKEN not in caplog.text and WRONG_TOKEN not in caplog.text


# --- the command --------------------------------------------------------------------------------------


def test_reward_serve_refuses_to_start_without_a_token(monkeypatch):
    monkeypatch.delenv("REMOTE_REWARD_TOKEN", raising=False)
    result = CliRunner().invoke(cli, ["reward-serve"])
    assert result.exit_code == 2 and "no token: set REMOTE_REWARD_TOKEN" in result.output
    monkeypatch.setenv("MY_TOKEN", "x")
    result = CliRunner().invoke(cli, ["reward-serve", "--token-env", "MY_TOKEN", "--rewards", "brightnes"])
    assert (
        result.exit_code == 2
        and "unknown reward 'brightnes' (did you mean 'brightness'?); image/video built-ins are"
        in result.output
    )
    result = CliRunner().invoke(cli, ["reward-serve", "--token-env", "MY_TOKEN", "--rewards", "accuracy"])
    assert result.exit_code == 2 and "'accuracy' scores text completions" in result.output


def test_reward_serve_help_shows_the_curl_example():
    result = CliRunner().invoke(cli, ["reward-serve", "--help"])
    assert result.exit_code == 0
    assert 'curl -s -H "Authorization: Bearer s3cret" --data-binary @req.bin' in result.output
    assert "-d uuid=<UUID> -d type=brightness http://127.0.0.1:8080/api/reward/pull" in result.output


def test_reward_serve_without_fastapi_names_the_extra(monkeypatch):
    monkeypatch.setenv("REMOTE_REWARD_TOKEN", "x")
    monkeypatch.setitem(sys.modules, "fastapi", None)
    monkeypatch.delitem(sys.modules, "cosmos_train.service.app")
    result = CliRunner().invoke(cli, ["reward-serve"])
    assert result.exit_code == 2
    assert result.output.strip() == (
        "error: reward-serve needs FastAPI and uvicorn (fastapi is missing): pip install 'cosmos-train[serve]'"
    )


# --- kill and restart while a client polls ------------------------------------------------------------

SLOW_REWARDS = """
import time

def slow_brightness(media, prompts, metadata, seconds=1.0):
    time.sleep(seconds)
    return [float(frame.mean()) / 255 for frame in media]
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServiceProcess:
    """`cosmos-train reward-serve` in a subprocess, hosting a slow reward from a module on PYTHONPATH."""

    def __init__(self, folder: Path, port: int):
        (folder / "slow_rewards.py").write_text(SLOW_REWARDS)
        (folder / "rewards.toml").write_text(
            '[rewards]\n"slow_rewards:slow_brightness" = { seconds = 1.0 }\n'
        )
        self.folder, self.port, self.process = folder, port, None
        self.base = f"http://127.0.0.1:{port}"

    def start(self) -> None:
        env = {
            **os.environ,
            "REMOTE_REWARD_TOKEN": TOKEN,
            "PYTHONPATH": str(self.folder),
            "OMP_NUM_THREADS": "1",
        }
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cosmos_train",
                "reward-serve",
                "--port",
                str(self.port),
                "--rewards",
                "brightness",
                "--rewards-config",
                str(self.folder / "rewards.toml"),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(self.folder / "service.log", "ab"),  # noqa: SIM115
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.process.poll() is None, (self.folder / "service.log").read_text()
            try:
                if httpx.get(self.base + HEALTH_PATH, timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.05)
        raise AssertionError("reward-serve did not start")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)


@pytest.fixture
def service_process(tmp_path):
    service = ServiceProcess(tmp_path, _free_port())
    yield service
    if service.process and service.process.poll() is None:
        service.kill()


def _fetch_in_thread(client, pending):
    outcome = {}

    def run():
        try:
            outcome["scores"] = client.fetch(pending)
        except RemoteRewardError as error:
            outcome["error"] = str(error)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


@pytest.mark.timeout(120)
def test_sigkill_and_restart_while_a_client_polls(service_process):
    """The client rides out the outage within its retry bounds, finds its result lost and re-enqueues it (got
    the right scores), or with no re-enqueue allowed fails loudly; with the service gone it gives up loudly."""
    service_process.start()
    reward = "slow_rewards:slow_brightness"
    patient = client_for(service_process.base, retries=40, backoff=0.05, max_backoff=0.25, poll_timeout=60)
    pending = patient.submit(reward, ["a", "b", "c"], IMAGES)
    thread, outcome = _fetch_in_thread(patient, pending)
    time.sleep(0.3)  # the client is polling; the batch is being scored
    service_process.kill()
    service_process.start()
    thread.join(60)
    assert outcome == {"scores": pytest.approx(brightness(IMAGES))}
    assert "uuid" in service_process.folder.joinpath("service.log").read_text()

    strict = client_for(service_process.base, retries=40, backoff=0.05, max_backoff=0.25, resubmits=0)
    pending = strict.submit(reward, ["a", "b", "c"], IMAGES)
    thread, outcome = _fetch_in_thread(strict, pending)
    time.sleep(0.3)
    service_process.kill()
    service_process.start()
    thread.join(60)
    assert set(outcome) == {"error"} and f"does not know {pending.uuid}" in outcome["error"]

    brief = client_for(service_process.base, retries=3, backoff=0.05, max_backoff=0.1)
    pending = brief.submit(reward, ["a", "b", "c"], IMAGES)
    service_process.kill()  # and never restarted
    start = time.monotonic()
    with pytest.raises(RemoteRewardError, match=r"gave up after 4 attempts \(ConnectError"):
        brief.fetch(pending)
    assert time.monotonic() - start < 5


def test_remote_media_reward_through_build_media_rewards(url):
    """`remote:<name>` in a diffusion job's [rewards]: media type from the array, metadata in the header."""
    (reward,) = build_media_rewards([RewardSpec("remote:brightness", 1.0, {})], client=client_for(url))
    assert reward(VIDEOS, ["a", "b"]) == pytest.approx([np.mean(brightness(clip)) for clip in VIDEOS])
    (echo,) = build_media_rewards([RewardSpec("remote:echo", 1.0, {})], client=client_for(url))
    assert echo(IMAGES, ["a", "b", "c"], [{"n": 1}, {"n": 2}, {"n": 3}]) == [1.0, 2.0, 3.0]
