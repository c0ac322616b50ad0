"""Image/video + caption pairs for diffusion training, and an optional safetensors cache of their encodings.

    dataset, report = load_pairs(job.data, video=adapter.video)   # validated once, decoded lazily
    batch = collate_pairs([dataset[0], dataset[1]])                # {"pixels", "prompts", "metadata", "keys"}
    cached = cache_pairs(dataset, adapter, cache_dir)              # optional: {"latents", "conditioning", ...}

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

import hashlib
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

from cosmos_train.data.loading import DataError, DataReport, _BadRecord, _hf_dataset, collect_rows
from cosmos_train.data.media import _reason, image_problem, load_image

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
            yield str(media[0]), _BadRecord(f"no caption file {stem.name}.json")
        elif not media:
            yield str(caption), _BadRecord(f"no media file {stem.name}.{_MEDIA_NAMES}")
        elif len(media) > 1:
            yield str(caption), _BadRecord(f"several media files ({', '.join(m.name for m in media)})")
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
            yield str(media[stem]), _BadRecord(f"no caption metas/{stem.as_posix()}.txt")
        elif stem not in media:
            yield str(metas[stem]), _BadRecord(f"no {folder[:-1]} for this caption in {folder}/")
        else:
            yield str(media[stem]), {"caption": metas[stem], "media": media[stem], "key": stem.as_posix()}


class _Checker:
    """Turns one record into a row `{"key", "media", "prompt", "metadata", "frames"}` after checking its media."""

    def __init__(self, data, video: bool):
        self.data, self.video = data, video

    def prompt(self, value: Any, where: str = "'prompt'") -> str:
        if not isinstance(value, str):
            raise _BadRecord(f"{where} is not text ({type(value).__name__})")
        if not value.strip():
            raise _BadRecord(f"empty {where}")
        return value

    def media(self, source: Any, name: str) -> int | None:
        """Check an image or video (a path or encoded bytes); for a video, its frame count when the header has one."""
        if not self.video:
            problem = image_problem(source)
            if problem:
                raise _BadRecord(f"corrupt image {name}: {problem}")
            return None
        problem, frames = _probe_video(source)
        if problem:
            raise _BadRecord(f"corrupt video {name}: {problem}")
        if frames and frames < self.data.num_frames:
            raise _BadRecord(
                f"video {name} has {frames} frames, fewer than num_frames = {self.data.num_frames}"
            )
        return frames


class _FolderPair(_Checker):
    def __call__(self, record: dict[str, Any]) -> dict[str, Any]:
        try:
            fields = json.loads(record["caption"].read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise _BadRecord(
                f"invalid JSON ({error.msg} at line {error.lineno} column {error.colno})"
            ) from None
        except UnicodeDecodeError:
            raise _BadRecord("not UTF-8 text") from None
        if not isinstance(fields, dict):
            raise _BadRecord(f"expected a JSON object, got {type(fields).__name__}")
        if "prompt" not in fields:
            raise _BadRecord("no 'prompt'")
        prompt = self.prompt(fields.pop("prompt"))
        media = record["media"]
        if (_kind(media) == "video") != self.video:
            raise _BadRecord(f"{media.name} is a {_kind(media)}, but the pipeline makes {self._wanted}")
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
            raise _BadRecord(f"caption {record['caption'].name} is not UTF-8 text") from None
        if not caption:
            raise _BadRecord(f"empty caption metas/{record['caption'].name}")
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
    dataset = _hf_dataset(data)
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
                raise _BadRecord(
                    f"{column!r} is neither a file path nor encoded media ({type(value).__name__})"
                )
            media = str((root / path).resolve())
            if not os.path.isfile(media):
                raise _BadRecord(f"missing {'video' if video else 'image'} {path}")
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
        from cosmos_train.diffusion.adapter import pad_ragged

        rows = [item["conditioning"] for item in items]
        if ragged is None:
            ragged = tuple(key for key in rows[0] if len({row[key].shape for row in rows}) > 1)
        batch["latents"] = torch.stack([item["latents"] for item in items])
        batch["conditioning"] = pad_ragged(rows, ragged)
    return batch


# --- the latent / text-embedding cache --------------------------------------------------------------------

CACHE_FORMAT = "cosmos-train-pairs-cache-v1"


def _config_dict(module: torch.nn.Module) -> dict[str, Any]:
    config = getattr(module, "config", None)
    if config is None:
        return {}
    values = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    # Paths and library versions do not change what the encoder computes.
    return {k: v for k, v in values.items() if not k.startswith("_") and k != "transformers_version"}


def encoder_fingerprint(adapter) -> str:
    """sha256 of what the cached encodings depend on besides the inputs: the adapter's class and options, and
    the class, config and every parameter and buffer of `adapter.vae_modules()` and `text_encoder_modules()`."""
    digest = hashlib.sha256(f"{CACHE_FORMAT}\n{type(adapter).__qualname__}\n{adapter.options!r}\n".encode())
    for role, modules in (("vae", adapter.vae_modules()), ("text", adapter.text_encoder_modules())):
        for module in modules:
            config = json.dumps(_config_dict(module), sort_keys=True, default=str)
            digest.update(f"{role} {type(module).__qualname__} {config}\n".encode())
            for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
                digest.update(f"{name} {tensor.dtype} {tuple(tensor.shape)}\n".encode())
                flat = tensor.detach().to("cpu").contiguous().reshape(-1)
                digest.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    return digest.hexdigest()


def encode_seed(digest: str) -> int:
    """The seed an item's encoding runs under (the VAE samples its latent): fixed per cache key."""
    return int(digest[:15], 16)


class LatentCache:
    """One safetensors file per item under `cache_dir/<digest[:2]>/<digest>.safetensors`, keyed by sha256 digests
    that include `encoder_fingerprint(adapter)`, so a changed encoder never reads stale entries.

    Files are written to a temporary name and renamed (`os.replace`), so a killed run leaves no entry that a
    later run could trust; an unreadable entry counts as a miss and is rewritten."""

    def __init__(self, adapter, cache_dir: str | Path):
        self.adapter, self.dir = adapter, Path(cache_dir)
        self.fingerprint = encoder_fingerprint(adapter)
        self.hits = self.misses = 0

    def path(self, digest: str) -> Path:
        return self.dir / digest[:2] / f"{digest}.safetensors"

    def digest(self, *parts: Any) -> str:
        text = json.dumps([CACHE_FORMAT, self.fingerprint, *parts], sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def load(self, digest: str) -> dict[str, torch.Tensor] | None:
        from safetensors import safe_open

        path = self.path(digest)
        if not path.is_file():
            return None
        try:
            with safe_open(str(path), framework="pt") as file:
                if (file.metadata() or {}).get("digest") != digest:
                    raise ValueError("digest mismatch")
                return {name: file.get_tensor(name) for name in file.keys()}  # noqa: SIM118 (safe_open is not iterable)
        except Exception as error:  # truncated or foreign file: encode again and overwrite
            logger.warning("ignoring unreadable cache entry %s (%s)", path, _reason(error))
            return None

    def store(self, digest: str, tensors: dict[str, torch.Tensor], metadata: dict[str, Any]) -> None:
        from safetensors.torch import save_file

        path = self.path(digest)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        header = {"digest": digest, "format": CACHE_FORMAT, "info": json.dumps(metadata, default=str)}
        try:
            save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(temporary), header)
            os.replace(temporary, path)  # atomic: readers see the old state or the whole file
        finally:
            temporary.unlink(missing_ok=True)

    def fetch(self, digest: str, encode, metadata: dict[str, Any]) -> dict[str, torch.Tensor]:
        """The entry `digest`, computing it with `encode()` (seeded by the digest) on a miss."""
        tensors = self.load(digest)
        if tensors is not None:
            self.hits += 1
            return tensors
        self.misses += 1
        device = self.adapter.device
        # A private RNG stream: the VAE sample is reproducible, and caching leaves the training RNG untouched.
        with (
            torch.random.fork_rng(devices=[device.index or 0] if device.type == "cuda" else []),
            torch.no_grad(),
        ):
            torch.manual_seed(encode_seed(digest))
            tensors = encode()
        self.store(digest, tensors, metadata)
        return tensors

    def unconditional(self) -> dict[str, torch.Tensor]:
        """The empty prompt's conditioning (batch dim removed), which the trainer swaps in for text dropout."""
        tensors = self.fetch(
            self.digest("unconditional"), lambda: _conditioning(self.adapter, ""), {"prompt": ""}
        )
        return {k.removeprefix("cond."): v for k, v in tensors.items()}


def _conditioning(adapter, prompt: str) -> dict[str, torch.Tensor]:
    return {f"cond.{k}": v[0] for k, v in adapter.encode_prompts([prompt]).items()}


def cache_window_start(media_digest: str, frames: int, num_frames: int) -> int:
    """The cached video window's first frame: fixed per file (drawn from its content hash) so reruns hit."""
    return int(media_digest[:15], 16) % (frames - num_frames + 1)


def cache_pairs(dataset: PairDataset, adapter, cache_dir: str | Path) -> CachedPairs:
    """Encode every item once with `adapter.encode_pixels` and `adapter.encode_prompts` into `cache_dir`, reusing
    entries from earlier runs; returns the cached dataset.

    An item's key is sha256 of the media bytes, the caption, the transform (height, width, num_frames, window
    start) and the encoder fingerprint. Caching fixes what is random on the fly: each video trains on one window
    (`cache_window_start`) and each item on one VAE latent sample (seeded by its key, `encode_seed`)."""
    from tqdm.auto import tqdm

    cache = LatentCache(adapter, cache_dir)
    digests = []
    for index in tqdm(range(len(dataset)), desc="caching latents and text embeddings", unit="item"):
        row = dataset.rows[index]
        media = hashlib.sha256(dataset.media_bytes(index)).hexdigest()
        start = None
        if dataset.video:
            start = cache_window_start(media, dataset.frame_count(index), dataset.num_frames)
        transform = {"height": dataset.height, "width": dataset.width, "num_frames": dataset.num_frames}
        digest = cache.digest("item", media, row["prompt"], transform, start)

        def encode(index=index, start=start) -> dict[str, torch.Tensor]:
            item = dataset.get(index, start=start)
            latents = adapter.encode_pixels(item["pixels"][None].to(adapter.device))
            return {"latents": latents[0], **_conditioning(adapter, item["prompt"])}

        info = {"key": row["key"], "media": dataset.name(index), "prompt": row["prompt"], "start": start}
        cache.fetch(digest, encode, info)
        digests.append(digest)
    logger.info("latent cache %s: %d hits, %d encoded", cache.dir, cache.hits, cache.misses)
    return CachedPairs(cache, digests, dataset.rows, cache.unconditional(), adapter.ragged_conditioning)


class CachedPairs(torch.utils.data.Dataset):
    """Items of a `PairDataset` as cached encodings: `{"latents", "conditioning", "prompt", "metadata", "key"}`
    (batch dims removed). Prompt and metadata come from the current data, not the cache."""

    def __init__(self, cache: LatentCache, digests, rows, unconditional, ragged: tuple[str, ...] = ()):
        self.cache, self.digests, self.rows = cache, list(digests), rows
        self._unconditional, self.ragged = unconditional, tuple(ragged)

    def __len__(self) -> int:
        return len(self.digests)

    def __getitem__(self, index: int) -> dict[str, Any]:
        from safetensors.torch import load_file

        tensors = load_file(str(self.cache.path(self.digests[index])))
        row = self.rows[index]
        return {
            "latents": tensors.pop("latents"),
            "conditioning": {k.removeprefix("cond."): v for k, v in tensors.items()},
            "prompt": row["prompt"],
            "metadata": dict(row["metadata"]),
            "key": row["key"],
        }

    def unconditional(self) -> dict[str, torch.Tensor]:
        """The empty prompt's conditioning (batch dim removed), for text dropout."""
        return dict(self._unconditional)

    def collate(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        """`collate_pairs` with this adapter's ragged conditioning keys: the trainer's `data_collator`."""
        return collate_pairs(items, self.ragged)


__all__ = [
    "CachedPairs",
    "LatentCache",
    "PairDataset",
    "cache_pairs",
    "collate_pairs",
    "detect_format",
    "encoder_fingerprint",
    "load_pairs",
]
