"""GRPO prompt data (`cosmos_train.data.chat_prompts.load_prompts`): plain and chat prompts, reference answers taken
from SFT-style conversations, prompt images and videos, `datasets` data, and bad records as one precise line.

Fast and offline: no model is loaded, and the `[data]` section is a stand-in with `PromptData`'s fields and
defaults (importing `grpo_config` imports TRL, which takes longer than all these tests).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from sft_helpers import SHAPES

from cosmos_train.data import DataError
from cosmos_train.data.chat_prompts import load_prompts

CLIP = str(SHAPES / "clip.mp4")
RED = str(SHAPES / "images" / "red_square.png")
BLUE = str(SHAPES / "images" / "blue_circle.png")


# `grpo_config.PromptData`'s defaults.
DEFAULTS = {
    "media_dir": None,
    "split": "train",
    "system_prompt": None,
    "fps": 2.0,
    "max_frames": 16,
    "skip_bad": False,
}


def section(path: Path, fmt: str, **kwargs) -> SimpleNamespace:
    """A `[data]` section as `grpo_config.PromptData` would hold it."""
    return SimpleNamespace(**(DEFAULTS | {"format": fmt, "path": str(path)} | kwargs))


def write_jsonl(path: Path, lines: list) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def write_llava(path: Path, records: list) -> Path:
    path.write_text(json.dumps(records, indent=1))
    return path


def text(value: str) -> dict:
    return {"type": "text", "text": value}


def user(*parts: dict) -> dict:
    return {"role": "user", "content": list(parts)}


VIDEO, IMAGE = {"type": "video", "text": None}, {"type": "image", "text": None}


# --- prompts and extra columns ------------------------------------------------------------------------------


def test_plain_prompts_stay_text_and_extra_columns_pass_through(tmp_path):
    path = write_jsonl(
        tmp_path / "math.jsonl",
        [
            {"prompt": "What is 2 + 2?", "solution": "4", "difficulty": 1, "tags": ["add"]},
            {"prompt": "What is 3 * 3?", "solution": "9", "difficulty": 2, "tags": []},
        ],
    )
    dataset, report = load_prompts(section(path, "jsonl"))
    assert (report.total, report.kept, report.skipped, report.problems) == (2, 2, 0, [])
    assert dataset.features["prompt"].dtype == "string"
    assert dataset.to_list() == [
        {
            "prompt": "What is 2 + 2?",
            "prompt_images": [],
            "prompt_videos": [],
            "solution": "4",
            "difficulty": 1,
            "tags": ["add"],
            "source": f"{path}:1",
        },
        {
            "prompt": "What is 3 * 3?",
            "prompt_images": [],
            "prompt_videos": [],
            "solution": "9",
            "difficulty": 2,
            "tags": [],
            "source": f"{path}:2",
        },
    ]


def test_chat_prompts_become_typed_parts(tmp_path):
    prompt = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 3 * 3?"}]
    path = write_jsonl(tmp_path / "chat.jsonl", [{"prompt": prompt, "solution": "9"}])
    dataset, _ = load_prompts(section(path, "jsonl"))
    assert dataset[0]["prompt"] == [
        {"role": "system", "content": [text("Be brief.")]},
        user(text("What is 3 * 3?")),
    ]
    assert dataset[0]["solution"] == "9"


def test_mixing_plain_and_chat_prompts_makes_every_prompt_a_chat(tmp_path):
    path = write_jsonl(
        tmp_path / "mixed.jsonl",
        [
            {"prompt": "plain question", "solution": "a"},
            {"prompt": [{"role": "user", "content": "chat question"}], "solution": "b"},
            {"prompt": "another plain one", "solution": "c"},
        ],
    )
    dataset, report = load_prompts(section(path, "jsonl"))
    assert report.kept == 3
    assert dataset["prompt"] == [
        [user(text("plain question"))],
        [user(text("chat question"))],
        [user(text("another plain one"))],
    ]
    assert dataset["solution"] == ["a", "b", "c"]


def test_system_prompt_turns_a_plain_prompt_into_a_chat(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "q"}])
    dataset, _ = load_prompts(section(path, "jsonl", system_prompt="Think first."))
    assert dataset[0]["prompt"] == [{"role": "system", "content": [text("Think first.")]}, user(text("q"))]


# --- conversations: the trailing assistant turn is the reference answer ---------------------------------------


def test_messages_trailing_assistant_turn_becomes_the_solution(tmp_path):
    question = {"role": "user", "content": "What color is the sky?"}
    path = write_jsonl(
        tmp_path / "conv.jsonl",
        [
            {"messages": [question, {"role": "assistant", "content": "blue"}]},
            {"messages": [question, {"role": "assistant", "content": "blue"}], "solution": "azure"},
            {"messages": [question], "solution": "cyan"},
            {
                "messages": [
                    question,
                    {"role": "assistant", "content": "light"},
                    {"role": "assistant", "content": "blue"},
                ]
            },
        ],
    )
    dataset, _ = load_prompts(section(path, "jsonl"))
    assert dataset["prompt"] == [[user(text("What color is the sky?"))]] * 4  # answers are not in the prompt
    # A record's own solution wins; several trailing assistant turns are one answer, a line each.
    assert dataset["solution"] == ["blue", "azure", "cyan", "light\nblue"]


def test_llava_conversation_answer_becomes_the_solution(tmp_path):
    path = write_llava(
        tmp_path / "qa.json",
        [
            {
                "conversations": [
                    {"from": "human", "value": "First?"},
                    {"from": "gpt", "value": "one"},
                    {"from": "human", "value": "Second?"},
                    {"from": "gpt", "value": "two"},
                ]
            }
        ],
    )
    dataset, _ = load_prompts(section(path, "llava"))
    row = dataset[0]
    # Earlier assistant turns are context; only the trailing one is the answer.
    assert row["prompt"] == [
        user(text("First?")),
        {"role": "assistant", "content": [text("one")]},
        user(text("Second?")),
    ]
    assert row["solution"] == "two" and row["source"] == f"{path}[0]"


# --- media ----------------------------------------------------------------------------------------------------


def test_llava_video_and_image_prompts_hold_absolute_paths_and_placeholders(tmp_path):
    path = write_llava(
        tmp_path / "video_qa.json",
        [
            {
                "video": "clip.mp4",
                "conversations": [
                    {
                        "from": "human",
                        "value": "Watch the clip.\n<video>\nWhich shape moves? (A) circle (B) square",
                    },
                    {"from": "gpt", "value": "B"},
                ],
            },
            {
                "image": "images/red_square.png",
                "video": "clip.mp4",
                "conversations": [
                    {"from": "human", "value": "<image>\nThis shape; then <video>\nSame color?"},
                    {"from": "gpt", "value": "A"},
                ],
            },
            {
                "images": ["images/red_square.png", "images/blue_circle.png"],
                "conversations": [{"from": "human", "value": "Compare <image> with <image>"}],
            },
        ],
    )
    dataset, report = load_prompts(section(path, "llava", media_dir=str(SHAPES)))
    assert report.kept == 3
    video, both, images = dataset.to_list()
    assert video["prompt"] == [
        user(text("Watch the clip."), VIDEO, text("Which shape moves? (A) circle (B) square"))
    ]
    assert (video["prompt_videos"], video["prompt_images"], video["solution"]) == ([CLIP], [], "B")
    assert both["prompt"] == [user(IMAGE, text("This shape; then "), VIDEO, text("Same color?"))]
    assert (both["prompt_images"], both["prompt_videos"]) == ([RED], [CLIP])
    assert images["prompt"] == [user(text("Compare "), IMAGE, text(" with "), IMAGE)]
    assert images["prompt_images"] == [RED, BLUE] and images["solution"] is None


def test_typed_jsonl_media_placeholders_and_untagged_media(tmp_path):
    path = write_jsonl(
        tmp_path / "media.jsonl",
        [
            {
                "prompt": [
                    {"role": "user", "content": [text("Look: "), {"type": "video", "video": "clip.mp4"}]}
                ],
                "solution": "B",
            },
            {"prompt": "What color is it?", "image": "images/red_square.png", "solution": "red"},
        ],
    )
    dataset, _ = load_prompts(section(path, "jsonl", media_dir=str(SHAPES)))
    typed, untagged = dataset.to_list()
    assert typed["prompt"] == [user(text("Look: "), VIDEO)] and typed["prompt_videos"] == [CLIP]
    # Media without a placeholder lead the first user turn.
    assert untagged["prompt"] == [user(IMAGE, text("What color is it?"))]
    assert untagged["prompt_images"] == [RED]


def test_media_paths_resolve_against_media_dir_or_the_data_file_folder(tmp_path):
    local = tmp_path / "data"
    (local / "media").mkdir(parents=True)
    shutil.copy(SHAPES / "clip.mp4", local / "media" / "local_clip.mp4")
    record = {"video": "media/local_clip.mp4", "conversations": [{"from": "human", "value": "<video>\nQ?"}]}
    path = write_llava(local / "qa.json", [record])

    beside, _ = load_prompts(section(path, "llava"))
    assert beside[0]["prompt_videos"] == [str(local / "media" / "local_clip.mp4")]

    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "media").mkdir(parents=True)
    shutil.copy(SHAPES / "clip.mp4", elsewhere / "media" / "local_clip.mp4")
    moved, _ = load_prompts(section(path, "llava", media_dir=str(elsewhere)))
    assert moved[0]["prompt_videos"] == [str(elsewhere / "media" / "local_clip.mp4")]

    with pytest.raises(DataError, match=r"\[0\]: missing video media/local_clip.mp4$"):
        load_prompts(section(path, "llava", media_dir=str(SHAPES)))


# --- datasets data ----------------------------------------------------------------------------------------------


def test_saved_datasets_dataset_with_prompt_and_solution_columns(tmp_path):
    import datasets

    prompts = [
        [{"role": "user", "content": "What is 1 + 1?"}],
        [{"role": "user", "content": "What is 2 + 5?"}],
    ]
    columns = {"prompt": prompts, "solution": ["2", "7"], "level": [1, 3]}
    datasets.Dataset.from_dict(columns).save_to_disk(tmp_path / "flat")
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(columns)}).save_to_disk(tmp_path / "splits")

    for folder in ("flat", "splits"):
        dataset, report = load_prompts(section(tmp_path / folder, "hf"))
        assert report.kept == 2
        assert dataset["prompt"] == [[user(text("What is 1 + 1?"))], [user(text("What is 2 + 5?"))]]
        assert dataset["solution"] == ["2", "7"] and dataset["level"] == [1, 3]
        assert dataset["source"] == [f"{tmp_path / folder}[0]", f"{tmp_path / folder}[1]"]

    plain = {"prompt": ["What is 1 + 1?"], "solution": ["2"]}
    datasets.Dataset.from_dict(plain).save_to_disk(tmp_path / "plain")
    dataset, _ = load_prompts(section(tmp_path / "plain", "hf"))
    assert dataset[0]["prompt"] == "What is 1 + 1?" and dataset[0]["solution"] == "2"

    with pytest.raises(DataError, match=r"no split 'test' \(has: train\)"):
        load_prompts(section(tmp_path / "splits", "hf", split="test"))


# --- bad records ---------------------------------------------------------------------------------------------


GOOD = {"prompt": "ok", "solution": "1"}
BAD_JSONL = [
    (GOOD, None),
    ('{"prompt": "unterminated', "invalid JSON"),
    ({"question": "no prompt key"}, "no 'prompt', 'conversations' or 'messages'"),
    ({"prompt": "v", "video": "missing.mp4"}, "missing video missing.mp4"),
    ({"prompt": [{"role": "system", "content": "only a system turn"}]}, "the prompt has no user turn"),
    ({"messages": [{"role": "assistant", "content": "just an answer"}]}, "the prompt has no user turn"),
    (GOOD, None),
]


def _one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("bad", [n for n, (_, reason) in enumerate(BAD_JSONL) if reason])
def test_each_bad_jsonl_record_fails_naming_file_and_line(tmp_path, bad):
    record, reason = BAD_JSONL[bad]
    path = write_jsonl(tmp_path / "bad.jsonl", [GOOD, GOOD, record])
    with pytest.raises(DataError) as error:
        load_prompts(section(path, "jsonl", media_dir=str(SHAPES)))
    assert _one_line(error).startswith(f"{path}:3: {reason}")


def test_skip_bad_skips_and_counts_every_bad_jsonl_record(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [record for record, _ in BAD_JSONL])
    dataset, report = load_prompts(section(path, "jsonl", media_dir=str(SHAPES), skip_bad=True))
    expected = [(n, reason) for n, (_, reason) in enumerate(BAD_JSONL, start=1) if reason]
    assert (report.total, report.kept, report.skipped) == (7, 2, 5)
    assert len(report.problems) == 5
    for problem, (line, reason) in zip(report.problems, expected, strict=True):
        assert problem.startswith(f"{path}:{line}: {reason}"), problem
    assert dataset["source"] == [f"{path}:1", f"{path}:7"]


def test_bad_llava_records_name_file_and_index(tmp_path):
    good = {
        "video": "clip.mp4",
        "conversations": [{"from": "human", "value": "<video>\nQ?"}, {"from": "gpt", "value": "A"}],
    }
    records = [
        good,
        {"video": "gone.mp4", "conversations": [{"from": "human", "value": "<video>\nQ?"}]},
        {"id": 7},
        {"conversations": [{"from": "gpt", "value": "an answer without a question"}]},
        good,
    ]
    path = write_llava(tmp_path / "bad.json", records)
    with pytest.raises(DataError) as error:
        load_prompts(section(path, "llava", media_dir=str(SHAPES)))
    assert _one_line(error) == f"{path}[1]: missing video gone.mp4"

    dataset, report = load_prompts(section(path, "llava", media_dir=str(SHAPES), skip_bad=True))
    assert (report.total, report.kept, report.skipped) == (5, 2, 3)
    assert report.problems == [
        f"{path}[1]: missing video gone.mp4",
        f"{path}[2]: no 'prompt', 'conversations' or 'messages'",
        f"{path}[3]: the prompt has no user turn",
    ]
    assert dataset["source"] == [f"{path}[0]", f"{path}[4]"] and dataset["solution"] == ["A", "A"]


def test_only_bad_records_is_an_error_even_when_skipping(tmp_path):
    path = write_jsonl(tmp_path / "all_bad.jsonl", ["not json", {"nothing": 1}])
    with pytest.raises(DataError) as error:
        load_prompts(section(path, "jsonl", skip_bad=True))
    assert _one_line(error).startswith(f"{path}: no usable prompts (skipped 2; first: {path}:1: invalid JSON")


@pytest.mark.parametrize(
    ("first", "second"),
    [(1, "hard"), ([1, 2], {"level": 1}), ("easy", ["a", "list"])],
    ids=["int-then-str", "list-then-dict", "str-then-list"],
)
def test_extra_columns_with_different_types_fail_naming_the_file(tmp_path, first, second):
    path = write_jsonl(
        tmp_path / "types.jsonl",
        [{"prompt": "a", "difficulty": first}, {"prompt": "b", "difficulty": second}],
    )
    with pytest.raises(DataError) as error:
        load_prompts(section(path, "jsonl"))
    assert _one_line(error).startswith(f"{path}: extra columns must have one type across records (")


def test_an_extra_column_missing_from_the_first_record_is_kept(tmp_path):
    path = write_jsonl(tmp_path / "late.jsonl", [{"prompt": "a"}, {"prompt": "b", "solution": "x"}])
    dataset, _ = load_prompts(section(path, "jsonl"))
    assert dataset["solution"] == [None, "x"]
