"""Image/video + caption pairs for diffusion training.

    dataset, report = load_pairs(job.data, video=adapter.video)   # validated once, decoded lazily
    batch = collate_pairs([dataset[0], dataset[1]])                # {"pixels", "prompts", "metadata", "keys"}

Their latents and text embeddings can be cached (`cosmos_train.diffusion.latent_cache`).

Sources (`[data] format`, or `"auto"` by looking at `path`):
- `folder`: pairs sharing a basename anywhere under the folder, `0001.json` (`{"prompt": ..., other keys pass
  through as metadata}`) with `0001.jpg|jpeg|png|webp` or `0001.mp4`;
- `cosmos_predict`: the Cosmos-Predict2.5 layout, `videos/*.mp4` (or `images/*`) with `metas/*.txt` captions
  matched by name. Its `*.pickle` text-embedding caches are never opened (unpickling runs code): captions are
  encoded by the pipeline's own text encoder;
- `hf`: a `datasets` source (a `save_to_disk` folder, a hub name or local data files), with the image (or
  video) and caption columns named by `image_column` / `video_column` / `caption_column`.

Bad pairs are reported as in SFT (`loading.collect_rows`): one line `"{file}: {reason}"`, or skipped and counted
with `skip_bad`.
"""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from cosmos_train.data.media import _reason, image_problem, load_image
from cosmos_train.data.records import BadRecord, DataReport, collect_rows, hf_dataset
from cosmos_train.errors import DataError

logger = logging.getLogger("cosmos_train.data")

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")
VIDEO_SUFFIXES = (".mp4",)
_MEDIA_NAMES = "jpg|jpeg|png|webp|mp4"
_PICKLE_SUFFIXES = (".pickle", ".pkl")


# --- loading ----------------------------------------------------------------------------------------------


def load_pairs(data, video: bool) -> tuple[PairDataset, DataReport]:
    """Read and validate `data` (the `[data]` section, `cosmos_train.config.PairData`) for an image (`video=False`)
    or video pipeline. Raises a one-line `DataError` for unusable data."""
    if video and not data.num_frames:
        raise DataError(f"{data.path}: the pipeline makes videos: set [data] num_frames")
    fmt = detect_format(data.path) if data.format == "auto" else data.format
    hf = None
    if fmt == "folder":
        records, normalize = _folder_records(Path(data.path), video), _FolderPair(data, video)
    elif fmt == "cosmos_predict":
        records, normalize = _cosmos_records(Path(data.path), video), _CosmosPair(data, video)
    elif fmt == "hf":
        hf, records, normalize = _hf_source(data, video)
    else:
        raise DataError(f"{data.path}: unknown data format {fmt!r}")
    rows, report = collect_rows(records, normalize, data.path, data.skip_bad, noun="pairs")
    return PairDataset(rows, data, video, hf=hf), report


def detect_format(path: str) -> str:
    """`cosmos_predict` for `metas/` beside `videos/` or `images/`; `folder` for a folder holding `*.json` pairs
    (and not a `save_to_disk` folder); otherwise `hf`."""
    root = Path(path)
    if not root.is_dir():
        return "hf"
    if (root / "metas").is_dir() and ((root / "videos").is_dir() or (root / "images").is_dir()):
        return "cosmos_predict"
    if any((root / name).exists() for name in ("dataset_dict.json", "state.json")):
        return "hf"
    if any(file.suffix == ".json" for file in _files(root)):
        return "folder"
    return "hf"


def _files(root: Path) -> Iterator[Path]:
    """Files under `root` in a stable order, hidden files and folders left out."""
    for folder, folders, names in os.walk(root):
        folders[:] = sorted(name for name in folders if not name.startswith("."))
        for name in sorted(names):
            if not name.startswith("."):
                yield Path(folder) / name


def _kind(path: Path) -> str | None:
    suffix = path.suffix.lower()
    return "image" if suffix in IMAGE_SUFFIXES else "video" if suffix in VIDEO_SUFFIXES else None


def _wrong_kind(path: str, found: str, video: bool) -> DataError:
    wanted = "videos" if video else "images"
    return DataError(f"{path}: the data are {found}s but the pipeline makes {wanted}")


def _folder_records(root: Path, video: bool) -> Iterator[tuple[str, Any]]:
    groups: dict[Path, dict[str, Any]] = {}
    for file in _files(root):
        if file.suffix == ".json" or _kind(file):
            group = groups.setdefault(file.with_suffix(""), {"json": None, "media": []})
            if file.suffix == ".json":
                group["json"] = file
            else:
                group["media"].append(file)
    kinds = {_kind(file) for group in groups.values() for file in group["media"]}
    if kinds and (("video" if video else "image") not in kinds):
        raise _wrong_kind(str(root), kinds.pop(), video)
    for stem, group in groups.items():
        caption, media = group["json"], group["media"]
        if caption is None:
            yield str(media[0]), BadRecord(f"no caption file {stem.name}.json")
        elif not media:
            yield str(caption), BadRecord(f"no media file {stem.name}.{_MEDIA_NAMES}")
        elif len(media) > 1:
            yield str(caption), BadRecord(f"several media files ({', '.join(m.name for m in media)})")
        else:
            yield (
                str(caption),
                {"caption": caption, "media": media[0], "key": stem.relative_to(root).as_posix()},
            )


def _cosmos_records(root: Path, video: bool) -> Iterator[tuple[str, Any]]:
    pickles = [file for file in _files(root) if file.suffix in _PICKLE_SUFFIXES]
    if pickles:  # listing names is safe; loading one could run arbitrary code
        logger.warning(
            "%s: ignoring %d pickle file(s) such as %s: pickles are never loaded; the captions in metas/ are "
            "encoded with the pipeline's text encoder",
            root,
            len(pickles),
            pickles[0].relative_to(root),
        )
    folder = "videos" if video else "images"
    if not (root / folder).is_dir():
        raise _wrong_kind(str(root), "video" if folder == "images" else "image", video)
    media = {
        file.relative_to(root / folder).with_suffix(""): file for file in _files(root / folder) if _kind(file)
    }
    metas = {file.relative_to(root / "metas").with_suffix(""): file for file in _files(root / "metas")}
    metas = {stem: file for stem, file in metas.items() if file.suffix == ".txt"}
    for stem in sorted(media.keys() | metas.keys()):
        if stem not in metas:
            yield str(media[stem]), BadRecord(f"no caption metas/{stem.as_posix()}.txt")
        elif stem not in media:
            yield str(metas[stem]), BadRecord(f"no {folder[:-1]} for this caption in {folder}/")
        else:
            yield str(media[stem]), {"caption": metas[stem], "media": media[stem], "key": stem.as_posix()}


class _Checker:
    """Turns one record into a row `{"key", "media", "prompt", "metadata", "frames"}` after checking its media."""

    def __init__(self, data, video: bool):
        self.data, self.video = data, video

    def prompt(self, value: Any, where: str = "'prompt'") -> str:
        if not isinstance(value, str):
            raise BadRecord(f"{where} is not text ({type(value).__name__})")
        if not value.strip():
            raise BadRecord(f"empty {where}")
        return value

    def media(self, source: Any, name: str) -> int | None:
        """Check an image or video (a path or encoded bytes); for a video, its frame count when the header has one."""
        if not self.video:
            problem = image_problem(source)
            if problem:
                raise BadRecord(f"corrupt image {name}: {problem}")
            return None
        problem, frames = _probe_video(source)
        if problem:
            raise BadRecord(f"corrupt video {name}: {problem}")
        if frames and frames < self.data.num_frames:
            raise BadRecord(
                f"video {name} has {frames} frames, fewer than num_frames = {self.data.num_frames}"
            )
        return frames


class _FolderPair(_Checker):
    def __call__(self, record: dict[str, Any]) -> dict[str, Any]:
        try:
            fields = json.loads(record["caption"].read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise BadRecord(
                f"invalid JSON ({error.msg} at line {error.lineno} column {error.colno})"
            ) from None
        except UnicodeDecodeError:
            raise BadRecord("not UTF-8 text") from None
        if not isinstance(fields, dict):
            raise BadRecord(f"expected a JSON object, got {type(fields).__name__}")
        if "prompt" not in fields:
            raise BadRecord("no 'prompt'")
        prompt = self.prompt(fields.pop("prompt"))
        media = record["media"]
        if (_kind(media) == "video") != self.video:
            raise BadRecord(f"{media.name} is a {_kind(media)}, but the pipeline makes {self._wanted}")
        frames = self.media(str(media), media.name)
        return {
            "key": record["key"],
            "media": str(media),
            "prompt": prompt,
            "metadata": fields,
            "frames": frames,
        }

    @property
    def _wanted(self) -> str:
        return "videos" if self.video else "images"


class _CosmosPair(_Checker):
    def __call__(self, record: dict[str, Any]) -> dict[str, Any]:
        try:
            caption = record["caption"].read_text(encoding="utf-8").strip()
        except UnicodeDecodeError:
            raise BadRecord(f"caption {record['caption'].name} is not UTF-8 text") from None
        if not caption:
            raise BadRecord(f"empty caption metas/{record['caption'].name}")
        media = record["media"]
        frames = self.media(str(media), media.name)
        return {
            "key": record["key"],
            "media": str(media),
            "prompt": caption,
            "metadata": {},
            "frames": frames,
        }


def _hf_source(data, video: bool):
    """(the media column as a `datasets.Dataset`, records, normalize) for a `datasets` source."""
    import datasets

    if video and not data.video_column:
        raise DataError(
            f"{data.path}: the pipeline makes videos: set [data] video_column to the video column"
        )
    if not video and data.video_column:
        raise _wrong_kind(data.path, "video", video)
    column = data.video_column if video else data.image_column
    dataset = hf_dataset(data)
    for name, role in (
        (column, "video_column" if video else "image_column"),
        (data.caption_column, "caption_column"),
    ):
        if name not in dataset.column_names:
            raise DataError(
                f"{data.path}: no column {name!r} (has: {', '.join(dataset.column_names)}); set [data] {role}"
            )
    feature = dataset.features[column]
    if isinstance(feature, datasets.Image | getattr(datasets, "Video", datasets.Image)):
        # Keep the stored {"bytes", "path"}: checking and decoding are ours, and nothing is decoded twice.
        dataset = dataset.cast_column(column, type(feature)(decode=False))
    passthrough = [
        name
        for name, value in dataset.features.items()
        if name not in (column, data.caption_column) and isinstance(value, datasets.Value)
    ]
    root = Path(data.path) if Path(data.path).is_dir() else Path.cwd()

    def records() -> Iterator[tuple[str, Any]]:
        # Arrow rows are the stored values, so embedded media arrive as bytes without being decoded.
        table = dataset.select_columns([column, data.caption_column, *passthrough]).with_format("arrow")
        index = 0
        for batch in table.iter(batch_size=256):
            for row in batch.to_pylist():
                yield f"{data.path}[{index}]", (index, row)
                index += 1

    checker = _Checker(data, video)

    def normalize(record: tuple[int, dict[str, Any]]) -> dict[str, Any]:
        index, row = record
        prompt = checker.prompt(row[data.caption_column], f"{data.caption_column!r}")
        value = row[column]
        if isinstance(value, dict) and value.get("bytes"):
            frames = checker.media(value["bytes"], f"{value.get('path') or '(embedded)'}")
            media: str | int = index  # fetched from the dataset when used, so the bytes are not held twice
        else:
            path = value.get("path") if isinstance(value, dict) else value
            if not isinstance(path, str) or not path:
                raise BadRecord(
                    f"{column!r} is neither a file path nor encoded media ({type(value).__name__})"
                )
            media = str((root / path).resolve())
            if not os.path.isfile(media):
                raise BadRecord(f"missing {'video' if video else 'image'} {path}")
            frames = checker.media(media, path)
        metadata = {name: row[name] for name in passthrough}
        return {"key": str(index), "media": media, "prompt": prompt, "metadata": metadata, "frames": frames}

    return dataset.select_columns([column]), records(), normalize


def _probe_video(source: str | bytes) -> tuple[str | None, int | None]:
    """(why a video is unusable or None, its frame count from the header or None): a video stream whose first
    frame decodes, as `media.video_problem`, for a path or encoded bytes."""
    import av

    try:
        with av.open(io.BytesIO(source) if isinstance(source, bytes) else source) as container:
            if not container.streams.video:
                return "no video stream", None
            stream = container.streams.video[0]
            for _ in container.decode(stream):
                return None, int(stream.frames) or None
            return "no decodable video frame", None
    except Exception as error:  # PyAV raises many error types for damaged containers; all mean unusable
        return _reason(error), None


# --- the dataset ------------------------------------------------------------------------------------------


def fit(image: Image.Image, height: int, width: int) -> np.ndarray:
    """Resize so the image covers `height x width` (shorter side first), then centre-crop: `H x W x 3` uint8."""
    scale = max(height / image.height, width / image.width)
    size = (max(width, round(image.width * scale)), max(height, round(image.height * scale)))
    if size != image.size:
        image = image.resize(size, Image.Resampling.BICUBIC, reducing_gap=3.0)
    left, top = (size[0] - width) // 2, (size[1] - height) // 2
    return np.array(image.crop((left, top, left + width, top + height)).convert("RGB"))  # a writable copy


def _to_unit(pixels: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(pixels).float().div(127.5).sub(1.0)


class PairDataset(torch.utils.data.Dataset):
    """Validated pairs; `dataset[i]` decodes one: `{"pixels", "prompt", "metadata", "key"}`.

    `pixels` is float32 in [-1, 1], `3 x H x W` for images and `3 x T x H x W` for videos (T = `num_frames`
    consecutive frames from a start drawn with torch's global RNG, so a resumed Trainer redraws the same)."""

    def __init__(self, rows: list[dict[str, Any]], data, video: bool, hf=None):
        self.rows, self.video, self._hf = rows, video, hf
        self.height, self.width = data.height, data.width
        self.num_frames = data.num_frames if video else None

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.get(index)

    def get(self, index: int, start: int | None = None) -> dict[str, Any]:
        """Item `index`; for a video the window starts at frame `start` (None: a random start)."""
        row = self.rows[index]
        if self.video:
            if start is None:
                start = int(torch.randint(0, self.frame_count(index) - self.num_frames + 1, ()).item())
            frames = self._window(index, start)
            pixels = _to_unit(np.stack([fit(f, self.height, self.width) for f in frames])).permute(3, 0, 1, 2)
        else:
            image = load_image(self._source(index))
            pixels = _to_unit(fit(image, self.height, self.width)).permute(2, 0, 1)
        return {
            "pixels": pixels,
            "prompt": row["prompt"],
            "metadata": dict(row["metadata"]),
            "key": row["key"],
        }

    def name(self, index: int) -> str:
        """The media file (or dataset row) of item `index`, for messages."""
        media = self.rows[index]["media"]
        return media if isinstance(media, str) else f"row {media}"

    def media_bytes(self, index: int) -> bytes:
        media = self._source(index)
        if isinstance(media, dict):
            return media["bytes"]
        return Path(media).read_bytes()

    def frame_count(self, index: int) -> int:
        """Frames in video `index`: from its header, else counted by decoding (once)."""
        row = self.rows[index]
        if not row["frames"]:
            import av

            with av.open(self._open(index)) as container:
                row["frames"] = sum(1 for _ in container.decode(container.streams.video[0]))
            if row["frames"] < self.num_frames:
                raise self._too_short(index, row["frames"])
        return row["frames"]

    def _source(self, index: int) -> str | dict[str, Any]:
        media = self.rows[index]["media"]
        return media if isinstance(media, str) else self._hf[media][self._hf.column_names[0]]

    def _open(self, index: int):
        source = self._source(index)
        return io.BytesIO(source["bytes"]) if isinstance(source, dict) else source

    def _too_short(self, index: int, frames: int) -> DataError:
        return DataError(
            f"{self.name(index)}: video has {frames} decodable frames, fewer than num_frames = {self.num_frames}"
        )

    def _window(self, index: int, start: int) -> list[Image.Image]:
        import av

        frames: list[Image.Image] = []
        decoded = 0
        with av.open(self._open(index)) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            for decoded, frame in enumerate(container.decode(stream), start=1):
                if decoded > start:
                    frames.append(frame.to_image())
                    if len(frames) == self.num_frames:
                        return frames
        raise self._too_short(index, decoded)  # the header promised more frames than decode


def collate_pairs(items: list[dict[str, Any]], ragged: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Batch `PairDataset` items (`pixels`) or `CachedPairs` items (`latents`, `conditioning`; the `ragged`
    conditioning keys, `adapter.ragged_conditioning`, are right-padded with zeros to the longest row; None pads
    the keys whose lengths differ in this batch)."""
    batch: dict[str, Any] = {
        "prompts": [item["prompt"] for item in items],
        "metadata": [item["metadata"] for item in items],
        "keys": [item["key"] for item in items],
    }
    if "pixels" in items[0]:
        batch["pixels"] = torch.stack([item["pixels"] for item in items])
    else:
        rows = [item["conditioning"] for item in items]
        if ragged is None:
            ragged = tuple(key for key in rows[0] if len({row[key].shape for row in rows}) > 1)
        batch["latents"] = torch.stack([item["latents"] for item in items])
        batch["conditioning"] = pad_ragged(rows, ragged)
    return batch


def pad_ragged(rows: list[dict[str, torch.Tensor]], ragged: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """Stack per-sample conditioning; `ragged` keys are right-padded with zeros to the longest row."""
    out: dict[str, Any] = {}
    for key in rows[0]:
        values = [row[key] for row in rows]
        if key in ragged:
            longest = max(v.shape[0] for v in values)
            values = [
                torch.nn.functional.pad(v, (0, 0) * (v.dim() - 1) + (0, longest - v.shape[0])) for v in values
            ]
        out[key] = torch.stack(values)
    return out


__all__ = ["PairDataset", "collate_pairs", "detect_format", "load_pairs", "pad_ragged"]
