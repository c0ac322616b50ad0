"""Read (and write) LeRobot datasets, v3.0 and v2.1, for Cosmos3 action post-training, without `lerobot`.

The `lerobot` package cannot be installed beside this project: it pins torch < 2.12 and Python >= 3.12, and we
run torch 2.14 on Python 3.11. So this module reads the format itself with pyarrow (parquet), json and PyAV, and
never unpickles anything.

    folder = LeRobotFolder("libero_10")                  # reads meta only
    spec = ActionSpec(cameras=("observation.images.image", "observation.images.wrist_image"),
                      action_columns=("action",), layout="side_by_side",
                      representation="axis_angle_to_rot6d", normalization="quantile")
    folder.check(spec)                                   # columns, dtypes, stats, windows; opens no video
    for episode, start in folder.windows(spec):
        window = folder.read_window(spec, episode, start)   # frames [T+1,H,W,3] uint8, actions [T,D] float32

Formats (LeRobot `datasets/utils.py`, `docs/source/lerobot-dataset-v3.mdx`, `convert_dataset_v21_to_v30.py`):
- v3.0: `meta/info.json`, `meta/tasks.parquet`, `meta/episodes/chunk-*/file-*.parquet` (one row per episode,
  with where its rows and video spans are); many episodes per data parquet and per mp4. Row r of an episode is
  at `from_timestamp + timestamp[r]` in its mp4.
- v2.1: `meta/info.json`, `meta/episodes.jsonl`, `meta/tasks.jsonl`, `meta/episodes_stats.jsonl`; one parquet
  and one mp4 per episode, whose video time is the row's `timestamp`.
- Cameras are `video` features (mp4) or `image` features (PNG bytes in the parquet, a struct with `bytes`).

Choices where the sources leave room (cosmos-framework = CF, see `cosmos_train.data.action_spaces`):
- Frames are decoded as LeRobot's `decode_video_frames_pyav` does: seek backward to just before the first
  requested time, decode forward, take the nearest frame to each query and reject any further than
  `tolerance_s` (LeRobot's default 1e-4 s; CF uses 2e-4).
- `quantile` normalisation is `(a - mid) / half_range` over [q01, q99] and is not clipped: CF's
  `resolve_action_normalization` clamps to [-1, 1] only with `apply_forward_clamp`, which its recipes leave off
  (`normalize(..., clip=True)` does it). mean_std divides by std floored at 1e-8, as CF does.
- Stats for a `raw` representation come from the dataset's meta (`stats()`); stats of a re-encoded action
  (`ee_delta_rot6d`, `axis_angle_to_rot6d`) cannot, so `action_stats` computes them from the parquet columns
  over every frame of every episode (CF ships such stats as separate files, e.g.
  `libero_native_frame_wise_relative_rot6d.json`; to use those, read with `normalization="none"` and call
  `normalize` yourself).
- The state row is normalised with the *action* stats when the representation is `raw` and the state is as
  wide as the action (CF puts the state row into the action tensor before its normaliser runs:
  `droid_lerobot_dataset.py`, `action = torch.cat([initial_state, action])`); otherwise it stays raw.
- A task text holding alternatives joined by " | " (Cosmos3-DROID) gives one of them: picked with `rng` when
  `read_window` gets one, else the first.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import string
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cosmos_train.data.action_spaces import axis_angle_to_rot6d_actions, ee_delta_rot6d
from cosmos_train.errors import DataError, first_line
from diffusers_cosmos3.action_units import NORMALIZATIONS, denormalize_actions, normalize_actions

logger = logging.getLogger("cosmos_train.data")

Layout = Literal["single", "side_by_side", "wrist_over_pair"]
Representation = Literal["raw", "ee_delta_rot6d", "axis_angle_to_rot6d"]
Normalization = Literal["none", "mean_std", "quantile"]

LAYOUTS = ("single", "side_by_side", "wrist_over_pair")
REPRESENTATIONS = ("raw", "ee_delta_rot6d", "axis_angle_to_rot6d")

# Every placeholder a path template may use: v3.0 writes {chunk_index}/{file_index}, some datasets (the
# Cosmos3-DROID example) write {episode_chunk}/{episode_file}, v2.1 writes {episode_chunk}/{episode_index}.
PLACEHOLDERS = ("chunk_index", "file_index", "episode_chunk", "episode_file", "episode_index", "video_key")
CAMERA_DTYPES = ("video", "image")
_NUMERIC_DTYPES = {"float16", "float32", "float64", "bool"} | {
    f"{s}int{n}" for s in ("", "u") for n in (8, 16, 32, 64)
}
_QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
_DEFAULT_FEATURES = ("timestamp", "frame_index", "episode_index", "index", "task_index")


# --- what a job asks for, and what it gets ---------------------------------------------------------------


@dataclass(frozen=True)
class ActionSpec:
    """What a job asks of a LeRobot dataset.

    `representation="ee_delta_rot6d"`: `action_columns[0]` is the per-frame end-effector pose
    `[x, y, z, roll, pitch, yaw]` (e.g. `observation.state.cartesian_position`), read over the window's T+1
    frames and turned into T deltas `[dpos 3, rot6d 6]`; the other columns (the gripper) are appended as stored.
    `representation="axis_angle_to_rot6d"`: the concatenated action columns must be 7 wide
    `[dpos 3, axis-angle 3, gripper 1]`; they become 10 wide.
    """

    cameras: tuple[str, ...]
    action_columns: tuple[str, ...]
    state_columns: tuple[str, ...] = ()
    chunk_size: int = 16
    layout: Layout = "single"
    representation: Representation = "raw"
    normalization: Normalization = "none"
    tolerance_s: float = 1e-4

    def __post_init__(self):
        for name in ("cameras", "action_columns", "state_columns"):  # a bare string would iterate characters
            value = getattr(self, name)
            object.__setattr__(self, name, (value,) if isinstance(value, str) else tuple(value))
        if not self.cameras:
            raise ValueError("ActionSpec needs at least one camera")
        if not self.action_columns:
            raise ValueError("ActionSpec needs at least one action column")
        if int(self.chunk_size) < 1:
            raise ValueError(f"chunk_size must be at least 1, got {self.chunk_size}")
        for name, value, allowed in (
            ("layout", self.layout, LAYOUTS),
            ("representation", self.representation, REPRESENTATIONS),
            ("normalization", self.normalization, NORMALIZATIONS),
        ):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        if not self.tolerance_s > 0:
            raise ValueError(f"tolerance_s must be positive, got {self.tolerance_s}")

    def normalizes_state(self, state_width: int, action_width: int) -> bool:
        """Whether the state row is normalised with the action stats: in cosmos-framework it is an action row (its
        DROID dataset puts it in the action tensor before normalising), so it is when it is one: raw actions of
        the same width. Otherwise it stays in its own units."""
        return self.normalization != "none" and self.representation == "raw" and state_width == action_width


@dataclass
class Window:
    """One training sample: T+1 frames, T actions, the state at the first frame and the task text."""

    frames: np.ndarray | None  # uint8 [T+1, H, W, 3], cameras laid out per spec.layout (None: not read)
    actions: np.ndarray  # float32 [T, D], after representation and normalization
    state: np.ndarray | None  # float32 [D_state] at the window's first frame, or None
    task: str
    episode: int
    start: int


@dataclass(frozen=True)
class VideoSpan:
    """Where one camera of one episode is: its mp4 and the episode's time span in it."""

    path: Path
    from_timestamp: float = 0.0
    to_timestamp: float | None = None


@dataclass
class Episode:
    """One episode's meta: its length, tasks, and where its rows and videos are."""

    index: int
    length: int
    tasks: list[str]
    data_path: Path
    videos: dict[str, VideoSpan] = field(default_factory=dict)
    from_index: int = 0  # global row (`index`) of its first frame


# --- normalisation ---------------------------------------------------------------------------------------


# One implementation, shared with the policy call that maps a model's actions back (`diffusers_cosmos3`).
normalize = normalize_actions
denormalize = denormalize_actions


# --- small helpers ---------------------------------------------------------------------------------------


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except json.JSONDecodeError as error:
        raise DataError(f"{path}: invalid JSON ({error.msg} at line {error.lineno})") from None
    except (OSError, UnicodeDecodeError) as error:
        raise DataError(f"{path}: cannot read ({first_line(error)})") from None


def _read_jsonl(path: Path) -> list[dict]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise DataError(f"{path}: cannot read ({first_line(error)})") from None
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise DataError(f"{path}:{number}: invalid JSON ({error.msg})") from None
        if not isinstance(record, dict):
            raise DataError(f"{path}:{number}: expected a JSON object")
        records.append(record)
    return records


def _read_parquet(path: Path, columns: Sequence[str] | None = None) -> pa.Table:
    try:
        return pq.read_table(path, columns=list(columns) if columns is not None else None)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (OSError, pa.ArrowException) as error:
        raise DataError(f"{path}: cannot read parquet ({first_line(error)})") from None


def _template_fields(template: str) -> list[str]:
    return [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]


def _format(template: str, **values: Any) -> str:
    return template.format(**{name: values.get(name, 0) for name in PLACEHOLDERS})


def _width(feature: Mapping[str, Any]) -> int:
    shape = feature.get("shape") or [1]
    return int(math.prod(int(n) for n in shape))


def _pick_task(text: str, rng: Any) -> str:
    """One of DROID-style alternatives "a | b | c": with `rng` (random.Random or numpy Generator) a random one,
    else the first."""
    options = [part.strip() for part in text.split(" | ") if part.strip()] or [text]
    if rng is None or len(options) == 1:
        return options[0]
    pick = rng.integers(len(options)) if hasattr(rng, "integers") else rng.randrange(len(options))
    return options[int(pick)]


def _resize_bilinear(frames: np.ndarray, height: int, width: int) -> np.ndarray:
    """[N, H, W, 3] uint8 resized like torch's `F.interpolate(mode="bilinear", align_corners=False)` without
    antialiasing, which CF uses to halve DROID's exterior views (for an exact halving it is a 2x2 mean)."""
    n, in_h, in_w, c = frames.shape
    if (in_h, in_w) == (height, width):
        return frames

    def taps(out: int, size: int):
        source = np.maximum((np.arange(out) + 0.5) * (size / out) - 0.5, 0.0)
        low = np.minimum(np.floor(source).astype(np.int64), size - 1)
        high = np.minimum(low + 1, size - 1)
        return low, high, (source - low).astype(np.float32)

    y0, y1, wy = taps(height, in_h)
    x0, x1, wx = taps(width, in_w)
    image = frames.astype(np.float32)
    rows = image[:, y0] * (1 - wy)[None, :, None, None] + image[:, y1] * wy[None, :, None, None]
    out = rows[:, :, x0] * (1 - wx)[None, None, :, None] + rows[:, :, x1] * wx[None, None, :, None]
    return np.clip(np.rint(out), 0, 255).astype(np.uint8).reshape(n, height, width, c)


class _LRU(OrderedDict):
    """A small least-recently-used cache; `on_evict` closes what falls out (open video containers)."""

    def __init__(self, size: int, on_evict=None):
        super().__init__()
        self.size, self.on_evict = size, on_evict

    def get_or(self, key, make):
        if key in self:
            self.move_to_end(key)
            return self[key]
        value = self[key] = make()
        while len(self) > self.size:
            _, old = self.popitem(last=False)
            if self.on_evict is not None:
                self.on_evict(old)
        return value

    def clear_all(self):
        while self:
            _, old = self.popitem(last=False)
            if self.on_evict is not None:
                self.on_evict(old)


def _close_quietly(container) -> None:
    # a container that failed half-open may not close cleanly; there is nothing to recover
    with contextlib.suppress(Exception):
        container.close()


# --- the reader ------------------------------------------------------------------------------------------


class LeRobotFolder:
    """A LeRobot dataset folder (v3.0 or v2.1). The constructor reads meta only; `read_window` reads rows and
    decodes frames. Open videos and parquet tables are kept in small LRU caches: `close()` (or `with`) closes
    them, and a pickled copy (a DataLoader worker) starts with empty caches."""

    def __init__(self, root: str | Path, *, max_open_videos: int = 4, max_open_tables: int = 4):
        self.root = Path(root)
        if not self.root.is_dir():
            raise DataError(f"{self.root}: no such folder")
        self._info_path = self.root / "meta" / "info.json"
        info = _read_json(self._info_path)
        if not isinstance(info, dict):
            raise DataError(f"{self._info_path}: expected a JSON object")
        self.info = info
        self.version = self._read_version(info)
        self.fps = self._read_fps(info)
        self.features = self._read_features(info)
        self.chunks_size = int(info.get("chunks_size") or 1000)
        self.data_path = self._read_template(info, "data_path", required=True)
        has_video = any(f.get("dtype") == "video" for f in self.features.values())
        self.video_path = self._read_template(info, "video_path", required=has_video)
        if self.version.startswith("v3"):
            self.tasks = self._read_tasks_v3()
            self.episodes = self._read_episodes_v3()
        else:
            self.tasks = self._read_tasks_v2()
            self.episodes = self._read_episodes_v2()
        self._by_index = {episode.index: episode for episode in self.episodes}
        self.skipped_episodes: list[int] = []  # the episodes the last `windows` call found too short
        self._max_open_videos, self._max_open_tables = max_open_videos, max_open_tables
        self._stats: dict | None = None
        self._derived_stats: dict[tuple, dict[str, np.ndarray]] = {}
        self._open_caches()

    # --- meta ---

    def _read_version(self, info: dict) -> str:
        version = info.get("codebase_version")
        if not isinstance(version, str) or not version:
            raise DataError(f"{self._info_path}: no codebase_version")
        if version.startswith("v3.") or version in ("v2.0", "v2.1"):
            return version
        raise DataError(f"{self._info_path}: codebase_version {version!r} is not supported (v3.0 or v2.1)")

    def _read_fps(self, info: dict) -> float:
        fps = info.get("fps")
        if isinstance(fps, bool) or not isinstance(fps, int | float) or not fps > 0:
            raise DataError(f"{self._info_path}: fps must be a positive number, got {fps!r}")
        return float(fps)

    def _read_features(self, info: dict) -> dict:
        features = info.get("features")
        if not isinstance(features, dict) or not features:
            raise DataError(f"{self._info_path}: no features")
        for name, feature in features.items():
            if not isinstance(feature, dict) or not isinstance(feature.get("dtype"), str):
                raise DataError(f"{self._info_path}: feature {name!r} has no dtype")
        return features

    def _read_template(self, info: dict, key: str, required: bool) -> str | None:
        template = info.get(key)
        if template is None and not required:
            return None
        if not isinstance(template, str) or not template:
            raise DataError(f"{self._info_path}: no {key}")
        try:
            unknown = [name for name in _template_fields(template) if name not in PLACEHOLDERS]
            _format(template)  # a bad format spec ({chunk_index:03q}) fails here, not mid-training
        except (ValueError, IndexError, KeyError) as error:
            raise DataError(
                f"{self._info_path}: {key} {template!r} is not a valid template ({error})"
            ) from None
        if unknown:
            raise DataError(
                f"{self._info_path}: {key} uses unknown placeholder {{{unknown[0]}}} "
                f"(known: {', '.join(PLACEHOLDERS)})"
            )
        return template

    def _read_tasks_v3(self) -> dict[int, str]:
        path = self.root / "meta" / "tasks.parquet"
        table = _read_parquet(path)
        names = table.column_names
        if "task_index" not in names:
            raise DataError(f"{path}: no task_index column")
        text_column = "task" if "task" in names else None
        if text_column is None:  # pandas wrote the task text as the DataFrame index (CF `base_dataset.py`)
            pandas = table.schema.pandas_metadata or {}
            index = [c for c in pandas.get("index_columns", []) if isinstance(c, str) and c in names]
            text_column = index[0] if index else None
        if text_column is None:
            raise DataError(f"{path}: no task column (neither `task` nor a stored index)")
        indexes = table.column("task_index").to_pylist()
        texts = table.column(text_column).to_pylist()
        return {
            int(i): str(t) for i, t in zip(indexes, texts, strict=True) if i is not None and t is not None
        }

    def _read_tasks_v2(self) -> dict[int, str]:
        path = self.root / "meta" / "tasks.jsonl"
        tasks = {}
        for record in _read_jsonl(path):
            if "task_index" not in record or "task" not in record:
                raise DataError(f"{path}: a line lacks task_index or task")
            tasks[int(record["task_index"])] = str(record["task"])
        return tasks

    def _read_episodes_v3(self) -> list[Episode]:
        folder = self.root / "meta" / "episodes"
        files = sorted(folder.glob("chunk-*/file-*.parquet"))
        if not files:
            raise DataError(f"{folder}: no episodes parquet files (chunk-*/file-*.parquet)")
        video_keys = [k for k, f in self.features.items() if f["dtype"] == "video"]
        episodes = []
        for path in files:
            try:
                names = pq.read_schema(path).names
            except (OSError, pa.ArrowException) as error:
                raise DataError(f"{path}: cannot read parquet ({first_line(error)})") from None
            required = ["episode_index", "length", "data/chunk_index", "data/file_index"]
            missing = [c for c in required if c not in names]
            if missing:
                raise DataError(f"{path}: no {missing[0]} column")
            # per-episode `stats/...` columns are many and unused here
            table = _read_parquet(path, [c for c in names if not c.startswith("stats/")])
            columns = {name: table.column(name).to_pylist() for name in table.column_names}
            for row in range(table.num_rows):
                value = {name: values[row] for name, values in columns.items()}
                episodes.append(self._episode_v3(path, value, video_keys))
        episodes.sort(key=lambda e: e.index)
        return episodes

    def _episode_v3(self, path: Path, row: dict, video_keys: list[str]) -> Episode:
        index = int(row["episode_index"])
        chunk, file = int(row["data/chunk_index"]), int(row["data/file_index"])
        place = {"chunk_index": chunk, "file_index": file, "episode_chunk": chunk, "episode_file": file}
        data = self.root / _format(self.data_path, episode_index=index, **place)
        videos = {}
        for key in video_keys:
            prefix = f"videos/{key}/"
            if row.get(prefix + "chunk_index") is None or row.get(prefix + "file_index") is None:
                continue  # `check` reports it if a job asks for this camera
            v_chunk, v_file = int(row[prefix + "chunk_index"]), int(row[prefix + "file_index"])
            video = _format(
                self.video_path,
                chunk_index=v_chunk,
                file_index=v_file,
                episode_chunk=v_chunk,
                episode_file=v_file,
                episode_index=index,
                video_key=key,
            )
            start, stop = row.get(prefix + "from_timestamp"), row.get(prefix + "to_timestamp")
            videos[key] = VideoSpan(
                self.root / video, float(start or 0.0), None if stop is None else float(stop)
            )
        tasks = row.get("tasks") or []
        return Episode(
            index=index,
            length=int(row["length"]),
            tasks=[str(t) for t in (tasks if isinstance(tasks, list) else [tasks])],
            data_path=data,
            videos=videos,
            from_index=int(row.get("dataset_from_index") or 0),
        )

    def _read_episodes_v2(self) -> list[Episode]:
        path = self.root / "meta" / "episodes.jsonl"
        video_keys = [k for k, f in self.features.items() if f["dtype"] == "video"]
        episodes, offset = [], 0
        for record in _read_jsonl(path):
            if "episode_index" not in record or "length" not in record:
                raise DataError(f"{path}: a line lacks episode_index or length")
            index, length = int(record["episode_index"]), int(record["length"])
            chunk = index // self.chunks_size
            # one file per episode: the file "index" is the episode's own
            place = {"chunk_index": chunk, "file_index": index, "episode_chunk": chunk, "episode_file": index}
            data = self.root / _format(self.data_path, episode_index=index, **place)
            videos = {
                key: VideoSpan(
                    self.root / _format(self.video_path, episode_index=index, video_key=key, **place),
                    0.0,
                    length / self.fps,
                )
                for key in video_keys
            }
            tasks = record.get("tasks") or []
            tasks = [str(t) for t in (tasks if isinstance(tasks, list) else [tasks])]
            episodes.append(Episode(index, length, tasks, data, videos, offset))
            offset += length
        if not episodes:
            raise DataError(f"{path}: no episodes")
        episodes.sort(key=lambda e: e.index)
        return episodes

    def _episode(self, index: int) -> Episode:
        episode = self._by_index.get(int(index))
        if episode is None:
            raise DataError(f"{self.root}: no episode {index} (it has {len(self.episodes)} episodes)")
        return episode

    # --- stats ---

    @property
    def stats_path(self) -> Path:
        if self.version.startswith("v3") or not (self.root / "meta" / "episodes_stats.jsonl").is_file():
            return self.root / "meta" / "stats.json"  # v2.0 kept global stats there too
        return self.root / "meta" / "episodes_stats.jsonl"

    def stats(self) -> dict:
        """{column: {"mean": [..], "std": [..], "min": .., "max": .., "count": .., "q01": .., ...}} from
        meta/stats.json (v3.0), or aggregated from meta/episodes_stats.jsonl (v2.1: count-weighted means, pooled
        std, min of mins, max of maxes; quantiles only if every episode has them, as count-weighted means, an
        approximation). {} when the file is absent."""
        if self._stats is None:
            path = self.stats_path
            if not path.is_file():
                self._stats = {}
            elif path.suffix == ".json":
                stats = _read_json(path)
                if not isinstance(stats, dict):
                    raise DataError(f"{path}: expected a JSON object")
                self._stats = stats
            else:
                self._stats = _aggregate_episode_stats(path, _read_jsonl(path))
        return self._stats

    def action_stats(self, spec: ActionSpec) -> dict[str, np.ndarray]:
        """The stats `normalize` uses for `spec`'s actions, each [D] float64: for `raw`, the meta stats of the
        action columns concatenated; for a re-encoded representation, computed from the parquet columns over
        every frame of every episode (meta stats describe the stored columns, not the re-encoded actions)."""
        if spec.representation == "raw":
            return self._meta_stats(spec.action_columns, spec.normalization)
        key = (spec.action_columns, spec.representation)
        if key not in self._derived_stats:
            self._derived_stats[key] = self._compute_action_stats(spec)
        return self._derived_stats[key]

    def _meta_stats(self, columns: Sequence[str], mode: str) -> dict[str, np.ndarray]:
        needed = {"mean_std": ("mean", "std"), "quantile": ("q01", "q99")}.get(mode, ("mean", "std"))
        stats, source = self.stats(), self.stats_path
        out: dict[str, list[np.ndarray]] = {key: [] for key in ("mean", "std", "min", "max", "q01", "q99")}
        for column in columns:
            entry = stats.get(column)
            if not isinstance(entry, dict):
                raise DataError(
                    f"{self.root}: {mode} normalization needs stats for column {column!r}, "
                    f"which {source} does not have"
                )
            missing = [key for key in needed if key not in entry]
            if missing:
                hint = (
                    " (LeRobot v2.1 stores no quantiles; use mean_std)"
                    if mode == "quantile" and self.version.startswith("v2")
                    else ""
                )
                raise DataError(
                    f"{self.root}: {mode} normalization needs {'/'.join(needed)} for column {column!r}, "
                    f"which {source} does not have{hint}"
                )
            width = _width(self.features[column]) if column in self.features else None
            for key in out:
                if key in entry:
                    value = np.asarray(entry[key], dtype=np.float64).reshape(-1)
                    if width is not None and value.size != width:
                        raise DataError(
                            f"{source}: {key} of column {column!r} is {value.size} wide, the column {width}"
                        )
                    out[key].append(value)
        return {key: np.concatenate(parts) for key, parts in out.items() if len(parts) == len(columns)}

    def _compute_action_stats(self, spec: ActionSpec) -> dict[str, np.ndarray]:
        parts = []
        for episode in self.episodes:
            table = self._episode_table(episode, spec.action_columns)
            count = episode.length - 1 if spec.representation == "ee_delta_rot6d" else episode.length
            if count > 0:
                parts.append(self._actions(spec, episode, table, 0, count))
        if not parts:
            raise DataError(f"{self.root}: no frames to compute {spec.representation} action stats from")
        return _column_stats(np.concatenate(parts).astype(np.float64))

    # --- checks and windows ---

    def _numeric_column(self, column: str, what: str) -> int:
        feature = self.features.get(column)
        if feature is None:
            known = [k for k, f in self.features.items() if f["dtype"] in _NUMERIC_DTYPES]
            raise DataError(
                f"{self.root}: no {what} column {column!r} (numeric columns: {', '.join(known[:20])})"
            )
        if feature["dtype"] not in _NUMERIC_DTYPES:
            raise DataError(
                f"{self.root}: {what} column {column!r} has dtype {feature['dtype']}, expected a number"
            )
        return _width(feature)

    def check(self, spec: ActionSpec) -> None:
        """Fail fast with a one-line DataError naming the dataset and column: cameras and columns exist with the
        right dtype and width, stats exist when the normalization needs them, and there is at least one window.
        Reads meta only; opens no video and no data parquet."""
        cameras = {k: f for k, f in self.features.items() if f["dtype"] in CAMERA_DTYPES}
        for camera in spec.cameras:
            feature = self.features.get(camera)
            if feature is None:
                raise DataError(
                    f"{self.root}: unknown camera {camera!r} (cameras: {', '.join(cameras) or 'none'})"
                )
            if feature["dtype"] not in CAMERA_DTYPES:
                raise DataError(
                    f"{self.root}: {camera!r} has dtype {feature['dtype']}, not a camera (video or image)"
                )
            if feature["dtype"] == "video":
                lacking = [e.index for e in self.episodes if camera not in e.videos]
                if lacking:
                    raise DataError(
                        f"{self.root}: camera {camera!r} has no video span "
                        f"for episode {lacking[0]} in meta/episodes"
                    )
                if "timestamp" not in self.features:
                    raise DataError(
                        f"{self.root}: no timestamp column, needed to find the frames of camera {camera!r}"
                    )
        wanted = {"single": (1, 1), "side_by_side": (2, 99), "wrist_over_pair": (3, 3)}[spec.layout]
        if not wanted[0] <= len(spec.cameras) <= wanted[1]:
            count = str(wanted[0]) if wanted[0] == wanted[1] else f"at least {wanted[0]}"
            raise DataError(
                f"{self.root}: layout {spec.layout} takes {count} cameras, got {len(spec.cameras)}"
            )
        widths = [self._numeric_column(column, "action") for column in spec.action_columns]
        for column in spec.state_columns:
            self._numeric_column(column, "state")
        if spec.representation == "axis_angle_to_rot6d" and sum(widths) != 7:
            raise DataError(
                f"{self.root}: axis_angle_to_rot6d needs 7-D actions [dpos, axis-angle, gripper], "
                f"columns {', '.join(map(repr, spec.action_columns))} are {sum(widths)} wide"
            )
        if spec.representation == "ee_delta_rot6d" and widths[0] != 6:
            raise DataError(
                f"{self.root}: ee_delta_rot6d needs a 6-D pose column [xyz, euler xyz] first, "
                f"{spec.action_columns[0]!r} is {widths[0]} wide"
            )
        if spec.normalization != "none" and spec.representation == "raw":
            self._meta_stats(spec.action_columns, spec.normalization)
        self.windows(spec)

    def windows(
        self, spec: ActionSpec, episodes: Sequence[int] | None = None, stride: int = 1
    ) -> list[tuple[int, int]]:
        """(episode_index, start_row) for every window of chunk_size + 1 frames, `stride` rows apart. Episodes
        shorter than that are skipped; their indexes are left in `self.skipped_episodes`. DataError if no
        episode is long enough."""
        if stride < 1:
            raise ValueError(f"stride must be at least 1, got {stride}")
        need = spec.chunk_size + 1
        chosen = self.episodes if episodes is None else [self._episode(i) for i in episodes]
        out, skipped = [], []
        for episode in chosen:
            if episode.length < need:
                skipped.append(episode.index)
                continue
            out.extend((episode.index, start) for start in range(0, episode.length - need + 1, stride))
        self.skipped_episodes = skipped
        if not out:
            longest = max((e.length for e in chosen), default=0)
            raise DataError(
                f"{self.root}: no episode has chunk_size + 1 = {need} frames "
                f"(the longest has {longest}); use a smaller chunk_size"
            )
        if skipped:
            logger.warning(
                "%s: skipped %d of %d episodes shorter than %d frames",
                self.root,
                len(skipped),
                len(chosen),
                need,
            )
        return out

    @property
    def skipped(self) -> int:
        """How many episodes the last `windows` call skipped as too short."""
        return len(self.skipped_episodes)

    # --- reading ---

    def _open_caches(self) -> None:
        self._videos = _LRU(self._max_open_videos, _close_quietly)
        self._tables = _LRU(self._max_open_tables)

    def close(self) -> None:
        """Close the cached video containers and drop the cached tables."""
        self._videos.clear_all()
        self._tables.clear_all()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __getstate__(self):
        state = self.__dict__.copy()
        # open containers do not pickle; a copy opens its own
        state.pop("_videos", None)
        state.pop("_tables", None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._open_caches()

    def _episode_table(self, episode: Episode, columns: Sequence[str]) -> pa.Table:
        """The episode's rows of `columns` (zero-copy slice of a cached file table)."""
        columns = tuple(dict.fromkeys(columns))
        v3 = self.version.startswith("v3")
        wanted = (*columns, "episode_index") if v3 and "episode_index" not in columns else columns
        path = episode.data_path

        def load():
            if not path.is_file():
                raise DataError(f"{path}: no such file (episode {episode.index})")
            try:
                names = pq.read_schema(path).names
            except (OSError, pa.ArrowException) as error:
                raise DataError(f"{path}: cannot read parquet ({first_line(error)})") from None
            missing = [c for c in wanted if c not in names]
            if missing:
                raise DataError(f"{path}: no column {missing[0]!r} (episode {episode.index})")
            table = _read_parquet(path, wanted)
            spans = {}
            if v3:  # rows of one episode are contiguous; where each starts and how many
                ids = table.column("episode_index").to_numpy()
                values, first, counts = np.unique(ids, return_index=True, return_counts=True)
                spans = {int(v): (int(f), int(c)) for v, f, c in zip(values, first, counts, strict=True)}
            return table, spans

        table, spans = self._tables.get_or((path, wanted), load)
        offset, count = spans.get(episode.index, (0, 0)) if v3 else (0, table.num_rows)
        if count != episode.length:
            raise DataError(
                f"{path}: episode {episode.index} has {count} rows, its meta says {episode.length}"
            )
        return table.slice(offset, count)

    def _column(self, episode: Episode, table: pa.Table, name: str, start: int, count: int) -> np.ndarray:
        """Rows [start, start+count) of a numeric column as float64 [count, D]."""
        column = table.column(name).slice(start, count).combine_chunks()
        where = f"{episode.data_path}: episode {episode.index}, column {name!r}"
        if column.null_count:
            raise DataError(f"{where}: null values")
        width = 1
        while (
            pa.types.is_list(column.type)
            or pa.types.is_large_list(column.type)
            or pa.types.is_fixed_size_list(column.type)
        ):
            lengths = (
                pc.list_value_length(column).to_numpy(zero_copy_only=False) if len(column) else np.ones(1)
            )
            if (lengths != lengths[0]).any():
                raise DataError(f"{where}: rows of different lengths")
            width *= int(lengths[0])
            column = column.flatten()
            if column.null_count:
                raise DataError(f"{where}: null values")
        if not (
            pa.types.is_floating(column.type)
            or pa.types.is_integer(column.type)
            or pa.types.is_boolean(column.type)
        ):
            raise DataError(f"{where}: values are {column.type}, expected numbers")
        values = column.to_numpy(zero_copy_only=False).astype(np.float64)
        return values.reshape(count, width)

    def _actions(
        self, spec: ActionSpec, episode: Episode, table: pa.Table, start: int, count: int
    ) -> np.ndarray:
        """`count` actions from row `start` in spec.representation, not normalised: float32 [count, D]."""
        if spec.representation == "ee_delta_rot6d":
            poses = self._column(episode, table, spec.action_columns[0], start, count + 1)
            if poses.shape[1] != 6:
                raise DataError(
                    f"{self.root}: ee_delta_rot6d needs a 6-D pose column first, "
                    f"{spec.action_columns[0]!r} is {poses.shape[1]} wide"
                )
            rest = [self._column(episode, table, c, start, count) for c in spec.action_columns[1:]]
            return np.concatenate([ee_delta_rot6d(poses), *rest], axis=1).astype(np.float32)
        raw = np.concatenate(
            [self._column(episode, table, c, start, count) for c in spec.action_columns], axis=1
        )
        if spec.representation == "axis_angle_to_rot6d":
            if raw.shape[1] != 7:
                raise DataError(
                    f"{self.root}: axis_angle_to_rot6d needs 7-D actions, "
                    f"columns {', '.join(map(repr, spec.action_columns))} are {raw.shape[1]} wide"
                )
            return axis_angle_to_rot6d_actions(raw)
        return raw.astype(np.float32)

    def read_window(
        self, spec: ActionSpec, episode: int, start: int, rng: Any = None, frames: bool = True
    ) -> Window:
        """The window of chunk_size + 1 frames from row `start` of `episode` (see `Window`). `rng`
        (random.Random or numpy Generator) picks among " | "-joined task alternatives; without it, the first.
        `frames=False` decodes no camera (`Window.frames` is None): a trainer that keeps the window's latents."""
        ep = self._episode(episode)
        steps = spec.chunk_size
        if start < 0 or start + steps + 1 > ep.length:
            raise DataError(
                f"{self.root}: episode {ep.index} has {ep.length} frames, "
                f"no window of {steps + 1} starts at row {start}"
            )
        cameras = spec.cameras if frames else ()
        images = [c for c in cameras if self.features.get(c, {}).get("dtype") == "image"]
        extra = ["task_index"] if "task_index" in self.features else []
        if len(images) < len(cameras):
            extra.append("timestamp")
        table = self._episode_table(ep, (*spec.action_columns, *spec.state_columns, *extra, *images))
        views = []
        for camera in cameras:
            feature = self.features.get(camera)
            if feature is None or feature["dtype"] not in CAMERA_DTYPES:
                known = [k for k, f in self.features.items() if f["dtype"] in CAMERA_DTYPES]
                raise DataError(
                    f"{self.root}: unknown camera {camera!r} (cameras: {', '.join(known) or 'none'})"
                )
            if feature["dtype"] == "image":
                views.append(self._image_frames(ep, table, camera, start, steps + 1))
            else:
                times = self._column(ep, table, "timestamp", start, steps + 1)[:, 0]
                views.append(self._video_frames(ep, camera, times, spec.tolerance_s))
        pixels = self._layout(spec, views) if frames else None

        actions = self._actions(spec, ep, table, start, steps)
        stats = None
        if spec.normalization != "none":
            stats = self.action_stats(spec)
            actions = normalize(actions, stats, spec.normalization)
        state = None
        if spec.state_columns:
            state = np.concatenate([self._column(ep, table, c, start, 1)[0] for c in spec.state_columns])
            if stats is not None and spec.normalizes_state(state.shape[0], actions.shape[1]):
                state = normalize(state, stats, spec.normalization)  # the state row is an action row in CF
            state = state.astype(np.float32)

        text = None
        if "task_index" in table.column_names:
            text = self.tasks.get(int(self._column(ep, table, "task_index", start, 1)[0, 0]))
        if text is None:
            text = ep.tasks[0] if ep.tasks else ""
        return Window(pixels, actions, state, _pick_task(text, rng), ep.index, int(start))

    def _layout(self, spec: ActionSpec, views: list[np.ndarray]) -> np.ndarray:
        if spec.layout == "single":
            if len(views) != 1:
                raise DataError(f"{self.root}: layout single takes 1 camera, got {len(views)}")
            return views[0]
        if spec.layout == "side_by_side":
            heights = {view.shape[1] for view in views}
            if len(heights) != 1:
                sizes = ", ".join(f"{c} {v.shape[1]}" for c, v in zip(spec.cameras, views, strict=True))
                raise DataError(f"{self.root}: side_by_side needs cameras of one height, got {sizes}")
            return np.concatenate(views, axis=2)
        if len(views) != 3:
            raise DataError(f"{self.root}: layout wrist_over_pair takes 3 cameras, got {len(views)}")
        # CF's DROID concat view: camera 0 on top at full size, cameras 1 and 2 below at half size each
        top = views[0]
        height, width = top.shape[1:3]
        half_h, half_w = height // 2, width // 2
        left = _resize_bilinear(views[1], half_h, half_w)
        right = _resize_bilinear(views[2], half_h, width - half_w)  # an odd width goes to the right view
        return np.concatenate([top, np.concatenate([left, right], axis=2)], axis=1)

    def _image_frames(
        self, episode: Episode, table: pa.Table, camera: str, start: int, count: int
    ) -> np.ndarray:
        column = table.column(camera).slice(start, count).combine_chunks()
        if pa.types.is_struct(column.type):
            if column.type.get_field_index("bytes") < 0:
                raise DataError(
                    f"{episode.data_path}: episode {episode.index}, camera {camera!r}: no bytes field"
                )
            column = column.field("bytes")
        frames = []
        for offset, data in enumerate(column.to_pylist()):
            row = start + offset
            if not data:
                raise DataError(
                    f"{episode.data_path}: episode {episode.index}, camera {camera!r}, row {row}: "
                    "no embedded image bytes"
                )
            frames.append(
                _decode_image(
                    data, f"{episode.data_path}: episode {episode.index}, camera {camera!r}, row {row}"
                )
            )
        if len({f.shape for f in frames}) != 1:
            raise DataError(
                f"{episode.data_path}: episode {episode.index}, camera {camera!r}: images of different sizes"
            )
        return np.stack(frames)

    def _video_frames(self, episode: Episode, camera: str, times: np.ndarray, tolerance: float) -> np.ndarray:
        import av

        span = episode.videos.get(camera)
        if span is None:
            raise DataError(f"{self.root}: camera {camera!r} has no video span for episode {episode.index}")
        path = span.path
        if not path.is_file():
            raise DataError(f"{path}: no such file (episode {episode.index}, camera {camera!r})")

        def open_video():
            try:
                return av.open(str(path))
            except Exception as error:  # PyAV raises many error types for damaged files; all mean unusable
                raise DataError(f"{path}: cannot open video ({first_line(error)})") from None

        container = self._videos.get_or(path, open_video)
        queries = span.from_timestamp + times
        try:
            decoded = _decode_nearest(container, queries, tolerance)
        except Exception as error:  # as above: a decode failure means the file is unusable
            self._videos.pop(path, None)
            _close_quietly(container)
            raise DataError(
                f"{path}: cannot decode (episode {episode.index}, camera {camera!r}: {first_line(error)})"
            ) from None
        frames, miss = decoded
        if miss is not None:
            query, distance = miss
            raise DataError(
                f"{self.root}: episode {episode.index}, camera {camera!r}: no frame within {tolerance:g}s of "
                f"timestamp {query - span.from_timestamp:.6f}s ({query:.6f}s in {path}; "
                f"the nearest is {distance:.6f}s away)"
            )
        if len({f.shape for f in frames}) != 1:
            raise DataError(f"{path}: frames of different sizes (episode {episode.index}, camera {camera!r})")
        return np.stack(frames)


def _decode_nearest(container, queries: np.ndarray, tolerance: float):
    """(frames, None) with the decoded frame nearest each query time (seconds in the file), or
    (None, (query, distance)) for the first query without a frame within `tolerance`: LeRobot's
    `decode_video_frames_pyav` — seek backward to just before the first time, decode forward to the last."""
    stream = container.streams.video[0]
    time_base = stream.time_base
    first, last = float(np.min(queries)), float(np.max(queries))
    container.seek(max(round(first / time_base) - 1, 0), backward=True, any_frame=False, stream=stream)
    kept: list[tuple[float, Any]] = []
    before = None  # the last frame earlier than any query could use, to measure how far off a miss is
    for frame in container.decode(stream):
        if frame.pts is None:
            continue
        at = float(frame.pts * time_base)
        if at < first - tolerance:
            before = (at, frame)
            continue
        kept.append((at, frame))
        if at >= last:
            break
    candidates = ([before] if before is not None else []) + kept
    if not candidates:
        return None, (first, math.inf)
    times = np.array([at for at, _ in candidates])
    frames = []
    for query in queries:
        nearest = int(np.argmin(np.abs(times - query)))
        distance = abs(times[nearest] - query)
        if distance > tolerance:
            return None, (float(query), float(distance))
        frames.append(candidates[nearest][1].to_ndarray(format="rgb24"))
    return frames, None


def _decode_image(data: bytes, where: str) -> np.ndarray:
    """PNG (or JPEG) bytes -> uint8 [H, W, 3], with PyAV's image decoders."""
    import av

    codec = "mjpeg" if data[:2] == b"\xff\xd8" else "png"
    try:
        decoder = av.CodecContext.create(codec, "r")
        frames = decoder.decode(av.Packet(data)) + decoder.decode(None)
    except Exception as error:  # any failure to parse means the image cannot be trained on
        raise DataError(f"{where}: not a decodable PNG or JPEG image ({first_line(error)})") from None
    if not frames:
        raise DataError(f"{where}: not a decodable PNG or JPEG image")
    return frames[0].to_ndarray(format="rgb24")


def _aggregate_episode_stats(path: Path, records: list[dict]) -> dict:
    """Global stats from v2.1's per-episode ones (see `LeRobotFolder.stats`)."""
    per_column: dict[str, list[dict]] = {}
    for number, record in enumerate(records, start=1):
        stats = record.get("stats")
        if not isinstance(stats, dict):
            raise DataError(f"{path}:{number}: no stats object")
        for column, entry in stats.items():
            if isinstance(entry, dict):
                per_column.setdefault(column, []).append(entry)
    out = {}
    for column, entries in per_column.items():
        if not all(k in e for e in entries for k in ("mean", "std", "count")):
            continue
        try:
            counts = np.array([float(np.asarray(e["count"]).reshape(-1)[0]) for e in entries])
            means = [np.asarray(e["mean"], dtype=np.float64) for e in entries]
            stds = [np.asarray(e["std"], dtype=np.float64) for e in entries]
            weights = counts / counts.sum()
            mean = sum(w * m for w, m in zip(weights, means, strict=True))
            second = sum(w * (s**2 + m**2) for w, s, m in zip(weights, stds, means, strict=True))
            entry = {
                "mean": mean.tolist(),
                "std": np.sqrt(np.maximum(second - mean**2, 0.0)).tolist(),
                "count": [int(counts.sum())],
            }
            if all("min" in e and "max" in e for e in entries):
                entry["min"] = np.min(
                    [np.asarray(e["min"], dtype=np.float64) for e in entries], axis=0
                ).tolist()
                entry["max"] = np.max(
                    [np.asarray(e["max"], dtype=np.float64) for e in entries], axis=0
                ).tolist()
            for key in _QUANTILES:
                if all(key in e for e in entries):
                    values = [np.asarray(e[key], dtype=np.float64) for e in entries]
                    entry[key] = sum(w * v for w, v in zip(weights, values, strict=True)).tolist()
        except (ValueError, TypeError) as error:
            raise DataError(
                f"{path}: stats of column {column!r} do not combine ({first_line(error)})"
            ) from None
        out[column] = entry
    return out


def _column_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """LeRobot's stats of [N, D] values: min, max, mean, std, count and q01..q99, each [D] (count [1])."""
    stats = {
        "min": values.min(axis=0),
        "max": values.max(axis=0),
        "mean": values.mean(axis=0),
        "std": values.std(axis=0),
        "count": np.array([values.shape[0]]),
    }
    quantiles = np.quantile(values, list(_QUANTILES.values()), axis=0)
    stats.update({key: quantiles[i] for i, key in enumerate(_QUANTILES)})
    return stats


# --- the writer ------------------------------------------------------------------------------------------

# Fixed encoder settings so the same frames give the same bytes: no macroblock-tree lookahead, no B-frames
# (frame times then start at 0), one thread, and a 2-frame GOP as LeRobot uses so a seek decodes little.
_X264_OPTIONS = {"crf": "18", "preset": "fast", "g": "2", "x264-params": "mbtree=0:bframes=0:threads=1"}


def _encode_mp4(path: Path, clips: Sequence[np.ndarray], rate: Fraction) -> None:
    import av

    height, width = clips[0].shape[1:3]
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=rate, options=dict(_X264_OPTIONS))
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        pts = 0
        for clip in clips:
            for image in clip:
                frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
                frame.pts, frame.time_base = pts, 1 / rate
                pts += 1
                container.mux(stream.encode(frame))
        container.mux(stream.encode(None))


def _encode_png(image: np.ndarray) -> bytes:
    import av

    encoder = av.CodecContext.create("png", "w")
    encoder.width, encoder.height, encoder.pix_fmt = image.shape[1], image.shape[0], "rgb24"
    frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
    return b"".join(bytes(packet) for packet in [*encoder.encode(frame), *encoder.encode(None)])


def _check_episodes(episodes: Sequence[dict], video: bool) -> tuple[dict, dict]:
    """Camera shapes {key: (H, W)} and column widths {name: D or None for a scalar column}, the same in every
    episode; ValueError on anything the writer cannot store."""
    if not episodes:
        raise ValueError("write_lerobot_dataset needs at least one episode")
    cameras: dict[str, tuple[int, int]] = {}
    columns: dict[str, int | None] = {}
    for number, episode in enumerate(episodes):
        where = f"episode {number}"
        if not isinstance(episode.get("task"), str):
            raise ValueError(f"{where}: task must be a string")
        frames, values = episode.get("frames") or {}, episode.get("columns") or {}
        if not frames and not values:
            raise ValueError(f"{where}: no frames and no columns")
        lengths = {len(np.asarray(v)) for v in (*frames.values(), *values.values())}
        if len(lengths) != 1 or 0 in lengths:
            raise ValueError(f"{where}: frames and columns must all have the same number (>0) of rows")
        for key, clip in frames.items():
            clip = np.asarray(clip)
            if clip.dtype != np.uint8 or clip.ndim != 4 or clip.shape[-1] != 3:
                raise ValueError(
                    f"{where}: camera {key!r} must be uint8 [T, H, W, 3], got {clip.dtype} {clip.shape}"
                )
            if video and (clip.shape[1] % 2 or clip.shape[2] % 2):
                raise ValueError(
                    f"{where}: camera {key!r} is {clip.shape[2]}x{clip.shape[1]}; "
                    "yuv420p video needs even sizes"
                )
            if cameras.setdefault(key, clip.shape[1:3]) != clip.shape[1:3]:
                raise ValueError(f"{where}: camera {key!r} changes size between episodes")
        for name, array in values.items():
            array = np.asarray(array)
            if name in _DEFAULT_FEATURES or name in frames:
                raise ValueError(f"{where}: column name {name!r} is reserved")
            if array.ndim not in (1, 2) or not np.issubdtype(array.dtype, np.number):
                raise ValueError(
                    f"{where}: column {name!r} must be numbers [T] or [T, D], got {array.dtype} {array.shape}"
                )
            width = None if array.ndim == 1 else array.shape[1]
            if columns.setdefault(name, width) != width:
                raise ValueError(f"{where}: column {name!r} changes width between episodes")
        if set(frames) != set(cameras) or set(values) != set(columns):
            raise ValueError(f"{where}: every episode must have the same cameras and columns")
    return cameras, columns


def _frame_table(
    episode: dict, index: int, task_index: int, global_start: int, fps: float, images: bool
) -> pa.Table:
    values = episode.get("columns") or {}
    frames = episode.get("frames") or {}
    length = len(next(iter((*frames.values(), *values.values()))))
    arrays: dict[str, pa.Array] = {}
    for name, array in values.items():
        array = np.asarray(array, dtype=np.float32)
        if array.ndim == 1:
            arrays[name] = pa.array(array)
        else:
            arrays[name] = pa.FixedSizeListArray.from_arrays(pa.array(array.reshape(-1)), array.shape[1])
    if images:
        for key, clip in frames.items():
            data = [_encode_png(image) for image in np.asarray(clip)]
            arrays[key] = pa.StructArray.from_arrays(
                [pa.array(data, pa.binary()), pa.array([None] * length, pa.string())], names=["bytes", "path"]
            )
    arrays["timestamp"] = pa.array((np.arange(length) / fps).astype(np.float32))
    arrays["frame_index"] = pa.array(np.arange(length, dtype=np.int64))
    arrays["episode_index"] = pa.array(np.full(length, index, dtype=np.int64))
    arrays["index"] = pa.array(np.arange(global_start, global_start + length, dtype=np.int64))
    arrays["task_index"] = pa.array(np.full(length, task_index, dtype=np.int64))
    return pa.table(arrays)


def _features(cameras: dict, columns: dict, fps: float, video: bool) -> dict:
    features: dict[str, dict] = {}
    for key, (height, width) in cameras.items():
        features[key] = {
            "dtype": "video" if video else "image",
            "shape": [height, width, 3],
            "names": ["height", "width", "channels"],
        }
        if video:
            features[key]["info"] = {
                "video.height": height,
                "video.width": width,
                "video.codec": "h264",
                "video.pix_fmt": "yuv420p",
                "video.is_depth_map": False,
                "video.fps": fps,
                "video.channels": 3,
                "has_audio": False,
            }
    for name, width in columns.items():
        features[name] = {"dtype": "float32", "shape": [width or 1], "names": None}
    features["timestamp"] = {"dtype": "float32", "shape": [1], "names": None}
    for name in ("frame_index", "episode_index", "index", "task_index"):
        features[name] = {"dtype": "int64", "shape": [1], "names": None}
    return features


def _stats_of(table: pa.Table, episodes: Sequence[dict], cameras: dict, columns: dict) -> dict:
    """LeRobot-style stats of every numeric column of `table` and of the cameras' pixels (per channel, in
    [0, 1], shaped [3, 1, 1] as LeRobot's; pixels are subsampled to about 4096 per frame)."""
    out = {}
    for name in (*columns, *_DEFAULT_FEATURES):
        column = table.column(name).combine_chunks()
        width = columns.get(name) or 1
        if pa.types.is_fixed_size_list(column.type):
            column = column.flatten()
        values = column.to_numpy(zero_copy_only=False).astype(np.float64).reshape(-1, width)
        out[name] = {k: v.tolist() for k, v in _column_stats(values).items()}
    for key, (height, width) in cameras.items():
        step = max(1, int(math.sqrt(height * width / 4096)))
        pixels = np.concatenate(
            [np.asarray(e["frames"][key])[:, ::step, ::step].reshape(-1, 3) for e in episodes]
        ).astype(np.float64)
        stats = _column_stats(pixels / 255.0)
        out[key] = {
            k: (v.reshape(3, 1, 1).tolist() if k != "count" else v.tolist()) for k, v in stats.items()
        }
    return out


def _write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=4) + "\n", encoding="utf-8")


def write_lerobot_dataset(
    root: str | Path,
    episodes: Sequence[dict],
    fps: float,
    *,
    version: Literal["v3.0", "v2.1"] = "v3.0",
    video: bool = True,
    robot_type: str = "synthetic",
    episodes_per_file: int = 1000,
    overwrite: bool = False,
) -> Path:
    """Write a LeRobot dataset the reader (and LeRobot's layout) accepts; returns `root`.

    Each episode: {"task": str, "frames": {camera: uint8 [T, H, W, 3]}, "columns": {name: [T, D] or [T]}}
    ([T] is stored as a scalar column, shape [1], as LeRobot stores e.g. a gripper position). Adds `timestamp`
    (frame_index / fps, float32), `frame_index`, `episode_index`, `index` and `task_index`. Cameras become mp4s
    (libx264, yuv420p, fixed settings so the bytes are reproducible; v3.0 puts `episodes_per_file` episodes in
    one mp4 and one parquet) or, with `video=False`, PNG `image` columns. Stats: meta/stats.json (v3.0) or
    meta/episodes_stats.jsonl (v2.1, min/max/mean/std/count as LeRobot v2.1 writes). Per-episode `stats/...`
    columns of v3.0's episodes meta and the `datasets` feature metadata in the parquet files are not written.
    Everything is written to a temporary sibling folder renamed to `root` at the end; an existing non-empty
    `root` is an error unless `overwrite`."""
    if version not in ("v3.0", "v2.1"):
        raise ValueError(f"version must be v3.0 or v2.1, got {version!r}")
    if not fps > 0 or episodes_per_file < 1:
        raise ValueError("fps must be positive and episodes_per_file at least 1")
    root = Path(root)
    cameras, columns = _check_episodes(episodes, video)
    rate = Fraction(fps).limit_denominator(1_000_000)
    tmp = root.parent / f".{root.name}.writing-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        tasks: dict[str, int] = {}
        for episode in episodes:
            tasks.setdefault(episode["task"], len(tasks))
        tables, start = [], 0
        for index, episode in enumerate(episodes):
            tables.append(_frame_table(episode, index, tasks[episode["task"]], start, fps, not video))
            start += tables[-1].num_rows
        writer = _write_v3 if version == "v3.0" else _write_v21
        writer(tmp, episodes, tables, tasks, cameras if video else {}, rate, episodes_per_file)
        chunks_size = 1000
        info = {
            "codebase_version": version,
            "robot_type": robot_type,
            "total_episodes": len(episodes),
            "total_frames": start,
            "total_tasks": len(tasks),
            "chunks_size": chunks_size,
            "fps": fps,
            "splits": {"train": f"0:{len(episodes)}"},
            "features": _features(cameras, columns, fps, video),
        }
        if version == "v3.0":
            info["data_files_size_in_mb"], info["video_files_size_in_mb"] = 100, 200
            info["data_path"] = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
            info["video_path"] = (
                "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
                if video and cameras
                else None
            )
            _write_json(
                tmp / "meta" / "stats.json", _stats_of(pa.concat_tables(tables), episodes, cameras, columns)
            )
        else:
            info["total_chunks"] = (len(episodes) - 1) // chunks_size + 1
            info["total_videos"] = len(episodes) * len(cameras) if video else 0
            info["data_path"] = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
            info["video_path"] = (
                "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
                if video and cameras
                else None
            )
            stats_lines = []
            for index, (episode, table) in enumerate(zip(episodes, tables, strict=True)):
                stats = _stats_of(table, [episode], cameras, columns)
                kept = {
                    c: {k: v for k, v in s.items() if k in ("min", "max", "mean", "std", "count")}
                    for c, s in stats.items()
                }
                stats_lines.append(json.dumps({"episode_index": index, "stats": kept}))
            (tmp / "meta" / "episodes_stats.jsonl").write_text(
                "\n".join(stats_lines) + "\n", encoding="utf-8"
            )
        _write_json(tmp / "meta" / "info.json", info)
        if root.exists():
            if overwrite:
                shutil.rmtree(root)
            elif any(root.iterdir()):
                raise FileExistsError(f"{root}: exists and is not empty")
            else:
                root.rmdir()
        os.replace(tmp, root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root


def _write_v3(tmp: Path, episodes, tables, tasks, cameras, rate, per_file) -> None:
    rows: dict[str, list] = {}

    def add(name, value):
        rows.setdefault(name, []).append(value)

    chunks_size = 1000
    for group, first in enumerate(range(0, len(episodes), per_file)):
        chunk, file = divmod(group, chunks_size)
        members = range(first, min(first + per_file, len(episodes)))
        path = tmp / f"data/chunk-{chunk:03d}/file-{file:03d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.concat_tables([tables[i] for i in members]), path)
        for key in cameras:
            clips = [np.asarray(episodes[i]["frames"][key]) for i in members]
            _encode_mp4(tmp / f"videos/{key}/chunk-{chunk:03d}/file-{file:03d}.mp4", clips, rate)
        offset = 0
        for i in members:
            table, length = tables[i], tables[i].num_rows
            add("episode_index", i)
            add("tasks", [episodes[i]["task"]])
            add("length", length)
            add("data/chunk_index", chunk)
            add("data/file_index", file)
            start = int(table.column("index")[0].as_py())
            add("dataset_from_index", start)
            add("dataset_to_index", start + length)
            for key in cameras:
                add(f"videos/{key}/chunk_index", chunk)
                add(f"videos/{key}/file_index", file)
                add(f"videos/{key}/from_timestamp", float(offset / rate))
                add(f"videos/{key}/to_timestamp", float((offset + length) / rate))
            add("meta/episodes/chunk_index", 0)
            add("meta/episodes/file_index", 0)
            offset += length
    path = tmp / "meta/episodes/chunk-000/file-000.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {
            name: pa.array(values, pa.list_(pa.string()) if name == "tasks" else None)
            for name, values in rows.items()
        }
    )
    pq.write_table(table, path)
    task_table = pa.table({"task_index": pa.array(list(tasks.values()), pa.int64()), "task": list(tasks)})
    pq.write_table(task_table, tmp / "meta" / "tasks.parquet")


def _write_v21(tmp: Path, episodes, tables, tasks, cameras, rate, per_file) -> None:
    chunks_size = 1000
    lines = []
    for index, (episode, table) in enumerate(zip(episodes, tables, strict=True)):
        chunk = index // chunks_size
        path = tmp / f"data/chunk-{chunk:03d}/episode_{index:06d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)
        for key in cameras:
            clip = np.asarray(episode["frames"][key])
            _encode_mp4(tmp / f"videos/chunk-{chunk:03d}/{key}/episode_{index:06d}.mp4", [clip], rate)
        lines.append(
            json.dumps({"episode_index": index, "tasks": [episode["task"]], "length": table.num_rows})
        )
    (tmp / "meta").mkdir(parents=True, exist_ok=True)
    (tmp / "meta" / "episodes.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    task_lines = [json.dumps({"task_index": i, "task": t}) for t, i in tasks.items()]
    (tmp / "meta" / "tasks.jsonl").write_text("\n".join(task_lines) + "\n", encoding="utf-8")
