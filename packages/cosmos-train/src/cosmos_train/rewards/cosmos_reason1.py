"""The `cosmos_reason1` video critic, computed as the cosmos-rl reward service computes it.

A Qwen2.5-VL critic (Cosmos-Reason1-7B or its reward fine-tune) watches each video with a system prompt
listing physical-plausibility checks and is asked to begin its answer with "Yes" (the video has anomalies)
or "No". One forward pass; the logits of the first token of "Yes" and of "No" at the last position give

    no_score   = softmax([yes_logit, no_logit])[1]   # the probability of "No": higher = more plausible
    prediction = "Bad" if yes_logit > no_logit else "Good"

    [rewards]
    cosmos_reason1 = { weight = 1.0, model = "nvidia/Cosmos-Reason1-7B", device = "cuda", dtype = "bfloat16" }

The reference service loads `nvidia/Cosmos-Reason1-7B-Reward`; any folder or hub id of a Qwen2.5-VL-style model
with its processor works. Each video is scored on its own (batch size 1, as the reference): frames are taken
every `interval = (T - 1) // max_frames + 1` frames (at most `max_frames`), at `fps = video_fps / interval`,
trimmed to an even count (the temporal patch), resized (bicubic) so the clip costs at most `max_video_tokens`
tokens. `video_fps` is the sample's `metadata[i]["video_fps"]` (the reward service puts the client's
`video_infos` there) or `fps`. The user turn is the video then the sample's prompt, as in the reference
(whose clients send the question as the prompt); `question` sends one fixed text instead, e.g.
`ANOMALY_QUESTION`. Images are refused: the critic judges motion.
"""

from __future__ import annotations

import functools
import inspect
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import first_line
from .media import _rgb, check_media
from .scorers import ScorerLoadError

__all__ = [
    "ANOMALY_QUESTION",
    "SYSTEM_PROMPT",
    "cosmos_reason1",
    "frame_size",
    "preload",
    "sample_frames",
]

SYSTEM_PROMPT = """You review videos for physical errors. Watch the whole clip and look for anything that could not happen in the real world, in particular:

* Gravity: things float, fall upwards or hang in the air with nothing holding them.
* Collisions: solid objects pass through each other or bounce off nothing.
* Object interaction: something moves, breaks or reacts with no visible cause.
* Fluids: water, smoke or other fluids flow through solids or against their nature.
* Object permanence: an object appears from nowhere, vanishes, or changes its shape or identity.
* Common sense: objects that could not work or serve their purpose, or are used in impossible ways.
* Cause and effect: an event happens without what should cause it, or a cause has no effect.
* Human motion: bodies that morph, limbs that bend or join in impossible ways, movement no person could make.

Do not count as anomalies:

* An animated or cartoon style on its own.
* Anything about sound: the video is silent.
* Lighting, shadows, blur or camera effects.
* Your overall impression, the artistic style or the background.

Begin your response with a single word: "Yes" if the video has such anomalies, "No" if it does not."""

# The question the critic's users ask; the reference service sends the client's prompt instead.
ANOMALY_QUESTION = "Does the video contain any anomalies or artifacts?"

_LOCK = threading.Lock()
_MIN_FRAME_TOKENS = 16  # the smallest frame the reference resizes to: 16 merged patches (x temporal patch)


@dataclass(frozen=True)
class Critic:
    model: Any
    processor: Any
    yes_id: int
    no_id: int
    factor: int  # pixels per merged patch side (patch size x merge size)
    temporal_patch: int
    video_options: dict  # extra video-processor arguments


def sample_frames(
    num_frames: int, video_fps: float, max_frames: int = 160, temporal_patch: int = 2
) -> tuple[list[int], float]:
    """(frame indices, their fps): every `interval`-th frame with `interval = (T - 1) // max_frames + 1`, so at
    most `max_frames` are kept, at `video_fps / interval`, cut to a multiple of `temporal_patch`."""
    if max_frames < temporal_patch:
        raise ValueError(f"max_frames must be at least {temporal_patch}, got {max_frames}")
    interval = max(1, (num_frames - 1) // max_frames + 1)
    indices = list(range(0, num_frames, interval))
    indices = indices[: len(indices) - len(indices) % temporal_patch]
    return indices, video_fps / interval


def frame_size(
    height: int,
    width: int,
    num_frames: int,
    factor: int = 28,
    temporal_patch: int = 2,
    max_video_tokens: int = 9216,
) -> tuple[int, int]:
    """(height, width) of the resized frames: multiples of `factor`, aspect kept, at least 16 tokens per frame
    and at most `max_video_tokens` for the whole clip (the reference's `smart_resize` budget)."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    area = factor * factor * temporal_patch
    return smart_resize(
        height,
        width,
        factor=factor,
        min_pixels=_MIN_FRAME_TOKENS * area,
        max_pixels=max_video_tokens * area // num_frames,
    )


def _torch_dtype(dtype: str):
    import torch

    if dtype == "auto":
        return "auto"
    value = getattr(torch, str(dtype), None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"dtype must be 'auto' or a torch dtype name such as 'bfloat16', got {dtype!r}")
    return value


@functools.cache
def _load_cached(model: str, device: str, dtype: str) -> Critic:
    from transformers import AutoModelForImageTextToText, AutoProcessor

    torch_dtype = _torch_dtype(dtype)
    try:
        processor = AutoProcessor.from_pretrained(model)
    except (OSError, ValueError) as error:
        raise ScorerLoadError(
            f"cannot load the cosmos_reason1 processor {model!r}: {first_line(error)}"
        ) from None
    video_processor = getattr(processor, "video_processor", None)
    if video_processor is None or not hasattr(processor, "tokenizer"):
        raise ScorerLoadError(
            f"{model!r} has no video processor: cosmos_reason1 needs a Qwen2.5-VL-style model"
        )
    try:
        network = AutoModelForImageTextToText.from_pretrained(model, dtype=torch_dtype)
        network = network.to(device).eval()
    except (OSError, ValueError, RuntimeError) as error:
        raise ScorerLoadError(
            f"cannot load the cosmos_reason1 model {model!r}: {first_line(error)}"
        ) from None
    encode = processor.tokenizer.encode
    return Critic(
        model=network,
        processor=processor,
        yes_id=encode("Yes", add_special_tokens=False)[0],
        no_id=encode("No", add_special_tokens=False)[0],
        factor=video_processor.patch_size * video_processor.merge_size,
        temporal_patch=video_processor.temporal_patch_size,
        # Nothing is resized there; this only silences transformers' notice about the option's coming default.
        video_options={"cap_pixels_per_frame": False}
        if hasattr(video_processor, "cap_pixels_per_frame")
        else {},
    )


def load_critic(model: str, device: str = "cpu", dtype: str = "auto") -> Critic:
    """The critic model (eval mode, on `device`), its processor and the "Yes"/"No" token ids, loaded once."""
    with _LOCK:
        return _load_cached(str(model), str(device), str(dtype))


def _sample_fps(metadata: Sequence[Any] | None, index: int, default: float) -> float:
    info = metadata[index] if metadata is not None and index < len(metadata) else None
    value = info.get("video_fps", default) if isinstance(info, dict) else default
    if value is None:
        value = default
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"sample {index}: video_fps must be a positive number, got {value!r}")
    return float(value)


def _score(
    critic: Critic, video: np.ndarray, video_fps: float, text: str, system: str, max_frames: int, budget: int
):
    import torch
    from PIL import Image

    indices, clip_fps = sample_frames(len(video), video_fps, max_frames, critic.temporal_patch)
    if not indices:
        raise ValueError(
            f"a video of {len(video)} frame(s) keeps none after trimming to the temporal patch "
            f"({critic.temporal_patch}): cosmos_reason1 needs at least {critic.temporal_patch} frames"
        )
    height, width = frame_size(
        video.shape[1], video.shape[2], len(indices), critic.factor, critic.temporal_patch, budget
    )
    frames = [
        Image.fromarray(frame).resize((width, height), resample=Image.Resampling.BICUBIC)
        for frame in _rgb(video[indices])
    ]
    messages = [
        {"role": "system", "content": system},
        {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": text}]},
    ]
    prompt = critic.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    inputs = critic.processor(
        text=[prompt],
        videos=[frames],
        # transformers reads the clip's fps (Qwen2.5-VL's temporal positions) from the metadata, not `fps=`.
        video_metadata=[{"total_num_frames": len(frames), "fps": clip_fps}],
        do_resize=False,  # already resized as the reference does (PIL bicubic to the smart_resize size)
        return_tensors="pt",
        **critic.video_options,
    ).to(critic.model.device)
    with torch.inference_mode():
        logits = critic.model(**inputs, use_cache=False, logits_to_keep=1).logits[0, -1]
    return float(logits[critic.yes_id]), float(logits[critic.no_id])


def cosmos_reason1(
    media,
    prompts: Sequence[str] = (),
    metadata: Sequence[Any] | None = None,
    model: str = "nvidia/Cosmos-Reason1-7B",
    device: str = "cpu",
    dtype: str = "auto",
    max_frames: int = 160,
    fps: float = 16.0,
    max_video_tokens: int = 9216,
    question: str | None = None,
    system_prompt: str | None = None,
) -> dict[str, list]:
    """Cosmos-Reason1 video critic: the probability that the video has no physical anomalies ("No" over "Yes").

    Returns `no_score` (the trainers' score), `yes_logit`, `no_logit` and `prediction` ("Good"/"Bad") per video,
    the reference service's keys."""
    media = check_media(media)
    if media.ndim != 5:
        raise ValueError(
            f"cosmos_reason1 scores videos (B x T x H x W x C), not images: got shape {media.shape}"
        )
    if question is None and len(prompts) != len(media):
        raise ValueError(
            f"{len(media)} videos but {len(prompts)} prompts (or set question = the text to ask of every video)"
        )
    if max_video_tokens < 1:
        raise ValueError(f"max_video_tokens must be positive, got {max_video_tokens}")
    critic = load_critic(model, device, dtype)
    system = SYSTEM_PROMPT if system_prompt is None else system_prompt
    scores: dict[str, list] = {"no_score": [], "yes_logit": [], "no_logit": [], "prediction": []}
    for index, video in enumerate(media):
        text = question if question is not None else str(prompts[index])
        yes, no = _score(
            critic,
            video,
            _sample_fps(metadata, index, fps),
            text,
            system,
            max_frames,
            max_video_tokens,
        )
        # softmax([yes, no])[1], written so that a large gap cannot overflow
        gap = yes - no
        no_score = 1.0 / (1.0 + math.exp(gap)) if gap <= 0 else math.exp(-gap) / (1.0 + math.exp(-gap))
        scores["no_score"].append(no_score)
        scores["yes_logit"].append(yes)
        scores["no_logit"].append(no)
        scores["prediction"].append("Bad" if yes > no else "Good")
    return scores


def preload(**parameters) -> None:
    """Load the critic now (the reward's `model`, `device`, `dtype`), so a bad path fails at start."""
    bound = inspect.signature(cosmos_reason1).bind_partial(None, **parameters)
    bound.apply_defaults()
    arguments = bound.arguments
    load_critic(arguments["model"], arguments["device"], arguments["dtype"])
