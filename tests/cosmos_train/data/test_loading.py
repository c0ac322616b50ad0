"""Loading and validation: every format normalizes to the same rows, every bad input is one precise line."""

import json
import logging
import wave
from pathlib import Path

import pytest
from PIL import Image

from cosmos_train.algorithms.sft.schema import ConversationData
from cosmos_train.data import DataError, load_conversations, to_text_messages


def section(path, fmt, **kwargs) -> ConversationData:
    return ConversationData(format=fmt, path=str(path), **kwargs)


def write_jsonl(path: Path, lines: list) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def user_image(image: str, text: str) -> dict:
    return {"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": text}]}


def chat(*turns) -> dict:
    return {"messages": list(turns)}


ANSWER = {"role": "assistant", "content": "red"}
IMAGE_QUESTION = [{"type": "image", "text": None}, {"type": "text", "text": "What color is the shape?"}]


@pytest.fixture
def media(tmp_path, write_clip) -> Path:
    """A folder with one good image, one good clip, and corrupt/unsuitable files."""
    Image.new("RGB", (32, 32), (200, 0, 0)).save(tmp_path / "good.png")
    (tmp_path / "bad.png").write_bytes(b"this is not a png at all" * 4)
    (tmp_path / "bad.mp4").write_bytes(b"\x00\x00\x00\x18garbage, not an mp4 container" * 8)
    write_clip(tmp_path / "good.mp4", frames=4, fps=4)
    with wave.open(str(tmp_path / "sound.wav"), "wb") as audio:  # decodable, but has no video stream
        audio.setnchannels(1)
        audio.setsampwidth(2)
        audio.setframerate(8000)
        audio.writeframes(b"\x00\x00" * 800)
    return tmp_path


def test_llava_jsonl_and_hf_normalize_to_the_same_rows(shapes_dir, tmp_path):
    import datasets

    llava, report = load_conversations(section(shapes_dir / "llava.json", "llava"))
    jsonl, _ = load_conversations(section(shapes_dir / "chat.jsonl", "jsonl"))
    assert report.total == report.kept == len(llava) == 24 and report.skipped == 0
    assert len(jsonl) == 26  # the same 24 plus two video records

    records = json.loads((shapes_dir / "llava.json").read_text())
    columns = {"conversations": [r["conversations"] for r in records], "image": [r["image"] for r in records]}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(columns)}).save_to_disk(tmp_path / "saved")
    hf, _ = load_conversations(section(tmp_path / "saved", "hf", media_dir=str(shapes_dir)))

    for rows in (jsonl.select(range(24)), hf):
        assert rows["messages"] == llava["messages"] and rows["images"] == llava["images"]
    first = llava[0]
    assert first["messages"] == [
        {"role": "user", "content": IMAGE_QUESTION},
        {"role": "assistant", "content": [{"type": "text", "text": "red"}]},
    ]
    assert first["images"] == [str(shapes_dir / "images" / "red_square.png")] and first["videos"] == []
    assert (first["source"], jsonl[3]["source"], hf[5]["source"]) == (
        f"{shapes_dir / 'llava.json'}[0]",
        f"{shapes_dir / 'chat.jsonl'}:4",
        f"{tmp_path / 'saved'}[5]",
    )
    video = jsonl[24]
    assert video["videos"] == [str(shapes_dir / "clip.mp4")] and video["images"] == []
    assert video["messages"][0]["content"][0] == {"type": "video", "text": None}


def test_system_prompt_is_prepended_only_when_missing(tmp_path, media):
    path = write_jsonl(
        tmp_path / "chat.jsonl",
        [
            chat({"role": "user", "content": "hi"}, ANSWER),
            chat({"role": "system", "content": "own"}, {"role": "user", "content": "hi"}, ANSWER),
        ],
    )
    rows, _ = load_conversations(section(path, "jsonl", system_prompt="Be brief."))
    assert [m["role"] for m in rows[0]["messages"]] == ["system", "user", "assistant"]
    assert rows[0]["messages"][0]["content"] == [{"type": "text", "text": "Be brief."}]
    assert rows[1]["messages"][0]["content"] == [{"type": "text", "text": "own"}]
    unprompted, _ = load_conversations(section(path, "jsonl"))
    assert [m["role"] for m in unprompted[0]["messages"]] == ["user", "assistant"]


def test_llava_tags_place_media_in_order_and_untagged_media_lead_the_first_human_turn(media):
    records = [
        {
            "images": ["good.png", "good.png"],
            "video": "good.mp4",
            "conversations": [
                {"from": "system", "value": "sys"},
                {"from": "human", "value": "Compare <image> and <image>.\n<video>"},
                {"from": "gpt", "value": "same"},
            ],
        },
        {
            "image": "good.png",
            "video": "good.mp4",
            "conversations": [
                {"from": "human", "value": "What is it?"},
                {"from": "gpt", "value": "a square"},
                {"from": "human", "value": "Sure?"},
                {"from": "gpt", "value": "yes"},
            ],
        },
    ]
    (media / "data.json").write_text(json.dumps(records))
    rows, _ = load_conversations(section(media / "data.json", "llava"))
    text = lambda t: {"type": "text", "text": t}  # noqa: E731
    image, video = {"type": "image", "text": None}, {"type": "video", "text": None}
    assert rows[0]["messages"][1]["content"] == [
        text("Compare "),
        image,
        text(" and "),
        image,
        text("."),
        video,
    ]
    assert rows[0]["images"] == [str(media / "good.png")] * 2 and rows[0]["videos"] == [
        str(media / "good.mp4")
    ]
    assert rows[1]["messages"][0]["content"] == [image, video, text("What is it?")]
    assert rows[1]["messages"][2]["content"] == [text("Sure?")]


def test_jsonl_placeholders_fill_from_media_columns(media):
    path = write_jsonl(
        media / "chat.jsonl",
        [
            {
                "images": ["good.png"],
                "messages": [
                    {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "q"}]},
                    ANSWER,
                ],
            }
        ],
    )
    rows, _ = load_conversations(section(path, "jsonl"))
    assert rows[0]["images"] == [str(media / "good.png")]


# (records, expected reason) per bad-input kind; JSONL sources are FILE:LINE, LLaVA sources FILE[INDEX].
JSONL_CASES = [
    ('{"messages": [', "invalid JSON (Expecting value at column 15)"),
    (chat(), "empty conversation"),
    ({"text": "hello"}, "no 'conversations' or 'messages'"),
    (chat({"role": "user", "content": "hi"}), "no assistant turn"),
    (chat({"role": "bot", "content": "hi"}, ANSWER), "unknown role 'bot' in messages[0]"),
    (chat(user_image("nope.png", "q"), ANSWER), "missing image nope.png"),
    (chat(user_image("bad.png", "q"), ANSWER), "corrupt image bad.png: not a recognised image format"),
    (
        chat({"role": "user", "content": [{"type": "video", "video": "bad.mp4"}]}, ANSWER),
        "corrupt video bad.mp4: Invalid data found when processing input",
    ),
    (chat({"role": "user", "content": [{"type": "video", "video": "sound.wav"}]}, ANSWER), None),
    (
        chat({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "q"}]}, ANSWER),
        "1 image placeholder(s) but 0 image(s)",
    ),
    (
        chat(
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": [{"type": "image", "image": "good.png"}]},
        ),
        "image in a assistant turn (media go in user turns)",
    ),
]


@pytest.mark.parametrize(("line", "reason"), JSONL_CASES)
def test_each_bad_jsonl_record_is_one_line_naming_file_and_line(media, line, reason):
    good = chat(user_image("good.png", "q"), ANSWER)
    path = write_jsonl(media / "chat.jsonl", [good, "", line])  # the blank line still counts for numbering
    with pytest.raises(DataError) as error:
        load_conversations(section(path, "jsonl"))
    message = str(error.value)
    assert "\n" not in message
    if reason is None:  # audio-only file: PyAV opens it, so the problem is the missing stream
        reason = "corrupt video sound.wav: no video stream"
    assert message == f"{path}:3: {reason}"


LLAVA_CASES = [
    ({"conversations": []}, "empty conversation"),
    (
        {
            "image": "good.png",
            "conversations": [{"from": "human", "value": "<image><image>"}, {"from": "gpt", "value": "x"}],
        },
        "2 <image> tag(s) but 1 image(s)",
    ),
    (
        {"conversations": [{"from": "human", "value": "<video> what?"}, {"from": "gpt", "value": "x"}]},
        "1 <video> tag(s) but 0 video(s)",
    ),
    (
        {
            "image": "gone/a.png",
            "conversations": [{"from": "human", "value": "?"}, {"from": "gpt", "value": "x"}],
        },
        "missing image gone/a.png",
    ),
    (
        {
            "video": "bad.mp4",
            "conversations": [{"from": "human", "value": "?"}, {"from": "gpt", "value": "x"}],
        },
        "corrupt video bad.mp4: Invalid data found when processing input",
    ),
    ({"conversations": [{"from": "robot", "value": "?"}]}, "unknown role 'robot' in conversations[0]"),
]


@pytest.mark.parametrize(("record", "reason"), LLAVA_CASES)
def test_each_bad_llava_record_is_one_line_naming_file_and_index(media, record, reason):
    good = {
        "image": "good.png",
        "conversations": [{"from": "human", "value": "<image>"}, {"from": "gpt", "value": "x"}],
    }
    (media / "data.json").write_text(json.dumps([good, good, record]))
    with pytest.raises(DataError) as error:
        load_conversations(section(media / "data.json", "llava"))
    assert str(error.value) == f"{media / 'data.json'}[2]: {reason}"


def test_skip_bad_skips_counts_and_logs_every_kind(media, caplog):
    good = chat(user_image("good.png", "q"), ANSWER)
    video = chat({"role": "user", "content": [{"type": "video", "video": "good.mp4"}]}, ANSWER)
    bad = [line for line, _ in JSONL_CASES]
    path = write_jsonl(media / "chat.jsonl", [good, *bad, video])
    with caplog.at_level(logging.WARNING, logger="cosmos_train.data"):
        rows, report = load_conversations(section(path, "jsonl", skip_bad=True))
    assert (report.total, report.kept, report.skipped) == (len(bad) + 2, 2, len(bad))
    assert [row["source"] for row in rows] == [f"{path}:1", f"{path}:{len(bad) + 2}"]
    expected = [
        f"{path}:{n}: {reason or 'corrupt video sound.wav: no video stream'}"
        for n, (_, reason) in enumerate(JSONL_CASES, 2)
    ]
    assert report.problems == expected
    summary = [r.getMessage() for r in caplog.records if r.name == "cosmos_train.data"]
    assert summary == [f"skipped {len(bad)} of {len(bad) + 2} records (first: {expected[0]})"]


def test_nothing_left_is_an_error_even_with_skip_bad(media):
    path = write_jsonl(media / "chat.jsonl", [chat(), chat()])
    with pytest.raises(
        DataError, match=r"no usable records \(skipped 2; first: .*chat.jsonl:1: empty conversation\)"
    ):
        load_conversations(section(path, "jsonl", skip_bad=True))


def test_whole_file_problems_are_one_line(media):
    # The job schema rejects a missing path first; the loader still says it in one line to other callers.
    missing = ConversationData.model_construct(format="llava", path=str(media / "nothere.json"))
    with pytest.raises(DataError, match=r"nothere.json: no such file$"):
        load_conversations(missing)
    (media / "broken.json").write_text('[{"conversations": []},\n  oops]')
    with pytest.raises(DataError) as error:
        load_conversations(section(media / "broken.json", "llava"))
    assert str(error.value) == f"{media / 'broken.json'}:2: invalid JSON (Expecting value at column 3)"


def test_hf_folder_with_messages_and_embedded_images(tmp_path):
    import datasets

    red, blue = Image.new("RGB", (32, 32), (255, 0, 0)), Image.new("RGB", (32, 32), (0, 0, 255))
    question = [{"type": "image", "text": None}, {"type": "text", "text": "color?"}]
    rows = {
        "messages": [
            [
                {"role": "user", "content": question},
                {"role": "assistant", "content": [{"type": "text", "text": c}]},
            ]
            for c in ("red", "blue")
        ],
        "images": [[red], [blue]],
    }
    features = datasets.Features(
        {
            "messages": datasets.List(
                {
                    "role": datasets.Value("string"),
                    "content": datasets.List(
                        {"type": datasets.Value("string"), "text": datasets.Value("string")}
                    ),
                }
            ),
            "images": datasets.List(datasets.Image()),
        }
    )
    datasets.Dataset.from_dict(rows, features=features).save_to_disk(tmp_path / "saved")
    loaded, report = load_conversations(section(tmp_path / "saved", "hf", system_prompt="sys"))
    assert report.kept == 2
    assert loaded[1]["messages"][1]["content"] == question
    image = loaded[1]["images"][0]
    assert isinstance(image, Image.Image) and image.convert("RGB").getpixel((0, 0)) == (0, 0, 255)


def test_hf_folder_reports_a_missing_split(tmp_path):
    import datasets

    datasets.DatasetDict({"test": datasets.Dataset.from_dict({"messages": [[]]})}).save_to_disk(
        tmp_path / "d"
    )
    with pytest.raises(DataError, match=r"d: no split 'train' \(has: test\)$"):
        load_conversations(section(tmp_path / "d", "hf"))


def test_to_text_messages():
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": "c"},
    ]
    assert to_text_messages(messages) == [
        {"role": "user", "content": "ab"},
        {"role": "assistant", "content": "c"},
    ]
    with pytest.raises(DataError, match=r"^x.jsonl:4: has image content but the model is text-only$"):
        to_text_messages([{"role": "user", "content": [{"type": "image", "text": None}]}], "x.jsonl:4")
