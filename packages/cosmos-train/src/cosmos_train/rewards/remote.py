"""Client of the remote reward service (`docs/reward-service.md`): enqueue a batch, then poll for its scores.

The service's contract, as trainers in this field already speak it:
- `POST {enqueue_url}`: one JSON line, a newline, then the media as `.npy` bytes; answers `{"uuid"}`.
- `POST {fetch_url}` with form fields `uuid` and `type` (the reward name): HTTP 400 while the result is not
  ready, then `{"scores": {key: [float, ...], ...}, ...}`. The key read is the reward's name, or the `score_key`
  a reward is configured with (`"a+b"`: the sum of two keys), as cosmos-rl's clients read the reference service.
- Videos travel as the reference service lays them out (uint8 B x C x T x H x W, `video_layout` "BCTHW"); GenEval
  records (`tag`, `include`) also as the reference's top-level `geneval_tags` / `geneval_includes`; a
  `replica_id` in the enqueue answer routes the pull (`X-Lepton-Replica-Target`), as on multi-replica services.

What this client promises: the bearer token from `REMOTE_REWARD_TOKEN`; a per-request timeout; connection
failures, 5xx and 429 (queue full) answers retried a bounded number of times with exponential back-off; a 4xx (other than
"not ready"), a scoring error (a 200 with `error`) or a missing score key fails at once with the service's reason; polling gives up after
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

from ..errors import RemoteRewardError, first_line

ENV_PREFIXES = ("REMOTE_REWARD_", "WFM_REWARD_")  # the first wins; some cosmos-rl versions use WFM_REWARD_*
REPLICA_HEADER = "X-Lepton-Replica-Target"  # routes a pull to the replica named by the enqueue's `replica_id`


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
    replica: str | None = None  # the replica that holds the result, when the service names one
    score_key: str | None = None


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

    def _headers(self, replica: str | None = None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        if replica:
            headers[REPLICA_HEADER] = replica
        return headers

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

    async def _post(self, client, url: str, replica: str | None = None, **request: Any):
        """POST with bounded retries on connection failures, 5xx and 429; any other answer is returned."""
        import httpx

        wait = self.backoff
        for attempt in range(self.retries + 1):
            try:
                answer = await client.post(
                    url, headers=self._headers(replica), timeout=self.timeout, **request
                )
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
        if media_type == "video" and media.dtype == np.uint8:  # the reference service's layout
            media = np.ascontiguousarray(media.transpose(0, 4, 1, 2, 3))
            header["video_layout"] = "BCTHW"
        records = fields.get("metadata")
        if (
            isinstance(records, list)
            and records
            and all(isinstance(r, dict) and "include" in r for r in records)
        ):
            header["geneval_includes"] = [r["include"] for r in records]  # the reference reads GenEval here
            if all("tag" in r for r in records):
                header["geneval_tags"] = [r["tag"] for r in records]
        return encode_request(header, media)

    async def aenqueue(
        self, reward: str, prompts: list[str], media: np.ndarray, media_type: str | None = None, **fields: Any
    ) -> str:
        """Send one batch to be scored by `reward`; returns the uuid to pull. `media_type` defaults to what
        `media` is (`media_type_of`); `fields` go in the JSON header (`video_infos`, `metadata`, ...)."""
        return (await self._enqueue_body(reward, self._body(reward, prompts, media, media_type, fields)))[0]

    async def _enqueue_body(self, reward: str, body: bytes) -> tuple[str, str | None]:
        """The uuid, and the replica that will hold the result when the service names one."""
        import httpx

        async with httpx.AsyncClient(verify=_ssl_context()) as client:
            answer = await self._post(client, self.enqueue_url, content=body)
        if answer.status_code != 200:
            raise RemoteRewardError(
                f"reward '{reward}': enqueue refused (HTTP {answer.status_code}: {_reason(answer)})"
            )
        enqueued = _json(answer, reward)
        uuid, replica = enqueued.get("uuid"), enqueued.get("replica_id")
        if not isinstance(uuid, str):
            raise RemoteRewardError(
                f"reward '{reward}': enqueue answered without a uuid: {answer.text[:200]}"
            )
        return uuid, str(replica) if replica is not None else None

    async def apull(
        self,
        reward: str,
        uuid: str,
        expected: int,
        score_key: str | None = None,
        replica: str | None = None,
    ) -> list[float]:
        """Poll for `uuid`'s scores under `reward` until ready or `poll_timeout`; read `score_key` (default: the
        reward's name; "a+b" sums two keys) from the replica that holds them."""
        import httpx

        deadline, wait = time.monotonic() + self.poll_timeout, self.backoff
        async with httpx.AsyncClient(verify=_ssl_context()) as client:
            while True:
                answer = await self._post(
                    client, self.fetch_url, replica, data={"uuid": uuid, "type": reward}
                )
                if answer.status_code == 200:
                    return _scores(_json(answer, reward), reward, expected, score_key)
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
        self,
        reward: str,
        prompts: list[str],
        media: np.ndarray,
        media_type: str | None = None,
        score_key: str | None = None,
        **fields: Any,
    ) -> PendingScores:
        """Enqueue one batch now; `afetch` its scores (under `score_key`, default the reward's name) later."""
        body = self._body(reward, prompts, media, media_type, fields)
        uuid, replica = await self._enqueue_body(reward, body)
        return PendingScores(reward, uuid, len(prompts), body, replica, score_key)

    async def afetch(self, pending: PendingScores) -> list[float]:
        """Poll for a submitted batch; re-enqueue it (up to `resubmits` times) when the service lost it."""
        for attempt in range(self.resubmits + 1):
            try:
                return await self.apull(
                    pending.reward, pending.uuid, pending.expected, pending.score_key, pending.replica
                )
            except ResultLost as lost:
                if attempt == self.resubmits:
                    raise RemoteRewardError(f"{lost} (re-enqueued {self.resubmits} times)") from None
                pending.uuid, pending.replica = await self._enqueue_body(pending.reward, pending.body)
        raise AssertionError("unreachable")

    async def ascore(
        self, reward: str, prompts: list[str], media: np.ndarray, media_type: str | None = None, **fields: Any
    ) -> list[float]:
        return await self.afetch(await self.asubmit(reward, prompts, media, media_type, **fields))

    def enqueue(
        self, reward: str, prompts: list[str], media: np.ndarray, media_type: str | None = None, **fields: Any
    ) -> str:
        return asyncio.run(self.aenqueue(reward, prompts, media, media_type, **fields))

    def pull(self, reward: str, uuid: str, expected: int, score_key: str | None = None) -> list[float]:
        return asyncio.run(self.apull(reward, uuid, expected, score_key))

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


def _scores(body: dict[str, Any], reward: str, expected: int, score_key: str | None = None) -> list[float]:
    """The values under `score_key` (default `reward`), or the sum of the keys of "a+b", as cosmos-rl's clients
    read them; a scoring error, a missing key or a wrong count fails with the service's reason."""
    if body.get("error"):
        raise RemoteRewardError(f"reward '{reward}': the service could not score the batch: {body['error']}")
    scores, key = body.get("scores"), score_key or reward
    names = [key] if isinstance(scores, dict) and key in scores else key.split("+")
    missing = [name for name in names if not isinstance(scores, dict) or name not in scores]
    if missing:
        keys = ", ".join(scores) if isinstance(scores, dict) else "none"
        raise RemoteRewardError(
            f"reward '{reward}': the service's result has no '{missing[0]}' score (it has: {keys})"
        )
    total = np.zeros(expected)
    for name in names:
        values = scores[name]
        if not isinstance(values, list) or len(values) != expected:
            got = len(values) if isinstance(values, list) else type(values).__name__
            raise RemoteRewardError(
                f"reward '{reward}': expected {expected} '{name}' scores, the service returned {got}"
            )
        try:
            total += np.asarray(values, dtype=np.float64)
        except (TypeError, ValueError):
            raise RemoteRewardError(
                f"reward '{reward}': non-numeric '{name}' scores {values[:4]!r}"
            ) from None
    return total.tolist()


class RemoteTextReward:
    """An async GRPO reward scored by the service: completions go in the JSON header (`media_type = "text"`),
    with the JSON-serialisable dataset columns as `metadata`."""

    def __init__(self, name: str, client: RemoteRewardClient, score_key: str | None = None):
        self.__name__ = f"remote:{name}"
        self.name, self.client, self.score_key = name, client, score_key

    async def __call__(self, prompts, completions, **columns: Any) -> list[float]:
        from .text import completion_text

        metadata = {key: value for key, value in columns.items() if _is_json(value)}
        return await self.client.ascore(
            self.name,
            [completion_text(p) if not isinstance(p, str) else p for p in prompts],
            np.zeros((0,), dtype=np.uint8),
            "text",
            score_key=self.score_key,
            completions=[completion_text(c) for c in completions],
            metadata=metadata,
        )


class RemoteMediaReward:
    """An image/video reward scored by the service (`build_media_rewards`' `remote:<name>`):
    `reward(media, prompts, metadata)`, the media type from the array, per-sample metadata in the header."""

    def __init__(self, name: str, client: RemoteRewardClient, score_key: str | None = None):
        self.__name__ = f"remote:{name}"
        self.name, self.client, self.score_key = name, client, score_key

    def __call__(
        self, media: np.ndarray, prompts: list[str], metadata: list[dict] | None = None
    ) -> list[float]:
        return self.fetch(self.submit(media, prompts, metadata))

    def submit(
        self, media: np.ndarray, prompts: list[str], metadata: list[dict] | None = None
    ) -> PendingScores:
        """Enqueue the batch now (a refusal raises now); `fetch` waits for its scores."""
        fields = {"metadata": list(metadata)} if metadata else {}
        return self.client.submit(self.name, list(prompts), media, score_key=self.score_key, **fields)

    def fetch(self, pending: PendingScores) -> list[float]:
        return self.client.fetch(pending)


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True
