"""Load test of the reward service: concurrent loopback clients against `cosmos-train reward-serve`.

    uv run python benchmarks/reward_service.py [--clients 16] [--requests 320] [--batch 4] [--size 64]

Starts the real command in a subprocess on a free loopback port (bearer token, the `brightness` reward, one
scoring thread), then runs `--clients` asyncio clients at once, each a `RemoteRewardClient` (the trainers'
client: enqueue, then poll with back-off from 5 ms up to 50 ms), sharing `--requests` batches of `--batch`
uint8 `--size` x `--size` images. Every batch's images carry values unique to that request, so each result
is checked against the brightness computed here: a lost, duplicated or swapped result fails the run, as does
any uuid answered twice. Latency runs from the enqueue to the scores in hand (both round trips and the
polls); requests/s is whole batches scored per second of wall time. Both processes share this machine's
2 cores, so the figures are a floor for a dedicated scorer host. Writes benchmarks/results/reward_service.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import numpy as np
from _common import write_results

from cosmos_train.rewards.remote import RemoteRewardClient

TOKEN = "benchmark-token"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_service(port: int) -> subprocess.Popen:
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
    service = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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


def batch_for(request: int, batch: int, size: int) -> np.ndarray:
    """`batch` flat images whose grey levels spell out `request` (base 256), so results cannot be swapped."""
    values = [(request >> (8 * (j % 3))) & 255 if j < 3 else (request + j) % 256 for j in range(batch)]
    return np.stack([np.full((size, size, 3), v, np.uint8) for v in values])


async def run_load(base: str, clients: int, requests: int, batch: int, size: int):
    client = RemoteRewardClient(
        f"{base}/api/reward/enqueue",
        f"{base}/api/reward/pull",
        token=TOKEN,
        timeout=30.0,
        backoff=0.005,
        max_backoff=0.05,
        poll_timeout=120.0,
        resubmits=0,
    )
    todo = asyncio.Queue()
    for request in range(requests):
        todo.put_nowait(request)
    results: dict[int, tuple[str, list[float], float]] = {}

    async def worker():
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
    await asyncio.gather(*(worker() for _ in range(clients)))
    return results, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=320)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--size", type=int, default=64)
    args = parser.parse_args()

    port = free_port()
    service = start_service(port)
    try:
        base = f"http://127.0.0.1:{port}"
        asyncio.run(run_load(base, args.clients, args.clients, args.batch, args.size))  # warm-up round
        results, wall = asyncio.run(run_load(base, args.clients, args.requests, args.batch, args.size))
    finally:
        service.send_signal(signal.SIGINT)
        service.wait(20)

    assert sorted(results) == list(range(args.requests)), "a result was lost"
    uuids = [uuid for uuid, _, _ in results.values()]
    assert len(set(uuids)) == len(uuids), "a uuid was answered for two requests"
    for request, (_, scores, _) in results.items():
        expected = [float(image.mean()) / 255 for image in batch_for(request, args.batch, args.size)]
        assert np.allclose(scores, expected, atol=1e-9), f"request {request} got another batch's scores"
    latencies = np.array([latency for _, _, latency in results.values()]) * 1000
    figures = {
        "clients": args.clients,
        "requests": args.requests,
        "batch": args.batch,
        "image_size": args.size,
        "reward": "brightness",
        "wall_s": round(wall, 3),
        "requests_per_s": round(args.requests / wall, 1),
        "images_per_s": round(args.requests * args.batch / wall, 1),
        "latency_ms": {
            "p50": round(float(np.percentile(latencies, 50)), 1),
            "p99": round(float(np.percentile(latencies, 99)), 1),
            "max": round(float(latencies.max()), 1),
        },
        "lost": 0,
        "duplicated": 0,
    }
    print(
        f"{args.requests} requests from {args.clients} clients in {wall:.2f} s: "
        f"{figures['requests_per_s']} requests/s, p50 {figures['latency_ms']['p50']} ms, "
        f"p99 {figures['latency_ms']['p99']} ms; none lost or duplicated"
    )
    write_results("reward_service", figures)


if __name__ == "__main__":
    main()
