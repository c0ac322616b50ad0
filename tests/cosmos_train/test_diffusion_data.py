"""Image/video + caption pairs for diffusion training: the three sources, the transforms, bad data, the cache."""

import json
import logging
import pickle
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from cosmos_train.config import PairData
from cosmos_train.data import DataError
from cosmos_train.data.pairs import collate_pairs, load_pairs
from cosmos_train.diffusion.adapter import DiffusionAdapter
from cosmos_train.diffusion.latent_cache import LatentCache, cache_pairs, cache_window_start, encode_seed

torch.set_num_threads(1)

EXAMPLE_PAIRS = Path(__file__).resolve().parents[2] / "examples" / "data" / "pairs"
RED, GREEN, BLUE = (220, 30, 30), (30, 170, 60), (40, 70, 220)


def section(path, **kwargs) -> PairData:
    return PairData(**{"path": str(path), "height": 16, "width": 16, **kwargs})


def write_image(path: Path, size=(32, 32), color=RED) -> Path:
    Image.new("RGB", size, color).save(path)
    return path


def write_clip(path: Path, frames: int, size: int = 32) -> Path:
    """An mpeg4 MP4 whose frame i is flat gray at level 20 + 10 * i (so a decoded frame tells its index)."""
    import av

    with av.open(str(path), "w", format="mp4") as container:
        stream = container.add_stream("mpeg4", rate=4)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        stream.options = {"qscale": "1"}
        for index in range(frames):
            pixels = np.full((size, size, 3), 20 + 10 * index, dtype=np.uint8)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")))
        container.mux(stream.encode(None))
    return path


def write_pair(folder: Path, name: str, media: str = "png", record=None, **image) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if media == "mp4":
        write_clip(folder / f"{name}.mp4", frames=image.get("frames", 8))
    else:
        write_image(folder / f"{name}.{media}", **image)
    record = {"prompt": f"picture {name}"} if record is None else record
    (folder / f"{name}.json").write_text(record if isinstance(record, str) else json.dumps(record))
    return folder


def frame_levels(pixels: torch.Tensor) -> list[float]:
    """The mean level (0..255) of each frame of a `3 x T x H x W` clip in [-1, 1]."""
    return [float((frame.mean() + 1) * 127.5) for frame in pixels.unbind(1)]


def decoded_levels(path: Path) -> list[float]:
    """The mean level of every frame of a clip, decoded independently with PyAV."""
    import av

    with av.open(str(path)) as container:
        return [float(frame.to_ndarray(format="rgb24").mean()) for frame in container.decode(video=0)]


# --- the three sources ----------------------------------------------------------------------------------


def test_folder_of_image_pairs_resizes_crops_and_passes_metadata_through(tmp_path):
    # 64x32: red | green | blue in quarters 1, 2-3, 4; shorter side to 16 then a centre crop keeps the green.
    image = Image.new("RGB", (64, 32), GREEN)
    image.paste(RED, (0, 0, 16, 32))
    image.paste(BLUE, (48, 0, 64, 32))
    image.save(tmp_path / "0001.png")
    (tmp_path / "0001.json").write_text(json.dumps({"prompt": "a green band", "source": "test", "n": 3}))
    write_pair(tmp_path / "more", "0002", media="jpg", size=(20, 40))
    write_pair(tmp_path, "0003", media="webp")

    dataset, report = load_pairs(section(tmp_path), video=False)

    assert (report.total, report.kept, report.skipped) == (3, 3, 0)
    assert [row["key"] for row in dataset.rows] == ["0001", "0003", "more/0002"]
    item = dataset[0]
    assert item["prompt"] == "a green band" and item["metadata"] == {"source": "test", "n": 3}
    assert item["key"] == "0001"
    pixels = item["pixels"]
    assert pixels.shape == (3, 16, 16) and pixels.dtype == torch.float32
    assert pixels.min() >= -1 and pixels.max() <= 1
    green = torch.tensor(GREEN) / 127.5 - 1
    assert torch.allclose(pixels[:, :, 2:14], green[:, None, None].expand(3, 16, 12), atol=0.02)
    assert dataset[2]["pixels"].shape == (3, 16, 16)  # portrait jpg: cropped the other way
    assert min(float(dataset[i]["pixels"].min()) for i in range(3)) >= -1

    batch = collate_pairs([dataset[0], dataset[1]])
    assert batch["pixels"].shape == (2, 3, 16, 16)
    assert batch["prompts"] == ["a green band", "picture 0003"]
    assert batch["metadata"] == [{"source": "test", "n": 3}, {}]


def test_example_pairs_load(tmp_path):
    dataset, report = load_pairs(section(EXAMPLE_PAIRS), video=False)
    assert report.kept == len(dataset) == 8
    assert dataset[0]["prompt"] == "a red square on a white background"


def test_video_window_is_num_frames_consecutive_frames_from_a_random_start(tmp_path):
    write_pair(tmp_path, "clip", media="mp4", frames=12)
    dataset, _ = load_pairs(section(tmp_path, num_frames=4, height=8, width=8), video=True)
    assert dataset.frame_count(0) == 12  # from the header, at load time

    reference = decoded_levels(tmp_path / "clip.mp4")  # frames differ by ~10 levels each
    starts = []
    for seed in range(12):
        torch.manual_seed(seed)
        pixels = dataset[0]["pixels"]
        assert pixels.shape == (3, 4, 8, 8) and pixels.dtype == torch.float32
        levels = frame_levels(pixels)
        start = min(range(12), key=lambda s: abs(reference[s] - levels[0]))
        assert np.allclose(levels, reference[start : start + 4], atol=1.0), (levels, reference)
        starts.append(start)
    assert len(set(starts)) > 3 and all(0 <= s <= 8 for s in starts)

    torch.manual_seed(5)  # the start comes from torch's global RNG: a reseeded (resumed) run redraws it
    again = dataset[0]["pixels"]
    torch.manual_seed(5)
    assert torch.equal(dataset[0]["pixels"], again)
    assert collate_pairs([dataset[0], dataset[0]])["pixels"].shape == (2, 3, 4, 8, 8)


def test_cosmos_predict_layout_never_unpickles_its_text_embeddings(tmp_path, caplog):
    root = tmp_path / "cosmos"
    for folder in ("videos", "metas", "text_embedding"):
        (root / folder).mkdir(parents=True)
    write_clip(root / "videos" / "a.mp4", frames=6)
    write_clip(root / "videos" / "b.mp4", frames=6)
    (root / "metas" / "a.txt").write_text("a gray fade\n")
    (root / "metas" / "b.txt").write_text("another fade")
    marker = tmp_path / "unpickled"

    class Payload:  # unpickling this creates `marker`
        def __reduce__(self):
            return (open, (str(marker), "w"))

    payload = pickle.dumps(Payload())
    (root / "text_embedding" / "a.pickle").write_bytes(payload)

    with caplog.at_level(logging.WARNING, logger="cosmos_train.data"):
        dataset, report = load_pairs(section(root, num_frames=4), video=True)
    assert report.kept == 2 and [row["prompt"] for row in dataset.rows] == ["a gray fade", "another fade"]
    assert dataset[0]["pixels"].shape == (3, 4, 16, 16)
    warnings = [r.getMessage() for r in caplog.records if "pickle" in r.getMessage()]
    assert len(warnings) == 1 and "ignoring 1 pickle file(s) such as text_embedding/a.pickle" in warnings[0]
    assert not marker.exists()
    pickle.loads(payload)  # the payload is live: loading it would have left the marker
    assert marker.exists()

    (root / "metas" / "b.txt").unlink()
    with pytest.raises(DataError) as error:
        load_pairs(section(root, num_frames=4), video=True)
    assert str(error.value) == f"{root}/videos/b.mp4: no caption metas/b.txt"
    (root / "metas" / "b.txt").write_text("  \n")
    with pytest.raises(DataError) as error:
        load_pairs(section(root, num_frames=4), video=True)
    assert str(error.value) == f"{root}/videos/b.mp4: empty caption metas/b.txt"


def test_hf_saved_dataset_with_an_image_column(tmp_path):
    import datasets

    images = [Image.new("RGB", (24, 16), color) for color in (RED, GREEN, BLUE)]
    table = datasets.Dataset.from_dict(
        {"picture": images, "caption": ["red", "green", "blue"], "score": [1.0, 2.0, 3.0]}
    ).cast_column("picture", datasets.Image())
    table.save_to_disk(str(tmp_path / "saved"))

    data = section(tmp_path / "saved", image_column="picture", caption_column="caption")
    dataset, report = load_pairs(data, video=False)  # format "auto": a save_to_disk folder
    assert report.kept == 3
    item = dataset[1]
    assert item["prompt"] == "green" and item["metadata"] == {"score": 2.0} and item["key"] == "1"
    assert item["pixels"].shape == (3, 16, 16)
    assert torch.allclose(item["pixels"][:, 8, 8], torch.tensor(GREEN) / 127.5 - 1, atol=0.02)

    with pytest.raises(DataError) as error:
        load_pairs(section(tmp_path / "saved", image_column="picture"), video=False)
    assert str(error.value) == (
        f"{tmp_path}/saved: no column 'text' (has: picture, caption, score); set [data] caption_column"
    )


def test_hf_bad_rows_and_a_video_column(tmp_path):
    import datasets

    features = datasets.Features({"image": datasets.Image(), "text": datasets.Value("string")})
    good = {"bytes": write_image(tmp_path / "ok.png").read_bytes(), "path": None}
    rows = {
        "image": [good, good, {"bytes": b"not an image at all", "path": None}],
        "text": ["fine", "", "broken"],
    }
    datasets.Dataset.from_dict(rows, features=features).save_to_disk(str(tmp_path / "bad"))
    dataset, report = load_pairs(section(tmp_path / "bad", format="hf", skip_bad=True), video=False)
    assert (report.total, report.kept, report.skipped) == (3, 1, 2)
    assert report.problems == [
        f"{tmp_path}/bad[1]: empty 'text'",
        f"{tmp_path}/bad[2]: corrupt image (embedded): not a recognised image format",
    ]

    write_clip(tmp_path / "v.mp4", frames=5)
    datasets.Dataset.from_dict({"clip": ["../v.mp4"], "text": ["gray"]}).save_to_disk(str(tmp_path / "vid"))
    dataset, _ = load_pairs(section(tmp_path / "vid", video_column="clip", num_frames=5), video=True)
    assert dataset[0]["pixels"].shape == (3, 5, 16, 16)  # paths are relative to the dataset folder


# --- bad data ---------------------------------------------------------------------------------------------


def _bad_folder(folder: Path, case: str) -> tuple[Path, str]:
    """A folder with one good pair and one bad one; the exact message the bad one gives."""
    write_pair(folder, "0001")
    if case == "missing prompt":
        write_pair(folder, "0002", record={"caption": "wrong key"})
        return folder, f"{folder}/0002.json: no 'prompt'"
    if case == "empty prompt":
        write_pair(folder, "0002", record={"prompt": "   "})
        return folder, f"{folder}/0002.json: empty 'prompt'"
    if case == "prompt not text":
        write_pair(folder, "0002", record={"prompt": ["a", "list"]})
        return folder, f"{folder}/0002.json: 'prompt' is not text (list)"
    if case == "non-JSON":
        write_pair(folder, "0002", record="{prompt: no quotes}")
        return folder, (
            f"{folder}/0002.json: invalid JSON (Expecting property name enclosed in double quotes at line 1 column 2)"
        )
    if case == "not an object":
        write_pair(folder, "0002", record='["prompt"]')
        return folder, f"{folder}/0002.json: expected a JSON object, got list"
    if case == "unreadable image":
        write_pair(folder, "0002")
        (folder / "0002.png").write_bytes(b"this is not a png" * 4)
        return folder, f"{folder}/0002.json: corrupt image 0002.png: not a recognised image format"
    if case == "caption missing":
        write_image(folder / "0002.png")
        return folder, f"{folder}/0002.png: no caption file 0002.json"
    if case == "media missing":
        (folder / "0002.json").write_text('{"prompt": "alone"}')
        return folder, f"{folder}/0002.json: no media file 0002.jpg|jpeg|png|webp|mp4"
    if case == "two media":
        write_pair(folder, "0002")
        write_image(folder / "0002.jpg")
        return folder, f"{folder}/0002.json: several media files (0002.jpg, 0002.png)"
    raise AssertionError(case)


BAD_CASES = [
    "missing prompt",
    "empty prompt",
    "prompt not text",
    "non-JSON",
    "not an object",
    "unreadable image",
    "caption missing",
    "media missing",
    "two media",
]


@pytest.mark.parametrize("case", BAD_CASES)
def test_a_bad_pair_is_one_line_naming_its_file(tmp_path, case):
    folder, expected = _bad_folder(tmp_path, case)
    with pytest.raises(DataError) as error:
        load_pairs(section(folder, format="folder"), video=False)
    assert str(error.value) == expected


def test_skip_bad_counts_and_lists_every_bad_pair(tmp_path, caplog):
    expected = [_bad_folder(tmp_path / case.replace(" ", "_"), case)[1] for case in BAD_CASES]
    with caplog.at_level(logging.WARNING, logger="cosmos_train.data"):
        dataset, report = load_pairs(section(tmp_path, format="folder", skip_bad=True), video=False)
    assert (report.total, report.kept, report.skipped) == (2 * len(BAD_CASES), len(BAD_CASES), len(BAD_CASES))
    assert sorted(report.problems) == sorted(expected) and len(dataset) == len(BAD_CASES)
    assert f"skipped {len(BAD_CASES)} of {2 * len(BAD_CASES)} records" in caplog.text

    (tmp_path / "missing_prompt" / "0001.json").unlink()
    with pytest.raises(DataError) as error:  # nothing usable at all
        load_pairs(section(tmp_path / "missing_prompt", skip_bad=True), video=False)
    assert str(error.value) == (
        f"{tmp_path}/missing_prompt: no usable pairs (skipped 2; first: {tmp_path}/missing_prompt/0001.png: "
        "no caption file 0001.json)"
    )


def test_images_for_a_video_pipeline_and_videos_for_an_image_pipeline(tmp_path):
    images = write_pair(tmp_path / "images", "0001")
    videos = write_pair(tmp_path / "videos", "0001", media="mp4", frames=3)
    with pytest.raises(DataError) as error:
        load_pairs(section(images, num_frames=2), video=True)
    assert str(error.value) == f"{images}: the data are images but the pipeline makes videos"
    with pytest.raises(DataError) as error:
        load_pairs(section(videos), video=False)
    assert str(error.value) == f"{videos}: the data are videos but the pipeline makes images"
    with pytest.raises(DataError) as error:
        load_pairs(section(videos), video=True)
    assert str(error.value) == f"{videos}: the pipeline makes videos: set [data] num_frames"
    with pytest.raises(DataError) as error:  # too short: known from the header at load time
        load_pairs(section(videos, num_frames=4), video=True)
    assert str(error.value) == f"{videos}/0001.json: video 0001.mp4 has 3 frames, fewer than num_frames = 4"


# --- the cache --------------------------------------------------------------------------------------------


class CountingAdapter(DiffusionAdapter):
    """A stand-in family: a 1x1-conv 'VAE' that samples (adds seeded noise) and a byte-embedding text encoder whose
    output length is the prompt's (ragged), counting every encode call."""

    pipeline_class = "CountingPipeline"
    ragged_conditioning = ("prompt_embeds",)

    def __init__(self, video: bool = False, seed: int = 0):
        torch.manual_seed(seed)
        pipeline = SimpleNamespace(
            transformer=torch.nn.Linear(1, 1),
            vae=torch.nn.Linear(3, 4),
            text_encoder=torch.nn.Embedding(257, 8),
        )
        super().__init__(pipeline)
        self.video = video
        self.pixel_calls = self.prompt_calls = 0

    def text_encoder_modules(self):
        return [self.pipeline.text_encoder]

    def encode_pixels(self, pixels):
        self.pixel_calls += 1
        mixed = torch.einsum("bc...,dc->bd...", pixels, self.pipeline.vae.weight)
        return mixed + 0.1 * torch.randn_like(mixed)

    def encode_prompts(self, prompts):
        self.prompt_calls += len(prompts)
        ids = torch.tensor([[256, *prompt.encode()] for prompt in prompts])  # one prompt at a time here
        embeds = self.pipeline.text_encoder(ids)
        return {"prompt_embeds": embeds, "pooled_prompt_embeds": embeds.mean(1)}


@pytest.fixture
def image_pairs(tmp_path):
    folder = tmp_path / "pairs"
    for index, color in enumerate((RED, GREEN, BLUE)):
        write_pair(folder, f"{index:04d}", record={"prompt": "x" * (index + 2), "i": index}, color=color)
    return load_pairs(section(folder), video=False)[0]


def cache_files(folder: Path) -> set[Path]:
    return set(folder.rglob("*.safetensors"))


def test_cache_hits_on_the_second_run_and_batches_ragged_conditioning(image_pairs, tmp_path):
    adapter = CountingAdapter()
    cached = cache_pairs(image_pairs, adapter, tmp_path / "cache")
    assert (adapter.pixel_calls, adapter.prompt_calls) == (3, 4)  # 3 items + the empty prompt once
    assert len(cache_files(tmp_path / "cache")) == 4

    again = CountingAdapter()  # a new run with the same encoder weights: nothing is encoded
    cached_again = cache_pairs(image_pairs, again, tmp_path / "cache")
    assert (again.pixel_calls, again.prompt_calls) == (0, 0)
    assert torch.equal(cached_again[1]["latents"], cached[1]["latents"])

    item = cached[2]
    assert set(item) == {"latents", "conditioning", "prompt", "metadata", "key"}
    assert item["latents"].shape == (4, 16, 16) and item["conditioning"]["prompt_embeds"].shape == (5, 8)
    assert item["prompt"] == "xxxx" and item["metadata"] == {"i": 2} and item["key"] == "0002"
    assert cached.unconditional()["prompt_embeds"].shape == (1, 8)  # the empty prompt: the start token only

    batch = cached.collate([cached[0], cached[2]])
    assert batch["latents"].shape == (2, 4, 16, 16) and batch["prompts"] == ["xx", "xxxx"]
    embeds = batch["conditioning"]["prompt_embeds"]
    assert embeds.shape == (2, 5, 8) and torch.equal(embeds[0, 3:], torch.zeros(2, 8))
    assert batch["conditioning"]["pooled_prompt_embeds"].shape == (2, 8)
    plain = collate_pairs([cached[0], cached[2]])  # without the adapter's keys: pads what differs
    assert all(torch.equal(plain["conditioning"][k], v) for k, v in batch["conditioning"].items())


def test_the_same_image_with_two_captions_is_two_entries(tmp_path):
    """The key holds the caption: one image captioned twice caches two text embeddings, each its own caption's."""
    folder = tmp_path / "pairs"
    write_pair(folder, "0000", record={"prompt": "a red square"}, color=RED)
    write_pair(folder, "0001", record={"prompt": "a crimson block"}, color=RED)  # the same image bytes
    assert (folder / "0000.png").read_bytes() == (folder / "0001.png").read_bytes()
    dataset, _ = load_pairs(section(folder), video=False)
    adapter = CountingAdapter()
    cached = cache_pairs(dataset, adapter, tmp_path / "cache")
    assert (
        cached.digests[0] != cached.digests[1] and adapter.prompt_calls == 3
    )  # two captions + the empty one
    for index, caption in enumerate(("a red square", "a crimson block")):
        with torch.no_grad():
            expected = adapter.encode_prompts([caption])["prompt_embeds"][0]
        assert torch.equal(cached[index]["conditioning"]["prompt_embeds"], expected), caption


def test_a_changed_encoder_invalidates_the_cache(image_pairs, tmp_path):
    cache_pairs(image_pairs, CountingAdapter(), tmp_path / "cache")
    before = cache_files(tmp_path / "cache")

    changed = CountingAdapter()
    with torch.no_grad():
        changed.pipeline.vae.weight[0, 0] += 1e-3  # one VAE weight
    cache_pairs(image_pairs, changed, tmp_path / "cache")
    assert changed.pixel_calls == 3
    text_changed = CountingAdapter()
    with torch.no_grad():
        text_changed.pipeline.text_encoder.weight[256, 0] += 1e-3  # one text-encoder weight
    cache_pairs(image_pairs, text_changed, tmp_path / "cache")
    assert (text_changed.pixel_calls, text_changed.prompt_calls) == (3, 4)
    assert len(cache_files(tmp_path / "cache") - before) == 8


def test_cached_encodings_equal_encoding_on_the_fly(tmp_path):
    from cosmos_train.diffusion.families.sd3 import StableDiffusion3Adapter
    from cosmos_train.tiny_models.pipelines import build_sd3

    folder = tmp_path / "pairs"
    for index, color in enumerate((RED, BLUE)):
        write_pair(folder, f"{index:04d}", record={"prompt": f"a shape {index}"}, size=(40, 32), color=color)
    dataset, _ = load_pairs(section(folder, height=32, width=32), video=False)
    adapter = StableDiffusion3Adapter(build_sd3())
    cached = cache_pairs(dataset, adapter, tmp_path / "cache")

    for index in range(2):
        item = cached[index]
        with torch.no_grad():
            torch.manual_seed(encode_seed(cached.digests[index]))
            latents = adapter.encode_pixels(dataset[index]["pixels"][None])[0]
            other_sample = adapter.encode_pixels(dataset[index]["pixels"][None])[0]
            conditioning = adapter.encode_prompts([dataset[index]["prompt"]])
        assert torch.equal(item["latents"], latents)
        assert not torch.equal(item["latents"], other_sample)  # the VAE samples: equality needs the seed
        assert conditioning.keys() == item["conditioning"].keys()
        for key, value in conditioning.items():
            assert torch.equal(item["conditioning"][key], value[0])
    with torch.no_grad():
        empty = adapter.encode_prompts([""])
    assert all(torch.equal(cached.unconditional()[k], v[0]) for k, v in empty.items())


def test_a_killed_write_leaves_nothing_that_is_trusted(image_pairs, tmp_path, monkeypatch):
    import safetensors.torch

    real_save = safetensors.torch.save_file

    def dies_halfway(tensors, filename, metadata=None):
        real_save(tensors, filename, metadata)
        data = Path(filename).read_bytes()
        Path(filename).write_bytes(data[: len(data) // 2])
        raise KeyboardInterrupt  # as a kill mid-write

    monkeypatch.setattr(safetensors.torch, "save_file", dies_halfway)
    with pytest.raises(KeyboardInterrupt):
        cache_pairs(image_pairs, CountingAdapter(), tmp_path / "cache")
    monkeypatch.setattr(safetensors.torch, "save_file", real_save)
    assert not list((tmp_path / "cache").rglob("*.safetensors")) and not list(
        (tmp_path / "cache").rglob("*tmp")
    )

    first = CountingAdapter()
    cached = cache_pairs(image_pairs, first, tmp_path / "cache")
    assert first.pixel_calls == 3
    # A damaged entry at the final name (disk trouble, a foreign file) is re-encoded, not read.
    path = cached.cache.path(cached.digests[0])
    reference = cached[0]["latents"].clone()  # loaded tensors may map the file, which is damaged next
    path.write_bytes(path.read_bytes()[:100])
    again = CountingAdapter()
    cached = cache_pairs(image_pairs, again, tmp_path / "cache")
    assert (again.pixel_calls, again.prompt_calls) == (1, 1)
    assert torch.equal(cached[0]["latents"], reference)


def test_video_cache_fixes_one_window_per_file(tmp_path):
    folder = write_pair(tmp_path / "clips", "0001", media="mp4", frames=10)
    dataset, _ = load_pairs(section(folder, num_frames=3, height=8, width=8), video=True)
    adapter = CountingAdapter(video=True)
    state = torch.get_rng_state()
    cached = cache_pairs(dataset, adapter, tmp_path / "cache")
    assert adapter.pixel_calls == 1
    assert torch.equal(torch.get_rng_state(), state)  # encoding drew from a private RNG, not the training one
    item = cached[0]
    assert item["latents"].shape == (4, 3, 8, 8)

    import hashlib

    media = hashlib.sha256(Path(dataset.rows[0]["media"]).read_bytes()).hexdigest()
    start = cache_window_start(media, 10, 3)
    with torch.no_grad():
        torch.manual_seed(encode_seed(cached.digests[0]))
        expected = adapter.encode_pixels(dataset.get(0, start=start)["pixels"][None])[0]
    assert torch.equal(item["latents"], expected)
    again = CountingAdapter(video=True)  # a rerun (any RNG state) hits the same window's entry
    assert torch.equal(cache_pairs(dataset, again, tmp_path / "cache")[0]["latents"], item["latents"])
    assert again.pixel_calls == 0


def test_latent_cache_unconditional_is_cached_once(tmp_path):
    adapter = CountingAdapter()
    cache = LatentCache(adapter, tmp_path)
    first = cache.unconditional()
    assert adapter.prompt_calls == 1
    assert torch.equal(
        LatentCache(adapter, tmp_path).unconditional()["prompt_embeds"], first["prompt_embeds"]
    )
    assert adapter.prompt_calls == 1
