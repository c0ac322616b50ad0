"""The reward service: the contract of `docs/reward-service.md` on FastAPI, served by uvicorn.

- `POST /api/reward/enqueue`: one JSON line (`prompts`, `reward_fn`, optional `media_type`, `video_infos`,
  `metadata`, `geneval_tags` / `geneval_includes`, `video_layout`), a newline, then `.npy` bytes (read with
  `allow_pickle=False` after the header is checked against the body's length); answers `{"uuid"}` at once and
  scores the batch on a worker thread. What cosmos-rl's clients send is accepted as they send it (`_as_media`).
- `POST /api/reward/pull`: form fields or JSON `uuid` and `type`; HTTP 400 while not ready, then
  `{"scores": {type: [...], <the reference's keys>: [...]}, "input_info", "duration", "type"}`, or a 200 with
  `"error"` and `"scores": null` when scoring failed. A result can be pulled again until it expires.
- `GET /health` and `GET|POST /api/reward/ping`: the only routes without the bearer token.

The queue and results live in this process (`RewardQueue`), or on Redis for several replicas (`--store redis://`,
`redis_queue.RedisRewardQueue`). Every bound (body bytes, JSON line bytes, batch size, queue length) answers a 4xx
that names it and its value.
Each request is logged as one JSON line (method, path, status, duration, uuid; never a header).
"""

from __future__ import annotations

import collections
import contextlib
import io
import json
import logging
import math
import secrets
import sys
import threading
import time
import uuid as uuidlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from fastapi import FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from ..config import suggest
from ..errors import first_line
from ..rewards import RewardError
from .latents import LatentDecoder

ENQUEUE_PATH, PULL_PATH, PING_PATH = "/api/reward/enqueue", "/api/reward/pull", "/api/reward/ping"
HEALTH_PATH = "/health"
MEDIA_TYPES = ("image", "video", "latent")
CHANNELS = (1, 3, 4)
VIDEO_LAYOUTS = ("BTHWC", "BCTHW")  # ours (channels last), the reference service's (channels first)
# The reference service's score keys, answered beside the reward's own name (its clients read these).
REFERENCE_SCORE_KEYS = {"ocr": ("ocr_reward",)}
MAX_PULL_BYTES = 64 << 10
LOG = logging.getLogger("cosmos_train.service")

MediaRewardFunction = Callable[[np.ndarray, list[str], list[dict] | None], list[float]]


@dataclass(frozen=True)
class ServiceSettings:
    token: str | None  # None only when started with --no-auth
    max_body_bytes: int = 256 << 20
    max_header_bytes: int = 1 << 20  # the JSON line
    max_batch: int = 256
    max_queue: int = 64  # batches enqueued and not scored yet
    result_ttl: float = 600.0  # seconds a scored result stays pullable
    workers: int = 1  # scoring threads
    store: str = "memory"  # or redis://host:port/db: replicas share the queue and the results
    lease: float = 10.0  # Redis store: seconds without a heartbeat before another replica takes a job over
    replica: str | None = None  # Redis store: this replica's name (default: host, pid and a random suffix)


@dataclass
class BatchResult:
    """An enqueued batch's scores (None until scored) or its scoring error, kept until it expires."""

    rewards: list[str]
    input_info: dict[str, Any]
    scores: dict[str, dict[str, Any]] | None = None  # reward -> the keys it answers -> values
    error: str | None = None
    duration: float = 0.0


@dataclass
class Batch:
    prompts: list[str]
    rewards: list[str]
    media: np.ndarray
    metadata: list[dict] | None
    input_info: dict[str, Any]
    latent: bool = False  # media are latents, decoded by the service's VAE before scoring


def _refuse(status: int, message: str) -> HTTPException:
    return HTTPException(status, message)


# --- parsing the enqueue body -------------------------------------------------------------------------


def read_npy(data: bytes) -> np.ndarray:
    """A `.npy` byte stream as an array, never unpickling, never allocating more than the body holds."""
    buffer = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(buffer)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(buffer)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(buffer)
        else:
            raise ValueError(f".npy format version {version} is not supported (1.0 or 2.0)")
    except Exception as error:  # numpy's header parser raises several types on garbage; all are the client's
        raise _refuse(400, f"the media is not a valid .npy stream: {first_line(error)}") from None
    if dtype.hasobject:
        raise _refuse(
            422, "the media is an object array; this service never unpickles (send uint8 or float16)"
        )
    declared = math.prod(shape) * dtype.itemsize
    present = len(data) - buffer.tell()
    if declared != present:
        raise _refuse(
            400, f"the .npy header declares {shape} {dtype} = {declared} bytes but the body holds {present}"
        )
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, EOFError, OSError) as error:
        raise _refuse(400, f"the media is not a valid .npy stream: {first_line(error)}") from None


def _as_media(
    media: np.ndarray, media_type: str | None, header: dict[str, Any]
) -> tuple[np.ndarray, str, str]:
    """The batch as the rewards take it: `(array, kind, layout)` with `kind` "image" (uint8 B x H x W x C),
    "video" (uint8 B x T x H x W x C) or "latent" (float32, decoded later by the service's VAE).

    What cosmos-rl's clients send is accepted as they send it: float latents with `media_type` "latent", none, or
    (its newer client) "video"; bfloat16 latents as their uint8 bytes with "latent"; float16 image pixels in
    [0, 255] (truncated to uint8 as the reference service does); videos channels first (B x C x T x H x W, the
    reference's layout) or last (ours), told apart by `video_layout` or, without it, by shape: channels last when
    the last axis is 1, 3 or 4 wide (read channels first, that would be a video 4 pixels wide)."""
    sent = _as_sent(media, media_type, header)
    if media_type == "latent" and media.dtype == np.uint8:
        if media.shape[-1] % 2:
            raise _refuse(
                422, f"uint8 latents are bfloat16 bytes: the last axis must be even, got {media.shape}"
            )
        bits = np.ascontiguousarray(media).view("<u2").astype(np.uint32) << 16
        return bits.view(np.float32), "latent", "bfloat16 bytes"
    floats = media.dtype in (np.float16, np.float32)
    if floats and media_type != "image":
        return media.astype(np.float32), "latent", str(media.dtype)
    if floats:  # cosmos-rl's remote_calculator sends image pixels as float16
        media = np.clip(np.nan_to_num(media), 0, 255).astype(np.uint8)
    if media.dtype != np.uint8:
        raise _refuse(422, f"media must be uint8 pixels or float16/float32 latents, got {media.dtype}")
    kind = media_type or {4: "image", 5: "video"}.get(media.ndim)
    ndim = {"image": 4, "video": 5}.get(kind)
    if media.ndim != ndim:
        raise _refuse(422, f"{sent}: {_ACCEPTED.get(kind, _ACCEPTED[None])}")
    last = media.shape[-1] in CHANNELS
    if kind == "video":
        layout = header.get("video_layout") or ("BTHWC" if last else "BCTHW")
        if layout not in VIDEO_LAYOUTS:
            raise _refuse(422, f"'video_layout' must be one of {', '.join(VIDEO_LAYOUTS)}, got {layout!r}")
        media = media.transpose(0, 2, 3, 4, 1) if layout == "BCTHW" else media
    else:
        layout = "BHWC" if last else "BCHW"
        media = media.transpose(0, 2, 3, 1) if layout == "BCHW" else media
    if media.shape[-1] not in CHANNELS or 0 in media.shape:
        raise _refuse(422, f"{sent}: {_ACCEPTED[kind]}")
    return np.ascontiguousarray(media), kind, layout


_ACCEPTED = {  # what `_as_media` takes, for its refusals
    "image": "an image is B x H x W x C or B x C x H x W, uint8 (or float16/float32 pixels with media_type "
    "'image'), C = 1, 3 or 4, no empty axis",
    "video": "a video is uint8 B x T x H x W x C or B x C x T x H x W (video_layout 'BTHWC' / 'BCTHW'), "
    "C = 1, 3 or 4, no empty axis",
    None: "uint8 pixels are an image (B x H x W x C, 4 axes) or a video (B x T x H x W x C, 5 axes)",
}


def _as_sent(media: np.ndarray, media_type: str | None, header: dict[str, Any]) -> str:
    """The media as the client sent it, for a refusal: dtype, shape, media_type and video_layout (as given)."""
    given = f"media_type {media_type!r}" if media_type is not None else "no media_type"
    if header.get("video_layout") is not None:
        given += f", video_layout {header['video_layout']!r}"
    return f"media sent as {media.dtype} {tuple(media.shape)} ({given})"


def _scored_rewards(reward_fn: Any, hosted: dict[str, Any]) -> list[str]:
    """The rewards to score: those of `reward_fn` with weight > 0 (the reference scores no other), all hosted."""
    if not isinstance(reward_fn, dict) or not reward_fn:
        raise _refuse(422, "'reward_fn' must be an object of reward name -> weight")
    for name, weight in reward_fn.items():
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight):
            raise _refuse(422, f"'reward_fn' weights must be numbers: {name!r} has {weight!r}")
    named = [name for name, weight in reward_fn.items() if weight > 0]
    if not named:
        raise _refuse(422, "every reward in 'reward_fn' has weight <= 0: nothing to score")
    unknown = [name for name in named if name not in hosted]
    if unknown:
        raise _refuse(
            422,
            f"unknown reward {unknown[0]!r}{suggest(unknown[0], list(hosted))}; "
            f"this service hosts: {', '.join(hosted) or 'none'}",
        )
    return named


def _per_sample_list(header: dict[str, Any], key: str, size: int) -> list | None:
    values = header.get(key)
    if values is not None and (not isinstance(values, list) or len(values) != size):
        raise _refuse(422, f"'{key}' must be a list of {size} entries (one per sample)")
    return values


def _per_sample_metadata(header: dict[str, Any], size: int) -> list[dict] | None:
    """One dict per sample: `metadata` (a list of dicts, or a dict of per-sample columns), with GenEval's
    top-level `geneval_tags` / `geneval_includes` (cosmos-rl's clients) as each sample's `tag` / `include`.
    Without either, dict `video_infos` carry the per-sample metadata (as the reference service passes them)."""
    metadata = header.get("metadata")
    if isinstance(metadata, dict):
        if not all(isinstance(v, list) and len(v) == size for v in metadata.values()):
            raise _refuse(422, f"'metadata' as a table needs one list of {size} values per key")
        metadata = [{key: values[i] for key, values in metadata.items()} for i in range(size)]
    elif metadata is not None and (
        not isinstance(metadata, list)
        or len(metadata) != size
        or not all(isinstance(m, dict) for m in metadata)
    ):
        raise _refuse(
            422, f"'metadata' must be a list of {size} objects (one per sample) or a table of lists"
        )
    tags = _per_sample_list(header, "geneval_tags", size)
    includes = _per_sample_list(header, "geneval_includes", size)
    if tags is not None or includes is not None:
        if includes is None or not all(
            isinstance(i, list) and all(isinstance(o, dict) for o in i) for i in includes
        ):
            raise _refuse(
                422, "'geneval_includes' must be one list of {class, count, ...} objects per sample"
            )
        geneval = [
            {"include": include, **({"tag": tags[i]} if tags is not None else {})}
            for i, include in enumerate(includes)
        ]
        metadata = [{**record, **own} for record, own in zip(geneval, metadata or [{}] * size, strict=True)]
    if metadata is None:
        infos = header.get("video_infos")
        return infos if infos and all(isinstance(i, dict) for i in infos) else None
    return metadata


def parse_enqueue(
    body: bytes, settings: ServiceSettings, hosted: dict[str, Any], decoder: LatentDecoder | None = None
) -> Batch:
    """The enqueue body as a checked batch, or an HTTPException (4xx) naming what is wrong."""
    end = body.find(b"\n", 0, settings.max_header_bytes + 1)
    if end < 0:
        if len(body) > settings.max_header_bytes:
            raise _refuse(
                413,
                f"no newline in the first max_header_bytes = {settings.max_header_bytes} bytes (JSON line)",
            )
        raise _refuse(400, "the body must be one JSON line, a newline, then .npy bytes (no newline found)")
    try:
        header = json.loads(body[:end])
    except (ValueError, RecursionError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise _refuse(400, f"the first line is not JSON: {first_line(error)}") from None
    if not isinstance(header, dict):
        raise _refuse(422, "the JSON line must be an object with prompts, reward_fn and media_type")
    prompts, media_type = header.get("prompts"), header.get("media_type")
    if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
        raise _refuse(422, "'prompts' must be a list of strings")
    rewards = _scored_rewards(header.get("reward_fn"), hosted)
    if media_type is not None and media_type not in MEDIA_TYPES:
        raise _refuse(422, f"'media_type' must be one of {', '.join(MEDIA_TYPES)}, got {media_type!r}")
    media = read_npy(body[end + 1 :])
    if media.ndim == 0:
        raise _refuse(422, "the media has no batch axis")
    size = media.shape[0]
    if size > settings.max_batch:
        raise _refuse(413, f"a batch of {size} exceeds max_batch = {settings.max_batch}")
    info = {"shape": list(media.shape), "dtype": str(media.dtype)}
    media, kind, layout = _as_media(media, media_type, header)
    if kind == "latent":
        if decoder is None:
            raise _refuse(
                422, "latent media needs a VAE: this service was started without --latent-vae (send pixels)"
            )
        try:
            decoder.check(media.shape)
        except ValueError as error:
            raise _refuse(422, str(error)) from None
    if len(prompts) != size:
        raise _refuse(422, f"{len(prompts)} prompts for a batch of {size}")
    _per_sample_list(header, "video_infos", size)
    info.update(media_type=kind, layout=layout)
    return Batch(prompts, rewards, media, _per_sample_metadata(header, size), info, latent=kind == "latent")


# --- the queue ----------------------------------------------------------------------------------------


def pull_answer(key: str, reward: str, result: BatchResult | None, ttl: float) -> dict[str, Any]:
    """The pull's answer for `key`'s stored `result` (None: unknown or expired), or its 4xx."""
    if result is None:
        raise _refuse(404, f"unknown or expired uuid {key} (results expire {ttl:g} s after scoring)")
    if reward not in result.rewards:
        raise _refuse(422, f"{key} was enqueued for {', '.join(result.rewards)}, not {reward!r}")
    if result.scores is None and result.error is None:
        raise _refuse(400, "not ready")
    return answer(reward, result)


def answer(reward: str, result: BatchResult) -> dict[str, Any]:
    """A scored result as the pull answers it: the reward's scores under its name and the reference service's
    keys for it, or (a 200, as the reference answers it) the scoring error with `scores` null."""
    body: dict[str, Any] = {
        "scores": None,
        "input_info": result.input_info,
        "duration": round(result.duration, 6),
        "type": reward,
    }
    if result.error is not None:
        body["error"] = result.error
    else:
        named = result.scores[reward]
        body["scores"] = {**named, **dict.fromkeys(REFERENCE_SCORE_KEYS.get(reward, ()), named[reward])}
    return body


def score_batch(
    batch: Batch, rewards: dict[str, MediaRewardFunction], decoder: LatentDecoder | None
) -> tuple[dict[str, dict[str, Any]] | None, str | None]:
    """`({reward: {key: values}}, None)`, every key each of the batch's rewards answers, or `(None, error)`: one
    line naming what failed."""
    scores, name = {}, ""
    try:
        media = batch.media
        if batch.latent:
            name = "latent decoding"
            media = decoder.decode(media)
        for name in batch.rewards:
            reward = rewards[name]
            if hasattr(reward, "scores"):  # a MediaReward: every key it answers
                scores[name] = reward.scores(media, batch.prompts, batch.metadata)
            else:
                scores[name] = {name: reward(media, batch.prompts, batch.metadata)}
    except RewardError as failure:  # MediaReward's one line, naming the reward
        return None, first_line(failure)
    except Exception as failure:  # a bare function or the VAE: name it here
        what = name if name == "latent decoding" else f"reward '{name}'"
        return None, f"{what} raised {type(failure).__name__}: {first_line(failure)}"
    return scores, None


@dataclass
class RewardQueue:
    """Batch results by uuid; scoring on `workers` threads; results forgotten `result_ttl` seconds after scoring."""

    rewards: dict[str, MediaRewardFunction]
    settings: ServiceSettings
    decoder: LatentDecoder | None = None
    results: dict[str, BatchResult] = field(default_factory=dict)
    pending: int = 0
    _expiry: collections.deque = field(default_factory=collections.deque)  # (time, uuid), in time order
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.executor = ThreadPoolExecutor(self.settings.workers, thread_name_prefix="reward")

    def submit(self, batch: Batch) -> str:
        key = str(uuidlib.uuid4())
        with self._lock:
            self._forget_expired()
            if self.pending >= self.settings.max_queue:
                raise _refuse(
                    429,
                    f"the queue is full: {self.pending} batches waiting (max_queue = {self.settings.max_queue})",
                )
            self.pending += 1
            self.results[key] = BatchResult(batch.rewards, batch.input_info)
        self.executor.submit(self._score, key, batch)
        return key

    def _score(self, key: str, batch: Batch) -> None:
        start = time.perf_counter()
        scores, error = score_batch(batch, self.rewards, self.decoder)
        with self._lock:
            result = self.results[key]
            result.scores, result.error = scores, error
            result.duration = time.perf_counter() - start
            self.pending -= 1
            self._expiry.append((time.monotonic() + self.settings.result_ttl, key))

    def _forget_expired(self) -> None:
        now = time.monotonic()
        while self._expiry and self._expiry[0][0] <= now:
            self.results.pop(self._expiry.popleft()[1], None)

    def result(self, key: str, reward: str) -> dict[str, Any]:
        with self._lock:
            self._forget_expired()
            return pull_answer(key, reward, self.results.get(key), self.settings.result_ttl)

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


# --- the app ------------------------------------------------------------------------------------------


def make_queue(
    settings: ServiceSettings, rewards: dict[str, MediaRewardFunction], decoder: LatentDecoder | None
):
    """The in-memory queue (one process), or the Redis one that replicas share (`settings.store`)."""
    if settings.store == "memory":
        return RewardQueue(rewards, settings, decoder)
    from .redis_queue import RedisRewardQueue

    return RedisRewardQueue(settings.store, rewards, settings, decoder, settings.replica)


def _authorised(header: str | None, token: str) -> bool:
    scheme, _, given = (header or "").partition(" ")
    # Compare even a malformed header, so a refusal takes the same time whatever was wrong.
    same = secrets.compare_digest(given.strip().encode("utf-8", "replace"), token.encode())
    return same and scheme.lower() == "bearer"


async def _read_body(request: Request, limit: int, bound: str) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _refuse(413, f"the body ({declared} bytes) exceeds {bound} = {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _refuse(413, f"the body exceeds {bound} = {limit}")
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(
    settings: ServiceSettings, rewards: dict[str, MediaRewardFunction], decoder: LatentDecoder | None = None
) -> FastAPI:
    """The service's FastAPI app, hosting `rewards` (name -> `f(media, prompts, metadata) -> list[float]`);
    latents are decoded by `decoder` (refused without one)."""
    queue = make_queue(settings, dict(rewards), decoder)
    store = settings.store.rpartition("@")[2]  # never a password in the log

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI):
        LOG.info(
            json.dumps(
                {
                    "event": "start",
                    "rewards": list(rewards),
                    "auth": settings.token is not None,
                    "store": store,
                }
            )
        )
        yield
        queue.close()

    app = FastAPI(
        title="cosmos-train reward service",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        lifespan=lifespan,
    )
    app.state.queue = queue

    @app.middleware("http")
    async def guard_and_log(request: Request, call_next):
        start = time.perf_counter()
        open_route = request.url.path == PING_PATH or (
            request.method == "GET" and request.url.path == HEALTH_PATH
        )
        if (
            settings.token is not None
            and not open_route
            and not _authorised(request.headers.get("authorization"), settings.token)
        ):
            response = JSONResponse(
                {"detail": "missing or wrong bearer token"}, 401, headers={"WWW-Authenticate": "Bearer"}
            )
        else:
            try:
                response = await call_next(request)
            except Exception as error:  # logged and answered here, so even a bug leaves its log line
                LOG.exception("unhandled error")
                response = JSONResponse({"detail": f"internal error: {type(error).__name__}"}, 500)
        LOG.info(
            json.dumps(
                {
                    "time": round(time.time(), 3),
                    "method": request.method,
                    "path": request.url.path,
                    "status": response.status_code,
                    "duration_ms": round((time.perf_counter() - start) * 1000, 2),
                    "uuid": getattr(request.state, "uuid", None),
                    "client": request.client.host if request.client else None,
                }
            )
        )
        return response

    @app.get(HEALTH_PATH)
    async def health():
        return {"status": "ok"}

    @app.api_route(PING_PATH, methods=["GET", "POST"])
    async def ping():  # the reference's liveness route (its clients POST an `info_data` form, never read here)
        return {"message": "Ping request received"}

    @app.post(ENQUEUE_PATH)
    async def enqueue(request: Request):
        body = await _read_body(request, settings.max_body_bytes, "max_body_bytes")
        batch = await run_in_threadpool(parse_enqueue, body, settings, queue.rewards, decoder)
        request.state.uuid = await run_in_threadpool(queue.submit, batch)
        return {"uuid": request.state.uuid}

    @app.post(PULL_PATH)
    async def pull(request: Request):
        declared = request.headers.get("content-length", "")
        if not declared.isdigit():
            raise _refuse(411, "a pull needs a Content-Length")
        if int(declared) > MAX_PULL_BYTES:
            raise _refuse(413, f"the pull body ({declared} bytes) exceeds {MAX_PULL_BYTES} bytes")
        body = await request.body()  # cached, so request.form() below reads it again
        if request.headers.get("content-type", "").startswith("application/json"):
            try:
                fields = json.loads(body)
            except ValueError as error:
                raise _refuse(422, f"the pull body is not JSON: {first_line(error)}") from None
            if not isinstance(fields, dict):
                raise _refuse(422, "the pull body must be a JSON object with uuid and type")
        else:
            fields = dict(await request.form(max_files=0, max_fields=16))
        key, reward = fields.get("uuid"), fields.get("type")
        if not isinstance(key, str) or not key or not isinstance(reward, str) or not reward:
            raise _refuse(422, "a pull needs the fields 'uuid' and 'type' (the reward name)")
        request.state.uuid = key
        return await run_in_threadpool(queue.result, key, reward)

    return app


def run(
    settings: ServiceSettings,
    rewards: dict[str, MediaRewardFunction],
    host: str,
    port: int,
    decoder: LatentDecoder | None = None,
) -> None:
    """Serve until interrupted; request logs go to stderr as JSON lines."""
    import uvicorn

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    LOG.handlers[:] = [handler]
    LOG.setLevel(logging.INFO)
    LOG.propagate = False
    uvicorn.run(
        create_app(settings, rewards, decoder), host=host, port=port, log_level="warning", access_log=False
    )


@contextlib.contextmanager
def serving(
    settings: ServiceSettings,
    rewards: dict[str, MediaRewardFunction],
    host: str = "127.0.0.1",
    decoder: LatentDecoder | None = None,
):
    """Run the service with uvicorn on a free port of `host` in a background thread; yields its base URL.
    For tests and for hosting rewards inside another process."""
    import socket

    import uvicorn

    # IPPROTO_TCP given explicitly: asyncio sets TCP_NODELAY only on sockets that name it, and without it
    # every keep-alive response waits ~40 ms for a delayed ACK (Nagle).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind((host, 0))
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings, rewards, decoder), log_level="warning", access_log=False)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the reward service did not start")
            time.sleep(0.01)
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
