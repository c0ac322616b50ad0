"""Scorer-model image rewards on transformers' CLIP: PickScore, HPS and an aesthetic head.

Each loads its model from a local folder or a hub id given as a reward parameter, once per process
(`load_clip` is cached), and scores a video as the mean of its frames (`per_clip`):

    [rewards]
    pickscore = { weight = 1.0, model = "yuvalkirstain/PickScore_v1", processor = "laion/CLIP-ViT-H-14-laion2B-s32B-b79K" }
    hps = { weight = 1.0, model = "path/to/hpsv2-clip" }
    aesthetic = { weight = 1.0, model = "openai/clip-vit-large-patch14", head = "path/to/head.safetensors" }

- `pickscore`: PickScore's own formula, `logit_scale.exp() * cos(image, prompt)` (about 20-23 for real images).
- `hps`: HPS v2's score, `cos(image, prompt)`. HPS v2 is an OpenCLIP ViT-H-14 fine-tune; open_clip is not a
  dependency here, so `model` must be the weights in transformers' CLIP format (a converted checkpoint).
- `aesthetic`: the LAION aesthetic predictor's recipe: the L2-normalised CLIP image embedding through a head of
  linear layers (`head`: a safetensors file of `<i>.weight` / `<i>.bias` pairs applied in index order, as the
  LAION MLP's `layers.0 ... layers.7`, or one `weight` / `bias`; LAION's MLP has no activations).
"""

from __future__ import annotations

import functools
import inspect
import re
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import ScorerLoadError
from .media import _rgb, per_clip

_LOCK = threading.Lock()  # loads happen once even when two service workers ask at the same time


@functools.cache
def _load_clip_cached(model: str, processor: str, device: str):
    from transformers import CLIPModel, CLIPProcessor

    try:
        clip = CLIPModel.from_pretrained(model).to(device).eval()
    except (OSError, ValueError) as error:
        raise ScorerLoadError(f"cannot load the CLIP model {model!r}: {_first_line(error)}") from None
    try:
        clip_processor = CLIPProcessor.from_pretrained(processor)
    except (OSError, ValueError) as error:
        raise ScorerLoadError(f"cannot load the CLIP processor {processor!r}: {_first_line(error)}") from None
    return clip, clip_processor


def load_clip(model: str, processor: str | None = None, device: str = "cpu"):
    """(CLIPModel in eval mode on `device`, CLIPProcessor), loaded once per (model, processor, device)."""
    with _LOCK:
        return _load_clip_cached(str(model), str(processor or model), device)


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:300]


def _chunks(count: int, size: int):
    for start in range(0, count, size):
        yield slice(start, min(start + size, count))


def clip_similarity(
    images: np.ndarray,
    prompts: Sequence[str],
    model: str,
    processor: str | None,
    device: str,
    batch_size: int,
) -> tuple[np.ndarray, float]:
    """Per pair (image i, prompt i): cosine similarity of the CLIP embeddings, and the model's logit scale."""
    import torch

    if len(prompts) != len(images):
        raise ValueError(f"{len(images)} images but {len(prompts)} prompts")
    clip, clip_processor = load_clip(model, processor, device)
    max_length = clip.config.text_config.max_position_embeddings
    cosines = []
    for part in _chunks(len(images), batch_size):
        inputs = clip_processor(
            text=list(prompts[part]),
            images=list(_rgb(images[part])),
            padding=True,
            truncation=True,
            max_length=max_length,
            return_tensors="pt",
        ).to(device)
        with torch.inference_mode():
            output = clip(**inputs)
        # text_embeds / image_embeds come out L2-normalised.
        cosines.append((output.image_embeds * output.text_embeds).sum(dim=-1).float().cpu().numpy())
    return np.concatenate(cosines), float(clip.logit_scale.detach().exp())


@per_clip
def pickscore(
    media,
    prompts: Sequence[str] = (),
    metadata=None,
    model: str = "yuvalkirstain/PickScore_v1",
    processor: str = "laion/CLIP-ViT-H-14-laion2B-s32B-b79K",
    device: str = "cpu",
    batch_size: int = 16,
) -> list[float]:
    """PickScore: logit_scale.exp() times the cosine similarity of the image and its prompt, over 26.

    The division by 26 is flow_grpo's (`pickscore_scorer.py`) and the cosmos-rl reward service's: it brings scores
    near [0, 1], inside the [-5, 5] that cosmos-rl's clients clip rewards to."""
    cosine, scale = clip_similarity(media, list(prompts), model, processor, device, batch_size)
    return (scale * cosine / 26).tolist()


@per_clip
def hps(
    media,
    prompts: Sequence[str] = (),
    metadata=None,
    model: str = "",
    processor: str = "",
    device: str = "cpu",
    batch_size: int = 16,
) -> list[float]:
    """HPS v2: the cosine similarity of the image and its prompt under a preference-tuned CLIP."""
    if not model:
        raise ValueError(
            "hps needs model = a folder or hub id of HPS v2 weights in transformers' CLIP format"
        )
    return clip_similarity(media, list(prompts), model, processor or None, device, batch_size)[0].tolist()


@functools.cache
def _load_head(path: str) -> list[tuple[np.ndarray, np.ndarray | None]]:
    from safetensors.numpy import load_file

    if not Path(path).is_file():
        raise ScorerLoadError(f"aesthetic head {path!r} is not a file (a .safetensors of linear layers)")
    try:
        tensors = load_file(path)
    except Exception as error:  # safetensors raises its own error types for a bad file
        raise ScorerLoadError(f"cannot read the aesthetic head {path!r}: {_first_line(error)}") from None
    layers = []
    for key in sorted((k for k in tensors if k.endswith("weight")), key=_layer_index):
        weight = tensors[key].astype(np.float32)
        bias = tensors.get(key.removesuffix("weight") + "bias")
        if weight.ndim != 2:
            raise ScorerLoadError(f"aesthetic head {path!r}: {key} is not a matrix ({weight.shape})")
        layers.append((weight, None if bias is None else bias.astype(np.float32)))
    if not layers:
        raise ScorerLoadError(f"aesthetic head {path!r} holds no '*weight' tensors")
    return layers


def _layer_index(key: str) -> tuple[int, str]:
    numbers = re.findall(r"\d+", key)
    return (int(numbers[-1]) if numbers else -1, key)


def image_embeddings(images: np.ndarray, model: str, processor: str | None, device: str, batch_size: int):
    """L2-normalised CLIP image embeddings, float32, one row per image."""
    import torch

    clip, clip_processor = load_clip(model, processor, device)
    rows = []
    for part in _chunks(len(images), batch_size):
        pixels = clip_processor(images=list(_rgb(images[part])), return_tensors="pt")["pixel_values"]
        with torch.inference_mode():
            features = clip.get_image_features(pixel_values=pixels.to(device))
        features = getattr(features, "pooler_output", features)  # transformers 5 returns an output object
        rows.append(torch.nn.functional.normalize(features.float(), dim=-1).cpu().numpy())
    return np.concatenate(rows)


@per_clip
def aesthetic(
    media,
    prompts: Sequence[str] = (),
    metadata=None,
    model: str = "openai/clip-vit-large-patch14",
    processor: str = "",
    head: str = "",
    device: str = "cpu",
    batch_size: int = 16,
) -> list[float]:
    """The LAION aesthetic predictor's recipe: the normalised CLIP image embedding through a linear head."""
    if not head:
        raise ValueError("aesthetic needs head = a .safetensors file of the linear head's weights")
    layers = _load_head(str(head))
    values = image_embeddings(media, model, processor or None, device, batch_size)
    for weight, bias in layers:
        if values.shape[-1] != weight.shape[1]:
            raise ScorerLoadError(
                f"aesthetic head {head!r} expects {weight.shape[1]} features, the CLIP model gives {values.shape[-1]}"
            )
        values = values @ weight.T + (0.0 if bias is None else bias)
    if values.shape[-1] != 1:
        raise ScorerLoadError(f"aesthetic head {head!r} outputs {values.shape[-1]} values per image, not 1")
    return values[:, 0].astype(np.float64).tolist()


def preload(name: str, **parameters) -> None:
    """Load a scorer's model (and head) now, so a bad path fails at start rather than on the first batch."""
    bound = inspect.signature(SCORERS[name]).bind_partial(**parameters)
    bound.apply_defaults()
    arguments = bound.arguments
    if SCORERS[name] is hps and not arguments["model"]:
        raise ValueError(
            "hps needs model = a folder or hub id of HPS v2 weights in transformers' CLIP format"
        )
    if name == "aesthetic":
        if not arguments["head"]:
            raise ValueError("aesthetic needs head = a .safetensors file of the linear head's weights")
        _load_head(str(arguments["head"]))
    load_clip(arguments["model"], arguments["processor"] or None, arguments["device"])


# `hpsv2` is the reference service's name for HPS v2 (the same model as `hps`).
SCORERS = {"pickscore": pickscore, "hps": hps, "hpsv2": hps, "aesthetic": aesthetic}
