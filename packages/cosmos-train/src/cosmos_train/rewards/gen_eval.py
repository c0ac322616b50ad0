"""GenEval's reward as the cosmos-rl reference reward service computes it (`gen_eval`), on transformers' models:
a COCO instance-segmentation Mask2Former finds the objects, a CLIP names their colours, and GenEval's rules judge
them against each sample's GenEval record.

    [rewards]
    gen_eval = { weight = 1.0, detector = "facebook/mask2former-swin-small-coco-instance", clip = "openai/clip-vit-large-patch14" }

`gen_eval(media, prompts, metadata, ...)` returns four named scores, as the service answers them (the first is
the one trainers use):

- `gen_eval_score`: partial credit per sample (`partial_score`), the mean of per-requirement parts; it can go
  below 0 when far too many objects are found.
- `gen_eval_reward`: 1.0 / 0.0 by GenEval's own rule (`geneval_rules.judge`): at least `count` objects
  of each class, the `count` most confident of the asked colour and in the asked position; 0.0 for every sample
  when `only_strict`.
- `gen_eval_strict`: 1.0 / 0.0: every count, colour count and position exactly as asked.
- `gen_eval_group`: `{tag: [value per sample]}` over GenEval's six tags: a sample's own tag holds its
  `gen_eval_reward`, every other tag -10.0 (the reference's "not this task" sentinel, for per-task statistics).

The steps, as the reference takes them:

- Detection: Mask2Former's instance post-processing (class probability times mean mask probability per query,
  the same score mmdet's Mask2Former gives); a segment is kept when its score is above 0.3 (0.9 for a record
  tagged `counting`); per class, the 16 most confident; no NMS. A box is the mask's bounding box (x1, y1
  exclusive, as mmdet's `mask2bbox`). The model's COCO label names map to GenEval's where they differ
  (`mouse`, `remote`, `keyboard` are GenEval's `computer mouse`, `tv remote`, `computer keyboard`).
- Colour: CLIP zero-shot over GenEval's ten colours on the object's crop (its box), the pixels outside its mask
  set to #999999; each colour's text embedding is the normalised mean of the normalised embeddings of the
  reference's three templates, "a photo of a {colour} {class}", "a photo of a {colour}-colored {class}" and
  "a photo of a {colour} object" (clip_benchmark's zero-shot classifier).
- Position: GenEval's `relative_position` on box centres, each offset shrunk by 0.1 x the two boxes' summed sizes.

Known differences from the reference: it runs mmdet's Mask2Former Swin-S and open_clip's ViT-L-14 (OpenAI
weights: the same weights as `openai/clip-vit-large-patch14`); transformers thresholds the masks at the model's
resolution and upsamples them (mmdet upsamples the logits, then thresholds), so mask edges can differ by a pixel
or so. The reference hands the detector RGB arrays that mmdet reads as BGR (a channel swap); here the detector
gets RGB, as its processor expects. Like the reference, only the record's `include` is judged: GenEval's
`exclude` (the counting task's "no more than n") is ignored, as the reference service never receives it.

Videos are refused: the reference scores images only (B x H x W x C).
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import first_line
from .geneval_rules import TASKS, Detection, judge, relative_position
from .media import _rgb, check_media
from .scorers import ScorerLoadError, load_clip

DEFAULT_DETECTOR = "facebook/mask2former-swin-small-coco-instance"
DEFAULT_CLIP = "openai/clip-vit-large-patch14"

TAGS = TASKS  # GenEval's six task tags
COLORS = ("red", "orange", "yellow", "green", "blue", "purple", "pink", "brown", "black", "white")
COLOR_TEMPLATES = (
    "a photo of a {color} {name}",
    "a photo of a {color}-colored {name}",
    "a photo of a {color} object",
)
THRESHOLD = 0.3
COUNTING_THRESHOLD = 0.9
MAX_OBJECTS = 16
BACKGROUND = (0x99, 0x99, 0x99)  # the reference's "#999" behind a crop's mask
GROUP_SENTINEL = -10.0
# COCO label names (detectron2 / transformers) -> GenEval's class names (its `object_names.txt`).
GENEVAL_NAMES = {"mouse": "computer mouse", "remote": "tv remote", "keyboard": "computer keyboard"}

_LOCK = threading.Lock()


@dataclass(frozen=True)
class Segment:
    """A detected object (`detection.shape` is its GenEval class name, `detection.iou` the detector's score)
    with its boolean H x W mask."""

    detection: Detection
    mask: np.ndarray


# ---------------------------------------------------------------------------------------------------------
# The rules: pure functions of detections and a record


def confidence_threshold(record: dict[str, Any]) -> float:
    """The detector score a segment must exceed: 0.9 for counting records, else 0.3."""
    return COUNTING_THRESHOLD if record.get("tag") == "counting" else THRESHOLD


def partial_score(objects: dict[str, list[Detection]], record: dict[str, Any]) -> tuple[bool, float]:
    """(strictly correct, partial score) of detections against a record, the reference's `evaluate_reward`.

    Requests are taken in order; `n` is the number of detections of the request's class (all of them, not the
    most confident `count`). Each request adds parts:
    - always `1 - |count - n| / count` (negative when n > 2 x count);
    - when n != count, the request fails, and a request with a colour or a position adds one 0.0;
    - otherwise a colour adds `1 - |count - k| / count`, k the detections of that colour, and the request
      fails unless k == count; then (only if it has not failed) a position fails with a 0.0 when its target
      request failed, else checks every (object, target object) pair: on the first pair not in the relation it
      adds a 0.0 and fails, and in both cases it adds a 1.0 afterwards (the reference's quirk: a failed
      relation gives two parts, 0.0 and 1.0, so it costs half a part, not a whole one).
    The score is the mean of the parts (0.0 for a record with no request); strictly correct means no request
    failed: exact counts, exact colour counts, every relation holds.
    """
    parts: list[float] = []
    groups: list[list[Detection] | None] = []
    correct = True
    for request in record["include"]:
        name, count = request["class"], request["count"]
        found = objects.get(name, [])
        parts.append(1 - abs(count - len(found)) / count)
        matched = len(found) == count
        if not matched:
            if "color" in request or "position" in request:
                parts.append(0.0)
        else:
            if "color" in request:
                have = sum(obj.color == request["color"] for obj in found)
                parts.append(1 - abs(count - have) / count)
                matched = have == count
            if matched and "position" in request:
                relation, target = request["position"]
                targets = groups[target] if target < len(groups) else None
                if targets is None:
                    matched = False
                    parts.append(0.0)
                else:
                    if not all(relation in relative_position(a.box, b.box) for a in found for b in targets):
                        matched = False
                        parts.append(0.0)
                    parts.append(1.0)
        groups.append(found if matched else None)
        correct = correct and matched
    return correct, (sum(parts) / len(parts) if parts else 0.0)


def score_record(
    objects: dict[str, list[Detection]], record: dict[str, Any], only_strict: bool = False
) -> dict[str, Any]:
    """One sample's four values from its detections by GenEval class name (most confident first, colours set
    where asked): `gen_eval_score` (partial), `gen_eval_reward` (GenEval's rule, 0.0 when `only_strict`),
    `gen_eval_strict` and `gen_eval_group` ({tag: value} over the six tags)."""
    strict, score = partial_score(objects, record)
    # Only the includes: the reference service never receives GenEval's `exclude`.
    reward = 0.0 if only_strict else float(judge(objects, {"include": record["include"]}).correct)
    tag = record.get("tag")
    return {
        "gen_eval_score": float(score),
        "gen_eval_reward": reward,
        "gen_eval_strict": float(strict),
        "gen_eval_group": {key: reward if key == tag else GROUP_SENTINEL for key in TAGS},
    }


def check_record(record: Any, index: int) -> dict[str, Any]:
    """The sample's GenEval record, or a one-line ValueError."""
    if not isinstance(record, dict) or not isinstance(record.get("include"), list):
        raise ValueError(
            f"gen_eval needs each sample's GenEval record (tag, include) as metadata; sample {index} has none: "
            "use a `*_metadata.jsonl` prompt list"
        )
    for request in record["include"]:
        count = request.get("count") if isinstance(request, dict) else None
        if not isinstance(request, dict) or not isinstance(request.get("class"), str):
            raise ValueError(
                f"gen_eval: sample {index}'s include entries need a 'class' name, got {request!r}"
            )
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(
                f"gen_eval: sample {index}'s include counts must be positive integers, got {count!r}"
            )
    return record


# ---------------------------------------------------------------------------------------------------------
# Detection


def geneval_name(label: str) -> str:
    """GenEval's name for a COCO label of the detector."""
    return GENEVAL_NAMES.get(label, label)


def box_of(mask: np.ndarray) -> tuple[int, int, int, int]:
    """(x0, y0, x1, y1) of a non-empty boolean mask, x1 and y1 exclusive."""
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    return int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1


def segments_from_result(
    result: dict[str, Any], id2label: dict[int, str], threshold: float, max_objects: int = MAX_OBJECTS
) -> dict[str, list[Segment]]:
    """One image's segments by GenEval class name from `post_process_instance_segmentation(...,
    return_binary_maps=True)`'s result: those scoring above `threshold`, most confident first, at most
    `max_objects` per class."""
    info = result["segments_info"]
    if not info:
        return {}
    maps = result["segmentation"]
    maps = (maps.detach().cpu().numpy() if hasattr(maps, "detach") else np.asarray(maps)) > 0.5
    by_class: dict[str, list[Segment]] = {}
    for segment in sorted(info, key=lambda s: -s["score"]):
        if not segment["score"] > threshold:
            continue
        mask = maps[segment["id"]]
        if not mask.any():
            continue
        name = geneval_name(id2label[int(segment["label_id"])])
        kept = by_class.setdefault(name, [])
        if len(kept) < max_objects:
            detection = Detection(
                shape=name, color=None, box=box_of(mask), area=int(mask.sum()), iou=float(segment["score"])
            )
            kept.append(Segment(detection, mask))
    return by_class


@functools.cache
def _load_detector_cached(name: str, device: str):
    from transformers import AutoImageProcessor, Mask2FormerForUniversalSegmentation

    try:
        model = Mask2FormerForUniversalSegmentation.from_pretrained(name).to(device).eval()
        processor = AutoImageProcessor.from_pretrained(name)
    except Exception as error:  # a missing folder, a wrong model type, no network: one line naming the path
        raise ScorerLoadError(f"cannot load the GenEval detector {name!r}: {first_line(error)}") from None
    if not hasattr(processor, "post_process_instance_segmentation"):
        raise ScorerLoadError(
            f"GenEval detector {name!r}: its processor ({type(processor).__name__}) has no instance segmentation"
        )
    return model, processor


def load_detector(name: str = DEFAULT_DETECTOR, device: str = "cpu"):
    """(Mask2FormerForUniversalSegmentation in eval mode on `device`, its image processor), loaded once per
    (name, device)."""
    with _LOCK:
        return _load_detector_cached(str(name), str(device))


def detect(
    images: np.ndarray,
    thresholds: Sequence[float],
    detector: str = DEFAULT_DETECTOR,
    device: str = "cpu",
    batch_size: int = 8,
) -> list[dict[str, list[Segment]]]:
    """Per image (uint8 B x H x W x 3), its segments by GenEval class name above the image's threshold."""
    import torch

    model, processor = load_detector(detector, device)
    id2label = {int(key): value for key, value in model.config.id2label.items()}
    height, width = images.shape[1:3]
    found: list[dict[str, list[Segment]]] = []
    for start in range(0, len(images), batch_size):
        chunk, limits = images[start : start + batch_size], thresholds[start : start + batch_size]
        inputs = processor(images=list(chunk), return_tensors="pt").to(device)
        with torch.inference_mode():
            outputs = model(**inputs)
        results = processor.post_process_instance_segmentation(
            outputs,
            threshold=min(limits),
            target_sizes=[(height, width)] * len(chunk),
            return_binary_maps=True,
        )
        found += [segments_from_result(r, id2label, t) for r, t in zip(results, limits, strict=True)]
    return found


# ---------------------------------------------------------------------------------------------------------
# Colour


def color_crops(image: np.ndarray, segments: Sequence[Segment]):
    """Each segment's crop of `image` (H x W x 3 uint8) as a PIL image: its box, grey (#999999) outside its mask."""
    from PIL import Image

    crops = []
    for segment in segments:
        x0, y0, x1, y1 = segment.detection.box
        picture = np.where(segment.mask[..., None], image, np.array(BACKGROUND, dtype=np.uint8))
        crops.append(Image.fromarray(np.ascontiguousarray(picture[y0:y1, x0:x1])))
    return crops


def _features(output):
    return getattr(output, "pooler_output", output)  # transformers 5 returns an output object


@functools.cache
def _color_classifier(clip: str, device: str, name: str):
    """(embedding size x 10) text embeddings of the colours for class `name`: per colour, the normalised mean of
    the normalised embeddings of its three templates."""
    import torch

    model, processor = load_clip(clip, None, device)
    texts = [template.format(color=c, name=name) for c in COLORS for template in COLOR_TEMPLATES]
    tokens = processor.tokenizer(
        texts,
        padding=True,
        truncation=True,
        max_length=model.config.text_config.max_position_embeddings,
        return_tensors="pt",
    ).to(device)
    with torch.inference_mode():
        embeddings = _features(model.get_text_features(**tokens)).float()
    embeddings = torch.nn.functional.normalize(embeddings, dim=-1).reshape(
        len(COLORS), len(COLOR_TEMPLATES), -1
    )
    return torch.nn.functional.normalize(embeddings.mean(dim=1), dim=-1).T


def classify_colors(
    image: np.ndarray, segments: Sequence[Segment], name: str, clip: str = DEFAULT_CLIP, device: str = "cpu"
) -> list[str]:
    """GenEval's colour name for each segment of class `name` (CLIP zero-shot on its masked crop)."""
    import torch

    if not segments:
        return []
    model, processor = load_clip(clip, None, device)
    pixels = processor(images=color_crops(image, segments), return_tensors="pt")["pixel_values"].to(device)
    with torch.inference_mode():
        features = _features(model.get_image_features(pixel_values=pixels)).float()
    logits = torch.nn.functional.normalize(features, dim=-1) @ _color_classifier(clip, device, name)
    return [COLORS[int(index)] for index in logits.argmax(dim=1).cpu()]


def with_colors(
    image: np.ndarray,
    segments: dict[str, list[Segment]],
    record: dict[str, Any],
    clip: str = DEFAULT_CLIP,
    device: str = "cpu",
) -> dict[str, list[Detection]]:
    """The detections by class, the most confident of each class a request asks a colour of given their CLIP
    colour (as many as the largest such count: all the rules read; the rest keep None)."""
    wanted: dict[str, int] = {}
    for request in record["include"]:
        if "color" in request:
            wanted[request["class"]] = max(wanted.get(request["class"], 0), request["count"])
    objects = {}
    for name, found in segments.items():
        colors = classify_colors(image, found[: wanted.get(name, 0)], name, clip, device)
        objects[name] = [
            dataclasses.replace(s.detection, color=colors[i]) if i < len(colors) else s.detection
            for i, s in enumerate(found)
        ]
    return objects


# ---------------------------------------------------------------------------------------------------------
# The reward


def preload(
    detector: str = DEFAULT_DETECTOR, clip: str = DEFAULT_CLIP, device: str = "cpu", **_: Any
) -> None:
    """Load the detector and CLIP now, so a bad path fails when the service or the run starts."""
    load_detector(detector, device)
    load_clip(clip, None, device)


def gen_eval(
    media: np.ndarray,
    prompts: Sequence[str] = (),
    metadata: Sequence[dict[str, Any]] | None = None,
    detector: str = DEFAULT_DETECTOR,
    clip: str = DEFAULT_CLIP,
    device: str = "cpu",
    only_strict: bool = False,
    batch_size: int = 8,
) -> dict[str, Any]:
    """GenEval (the cosmos-rl reward service's `gen_eval`): each image judged against its GenEval record
    (`metadata[i]`: `tag` and `include`). Returns `gen_eval_score` (partial credit, the score trainers use),
    `gen_eval_reward` (GenEval's 1/0, 0 with `only_strict`), `gen_eval_strict` (1/0, exact counts) and
    `gen_eval_group` ({tag: list}, -10.0 for other tags). Images only (B x H x W x C); videos are refused.
    `batch_size`: images per detector pass."""
    media = check_media(media)
    if media.ndim != 4:
        raise ValueError(f"gen_eval scores images (B x H x W x C), not videos; got shape {media.shape}")
    if metadata is None or len(metadata) != len(media):
        got = "no metadata" if metadata is None else f"{len(metadata)} records"
        raise ValueError(
            f"gen_eval needs one GenEval record (tag, include) per image as metadata: {len(media)} images, {got}"
        )
    if not (isinstance(batch_size, int) and batch_size > 0):
        raise ValueError(f"gen_eval: batch_size must be a positive integer, got {batch_size!r}")
    records = [check_record(record, index) for index, record in enumerate(metadata)]
    images = _rgb(media)
    segments = detect(images, [confidence_threshold(r) for r in records], detector, device, batch_size)
    values = [
        score_record(with_colors(image, found, record, clip, device), record, only_strict)
        for image, found, record in zip(images, segments, records, strict=True)
    ]
    return {
        "gen_eval_score": [v["gen_eval_score"] for v in values],
        "gen_eval_reward": [v["gen_eval_reward"] for v in values],
        "gen_eval_strict": [v["gen_eval_strict"] for v in values],
        "gen_eval_group": {tag: [v["gen_eval_group"][tag] for v in values] for tag in TAGS},
    }
