"""Client of the remote reward service (`docs/reward-service.md`): enqueue a batch, then poll for its scores.

The service's contract, as trainers in this field already speak it:
- `POST {enqueue_url}`: one JSON line, a newline, then the media as `.npy` bytes; answers `{"uuid"}`.
- `POST {fetch_url}` with form fields `uuid` and `type` (the reward name): HTTP 400 while the result is not
  ready, then `{"scores": {name: [float, ...]}, ...}`.

What this client promises: the bearer token from `REMOTE_REWARD_TOKEN`; a per-request timeout; connection
failures, 5xx and 429 (queue full) answers retried a bounded number of times with exponential back-off; a 4xx (other than
"not ready") or a missing score key fails at once with the service's reason; polling gives up after
`poll_timeout` seconds. It never invents a score.

To score a batch while the next rollout runs, `submit` it (the upload happens now, and a refusal fails now)
and `fetch` its scores later. A result the service no longer knows (HTTP 404: it restarted, or the result
expired) is re-enqueued from the kept request up to `resubmits` times, then fails loudly.

    pending = client.submit("pickscore", prompts, images)   # uint8 B x H x W x C: media_type "image"
    ...                                                      # the next rollout
    scores = client.fetch(pending)
"""

from __future__ import annotations

import asyncio
import functools
import io
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from ..errors import first_line

ENV_PREFIXES = ("REMOTE_REWARD_", "WFM_REWARD_")  # the first wins; some cosmos-rl versions use WFM_REWARD_*


class RemoteRewardError(RuntimeError):
    """The reward service refused a request, lost a result or could not be reached."""


class ResultLost(RemoteRewardError):
    """The service does not know the uuid (HTTP 404): it restarted, or the result expired."""


def media_type_of(media: np.ndarray) -> str:
    """The contract's media type of `media`: uint8 B x H x W x C "image", B x T x H x W x C "video",
    float16 "latent"; anything else is a ValueError."""
    if media.dtype == np.float16:
        return "latent"
    if media.dtype == np.uint8 and media.ndim in (4, 5):
        return "image" if media.ndim == 4 else "video"
    raise ValueError(
        f"media must be uint8 B x H x W x C (image) or B x T x H x W x C (video), or float16 (latent); "
        f"got {media.dtype} {media.shape}"
    )


@dataclass
class PendingScores:
    """A batch enqueued and not fetched yet (`RemoteRewardClient.submit`); keeps its request to re-enqueue."""

    reward: str
    uuid: str
    expected: int
    body: bytes = field(repr=False)


def _env(name: str) -> str | None:
    for prefix in ENV_PREFIXES:
        value = os.environ.get(prefix + name)
        if value:
            return value
    return None


def encode_request(header: dict[str, Any], media: np.ndarray) -> bytes:
    """The enqueue body: the JSON header on one line, a newline, then `media` as `.npy` bytes."""
    buffer = io.BytesIO()
    np.save(buffer, media, allow_pickle=False)
    return json.dumps(header).encode() + b"\n" + buffer.getvalue()


@dataclass
class RemoteRewardClient:
    enqueue_url: str
    fetch_url: str
    token: str | None = None
    timeout: float = 30.0  # seconds per HTTP request
    retries: int = 4  # further attempts after a connection failure or a 5xx
    backoff: float = 0.5  # first wait between attempts or polls, doubled up to max_backoff
    max_backoff: float = 8.0
    poll_timeout: float = 600.0  # seconds to wait for one result
    resubmits: int = 1  # re-enqueues of a batch whose result the service lost (404), then fail

    @classmethod
    def from_env(cls, **settings: Any) -> RemoteRewardClient:
        """A client for `REMOTE_REWARD_ENQUEUE_URL` / `_FETCH_URL` / `_TOKEN` (or their `WFM_REWARD_*` names)."""
        enqueue, fetch = _env("ENQUEUE_URL"), _env("FETCH_URL")
        if not enqueue or not fetch:
            missing = " and ".join(n for n, v in (("ENQUEUE_URL", enqueue), ("FETCH_URL", fetch)) if not v)
            raise RemoteRewardError(
                f"remote rewards need REMOTE_REWARD_{missing.replace(' and ', ' and REMOTE_REWARD_')} "
                "(e.g. http://host:port/api/reward/enqueue and .../pull) and REMOTE_REWARD_TOKEN"
            )
        return cls(enqueue_url=enqueue, fetch_url=fetch, token=_env("TOKEN"), **settings)

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def check_reachable(self) -> None:
        """Fail fast when the service is down or refuses the token, before a run loads its model."""
        import httpx

        where = urlsplit(self.enqueue_url).netloc or self.enqueue_url
        try:
            answer = httpx.get(
                self.enqueue_url,
                headers=self._headers(),
                timeout=min(self.timeout, 10.0),
                verify=_ssl_context(),
            )
        except (httpx.HTTPError, ValueError) as error:
            raise RemoteRewardError(
                f"reward service at {where} is not reachable ({type(error).__name__}: {error}); "
                "start it or fix REMOTE_REWARD_ENQUEUE_URL"
            ) from None
        if answer.status_code in (401, 403):
            raise RemoteRewardError(
                f"reward service at {where} refused the token (HTTP {answer.status_code}); check REMOTE_REWARD_TOKEN"
            )
        if answer.status_code == 404 or answer.status_code >= 500:
            raise RemoteRewardError(
                f"reward service at {self.enqueue_url} answered HTTP {answer.status_code} ({_reason(answer)}); "
                "check REMOTE_REWARD_ENQUEUE_URL and the service"
            )

    # --- the protocol -------------------------------------------------------------------------------

    async def _post(self, client, url: str, **request: Any):
        """POST with bounded retries on connection failures, 5xx and 429; any other answer is returned."""
        import httpx

        wait = self.backoff
        for attempt in range(self.retries + 1):
            try:
                answer = await client.post(url, headers=self._headers(), timeout=self.timeout, **request)
                if answer.status_code < 500 and answer.status_code != 429:  # 429: the queue is full for now
                    return answer
                problem = f"HTTP {answer.status_code}: {_reason(answer)}"
            except httpx.HTTPError as error:
                problem = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
            if attempt == self.retries:
                break
            await asyncio.sleep(wait)
            wait = min(wait * 2, self.max_backoff)
        raise RemoteRewardError(f"{url}: gave up after {self.retries + 1} attempts ({problem})")

    def _body(
        self, reward: str, prompts: list[str], media: np.ndarray, media_type: str | None, fields: dict
    ) -> bytes:
        media_type = media_type or media_type_of(media)
        header = {"prompts": list(prompts), "reward_fn": {reward: 1.0}, "media_type": media_type, **fields}
        return encode_request(header, media)

    async def aenqueue(
        self, reward: str, prompts: list[str], media: np.ndarray, media_type: str | None = None, **fields: Any
    ) -> str:
        """Send one batch to be scored by `reward`; returns the uuid to pull. `media_type` defaults to what
        `media` is (`media_type_of`); `fields` go in the JSON header (`video_infos`, `metadata`, ...)."""
        return await self._enqueue_body(reward, self._body(reward, prompts, media, media_type, fields))

    async def _enqueue_body(self, reward: str, body: bytes) -> str:
        import httpx

        async with httpx.AsyncClient(verify=_ssl_context()) as client:
            answer = await self._post(client, self.enqueue_url, content=body)
        if answer.status_code != 200:
            raise RemoteRewardError(
                f"reward '{reward}': enqueue refused (HTTP {answer.status_code}: {_reason(answer)})"
            )
        uuid = _json(answer, reward).get("uuid")
        if not isinstance(uuid, str):
            raise RemoteRewardError(
                f"reward '{reward}': enqueue answered without a uuid: {answer.text[:200]}"
            )
        return uuid

    async def apull(self, reward: str, uuid: str, expected: int) -> list[float]:
        """Poll for `uuid`'s scores under `reward` until ready or `poll_timeout`."""
        import httpx

        deadline, wait = time.monotonic() + self.poll_timeout, self.backoff
        async with httpx.AsyncClient(verify=_ssl_context()) as client:
            while True:
                answer = await self._post(client, self.fetch_url, data={"uuid": uuid, "type": reward})
                if answer.status_code == 200:
                    return _scores(_json(answer, reward), reward, expected)
                if answer.status_code == 404:
                    raise ResultLost(
                        f"reward '{reward}': the service does not know {uuid} (HTTP 404: {_reason(answer)}); "
                        "it restarted or the result expired"
                    )
                if answer.status_code != 400:  # 400 means "not ready yet"; any other 4xx is final
                    raise RemoteRewardError(
                        f"reward '{reward}': pull of {uuid} refused (HTTP {answer.status_code}: {_reason(answer)})"
                    )
                if time.monotonic() + wait > deadline:
                    raise RemoteRewardError(
                        f"reward '{reward}': no result for {uuid} after {self.poll_timeout:g} s "
                        f"(last answer: {_reason(answer)})"
                    )
                await asyncio.sleep(wait)
                wait = min(wait * 2, self.max_backoff)

    async def asubmit(
        self, reward: str, prompts: list[str], media: np.ndarray, media_type: str | None = None, **fields: Any
    ) -> PendingScores:
        """Enqueue one batch now; `afetch` its scores later."""
        body = self._body(reward, prompts, media, media_type, fields)
        return PendingScores(reward, await self._enqueue_body(reward, body), len(prompts), body)

    async def afetch(self, pending: PendingScores) -> list[float]:
        """Poll for a submitted batch; re-enqueue it (up to `resubmits` times) when the service lost it."""
        for attempt in range(self.resubmits + 1):
            try:
                return await self.apull(pending.reward, pending.uuid, pending.expected)
            except ResultLost as lost:
                if attempt == self.resubmits:
                    raise RemoteRewardError(f"{lost} (re-enqueued {self.resubmits} times)") from None
                pending.uuid = await self._enqueue_body(pending.reward, pending.body)
        raise AssertionError("unreachable")

    async def ascore(
        self, reward: str, prompts: list[str], media: np.ndarray, media_type: str | None = None, **fields: Any
    ) -> list[float]:
        return await self.afetch(await self.asubmit(reward, prompts, media, media_type, **fields))

    def enqueue(
        self, reward: str, prompts: list[str], media: np.ndarray, media_type: str | None = None, **fields: Any
    ) -> str:
        return asyncio.run(self.aenqueue(reward, prompts, media, media_type, **fields))

    def pull(self, reward: str, uuid: str, expected: int) -> list[float]:
        return asyncio.run(self.apull(reward, uuid, expected))

    def submit(
        self, reward: str, prompts: list[str], media: np.ndarray, media_type: str | None = None, **fields: Any
    ) -> PendingScores:
        """Enqueue one batch now (a refusal raises now); `fetch(pending)` waits for its scores."""
        return asyncio.run(self.asubmit(reward, prompts, media, media_type, **fields))

    def fetch(self, pending: PendingScores) -> list[float]:
        return asyncio.run(self.afetch(pending))

    def score(
        self, reward: str, prompts: list[str], media: np.ndarray, media_type: str | None = None, **fields: Any
    ) -> list[float]:
        return asyncio.run(self.ascore(reward, prompts, media, media_type, **fields))


@functools.cache
def _ssl_context():
    """httpx's default TLS context, built once: building it costs ~30 ms of CPU, and each call opens a client."""
    import httpx

    return httpx.create_ssl_context()


def _reason(answer) -> str:
    try:
        body = answer.json()
        detail = body.get("detail") or body.get("error") or body if isinstance(body, dict) else body
    except ValueError:
        detail = answer.text
    return first_line(str(detail), limit=200) or answer.reason_phrase


def _json(answer, reward: str) -> dict[str, Any]:
    try:
        body = answer.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise RemoteRewardError(f"reward '{reward}': the service answered non-JSON: {answer.text[:200]!r}")
    return body


def _scores(body: dict[str, Any], reward: str, expected: int) -> list[float]:
    scores = body.get("scores")
    if not isinstance(scores, dict) or reward not in scores:
        keys = ", ".join(scores) if isinstance(scores, dict) else "none"
        raise RemoteRewardError(
            f"reward '{reward}': the service's result has no '{reward}' score (it has: {keys})"
        )
    values = scores[reward]
    if not isinstance(values, list) or len(values) != expected:
        got = len(values) if isinstance(values, list) else type(values).__name__
        raise RemoteRewardError(f"reward '{reward}': expected {expected} scores, the service returned {got}")
    try:
        return [float(value) for value in values]
    except (TypeError, ValueError):
        raise RemoteRewardError(f"reward '{reward}': non-numeric scores {values[:4]!r}") from None


class RemoteTextReward:
    """An async GRPO reward scored by the service: completions go in the JSON header (`media_type = "text"`),
    with the JSON-serialisable dataset columns as `metadata`."""

    def __init__(self, name: str, client: RemoteRewardClient):
        self.__name__ = f"remote:{name}"
        self.name, self.client = name, client

    async def __call__(self, prompts, completions, **columns: Any) -> list[float]:
        from .text import completion_text

        metadata = {key: value for key, value in columns.items() if _is_json(value)}
        return await self.client.ascore(
            self.name,
            [completion_text(p) if not isinstance(p, str) else p for p in prompts],
            np.zeros((0,), dtype=np.uint8),
            "text",
            completions=[completion_text(c) for c in completions],
            metadata=metadata,
        )


class RemoteMediaReward:
    """An image/video reward scored by the service (`build_media_rewards`' `remote:<name>`):
    `reward(media, prompts, metadata)`, the media type from the array, per-sample metadata in the header."""

    def __init__(self, name: str, client: RemoteRewardClient):
        self.__name__ = f"remote:{name}"
        self.name, self.client = name, client

    def __call__(
        self, media: np.ndarray, prompts: list[str], metadata: list[dict] | None = None
    ) -> list[float]:
        fields = {"metadata": list(metadata)} if metadata else {}
        return self.client.score(self.name, list(prompts), media, **fields)


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True
