"""`RemoteRewardClient` and `RemoteTextReward` against a real-HTTP double of the reward service contract."""

import asyncio
import io
import json
import re
import socket
import time

import numpy as np
import pytest
from reward_service_double import ENQUEUE_PATH, PULL_PATH, serve

from cosmos_train.rewards.remote import RemoteRewardClient, RemoteRewardError, RemoteTextReward

TOKEN = "s3cret"
TEXT = np.zeros((0,), dtype=np.uint8)
ENV_NAMES = [p + n for p in ("REMOTE_REWARD_", "WFM_REWARD_") for n in ("ENQUEUE_URL", "FETCH_URL", "TOKEN")]


@pytest.fixture
def service():
    with serve(token=TOKEN) as double:
        yield double


def client_for(service, **settings) -> RemoteRewardClient:
    """A client of `service` with short waits, so failures show up fast."""
    settings = {"token": TOKEN, "timeout": 5.0, "backoff": 0.01, "max_backoff": 0.05, **settings}
    return RemoteRewardClient(service.enqueue_url, service.fetch_url, **settings)


def score_text(client, completions, reward="lower"):
    return client.score(
        reward, [f"p{i}" for i in range(len(completions))], TEXT, "text", completions=completions
    )


def test_score_round_trip(service):
    """Scores come back from the service; the token, JSON header and `.npy` media arrive intact."""
    assert score_text(client_for(service), ["abcd", "ABcd", ""]) == [1.0, 0.5, 0.0]

    media = np.arange(2 * 4 * 4 * 3, dtype=np.uint8).reshape(2, 4, 4, 3)
    scores = client_for(service).score(
        "bright", ["a cat", "a dog"], media, "image", video_infos=[{"video_fps": 1}]
    )
    assert scores == pytest.approx([float(m.mean()) for m in media])

    assert {r.headers.get("authorization") for r in service.requests} == {f"Bearer {TOKEN}"}
    header = service.enqueued[-1]["header"]
    assert header["prompts"] == ["a cat", "a dog"]
    assert header["reward_fn"] == {"bright": 1.0}
    assert header["media_type"] == "image"
    assert header["video_infos"] == [{"video_fps": 1}]
    sent = service.enqueued[-1]["media"]
    assert sent.dtype == media.dtype and np.array_equal(sent, media)

    raw = service.received(ENQUEUE_PATH)[-1].body  # the wire format itself: one JSON line, then .npy bytes
    line, _, npy = raw.partition(b"\n")
    assert json.loads(line)["prompts"] == ["a cat", "a dog"]
    assert np.array_equal(np.load(io.BytesIO(npy), allow_pickle=False), media)


def test_polls_until_ready(service):
    service.not_ready_polls = 2
    assert score_text(client_for(service), ["ab", "AB"]) == [1.0, 0.0]
    assert len(service.received(PULL_PATH)) == 3


def test_5xx_is_retried_a_bounded_number_of_times(service):
    service.fail_with_5xx = 2
    assert score_text(client_for(service, retries=2), ["ab"]) == [1.0]
    assert len(service.requests) == 4  # two 503s, the enqueue, the pull

    service.requests.clear()
    service.fail_with_5xx = 2
    with pytest.raises(RemoteRewardError, match=r"gave up after 2 attempts \(HTTP 503"):
        score_text(client_for(service, retries=1), ["ab"])
    assert len(service.requests) == 2


def test_4xx_fails_at_once(service):
    with pytest.raises(RemoteRewardError, match="HTTP 401"):
        score_text(client_for(service, token="wrong", retries=4), ["ab"])
    assert len(service.requests) == 1


def test_unknown_uuid_fails_at_once(service):
    with pytest.raises(RemoteRewardError, match=r"HTTP 404.*unknown uuid"):
        client_for(service, retries=4).pull("lower", "no-such-uuid", expected=1)
    assert len(service.requests) == 1


def test_missing_score_key_fails_at_once(service):
    service.drop_score_key = True
    with pytest.raises(RemoteRewardError, match=r"no 'lower' score \(it has: not-lower\)"):
        score_text(client_for(service, retries=4), ["ab"])
    assert len(service.received(PULL_PATH)) == 1


def test_poll_timeout(service):
    service.not_ready_polls = 10**9
    start = time.monotonic()
    with pytest.raises(RemoteRewardError, match=r"no result .* after 0\.5 s"):
        score_text(client_for(service, poll_timeout=0.5, backoff=0.05), ["ab"])
    assert time.monotonic() - start < 5
    assert len(service.received(PULL_PATH)) >= 2


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_check_reachable(service):
    client_for(service).check_reachable()  # the GET probe gets 405: reachable, token accepted

    with pytest.raises(RemoteRewardError, match="check REMOTE_REWARD_TOKEN"):
        client_for(service, token="wrong").check_reachable()

    port = free_port()
    down = RemoteRewardClient(f"http://127.0.0.1:{port}/api/reward/enqueue", f"http://127.0.0.1:{port}/x")
    start = time.monotonic()
    with pytest.raises(RemoteRewardError, match=re.escape(f"127.0.0.1:{port} is not reachable")):
        down.check_reachable()
    assert time.monotonic() - start < 5


def test_from_env(monkeypatch):
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(RemoteRewardError, match="REMOTE_REWARD_ENQUEUE_URL and REMOTE_REWARD_FETCH_URL"):
        RemoteRewardClient.from_env()

    monkeypatch.setenv("WFM_REWARD_ENQUEUE_URL", "http://wfm/enqueue")
    monkeypatch.setenv("WFM_REWARD_FETCH_URL", "http://wfm/pull")
    monkeypatch.setenv("WFM_REWARD_TOKEN", "wfm-token")
    client = RemoteRewardClient.from_env(retries=1)
    assert (client.enqueue_url, client.fetch_url, client.token, client.retries) == (
        "http://wfm/enqueue",
        "http://wfm/pull",
        "wfm-token",
        1,
    )

    monkeypatch.setenv("REMOTE_REWARD_ENQUEUE_URL", "http://remote/enqueue")
    monkeypatch.setenv("REMOTE_REWARD_FETCH_URL", "http://remote/pull")
    monkeypatch.setenv("REMOTE_REWARD_TOKEN", "remote-token")
    client = RemoteRewardClient.from_env()
    assert (client.enqueue_url, client.fetch_url, client.token) == (
        "http://remote/enqueue",
        "http://remote/pull",
        "remote-token",
    )

    for name in ENV_NAMES:
        monkeypatch.delenv(name)
    monkeypatch.setenv("REMOTE_REWARD_ENQUEUE_URL", "http://remote/enqueue")
    with pytest.raises(RemoteRewardError, match="need REMOTE_REWARD_FETCH_URL") as error:
        RemoteRewardClient.from_env()
    assert "REMOTE_REWARD_ENQUEUE_URL (" not in str(error.value)


def test_remote_text_reward(service):
    """The async GRPO reward sends completions in the header and JSON columns as metadata."""
    reward = RemoteTextReward("lower", client_for(service))
    assert reward.__name__ == "remote:lower"
    completions = ["abcd", [{"role": "assistant", "content": "ABcd"}]]
    scores = asyncio.run(
        reward(prompts=["p1", "p2"], completions=completions, solution=["x", "y"], ids=object())
    )
    assert scores == [1.0, 0.5]
    header = service.enqueued[-1]["header"]
    assert header["completions"] == ["abcd", "ABcd"]
    assert header["metadata"] == {"solution": ["x", "y"]}  # the non-JSON column is left out
    assert (header["prompts"], header["media_type"], header["reward_fn"]) == (
        ["p1", "p2"],
        "text",
        {"lower": 1.0},
    )


def test_our_client_reads_a_service_that_answers_as_the_reference():
    """Against a stand-in answering as cosmos-rl's reference service: the reward's own keys (read by `score_key`,
    "a+b" summed), a scoring failure as a 200 with `error`, and a `replica_id` every pull must be routed to."""
    keys = {
        "ocr": {"ocr_reward": 1.0},
        "dance_grpo": {"vq_reward": 1.0, "mq_reward": 2.0, "ta_reward": 3.0, "overall_reward": 6.0},
    }
    images = np.stack([np.full((4, 4, 3), 10), np.full((4, 4, 3), 30)]).astype(np.uint8)
    prompts = ["a", "b"]
    with serve(token=TOKEN, reference_keys=keys, replica_id="replica-7") as double:
        client = client_for(double, poll_timeout=2.0)
        assert client.score("ocr", prompts, images, score_key="ocr_reward") == [10.0, 30.0]
        assert client.score("dance_grpo", prompts, images, score_key="vq_reward+mq_reward") == [30.0, 90.0]
        assert client.score("dance_grpo", prompts, images, score_key="overall_reward") == [60.0, 180.0]
        pulls = double.received(PULL_PATH)
        assert pulls and all(r.headers.get("x-lepton-replica-target") == "replica-7" for r in pulls)
        with pytest.raises(RemoteRewardError, match=r"no 'ocr' score \(it has: ocr_reward\)"):
            client.score("ocr", prompts, images)
        with pytest.raises(RemoteRewardError, match=r"no 'ta' score \(it has: vq_reward, mq_reward"):
            client.score("dance_grpo", prompts, images, score_key="vq_reward+ta")
        double.scoring_error = "prompt count 1 != batch size 2"
        with pytest.raises(
            RemoteRewardError, match="could not score the batch: prompt count 1 != batch size 2"
        ):
            client.score("ocr", prompts, images, score_key="ocr_reward")


def test_videos_travel_channels_first_and_geneval_records_at_the_top_level(service):
    """As the reference service reads them: uint8 B x C x T x H x W (named by `video_layout`) and
    `geneval_tags` / `geneval_includes` beside our per-sample `metadata`."""
    video = np.random.default_rng(0).integers(0, 256, (2, 3, 5, 6, 3), dtype=np.uint8)  # B x T x H x W x C
    records = [
        {"tag": "counting", "include": [{"class": "circle", "count": 2}]},
        {"tag": "colors", "include": [{"class": "square", "count": 1, "color": "red"}]},
    ]
    client_for(service).score("mean", ["a", "b"], video, metadata=records)
    sent = service.enqueued[-1]
    np.testing.assert_array_equal(sent["media"], video.transpose(0, 4, 1, 2, 3))
    assert sent["header"]["media_type"] == "video" and sent["header"]["video_layout"] == "BCTHW"
    assert sent["header"]["geneval_tags"] == ["counting", "colors"]
    assert sent["header"]["geneval_includes"] == [r["include"] for r in records]
    assert sent["header"]["metadata"] == records


def test_a_media_reward_enqueues_at_submit_and_pulls_when_collected(service):
    """`MediaReward.submit` on a remote reward: the batch is on the service before anything waits for it, and the
    collected scores are those of a plain call; a refused batch fails at submit, in one line naming the reward."""
    from cosmos_train.rewards import MediaReward, RewardError
    from cosmos_train.rewards.remote import RemoteMediaReward

    images = np.stack([np.full((4, 4, 3), 10), np.full((4, 4, 3), 30)]).astype(np.uint8)
    reward = MediaReward("bright", 1.0, RemoteMediaReward("bright", client_for(service)))
    collect = reward.submit(images, ["a", "b"])
    assert len(service.enqueued) == 1 and not service.received(PULL_PATH)
    assert collect() == {"bright": [10.0, 30.0]} == reward.scores(images, ["a", "b"])
    assert service.received(PULL_PATH)

    refused = MediaReward("bright", 1.0, RemoteMediaReward("bright", client_for(service, token="wrong")))
    with pytest.raises(RewardError, match=r"^reward 'bright': .*401"):
        refused.submit(images, ["a", "b"])
