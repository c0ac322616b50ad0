"""The reward queue and its results on Redis (`reward-serve --store redis://host:port/db`): several replicas, on
several machines, score one queue, and any replica answers any pull.

Keys, under `prefix`:
- `queue`: the uuids waiting, oldest on the right;
- `job:<uuid>`: the batch, in our own format (a JSON line, then `.npy` media read with `allow_pickle=False`);
- `result:<uuid>`: JSON `{rewards, input_info, scores, error, duration}`, pending (scores and error null) from the
  enqueue until scored, then kept `result_ttl` seconds;
- `processing:<replica>`: the uuids a replica is scoring; `lease:<uuid>`: its owner, alive while the replica's
  heartbeat renews it.

Claiming and completing are Lua scripts, so each is atomic: a claim moves a uuid from the queue to the replica's
processing list and leases it; a completion stores the result only if the uuid was still on that list. A replica
that dies mid-batch stops renewing its leases, and every replica's reaper puts a leaseless job back at the head of
the queue, where another replica claims it: nothing is lost, and each job completes exactly once.
"""

from __future__ import annotations

import io
import json
import os
import socket
import threading
import time
import uuid as uuidlib
from dataclasses import asdict
from typing import Any

import numpy as np

from .app import (
    Batch,
    BatchResult,
    LatentDecoder,
    MediaRewardFunction,
    ServiceSettings,
    _refuse,
    pull_answer,
    score_batch,
)

_CLAIM = """
local id = redis.call('RPOP', KEYS[1])
if id then
  redis.call('LPUSH', KEYS[2], id)
  redis.call('SET', ARGV[1] .. id, ARGV[2], 'PX', ARGV[3])
end
return id
"""
_COMPLETE = """
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 1 then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
  redis.call('DEL', KEYS[3], KEYS[4])
  return 1
end
return 0
"""
_REAP = """
local moved = 0
for _, id in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  if redis.call('EXISTS', ARGV[1] .. id) == 0 then
    redis.call('LREM', KEYS[1], 1, id)
    redis.call('RPUSH', KEYS[2], id)
    moved = moved + 1
  end
end
return moved
"""
PENDING_TTL = 24 * 3600.0  # seconds a never-scored job's pending record lives (a lost store, not a lost job)


def batch_bytes(batch: Batch) -> bytes:
    header = {k: getattr(batch, k) for k in ("prompts", "rewards", "metadata", "input_info", "latent")}
    buffer = io.BytesIO()
    np.save(buffer, batch.media, allow_pickle=False)
    return json.dumps(header).encode() + b"\n" + buffer.getvalue()


def batch_from_bytes(data: bytes) -> Batch:
    line, _, media = data.partition(b"\n")
    header = json.loads(line)
    return Batch(
        header["prompts"],
        header["rewards"],
        np.load(io.BytesIO(media), allow_pickle=False),
        header["metadata"],
        header["input_info"],
        latent=header["latent"],
    )


class RedisRewardQueue:
    """`submit(batch) -> uuid`, `result(uuid, reward)`, `close()`, as `RewardQueue`, with the queue and results on
    Redis; `settings.workers` threads of this replica claim jobs from the shared queue."""

    def __init__(
        self,
        url: str,
        rewards: dict[str, MediaRewardFunction],
        settings: ServiceSettings,
        decoder: LatentDecoder | None = None,
        replica: str | None = None,
        prefix: str = "cosmos_train:reward:",
        poll: float = 0.02,
    ):
        import redis

        self.rewards, self.settings, self.decoder, self.poll = rewards, settings, decoder, poll
        self.replica = replica or f"{socket.gethostname()}-{os.getpid()}-{uuidlib.uuid4().hex[:6]}"
        self.prefix = prefix
        self.redis = redis.Redis.from_url(url)
        try:
            self.redis.ping()
        except redis.RedisError as error:
            raise ConnectionError(f"Redis at {url} is not reachable: {error}") from None
        self._claim = self.redis.register_script(_CLAIM)
        self._complete = self.redis.register_script(_COMPLETE)
        self._reap = self.redis.register_script(_REAP)
        self.lease_ms = int(settings.lease * 1000)
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._work, name=f"reward-{i}", daemon=True)
            for i in range(settings.workers)
        ]
        self._threads.append(threading.Thread(target=self._reap_forever, name="reward-reaper", daemon=True))
        for thread in self._threads:
            thread.start()

    def _key(self, kind: str, name: str = "") -> str:
        return f"{self.prefix}{kind}{':' + name if name else ''}"

    # --- the routes' side ---------------------------------------------------------------------------------

    def submit(self, batch: Batch) -> str:
        waiting = self.redis.llen(self._key("queue"))
        if waiting >= self.settings.max_queue:
            raise _refuse(
                429, f"the queue is full: {waiting} batches waiting (max_queue = {self.settings.max_queue})"
            )
        key = str(uuidlib.uuid4())
        pending = json.dumps(asdict(BatchResult(batch.rewards, batch.input_info)))
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(self._key("job", key), batch_bytes(batch), px=int(PENDING_TTL * 1000))
            pipe.set(self._key("result", key), pending, px=int(PENDING_TTL * 1000))
            pipe.lpush(self._key("queue"), key)
            pipe.execute()
        return key

    def result(self, key: str, reward: str) -> dict[str, Any]:
        stored = self.redis.get(self._key("result", key))
        return pull_answer(
            key, reward, BatchResult(**json.loads(stored)) if stored else None, self.settings.result_ttl
        )

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        self.redis.close()

    # --- this replica's workers ---------------------------------------------------------------------------

    def _work(self) -> None:
        processing = self._key("processing", self.replica)
        while not self._stop.is_set():
            claimed = self._claim(
                keys=[self._key("queue"), processing],
                args=[self._key("lease") + ":", self.replica, self.lease_ms],
            )
            if claimed is None:
                time.sleep(self.poll)
                continue
            key = claimed.decode()
            data = self.redis.get(self._key("job", key))
            stored = self.redis.get(self._key("result", key))
            if data is None or stored is None:  # expired while queued: nothing left to score or to answer
                self.redis.lrem(processing, 1, key)
                continue
            result = BatchResult(**json.loads(stored))
            alive = threading.Event()
            heartbeat = threading.Thread(target=self._renew, args=(key, alive), daemon=True)
            heartbeat.start()
            start = time.perf_counter()
            try:
                result.scores, result.error = score_batch(batch_from_bytes(data), self.rewards, self.decoder)
            finally:
                alive.set()
                heartbeat.join()
            result.duration = time.perf_counter() - start
            self._complete(
                keys=[processing, self._key("result", key), self._key("job", key), self._key("lease", key)],
                args=[key, json.dumps(asdict(result)), int(self.settings.result_ttl * 1000)],
            )

    def _renew(self, key: str, done: threading.Event) -> None:
        while not done.wait(self.settings.lease / 3):
            self.redis.pexpire(self._key("lease", key), self.lease_ms)

    def _reap_forever(self) -> None:
        """Every half lease: jobs on any replica's processing list whose lease expired go back to the queue."""
        while not self._stop.wait(self.settings.lease / 2):
            for processing in self.redis.scan_iter(match=self._key("processing", "*")):
                self._reap(keys=[processing, self._key("queue")], args=[self._key("lease") + ":"])
