"""Reward-service replicas sharing one queue and their results on a real `redis-server` (Debian's package, started
here on a loopback port): a client enqueues on one replica and pulls from another, and a replica killed mid-batch
leaves its job to another replica, which completes it: nothing lost, nothing completed twice."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from cosmos_train.rewards import RewardSpec, build_media_rewards
from cosmos_train.rewards.remote import RemoteRewardClient
from cosmos_train.service.app import ENQUEUE_PATH, HEALTH_PATH, PULL_PATH, ServiceSettings, serving

TOKEN = "s3cret"
REWARD = "counting_reward:counted_brightness"
TESTS = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip(
            "redis-server is not installed (Debian: apt-get install redis-server; scripts/test.sh does)"
        )
    port, folder = free_port(), tmp_path_factory.mktemp("redis")
    server = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            folder,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    import redis

    client = redis.Redis(port=port)
    deadline = time.monotonic() + 20
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            assert server.poll() is None and time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0"
    server.kill()
    server.wait(10)


@pytest.fixture
def store(redis_url):
    """The Redis store, emptied for each test."""
    import redis

    redis.Redis.from_url(redis_url).flushdb()
    return redis_url


def counted(log: Path, seconds: float = 0.0) -> dict:
    (reward,) = build_media_rewards([RewardSpec(REWARD, 1.0, {"log": str(log), "seconds": seconds})])
    return {REWARD: reward}


def finished(log: Path) -> list[tuple[str, int]]:
    """(first prompt, pid) of each batch scored to the end, in order."""
    lines = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
    return [(prompt, int(pid)) for event, prompt, pid in lines if event == "finish"]


def batch(index: int) -> np.ndarray:
    return np.full((2, 4, 4, 3), index * 10, dtype=np.uint8)


def test_a_client_enqueues_on_one_replica_and_pulls_from_another(store, tmp_path):
    log = tmp_path / "scored.log"
    settings = ServiceSettings(token=TOKEN, store=store, lease=2.0)
    with (
        serving(dataclasses.replace(settings, replica="a"), counted(log)) as a,
        serving(dataclasses.replace(settings, replica="b"), counted(log)) as b,
    ):
        client = RemoteRewardClient(a + ENQUEUE_PATH, b + PULL_PATH, token=TOKEN, timeout=5.0, backoff=0.02)
        pending = [client.submit(REWARD, [f"p{i}", "x"], batch(i)) for i in range(12)]
        scores = [client.fetch(p) for p in pending]
        # And the other way round, answered by either replica.
        back = RemoteRewardClient(b + ENQUEUE_PATH, a + PULL_PATH, token=TOKEN, timeout=5.0, backoff=0.02)
        assert back.score(REWARD, ["q", "x"], batch(3)) == pytest.approx([30 / 255] * 2)
    assert scores == [pytest.approx([i * 10 / 255] * 2) for i in range(12)]
    done = finished(log)
    assert sorted(prompt for prompt, _ in done) == sorted([f"p{i}" for i in range(12)] + ["q"])  # each once
    import redis

    leftover = redis.Redis.from_url(store)
    assert leftover.llen("cosmos_train:reward:queue") == 0
    assert not list(leftover.scan_iter("cosmos_train:reward:job:*"))  # scored jobs leave no batch behind


def serve_in_a_process(store: str, log: Path, port: int, replica: str, seconds: float) -> subprocess.Popen:
    (log.parent / f"{replica}.toml").write_text(
        f'[rewards]\n"{REWARD}" = {{ log = "{log}", seconds = {seconds} }}\n'
    )
    command = [sys.executable, "-m", "cosmos_train", "reward-serve", "--port", str(port)]
    command += ["--rewards", "brightness", "--rewards-config", str(log.parent / f"{replica}.toml")]
    command += ["--store", store, "--lease-seconds", "1", "--replica-id", replica]
    env = {**os.environ, "REMOTE_REWARD_TOKEN": TOKEN, "PYTHONPATH": str(TESTS), "OMP_NUM_THREADS": "1"}
    errors = open(log.parent / f"{replica}.stderr", "ab")  # noqa: SIM115
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=errors)
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, (log.parent / f"{replica}.stderr").read_text()
        try:
            if httpx.get(f"http://127.0.0.1:{port}{HEALTH_PATH}", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            assert time.monotonic() < deadline, "reward-serve did not start"
            time.sleep(0.05)


def enqueue_and_wait_for_scoring(port: int, log: Path, prompt: str, value: int):
    """Enqueue one batch on the replica at `port`; return it once that replica has started scoring it."""
    base = f"http://127.0.0.1:{port}"
    client = RemoteRewardClient(base + ENQUEUE_PATH, base + PULL_PATH, token=TOKEN, timeout=5.0)
    pending = client.submit(REWARD, [prompt, "x"], batch(value))
    deadline = time.monotonic() + 30
    while f"start {prompt}" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, "the first replica never started scoring"
        time.sleep(0.05)
    return pending


@contextlib.contextmanager
def second_replica(store: str, log: Path):
    """Another replica of the same store, in this process: its base URL and a client of it."""
    settings = ServiceSettings(token=TOKEN, store=store, lease=1.0, replica="second")
    with serving(settings, counted(log)) as base:
        yield (
            base,
            RemoteRewardClient(
                base + ENQUEUE_PATH, base + PULL_PATH, token=TOKEN, timeout=5.0, backoff=0.1, poll_timeout=30
            ),
        )


def test_a_replica_killed_mid_batch_leaves_its_job_to_another(store, tmp_path):
    log, port = tmp_path / "scored.log", free_port()
    first = serve_in_a_process(store, log, port, "first", seconds=30.0)
    try:
        pending = enqueue_and_wait_for_scoring(port, log, "killed", 5)
        first.send_signal(signal.SIGKILL)  # mid-batch: its lease stops being renewed
        first.wait(10)
        with second_replica(store, log) as (_, other):
            assert other.pull(REWARD, pending.uuid, 2) == pytest.approx([50 / 255] * 2)
    finally:
        if first.poll() is None:
            first.kill()
    starts = [line for line in log.read_text().splitlines() if line.startswith("start killed")]
    assert len(starts) == 2 and str(first.pid) in starts[0]  # begun by the killed replica, then taken over
    assert finished(log) == [("killed", os.getpid())]  # completed once, by the replica in this process


def test_an_unreachable_store_is_one_line():
    command = [sys.executable, "-m", "cosmos_train", "reward-serve", "--no-auth", "--port", str(free_port())]
    answer = subprocess.run(
        [*command, "--store", f"redis://127.0.0.1:{free_port()}/0"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert answer.returncode == 2
    assert answer.stderr.strip().splitlines()[-1].startswith("error: Redis at redis://127.0.0.1:")
    assert "is not reachable" in answer.stderr and "Traceback" not in answer.stderr


def test_a_replica_stalled_past_its_lease_cannot_complete_the_job_again(store, tmp_path):
    """SIGSTOP mid-batch: another replica takes the job over and completes it; when the stalled one resumes and
    finishes, its late result is discarded (the job completes once)."""
    log, port = tmp_path / "scored.log", free_port()
    stalled = serve_in_a_process(store, log, port, "stalled", seconds=2.0)
    try:
        pending = enqueue_and_wait_for_scoring(port, log, "stalled", 7)
        deadline = time.monotonic() + 60
        stalled.send_signal(signal.SIGSTOP)
        with second_replica(store, log) as (b, other):
            assert other.pull(REWARD, pending.uuid, 2) == pytest.approx([70 / 255] * 2)
            stalled.send_signal(signal.SIGCONT)
            while len(finished(log)) < 2:  # the stalled replica finishes its sleep and tries to complete
                assert time.monotonic() < deadline, "the stalled replica never finished"
                time.sleep(0.05)
            time.sleep(0.5)
            answer = httpx.post(
                b + PULL_PATH,
                data={"uuid": pending.uuid, "type": REWARD},
                headers={"Authorization": f"Bearer {TOKEN}"},
            ).json()
    finally:
        stalled.kill()
        stalled.wait(10)
    assert finished(log) == [("stalled", os.getpid()), ("stalled", stalled.pid)]
    assert answer["duration"] < 1.0  # the taking-over replica's result stands, not the 2 s one that came late
