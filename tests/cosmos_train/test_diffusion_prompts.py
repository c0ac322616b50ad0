"""Prompt lists for diffusion RL (`cosmos_train.data.prompt_lists`): one-prompt-per-line text (pickscore, ocr,
video prompt sets), GenEval `{split}_metadata.jsonl`, generic JSONL; folder + split resolution, auto-detection and
forcing, and bad lines as one precise `FILE:LINE` line (or skipped and counted).

Fast and offline: small files in `tmp_path`, no model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import pytest
from sft_helpers import REPO

from cosmos_train.config import ConfigError, JobSchema, PromptListData, resolve_paths, validate_job
from cosmos_train.data import DataError, PromptDataset, collate_prompts, load_prompt_list
from cosmos_train.jobs import check_sources

EXAMPLES = REPO / "examples" / "data" / "prompts"

APPLES = {"tag": "counting", "include": [{"class": "apple", "count": 3}], "prompt": "a photo of three apples"}
RED_CAR = {
    "tag": "colors",
    "include": [{"class": "car", "count": 1, "color": "red"}],
    "prompt": "a photo of a red car",
}
CLOCKS = {
    "tag": "counting",
    "include": [{"class": "clock", "count": 2}],
    "exclude": [{"class": "clock", "count": 3}],
    "prompt": "a photo of two clocks",
}
DOG_RIGHT_OF_BEAR = {
    "tag": "position",
    "include": [
        {"class": "teddy bear", "count": 1},
        {"class": "dog", "count": 1, "position": ["right of", 0]},
    ],
    "prompt": "a photo of a dog right of a teddy bear",
}


def data(path: Path, **kwargs) -> PromptListData:
    return PromptListData(path=str(path), **kwargs)


def write_lines(path: Path, lines: list) -> Path:
    path.write_text(
        "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines),
        encoding="utf-8",
    )
    return path


def load(path: Path, **kwargs) -> tuple[PromptDataset, object]:
    return load_prompt_list(data(path, **kwargs))


# --- formats ------------------------------------------------------------------------------------------------


def test_txt_one_prompt_per_line_skips_blank_lines(tmp_path):
    path = write_lines(
        tmp_path / "prompts.txt", ["a red square", "", "   ", "  a bright sunny beach  ", "a cat"]
    )
    dataset, report = load(path)
    assert isinstance(dataset, PromptDataset)
    assert dataset.prompts == ["a red square", "a bright sunny beach", "a cat"]
    assert [row["metadata"] for row in dataset] == [{}, {}, {}]
    assert [row["source"] for row in dataset] == [f"{path}:1", f"{path}:4", f"{path}:5"]
    assert (report.total, report.kept, report.skipped) == (3, 3, 0)
    assert dataset.format == "txt" and len(dataset) == 3


def test_txt_crlf_bom_and_unicode(tmp_path):
    path = tmp_path / "train.txt"
    path.write_bytes(
        "\ufeffun café rouge\r\n\r\n東京の夜景 🌃\r\nZürich im Schnee\rlast line without newline".encode()
    )
    dataset, _ = load(path)
    assert dataset.prompts == [
        "un café rouge",
        "東京の夜景 🌃",
        "Zürich im Schnee",
        "last line without newline",
    ]
    assert [row["source"] for row in dataset] == [f"{path}:1", f"{path}:3", f"{path}:4", f"{path}:5"]


def test_geneval_metadata_is_the_record_without_prompt(tmp_path):
    path = write_lines(tmp_path / "train_metadata.jsonl", [APPLES, RED_CAR, CLOCKS, DOG_RIGHT_OF_BEAR])
    dataset, report = load(path)
    assert dataset.format == "geneval" and report.kept == 4
    assert dataset[0] == {
        "prompt": "a photo of three apples",
        "metadata": {"tag": "counting", "include": [{"class": "apple", "count": 3}]},
        "source": f"{path}:1",
    }
    assert dataset[1]["metadata"]["include"][0]["color"] == "red"
    assert dataset[2]["metadata"]["exclude"] == [{"class": "clock", "count": 3}]
    assert dataset[3]["metadata"]["include"][1]["position"] == ["right of", 0]


def test_jsonl_other_keys_are_metadata(tmp_path):
    path = write_lines(
        tmp_path / "prompts.jsonl",
        [
            {"prompt": "a sign that says 'hello'", "text": "hello"},
            {"prompt": "a dog", "seed": 3, "tags": ["x"]},
        ],
    )
    dataset, _ = load(path)
    assert dataset.format == "jsonl"
    assert [row["prompt"] for row in dataset] == ["a sign that says 'hello'", "a dog"]
    assert [row["metadata"] for row in dataset] == [{"text": "hello"}, {"seed": 3, "tags": ["x"]}]


def test_collate_prompts_copies_metadata(tmp_path):
    dataset, _ = load(write_lines(tmp_path / "test_metadata.jsonl", [APPLES, RED_CAR]))
    batch = collate_prompts([dataset[0], dataset[1]])
    assert batch == {
        "prompts": ["a photo of three apples", "a photo of a red car"],
        "metadata": [
            {"tag": "counting", "include": [{"class": "apple", "count": 3}]},
            {"tag": "colors", "include": [{"class": "car", "count": 1, "color": "red"}]},
        ],
    }
    batch["metadata"][0]["include"][0]["count"] = 99  # a reward editing its metadata
    assert dataset[0]["metadata"]["include"][0]["count"] == 3
    assert collate_prompts([{"prompt": "p"}]) == {"prompts": ["p"], "metadata": [{}]}


def test_max_prompts_reads_only_the_first(tmp_path):
    path = write_lines(tmp_path / "p.txt", ["one", "two", "three", "{not read"])
    dataset, report = load(path, max_prompts=2)
    assert dataset.prompts == ["one", "two"]
    assert (report.total, report.kept) == (2, 2)


def test_the_example_prompt_files_load():
    colors, _ = load(EXAMPLES / "colors.txt")
    assert len(colors) == 12 and "a bright sunny beach" in colors.prompts
    geneval, _ = load(EXAMPLES / "geneval_mini_metadata.jsonl")
    assert geneval.format == "geneval" and len(geneval) >= 5
    assert {row["metadata"]["tag"] for row in geneval} >= {"single_object", "counting", "colors", "position"}


# --- folders, auto-detection, forcing -----------------------------------------------------------------------


def test_folder_resolves_txt_splits(tmp_path):
    write_lines(tmp_path / "train.txt", ["a train prompt"])
    write_lines(tmp_path / "test.txt", ["a test prompt"])
    train, _ = load(tmp_path)
    test, _ = load(tmp_path, split="test")
    assert train.prompts == ["a train prompt"] and train.path == str(tmp_path / "train.txt")
    assert test.prompts == ["a test prompt"] and test.format == "txt"


def test_folder_resolves_geneval_split(tmp_path):
    write_lines(tmp_path / "train_metadata.jsonl", [APPLES])
    write_lines(tmp_path / "test_metadata.jsonl", [RED_CAR])
    dataset, _ = load(tmp_path, split="test")
    assert dataset.format == "geneval" and dataset.prompts == ["a photo of a red car"]


def test_folder_without_the_split(tmp_path):
    write_lines(tmp_path / "train.txt", ["a"])
    write_lines(tmp_path / "test_metadata.jsonl", [APPLES])
    with pytest.raises(DataError) as error:
        load_prompt_list(PromptListData.model_construct(path=str(tmp_path), format="auto", split="val"))
    assert str(error.value) == (
        f"{tmp_path}: no val.txt, val_metadata.jsonl or val.jsonl for split 'val' (splits here: test, train)"
    )


def test_folder_with_two_files_for_the_split_needs_a_format(tmp_path):
    write_lines(tmp_path / "train.txt", ["a plain prompt"])
    write_lines(tmp_path / "train_metadata.jsonl", [APPLES])
    with pytest.raises(DataError, match=r"both train\.txt and train_metadata\.jsonl hold split 'train'; set"):
        load(tmp_path)
    assert load(tmp_path, format="txt")[0].prompts == ["a plain prompt"]
    assert load(tmp_path, format="geneval")[0].prompts == ["a photo of three apples"]


def test_forcing_the_format(tmp_path):
    # A .jsonl named like GenEval but read as generic JSONL: no GenEval validation.
    path = write_lines(tmp_path / "x_metadata.jsonl", [{"prompt": "no tag here"}])
    with pytest.raises(DataError, match="no 'tag'"):
        load(path)
    assert load(path, format="jsonl")[0][0]["metadata"] == {}
    # A file named anything, forced to txt or geneval.
    lines = write_lines(tmp_path / "prompts.list", ["first", "second"])
    assert load(lines, format="txt")[0].prompts == ["first", "second"]
    records = write_lines(tmp_path / "records.jsonl", [APPLES])
    assert load(records, format="geneval")[0].format == "geneval"
    # JSON lines forced to txt are prompts as written.
    assert load(records, format="txt")[0].prompts == [json.dumps(APPLES)]


def test_an_unknown_suffix_needs_a_format(tmp_path):
    path = write_lines(tmp_path / "prompts.csv", ["a"])
    with pytest.raises(DataError) as error:
        load_prompt_list(PromptListData.model_construct(path=str(path), format="auto", split="train"))
    assert str(error.value) == (
        f"{path}: cannot tell the prompt format from the name (expected .txt, *_metadata.jsonl or .jsonl); "
        "set [data] format"
    )


def test_job_file_data_section(tmp_path):
    """`[data] path` alone is enough, relative to the job file; a bad path is a one-line ConfigError when the job's
    sources are checked (the schema itself reads no file)."""

    class Job(JobSchema):
        kind: Literal["prompts"] = "prompts"
        data: PromptListData

    (tmp_path / "prompts").mkdir()
    write_lines(tmp_path / "prompts" / "train.txt", ["a red square"])
    raw = resolve_paths({"kind": "prompts", "data": {"path": "prompts"}}, Job, tmp_path)
    job = validate_job(raw, Job, "job.toml")
    assert job.data.path == str(tmp_path / "prompts") and job.data.format == "auto"
    assert load_prompt_list(job.data)[0].prompts == ["a red square"]

    missing = validate_job({"kind": "prompts", "data": {"path": str(tmp_path / "nope.txt")}}, Job, "job.toml")
    with pytest.raises(ConfigError) as error:
        check_sources(missing, "job.toml", tmp_path)
    assert str(error.value) == f"job.toml: [data] {tmp_path / 'nope.txt'}: no such file or folder"
    with pytest.raises(
        ConfigError, match=r"\[data\] format: Input should be 'auto', 'txt', 'geneval' or 'jsonl'"
    ):
        validate_job(
            {"data": {"path": str(tmp_path / "prompts"), "format": "csv"}, "kind": "prompts"}, Job, "j"
        )
    with pytest.raises(ConfigError, match=r"\[data\] max_prompts: Input should be greater than 0"):
        validate_job(
            {"data": {"path": str(tmp_path / "prompts"), "max_prompts": 0}, "kind": "prompts"}, Job, "j"
        )


# --- bad lines ----------------------------------------------------------------------------------------------

BAD_LINES = [
    ("jsonl", '{"prompt": "a cat"', "invalid JSON (Expecting ',' delimiter at column 19)"),
    ("jsonl", {"text": "a cat"}, "no 'prompt'"),
    ("jsonl", ["a cat"], "expected an object, got a list"),
    ("jsonl", {"prompt": 3}, "'prompt' is not text (int)"),
    ("jsonl", {"prompt": "  "}, "empty 'prompt'"),
    ("geneval", {"include": [{"class": "cat"}], "prompt": "a cat"}, "no 'tag' (a GenEval record has tag, include and prompt)"),
    ("geneval", {"tag": 1, "include": [{"class": "cat"}], "prompt": "a cat"}, "'tag' is not a non-empty string (1)"),
    ("geneval", {"tag": "t", "prompt": "a cat"}, "no 'include' (a GenEval record has tag, include and prompt)"),
    ("geneval", {"tag": "t", "include": {"class": "cat"}, "prompt": "a cat"}, "'include' is not a list (an object)"),
    ("geneval", {"tag": "t", "include": [], "prompt": "a cat"}, "'include' is empty"),
    ("geneval", {"tag": "t", "include": ["cat"], "prompt": "a cat"}, "include[0] is not an object (a string)"),
    ("geneval", {"tag": "t", "include": [{"count": 1}], "prompt": "a cat"}, "include[0] has no 'class' name"),
    ("geneval", {"tag": "t", "include": [{"class": "cat", "count": "2"}], "prompt": "two cats"}, "include[0].count is not a whole number ('2')"),
    ("geneval", {"tag": "t", "include": [{"class": "cat", "count": True}], "prompt": "a cat"}, "include[0].count is not a whole number (True)"),
    ("geneval", {"tag": "t", "include": [{"class": "cat", "color": 7}], "prompt": "a cat"}, "include[0].color is not a string (7)"),
    ("geneval", {"tag": "t", "include": [{"class": "a"}, {"class": "b", "position": "left"}], "prompt": "p"}, "include[1].position is not [relation, object index] ('left')"),
    ("geneval", {"tag": "t", "include": [{"class": "cat"}], "exclude": [{"class": "cat", "count": -1}], "prompt": "p"}, "exclude[0].count is not a whole number (-1)"),
]  # fmt: skip


@pytest.mark.parametrize(("fmt", "bad", "reason"), BAD_LINES)
def test_a_bad_line_is_one_line_naming_file_and_line(tmp_path, fmt, bad, reason):
    name = "train_metadata.jsonl" if fmt == "geneval" else "train.jsonl"
    good = APPLES if fmt == "geneval" else {"prompt": "a dog"}
    path = write_lines(tmp_path / name, [good, "", bad, good])
    with pytest.raises(DataError) as error:
        load(path)
    assert str(error.value) == f"{path}:3: {reason}"
    assert "\n" not in str(error.value)


def test_skip_bad_counts_and_reports(tmp_path):
    path = write_lines(
        tmp_path / "train_metadata.jsonl",
        [APPLES, "{oops", {"tag": "t", "include": "apple", "prompt": "p"}, RED_CAR, {"prompt": "untagged"}],
    )
    dataset, report = load(path, skip_bad=True)
    assert dataset.prompts == ["a photo of three apples", "a photo of a red car"]
    assert (report.total, report.kept, report.skipped) == (5, 2, 3)
    assert report.problems == [
        f"{path}:2: invalid JSON (Expecting property name enclosed in double quotes at column 2)",
        f"{path}:3: 'include' is not a list (a string)",
        f"{path}:5: no 'tag' (a GenEval record has tag, include and prompt)",
    ]


def test_a_line_that_is_not_utf8_is_a_bad_line(tmp_path):
    path = tmp_path / "train.txt"
    path.write_bytes(b"a red square\n\xff\xfe broken\na blue circle\n")
    with pytest.raises(DataError) as error:
        load(path)
    assert str(error.value) == f"{path}:2: not UTF-8 text (byte 1)"
    dataset, report = load(path, skip_bad=True)
    assert dataset.prompts == ["a red square", "a blue circle"] and report.skipped == 1


def test_a_bom_before_json_is_dropped(tmp_path):
    path = tmp_path / "train_metadata.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(APPLES).encode() + b"\r\n")
    assert load(path)[0].prompts == ["a photo of three apples"]


def test_empty_lists_are_a_clear_error(tmp_path):
    empty = write_lines(tmp_path / "empty.txt", ["", "  "])
    with pytest.raises(DataError) as error:
        load(empty)
    assert str(error.value) == f"{empty}: no usable prompts"
    bad = write_lines(tmp_path / "bad.jsonl", [{"text": "x"}, {"text": "y"}])
    with pytest.raises(DataError) as error:
        load(bad, skip_bad=True)
    assert str(error.value) == f"{bad}: no usable prompts (skipped 2; first: {bad}:1: no 'prompt')"
