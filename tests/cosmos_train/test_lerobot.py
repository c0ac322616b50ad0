"""LeRobot datasets without `lerobot`: the writer, the v3.0 / v2.1 reader, layouts, normalisation, action
representations and the one-line errors (`cosmos_train.data.lerobot`, `cosmos_train.data.action_spaces`)."""

import json
import pickle
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cosmos_train.data import action_spaces as spaces
from cosmos_train.data.lerobot import (
    ActionSpec,
    LeRobotFolder,
    denormalize,
    normalize,
    write_lerobot_dataset,
)
from cosmos_train.errors import DataError

FPS = 20.0
T, H, W = 12, 32, 32
CAM_A, CAM_B, CAM_C = "observation.images.agentview", "observation.images.wrist", "observation.images.side"


def _episode(e: int, length: int = T, cameras=(CAM_A, CAM_B)) -> dict:
    """Smooth images (H.264 keeps them within a few levels), different per camera, frame and episode."""
    rng = np.random.default_rng(e)
    t = np.arange(length)[:, None, None]
    ramp = np.linspace(0, 200, W)[None, None, :]
    frames = {}
    for c, key in enumerate(cameras):
        clip = np.zeros((length, H, W, 3), np.uint8)
        clip[..., 0] = 20 + 12 * t + 30 * e
        clip[..., 1] = ramp if c % 2 == 0 else 200 - ramp
        clip[..., 2] = 40 + 70 * c
        frames[key] = clip
    poses = np.cumsum(rng.normal(scale=0.05, size=(length, 6)), axis=0).astype(np.float32)
    return {
        "task": f"put the bowl {e} away | stow bowl {e}",
        "frames": frames,
        "columns": {
            "action": rng.normal(scale=0.3, size=(length, 7)).astype(np.float32),
            "observation.state": (np.arange(length * 8).reshape(length, 8) + 100 * e).astype(np.float32),
            "observation.state.cartesian_position": poses,
            "action.gripper_position": np.linspace(0, 1, length).astype(np.float32),
        },
    }


EPISODES = [_episode(e) for e in range(3)]


def _spec(**overrides) -> ActionSpec:
    base = {"cameras": (CAM_A,), "action_columns": ("action",), "chunk_size": 4}
    return ActionSpec(**{**base, **overrides})


def _one_line_error(call, *fragments) -> str:
    with pytest.raises(DataError) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message, message
    for fragment in fragments:
        assert str(fragment) in message, message
    return message


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("lerobot")
    return {
        # 2 episodes per file: episode 1 starts mid-file (from_timestamp > 0), episode 2 is in a second file
        "v3.0": write_lerobot_dataset(root / "v30", EPISODES, FPS, episodes_per_file=2),
        "v2.1": write_lerobot_dataset(root / "v21", EPISODES, FPS, version="v2.1"),
        "images": write_lerobot_dataset(
            root / "img", [_episode(e, cameras=(CAM_A, CAM_B, CAM_C)) for e in range(2)], FPS, video=False
        ),
    }


def _copy(datasets, name, tmp_path):
    return shutil.copytree(datasets[name], tmp_path / name)


# --- reading back what the writer wrote ------------------------------------------------------------------


@pytest.mark.parametrize("version", ["v3.0", "v2.1"])
def test_written_dataset_reads_back(datasets, version):
    folder = LeRobotFolder(datasets[version])
    assert (folder.version, folder.fps, len(folder.episodes)) == (version, FPS, 3)
    spec = _spec(cameras=(CAM_A, CAM_B), layout="side_by_side", state_columns=("observation.state",))
    folder.check(spec)
    windows = folder.windows(spec)
    assert len(windows) == 3 * (T - spec.chunk_size)  # starts 0..7 in each 12-frame episode
    assert folder.windows(spec, episodes=[1], stride=3) == [(1, 0), (1, 3), (1, 6)]
    for episode, start in [(0, 0), (1, 0), (1, 7), (2, 5)]:
        window = folder.read_window(spec, episode, start)
        source = EPISODES[episode]
        rows = slice(start, start + spec.chunk_size + 1)
        assert window.frames.shape == (5, H, 2 * W, 3) and window.frames.dtype == np.uint8
        for c, key in enumerate((CAM_A, CAM_B)):
            decoded = window.frames[:, :, c * W : (c + 1) * W].astype(int)
            assert np.abs(decoded - source["frames"][key][rows]).mean() < 4, (episode, start, key)
        np.testing.assert_array_equal(window.actions, source["columns"]["action"][start : start + 4])
        assert window.actions.dtype == np.float32
        np.testing.assert_array_equal(window.state, source["columns"]["observation.state"][start])
        assert window.task == f"put the bowl {episode} away"  # the first of the " | " alternatives
        assert (window.episode, window.start) == (episode, start)
    picked = {folder.read_window(spec, 0, 0, rng=np.random.default_rng(s)).task for s in range(8)}
    assert picked == {"put the bowl 0 away", "stow bowl 0"}


def test_stats_v30_file_and_v21_aggregate(datasets):
    v30, v21 = LeRobotFolder(datasets["v3.0"]).stats(), LeRobotFolder(datasets["v2.1"]).stats()
    every = np.concatenate([e["columns"]["action"] for e in EPISODES]).astype(np.float64)
    for stats in (v30, v21):
        np.testing.assert_allclose(stats["action"]["mean"], every.mean(0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(stats["action"]["std"], every.std(0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(stats["action"]["min"], every.min(0), rtol=1e-6)
    np.testing.assert_allclose(v30["action"]["q99"], np.quantile(every, 0.99, axis=0), rtol=1e-5)
    assert "q01" not in v21["action"]  # v2.1 stores no quantiles


def test_v30_episode_chunk_and_file_placeholders(datasets, tmp_path):
    root = _copy(datasets, "v3.0", tmp_path)
    info_path = root / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    info["data_path"] = "data/chunk-{episode_chunk:03d}/file-{episode_file:03d}.parquet"
    info["video_path"] = "videos/{video_key}/chunk-{episode_chunk:03d}/file-{episode_file:03d}.mp4"
    info_path.write_text(json.dumps(info))
    folder = LeRobotFolder(root)
    window = folder.read_window(_spec(), 2, 3)
    assert np.abs(window.frames.astype(int) - EPISODES[2]["frames"][CAM_A][3:8]).mean() < 4
    np.testing.assert_array_equal(window.actions, EPISODES[2]["columns"]["action"][3:7])


def test_tasks_parquet_with_the_task_as_pandas_index(datasets, tmp_path):
    pd = pytest.importorskip("pandas")
    root = _copy(datasets, "v3.0", tmp_path)
    frame = pd.DataFrame({"task_index": [0, 1, 2]}, index=[e["task"] for e in EPISODES])  # unnamed index
    frame.to_parquet(root / "meta" / "tasks.parquet")
    assert "task" not in pq.read_schema(root / "meta" / "tasks.parquet").names
    assert LeRobotFolder(root).read_window(_spec(), 1, 0).task == "put the bowl 1 away"


def test_png_image_cameras_read_losslessly(datasets):
    folder = LeRobotFolder(datasets["images"])
    assert folder.features[CAM_A]["dtype"] == "image"
    assert not (datasets["images"] / "videos").exists()
    window = folder.read_window(_spec(), 1, 2)
    np.testing.assert_array_equal(
        window.frames, _episode(1, cameras=(CAM_A, CAM_B, CAM_C))["frames"][CAM_A][2:7]
    )


def test_layouts_shapes_and_placement(datasets):
    folder = LeRobotFolder(datasets["images"])  # lossless, so the placement is checked exactly
    source = _episode(0, cameras=(CAM_A, CAM_B, CAM_C))["frames"]
    side = folder.read_window(_spec(cameras=(CAM_A, CAM_B), layout="side_by_side"), 0, 1).frames
    assert side.shape == (5, H, 2 * W, 3)
    np.testing.assert_array_equal(side[:, :, :W], source[CAM_A][1:6])
    np.testing.assert_array_equal(side[:, :, W:], source[CAM_B][1:6])

    droid = folder.read_window(_spec(cameras=(CAM_A, CAM_B, CAM_C), layout="wrist_over_pair"), 0, 1).frames
    assert droid.shape == (5, H + H // 2, W, 3)
    np.testing.assert_array_equal(droid[:, :H], source[CAM_A][1:6])

    def halved(clip):  # bilinear halving (align_corners=False) is the mean of each 2x2 block
        blocks = clip.astype(np.float64).reshape(5, H // 2, 2, W // 2, 2, 3).mean(axis=(2, 4))
        return np.rint(blocks).astype(np.uint8)

    np.testing.assert_array_equal(droid[:, H:, : W // 2], halved(source[CAM_B][1:6]))
    np.testing.assert_array_equal(droid[:, H:, W // 2 :], halved(source[CAM_C][1:6]))
    _one_line_error(
        lambda: folder.check(_spec(cameras=(CAM_A, CAM_B), layout="wrist_over_pair")), "wrist_over_pair", "3"
    )


# --- normalisation ---------------------------------------------------------------------------------------


def test_quantile_values_and_round_trips():
    stats = {"q01": [-1.0, 0.0], "q99": [1.0, 4.0], "mean": [1.0, 2.0], "std": [2.0, 0.5]}
    actions = np.array([[0.0, 2.0], [1.0, 4.0], [-1.0, 0.0], [3.0, 6.0]])
    expected = [[0, 0], [1, 1], [-1, -1], [3, 2]]  # mid 0 / 2, half range 1 / 2; not clipped
    np.testing.assert_allclose(normalize(actions, stats, "quantile"), expected)
    np.testing.assert_allclose(normalize(actions, stats, "quantile", clip=True)[3], [1, 1])
    np.testing.assert_allclose(normalize(actions, stats, "mean_std"), (actions - [1, 2]) / [2, 0.5])
    for mode in ("quantile", "mean_std", "none"):
        out = normalize(actions, stats, mode)
        assert out.dtype == np.float32
        np.testing.assert_allclose(denormalize(out, stats, mode), actions, atol=1e-6)
    flat = {"q01": [0.5], "q99": [0.5]}  # a constant column: the range is floored, not divided by 0
    assert np.isfinite(normalize(np.array([[0.5], [0.6]]), flat, "quantile")).all()


def test_read_window_normalizes_actions_and_same_width_state(datasets):
    folder = LeRobotFolder(datasets["v3.0"])
    stats = folder.action_stats(_spec(normalization="quantile"))
    np.testing.assert_allclose(stats["q01"], folder.stats()["action"]["q01"])
    raw = EPISODES[1]["columns"]["action"]
    window = folder.read_window(_spec(normalization="quantile", state_columns=("action",)), 1, 2)
    np.testing.assert_allclose(window.actions, normalize(raw[2:6], stats, "quantile"), rtol=1e-6)
    np.testing.assert_allclose(window.state, normalize(raw[2], stats, "quantile"), rtol=1e-6)
    other = folder.read_window(_spec(normalization="mean_std", state_columns=("observation.state",)), 1, 2)
    np.testing.assert_array_equal(other.state, EPISODES[1]["columns"]["observation.state"][2])  # 8 != 7 wide


def test_quantile_on_v21_needs_quantiles(datasets):
    folder = LeRobotFolder(datasets["v2.1"])
    _one_line_error(
        lambda: folder.check(_spec(normalization="quantile")), datasets["v2.1"], "'action'", "q01"
    )
    folder.check(_spec(normalization="mean_std"))


# --- action representations ------------------------------------------------------------------------------

RZ90 = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
RX90 = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])


def _rodrigues(rotvec):
    """R = I + sin(t) K + (1 - cos t) K^2 for the unit axis' cross-product matrix K."""
    angle = np.linalg.norm(rotvec)
    x, y, z = np.asarray(rotvec) / angle
    k = np.array([[0, -z, y], [z, 0, -x], [-y, x, 0]])
    return np.eye(3) + np.sin(angle) * k + (1 - np.cos(angle)) * k @ k


def test_rotation_closed_forms():
    np.testing.assert_allclose(spaces.axis_angle_to_matrix([0, 0, np.pi / 2]), RZ90, atol=1e-12)
    np.testing.assert_allclose(spaces.axis_angle_to_matrix([0, 0, 0]), np.eye(3))
    tiny = np.array([1e-9, -2e-9, 3e-9])
    np.testing.assert_allclose(spaces.axis_angle_to_matrix(tiny), np.eye(3) + spaces._skew(tiny), atol=1e-15)
    rng = np.random.default_rng(0)
    for axis, angle in zip(rng.normal(size=(5, 3)), [0.1, 1.0, 2.0, 3.0, np.pi - 1e-7], strict=True):
        rotvec = axis / np.linalg.norm(axis) * angle
        matrix = spaces.axis_angle_to_matrix(rotvec)
        np.testing.assert_allclose(matrix, _rodrigues(rotvec), atol=1e-12)
        np.testing.assert_allclose(spaces.matrix_to_axis_angle(matrix), rotvec, atol=1e-6)
    # scipy's lowercase "xyz": extrinsic x, then y, then z, so R = Rz @ Ry @ Rx
    np.testing.assert_allclose(spaces.euler_xyz_to_matrix([0, 0, np.pi / 2]), RZ90, atol=1e-12)
    np.testing.assert_allclose(spaces.euler_xyz_to_matrix([np.pi / 2, 0, np.pi / 2]), RZ90 @ RX90, atol=1e-12)
    a, b, c = 0.3, -0.7, 1.1
    rx = np.array([[1, 0, 0], [0, np.cos(a), -np.sin(a)], [0, np.sin(a), np.cos(a)]])
    ry = np.array([[np.cos(b), 0, np.sin(b)], [0, 1, 0], [-np.sin(b), 0, np.cos(b)]])
    rz = np.array([[np.cos(c), -np.sin(c), 0], [np.sin(c), np.cos(c), 0], [0, 0, 1]])
    np.testing.assert_allclose(spaces.euler_xyz_to_matrix([a, b, c]), rz @ ry @ rx, atol=1e-12)
    # CF's rot6d: column 0 then column 1
    np.testing.assert_allclose(spaces.matrix_to_rot6d(RZ90), [0, 1, 0, -1, 0, 0])
    np.testing.assert_allclose(spaces.rot6d_to_matrix([0, 1, 0, -1, 0, 0]), RZ90, atol=1e-12)


def test_axis_angle_to_rot6d_actions():
    actions = np.array([[0.1, 0.2, 0.3, 0, 0, np.pi / 2, 1.0], [0.0, 0.0, 0.0, 0, 0, 0, -1.0]])
    out = spaces.axis_angle_to_rot6d_actions(actions)
    assert out.shape == (2, 10) and out.dtype == np.float32
    np.testing.assert_allclose(out[0], [0.1, 0.2, 0.3, 0, 1, 0, -1, 0, 0, 1.0], atol=1e-7)
    np.testing.assert_allclose(out[1], [0, 0, 0, 1, 0, 0, 0, 1, 0, -1.0])
    np.testing.assert_allclose(spaces.rot6d_to_axis_angle_actions(out), actions, atol=1e-6)


def test_ee_delta_rot6d_closed_forms():
    still = [0, 0, 0, 0, 0, 0]
    # a pure translation, seen from the end effector: with the OpenCV turn C (90 deg about z), dpos = C^T t
    np.testing.assert_allclose(
        spaces.ee_delta_rot6d([still, [1, 2, 3, 0, 0, 0]], to_opencv=False)[0], [1, 2, 3, 1, 0, 0, 0, 1, 0]
    )
    np.testing.assert_allclose(
        spaces.ee_delta_rot6d([still, [1, 2, 3, 0, 0, 0]])[0], [2, -1, 3, 1, 0, 0, 0, 1, 0], atol=1e-7
    )
    # a 90 degree yaw: z rotations commute with C, so the delta is Rz90
    np.testing.assert_allclose(
        spaces.ee_delta_rot6d([still, [0, 0, 0, 0, 0, np.pi / 2]])[0], [0, 0, 0, 0, 1, 0, -1, 0, 0], atol=1e-7
    )
    # moving +x in the world while yawed 90 degrees (180 with C) is -x for the end effector
    yawed = [[0, 0, 0, 0, 0, np.pi / 2], [1, 0, 0, 0, 0, np.pi / 2]]
    np.testing.assert_allclose(spaces.ee_delta_rot6d(yawed)[0], [-1, 0, 0, 1, 0, 0, 0, 1, 0], atol=1e-7)
    assert spaces.ee_delta_rot6d(np.zeros((5, 6))).shape == (4, 9)


def test_representations_through_the_reader(datasets):
    folder = LeRobotFolder(datasets["v3.0"])
    columns = EPISODES[2]["columns"]
    ee = _spec(
        action_columns=("observation.state.cartesian_position", "action.gripper_position"),
        representation="ee_delta_rot6d",
    )
    folder.check(ee)
    window = folder.read_window(ee, 2, 3)
    assert window.actions.shape == (4, 10)
    np.testing.assert_allclose(
        window.actions[:, :9],
        spaces.ee_delta_rot6d(columns["observation.state.cartesian_position"][3:8]),
        atol=1e-6,
    )
    np.testing.assert_array_equal(window.actions[:, 9], columns["action.gripper_position"][3:7])

    libero = _spec(representation="axis_angle_to_rot6d", normalization="quantile")
    folder.check(libero)
    every = np.concatenate([spaces.axis_angle_to_rot6d_actions(e["columns"]["action"]) for e in EPISODES])
    stats = folder.action_stats(
        libero
    )  # of the 10-D actions, from the data: meta stats are of the 7-D column
    np.testing.assert_allclose(stats["q01"], np.quantile(every.astype(np.float64), 0.01, axis=0), rtol=1e-5)
    window = folder.read_window(libero, 2, 3)
    expected = normalize(spaces.axis_angle_to_rot6d_actions(columns["action"][3:7]), stats, "quantile")
    np.testing.assert_allclose(window.actions, expected, rtol=1e-5, atol=1e-6)
    _one_line_error(
        lambda: folder.check(
            _spec(action_columns=("observation.state",), representation="axis_angle_to_rot6d")
        ),
        "'observation.state'",
        "8 wide",
    )


# --- errors ----------------------------------------------------------------------------------------------


def test_missing_column_and_unknown_camera(datasets):
    folder = LeRobotFolder(datasets["v3.0"])
    _one_line_error(
        lambda: folder.check(_spec(action_columns=("action.eef",))), datasets["v3.0"], "'action.eef'"
    )
    _one_line_error(lambda: folder.check(_spec(state_columns=("joints",))), datasets["v3.0"], "'joints'")
    _one_line_error(
        lambda: folder.check(_spec(cameras=("observation.images.top",))),
        datasets["v3.0"],
        "'observation.images.top'",
        CAM_A,
    )
    _one_line_error(lambda: folder.check(_spec(cameras=("action",))), "'action'", "not a camera")


def test_too_short_episodes(datasets, tmp_path):
    folder = LeRobotFolder(datasets["v3.0"])
    _one_line_error(lambda: folder.check(_spec(chunk_size=12)), datasets["v3.0"], "chunk_size", "13")
    mixed = write_lerobot_dataset(tmp_path / "mixed", [_episode(0), _episode(1, length=4), _episode(2)], FPS)
    folder = LeRobotFolder(mixed)
    windows = folder.windows(_spec())
    assert len(windows) == 2 * (T - 4) and {e for e, _ in windows} == {0, 2}
    assert folder.skipped == 1 and folder.skipped_episodes == [1]
    _one_line_error(lambda: folder.read_window(_spec(), 1, 0), "episode 1", "4 frames")


def test_timestamp_beyond_tolerance(datasets, tmp_path):
    root = _copy(datasets, "v3.0", tmp_path)
    path = root / "data" / "chunk-000" / "file-000.parquet"
    table = pq.read_table(path)
    stamps = table.column("timestamp").to_numpy().copy()
    stamps[6] += 0.02  # episode 0, row 6: 0.3 s -> 0.32 s, between two frames 0.05 s apart
    table = table.set_column(table.column_names.index("timestamp"), "timestamp", pa.array(stamps))
    pq.write_table(table, path)
    folder = LeRobotFolder(root)
    folder.read_window(_spec(), 0, 0)  # rows 0..4 are untouched
    _one_line_error(
        lambda: folder.read_window(_spec(), 0, 4), root, "episode 0", CAM_A, "0.32", "file-000.mp4"
    )
    folder.check(_spec())  # check decodes nothing, so it cannot see this


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (lambda text, info: "{not json", "invalid JSON"),
        (lambda text, info: json.dumps({k: v for k, v in info.items() if k != "fps"}), "fps"),
        (lambda text, info: json.dumps({**info, "codebase_version": "v1.6"}), "v1.6"),
        (
            lambda text, info: json.dumps({**info, "data_path": "data/{chunk}/{file_index}.parquet"}),
            "{chunk}",
        ),
    ],
)
def test_bad_info_json_names_the_file(datasets, tmp_path, edit, fragment):
    root = _copy(datasets, "v2.1", tmp_path)
    info_path = root / "meta" / "info.json"
    text = info_path.read_text()
    info_path.write_text(edit(text, json.loads(text)))
    _one_line_error(lambda: LeRobotFolder(root), info_path, fragment)


def test_check_opens_no_video(datasets, tmp_path, monkeypatch):
    import av

    root = _copy(datasets, "v3.0", tmp_path)
    shutil.rmtree(root / "videos")
    folder = LeRobotFolder(root)
    spec = _spec(cameras=(CAM_A, CAM_B), layout="side_by_side", normalization="mean_std")

    def no_open(*args, **kwargs):
        raise AssertionError("check() opened a video")

    with monkeypatch.context() as patch:
        patch.setattr(av, "open", no_open)
        folder.check(spec)
    _one_line_error(lambda: folder.read_window(spec, 0, 0), "file-000.mp4", "no such file", "episode 0")


# --- the writer and the reader's plumbing ----------------------------------------------------------------


def test_writer_is_deterministic_and_refuses_to_overwrite(datasets, tmp_path):
    again = write_lerobot_dataset(tmp_path / "again", EPISODES, FPS, episodes_per_file=2)
    for mp4 in sorted(datasets["v3.0"].glob("videos/**/*.mp4")):
        assert (again / mp4.relative_to(datasets["v3.0"])).read_bytes() == mp4.read_bytes()
    with pytest.raises(FileExistsError):
        write_lerobot_dataset(again, EPISODES[:1], FPS)
    write_lerobot_dataset(again, EPISODES[:1], FPS, overwrite=True)
    assert len(LeRobotFolder(again).episodes) == 1
    assert not list(tmp_path.glob(".*writing*"))
    with pytest.raises(ValueError, match="even"):
        write_lerobot_dataset(
            tmp_path / "odd",
            [{"task": "x", "frames": {CAM_A: np.zeros((2, 5, 6, 3), np.uint8)}, "columns": {}}],
            FPS,
        )


def test_folder_pickles_without_its_open_videos(datasets):
    with LeRobotFolder(datasets["v3.0"]) as folder:
        first = folder.read_window(_spec(), 1, 1)
        copy = pickle.loads(pickle.dumps(folder))
        np.testing.assert_array_equal(copy.read_window(_spec(), 1, 1).frames, first.frames)
        copy.close()
