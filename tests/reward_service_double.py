"""A test double of the remote reward service contract (`docs/reward-service.md`), served over real HTTP.

Not the real service (that comes later): it scores text completions with a cheap function and other media
by their per-item mean, so clients can be tested end to end. Usage::

    with serve(token="secret", not_ready_polls=2) as service:
        client = RemoteRewardClient(service.enqueue_url, service.fetch_url, token="secret")
        ...
        service.requests  # every request received, in order
        service.enqueued  # every parsed enqueue: {"header": dict, "media": np.ndarray}

Knobs are plain attributes and may be changed while the service runs.
"""

from __future__ import annotations

import contextlib
import io
import json
import socket
import string
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import numpy as np
import uvicorn
from fastapi import FastAPI, HTTPException, Request

ENQUEUE_PATH, PULL_PATH = "/api/reward/enqueue", "/api/reward/pull"


def lowercase_fraction(completion: str) -> float:
    """The default text score: the fraction of characters that are lowercase ASCII letters."""
    return sum(c in string.ascii_lowercase for c in completion) / len(completion) if completion else 0.0


@dataclass
class Received:
    """One request as the double saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class RewardServiceDouble:
    """The service's state, knobs and records; `serve()` runs it."""

    token: str | None = "test-token"  # None: accept any request
    not_ready_polls: int = 0  # answer 400 "not ready" to this many pulls of each uuid
    fail_with_5xx: int = 0  # answer 503 to this many requests (of any kind) before working
    drop_score_key: bool = False  # answer scores under a wrong key
    # As the reference service answers: a reward's own keys (reward -> {key: multiplier of the score}), a scoring
    # failure as a 200 with "error" and null scores, and a replica id that pulls must name in their header.
    reference_keys: dict[str, dict[str, float]] = field(default_factory=dict)
    scoring_error: str | None = None
    replica_id: str | None = None
    score_text: Callable[[str], float] = lowercase_fraction
    max_body_bytes: int = 64 << 20
    base_url: str = ""
    requests: list[Received] = field(default_factory=list)
    enqueued: list[dict[str, Any]] = field(default_factory=list)
    results: dict[str, list[float]] = field(default_factory=dict)
    polls: dict[str, int] = field(default_factory=dict)

    @property
    def enqueue_url(self) -> str:
        return self.base_url + ENQUEUE_PATH

    @property
    def fetch_url(self) -> str:
        return self.base_url + PULL_PATH

    def received(self, path: str) -> list[Received]:
        """The requests received on `path` (e.g. `PULL_PATH`)."""
        return [r for r in self.requests if r.path == path]

    async def _admit(self, request: Request) -> bytes:
        """Record the request, then apply the 5xx knob, the token check and the size bound."""
        body = await request.body()
        self.requests.append(Received(request.method, request.url.path, dict(request.headers), body))
        if self.fail_with_5xx > 0:
            self.fail_with_5xx -= 1
            raise HTTPException(503, "injected failure")
        if self.token is not None and request.headers.get("authorization") != f"Bearer {self.token}":
            raise HTTPException(401, "missing or wrong bearer token")
        if len(body) > self.max_body_bytes:
            raise HTTPException(413, "body too large")
        return body

    def _score(self, header: dict[str, Any], media: np.ndarray) -> list[float]:
        if header.get("media_type") == "text":
            return [float(self.score_text(c)) for c in header.get("completions", [])]
        return [float(np.mean(item)) for item in media]

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.get(ENQUEUE_PATH)
        async def probe(request: Request):
            await self._admit(request)
            raise HTTPException(405, "use POST")

        @app.post(ENQUEUE_PATH)
        async def enqueue(request: Request):
            line, _, npy = (await self._admit(request)).partition(b"\n")
            try:
                header = json.loads(line)
                media = np.load(io.BytesIO(npy), allow_pickle=False)
            except ValueError as error:  # JSONDecodeError, or a bad/pickled .npy
                raise HTTPException(400, f"bad body: {error}") from None
            if not isinstance(header, dict) or not isinstance(header.get("prompts"), list):
                raise HTTPException(400, "the JSON header needs a 'prompts' list")
            key = str(uuidlib.uuid4())
            self.enqueued.append({"header": header, "media": media})
            self.results[key] = self._score(header, media)
            return {"uuid": key, **({"replica_id": self.replica_id} if self.replica_id else {})}

        @app.post(PULL_PATH)
        async def pull(request: Request):
            body = await self._admit(request)
            if request.headers.get("content-type", "").startswith("application/json"):
                fields = json.loads(body)
            else:
                fields = {k: v[0] for k, v in parse_qs(body.decode()).items()}
            key, name = fields.get("uuid"), fields.get("type")
            if not key or not name:
                raise HTTPException(422, "form fields 'uuid' and 'type' are required")
            if key not in self.results:
                raise HTTPException(404, f"unknown uuid {key}")
            self.polls[key] = self.polls.get(key, 0) + 1
            if self.polls[key] <= self.not_ready_polls:
                raise HTTPException(400, "not ready")
            if self.replica_id and request.headers.get("x-lepton-replica-target") != self.replica_id:
                raise HTTPException(400, f"Not found scores for {key}")  # another replica: never ready there
            if self.scoring_error:
                return {"error": self.scoring_error, "scores": None, "input_info": {}, "type": name}
            if name in self.reference_keys:
                scores = {k: [m * v for v in self.results[key]] for k, m in self.reference_keys[name].items()}
            else:
                scores = {f"not-{name}" if self.drop_score_key else name: self.results[key]}
            return {"scores": scores, "input_info": {}, "duration": 0.0, "type": name}

        return app


@contextlib.contextmanager
def serve(**knobs: Any) -> Iterator[RewardServiceDouble]:
    """Run a `RewardServiceDouble(**knobs)` with uvicorn on 127.0.0.1 (a free port) in a background thread."""
    service = RewardServiceDouble(**knobs)
    # IPPROTO_TCP named, so asyncio sets TCP_NODELAY (else keep-alive answers wait ~40 ms for a delayed ACK).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    service.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(service.app(), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the reward service double did not start")
            time.sleep(0.01)
        yield service
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
