"""Load test of the reward service: concurrent loopback clients against `cosmos-train reward-serve`, with its
results in memory (one replica, the baseline) and on Redis (one replica, then two sharing one queue).

    uv run python benchmarks/reward_service.py [--clients 16] [--requests 320] [--batch 4] [--size 64] [--rounds 3]

Starts the real command in subprocesses on free loopback ports (bearer token, the `brightness` reward, one
scoring thread each; for Redis, a `redis-server` of its own), then runs `--clients` asyncio clients at once, each a
`RemoteRewardClient` (the trainers' client: enqueue, then poll with back-off from 5 ms up to 50 ms), sharing
`--requests` batches of `--batch` uint8 `--size` x `--size` images. With two replicas, every client enqueues on
one and pulls from the other. Every batch's images carry values unique to that request, so each result is
checked against the brightness computed here: a lost, duplicated or swapped result fails the run, as does any uuid
answered twice. Latency runs from the enqueue to the scores in hand (both round trips and the polls); requests/s
is whole batches scored per second of wall time. The setups are interleaved over `--rounds` rounds; the medians
and the median ratio to the in-memory baseline are reported. Every process shares this machine's 2 cores, so the
figures are a floor for dedicated scorer hosts, and a second replica adds no cores here. Writes
benchmarks/results/reward_service.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import httpx
import numpy as np
from _common import median, write_results

from cosmos_train.rewards.remote import RemoteRewardClient

TOKEN = "benchmark-token"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_service(port: int, store: str = "memory") -> subprocess.Popen:
    env = {**os.environ, "REMOTE_REWARD_TOKEN": TOKEN, "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        "-m",
        "cosmos_train",
        "reward-serve",
        "--port",
        str(port),
        "--rewards",
        "brightness",
    ]
    service = subprocess.Popen(
        [*command, "--store", store], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if service.poll() is not None:
            raise SystemExit("reward-serve exited at start")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return service
        except httpx.HTTPError:
            time.sleep(0.05)
    service.kill()
    raise SystemExit("reward-serve did not start")


def start_redis() -> tuple[subprocess.Popen, str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed (Debian: apt-get install redis-server)")
    port = free_port()
    server = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    import redis

    deadline = time.monotonic() + 20
    while True:
        try:
            redis.Redis.from_url(url).ping()
            return server, url
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise SystemExit("redis-server did not start") from None
            time.sleep(0.05)


def batch_for(request: int, batch: int, size: int) -> np.ndarray:
    """`batch` flat images whose grey levels spell out `request` (base 256), so results cannot be swapped."""
    values = [(request >> (8 * (j % 3))) & 255 if j < 3 else (request + j) % 256 for j in range(batch)]
    return np.stack([np.full((size, size, 3), v, np.uint8) for v in values])


async def run_load(bases: list[str], clients: int, requests: int, batch: int, size: int):
    """Client i enqueues on replica i and pulls from replica i + 1 (the same one when there is one)."""
    routes = [
        RemoteRewardClient(
            f"{bases[i]}/api/reward/enqueue",
            f"{bases[(i + 1) % len(bases)]}/api/reward/pull",
            token=TOKEN,
            timeout=30.0,
            backoff=0.005,
            max_backoff=0.05,
            poll_timeout=120.0,
            resubmits=0,
        )
        for i in range(len(bases))
    ]
    todo = asyncio.Queue()
    for request in range(requests):
        todo.put_nowait(request)
    results: dict[int, tuple[str, list[float], float]] = {}

    async def worker(client):
        while True:
            try:
                request = todo.get_nowait()
            except asyncio.QueueEmpty:
                return
            media = batch_for(request, batch, size)
            start = time.perf_counter()
            pending = await client.asubmit("brightness", [f"request {request}"] * batch, media)
            scores = await client.afetch(pending)
            assert request not in results, f"request {request} answered twice"
            results[request] = (pending.uuid, scores, time.perf_counter() - start)

    start = time.perf_counter()
    await asyncio.gather(*(worker(routes[i % len(routes)]) for i in range(clients)))
    return results, time.perf_counter() - start


def measure(setup: str, args) -> dict:
    """One setup's load run on fresh processes: its requests/s and latencies, every result checked."""
    store, replicas = {"memory": ("memory", 1), "redis_1": ("redis", 1), "redis_2": ("redis", 2)}[setup]
    processes = []
    try:
        if store == "redis":
            server, store = start_redis()
            processes.append(server)
        ports = [free_port() for _ in range(replicas)]
        processes += [start_service(port, store) for port in ports]
        bases = [f"http://127.0.0.1:{port}" for port in ports]
        asyncio.run(run_load(bases, args.clients, args.clients, args.batch, args.size))  # warm-up round
        results, wall = asyncio.run(run_load(bases, args.clients, args.requests, args.batch, args.size))
    finally:
        for process in reversed(processes):
            process.send_signal(signal.SIGINT)
            process.wait(20)
    assert sorted(results) == list(range(args.requests)), f"{setup}: a result was lost"
    uuids = [uuid for uuid, _, _ in results.values()]
    assert len(set(uuids)) == len(uuids), f"{setup}: a uuid was answered for two requests"
    for request, (_, scores, _) in results.items():
        expected = [float(image.mean()) / 255 for image in batch_for(request, args.batch, args.size)]
        assert np.allclose(scores, expected, atol=1e-9), (
            f"{setup}: request {request} got another batch's scores"
        )
    latencies = np.array([latency for _, _, latency in results.values()]) * 1000
    return {
        "wall_s": round(wall, 3),
        "requests_per_s": round(args.requests / wall, 1),
        "p50_ms": round(float(np.percentile(latencies, 50)), 1),
        "p99_ms": round(float(np.percentile(latencies, 99)), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=320)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    setups = ["memory", "redis_1", "redis_2"]
    rounds = [{setup: measure(setup, args) for setup in setups} for _ in range(args.rounds)]
    figures = {
        "clients": args.clients,
        "requests": args.requests,
        "batch": args.batch,
        "image_size": args.size,
        "reward": "brightness",
        "rounds": rounds,
        "lost": 0,
        "duplicated": 0,
    }
    for setup in setups:
        runs = [r[setup] for r in rounds]
        figures[setup] = {
            key: median([run[key] for run in runs]) for key in ("requests_per_s", "p50_ms", "p99_ms")
        }
        figures[setup]["throughput_ratio_to_memory"] = round(
            median([r[setup]["requests_per_s"] / r["memory"]["requests_per_s"] for r in rounds]), 3
        )
        print(
            f"{setup}: {figures[setup]['requests_per_s']} requests/s (x{figures[setup]['throughput_ratio_to_memory']} "
            f"of memory), p50 {figures[setup]['p50_ms']} ms, p99 {figures[setup]['p99_ms']} ms"
        )
    print(
        f"{args.requests} requests from {args.clients} clients per run, {args.rounds} rounds; none lost or duplicated"
    )
    write_results("reward_service", figures)


if __name__ == "__main__":
    main()
