"""GenEval-mini's evaluator: scores a picture against its GenEval record the way GenEval does per task, with a
detector made for the domain instead of Mask2Former and CLIP.

    objects, regions = detect(image, colors, shapes)      # {shape: [Detection, ...]}, most confident first
    verdict = evaluate(image, record, colors, shapes)     # Verdict(correct, score, reasons)
    geneval_mini(media, prompts, metadata)                # the reward: one score per sample

Detection: each pixel takes its nearest named colour (or the background) when it lies within `tolerance` of
it; each colour's connected regions (4-connected, at least `min_area` pixels) are objects of that colour. A
region's shape is the vocabulary shape whose filled template, drawn in the region's bounding box, overlaps it
best (intersection over union); under `min_iou` the region is malformed and counts as no object.

Judging follows GenEval's `evaluate`, by the rules the `gen_eval` reward shares (`cosmos_train.rewards.geneval_rules`:
`judge`, `relative_position` with GenEval's 0.1 threshold): for each `include`, the `count` most confident objects
of the class must exist; with a `color`, that many of them must have it; with a `position`, each must stand in that
relation to every object of the group it names; each `exclude` caps a class's count. `correct` is GenEval's score;
`score` is the share of requirements met (the partial credit a reward gives; Flow-GRPO's GenEval reward gives one
too).

The rewards are reached as any user reward, by import path, with `benchmarks/` on `sys.path`:

    [rewards]
    "domains.geneval_mini.evaluator:geneval_mini" = { weight = 1.0, strict = true }
    "domains.geneval_mini.evaluator:well_formed_shapes" = 0.0
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from cosmos_train.rewards.geneval_rules import Detection, Verdict, judge
from cosmos_train.rewards.media import per_clip

from .domain import BACKGROUND, NAMED_COLORS, SHAPES, TASKS, Vocabulary, shape_mask

DEFAULT_TOLERANCE = 90.0  # RGB distance: half the gap between the closest named colours, roughly
DEFAULT_MIN_IOU = 0.6  # below it a region is malformed; the shape is the best match (a circle in a square's box scores pi / 4)


def segment_colors(
    image: np.ndarray, colors: Sequence[str], tolerance: float = DEFAULT_TOLERANCE
) -> np.ndarray:
    """Per pixel, the index of its nearest colour in `colors` (the background is -1); -2 where none lies
    within `tolerance`."""
    palette = np.array([BACKGROUND] + [NAMED_COLORS[c] for c in colors], dtype=np.float32)
    pixels = image[..., :3].astype(np.float32)
    distance = np.linalg.norm(pixels[:, :, None, :] - palette[None, None], axis=-1)
    nearest = distance.argmin(-1)
    labels = nearest - 1
    labels[distance.min(-1) > tolerance] = -2
    return labels


def detect(
    image: np.ndarray,
    colors: Sequence[str] = tuple(NAMED_COLORS),
    shapes: Sequence[str] = SHAPES,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    min_area: int | None = None,
    min_iou: float = DEFAULT_MIN_IOU,
    labels: np.ndarray | None = None,
) -> tuple[dict[str, list[Detection]], list[Detection]]:
    """The objects of `image` (H x W x 3 uint8) by shape, most confident first, and every region found
    (malformed ones included). `min_area` defaults to 1/100 of the image."""
    from scipy import ndimage

    if min_area is None:
        min_area = max(4, image.shape[0] * image.shape[1] // 100)
    if labels is None:
        labels = segment_colors(image, colors, tolerance)
    regions = []
    for index, color in enumerate(colors):
        components, _ = ndimage.label(labels == index)
        for number, slices in enumerate(ndimage.find_objects(components), start=1):
            mask = components[slices] == number
            area = int(mask.sum())
            if area < min_area:
                continue
            rows, cols = slices
            height, width = mask.shape
            ious = {shape: _iou(mask, shape_mask(shape, width, height)) for shape in shapes}
            best = max(ious, key=ious.get)
            regions.append(
                Detection(
                    shape=best if ious[best] >= min_iou else None,
                    color=color,
                    box=(cols.start, rows.start, cols.stop, rows.stop),
                    area=area,
                    iou=ious[best],
                )
            )
    objects: dict[str, list[Detection]] = {}
    for region in sorted(regions, key=lambda r: (-r.iou, -r.area)):
        if region.shape is not None:
            objects.setdefault(region.shape, []).append(region)
    return objects, regions


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / max(1, (a | b).sum()))


def evaluate(
    image: np.ndarray,
    record: dict[str, Any],
    colors: Sequence[str] = tuple(NAMED_COLORS),
    shapes: Sequence[str] = SHAPES,
    **detector: Any,
) -> Verdict:
    """Detect the objects of `image` and judge them against `record` (a GenEval metadata record)."""
    objects, _ = detect(image, colors, shapes, **detector)
    return judge(objects, record)


def well_formed_share(
    image: np.ndarray, colors: Sequence[str] = tuple(NAMED_COLORS), shapes: Sequence[str] = SHAPES
) -> float:
    """The share of `image`'s coloured pixels that lie in well-formed objects: 1 for ground-truth pictures,
    lower as shapes smear, split or bleed, 0 for a picture with no colour. A distance to the data that needs
    no prompt."""
    labels = segment_colors(image, colors)
    colored = int((labels != -1).sum())
    if colored == 0:
        return 0.0
    _, regions = detect(image, colors, shapes, labels=labels)
    return sum(region.area for region in regions if region.shape is not None) / colored


def task_scores(correct: Sequence[float], tags: Sequence[str]) -> dict[str, float]:
    """Mean score per task and `overall`, their mean over the tasks present (GenEval's overall)."""
    per_task = {
        task: float(np.mean([c for c, t in zip(correct, tags, strict=True) if t == task]))
        for task in TASKS
        if task in tags
    }
    return {"overall": float(np.mean(list(per_task.values()))) if per_task else 0.0, **per_task}


def bootstrap_error(
    correct: Sequence[float], tags: Sequence[str], rounds: int = 2000, seed: int = 0
) -> float:
    """The standard error of the overall score (`task_scores`), bootstrapped: every task's samples redrawn with
    replacement (each task keeps its number of samples, as a balanced evaluation fixes it), the spread of the
    overall scores so drawn."""
    rng = np.random.default_rng(seed)
    scores = np.asarray(correct, dtype=np.float64)
    groups = [scores[[t == task for t in tags]] for task in TASKS if task in tags]
    draws = np.mean([g[rng.integers(len(g), size=(rounds, len(g)))].mean(1) for g in groups], axis=0)
    return float(draws.std(ddof=1))


@per_clip
def geneval_mini(
    media: np.ndarray,
    prompts: Sequence[str] = (),
    metadata: Sequence[dict[str, Any]] | None = None,
    *,
    colors: Sequence[str] | None = None,
    shapes: Sequence[str] | None = None,
    strict: bool = False,
    tolerance: float = DEFAULT_TOLERANCE,
    min_iou: float = DEFAULT_MIN_IOU,
) -> list[float]:
    """GenEval-mini: each image judged against its prompt's GenEval record (the prompt list's metadata), 1 or 0
    with `strict`, else the share of the record's requirements met. `colors` and `shapes`: the vocabulary
    (default: every named colour and shape). Videos are scored frame by frame and averaged."""
    if metadata is None or any(not isinstance(m, dict) or "include" not in m for m in metadata):
        raise ValueError(
            "geneval_mini needs each prompt's GenEval record as metadata: use a `*_metadata.jsonl` prompt list"
        )
    colors, shapes = _vocabulary(colors, shapes)
    verdicts = [
        evaluate(image, record, colors, shapes, tolerance=tolerance, min_iou=min_iou)
        for image, record in zip(media, metadata, strict=True)
    ]
    return [float(v.correct) if strict else v.score for v in verdicts]


@per_clip
def well_formed_shapes(
    media: np.ndarray,
    prompts: Sequence[str] = (),
    metadata: Sequence[dict[str, Any]] | None = None,
    *,
    colors: Sequence[str] | None = None,
    shapes: Sequence[str] | None = None,
) -> list[float]:
    """The share of each picture's coloured pixels inside well-formed shapes (`well_formed_share`), whatever the
    prompt: how close samples stay to the domain's clean pictures. Videos: averaged over frames."""
    colors, shapes = _vocabulary(colors, shapes)
    return [well_formed_share(image, colors, shapes) for image in media]


def _vocabulary(colors, shapes) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The reward's colours and shapes (default: every named one), checked by `Vocabulary` for a clear error."""
    colors, shapes = tuple(colors or NAMED_COLORS), tuple(shapes or SHAPES)
    Vocabulary(colors=colors, shapes=shapes)
    return colors, shapes
