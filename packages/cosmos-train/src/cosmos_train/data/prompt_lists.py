"""Prompt lists for diffusion RL (DiffusionNFT, FlowGRPO, DDRL), in the public prompt-set formats.

    dataset, report = load_prompt_list(job.data)    # rows {"prompt": str, "metadata": dict, "source": "FILE:LINE"}
    batch = collate_prompts([dataset[0], dataset[1]])  # {"prompts": [str], "metadata": [dict]}

Formats (`[data] format`, or `"auto"` from the file name):
- `txt`: one prompt per line (the `pickscore`, `ocr` and `dance_grpo_t2v` video prompt sets). Blank lines are
  skipped, surrounding whitespace, CRLF line ends and a UTF-8 BOM are dropped; metadata is `{}`.
- `geneval`: GenEval's `{split}_metadata.jsonl`, one record per line, `{"tag", "include": [{"class", "count",
  "color", "position"}], "exclude"?, "prompt"}`. The metadata (the record without `prompt`) reaches the reward;
  it is validated here so that a malformed record fails at load, not in the reward service mid-run.
- `jsonl`: one object per line with a `prompt` string; every other key is metadata, passed as it is.

Auto-detection: `*_metadata.jsonl` is GenEval, another `*.jsonl` is `jsonl`, `*.txt` is `txt`. A folder is
resolved by `split`: `{split}.txt`, `{split}_metadata.jsonl` or `{split}.jsonl` (e.g. `train.txt` / `test.txt`
of pickscore and ocr, `train_metadata.jsonl` of geneval); a forced format picks its own file name.

A bad line is a one-line `DataError` `"FILE:LINE: reason"`, or skipped and counted with `skip_bad`
(`loading.collect_rows`, as for SFT and GRPO data).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch.utils.data

from cosmos_train.data.records import BadRecord, DataReport, collect_rows
from cosmos_train.errors import DataError

FORMATS = ("txt", "geneval", "jsonl")
_GENEVAL_SUFFIX = "_metadata.jsonl"


class PromptDataset(torch.utils.data.Dataset):
    """Validated prompts in file order; each item is `{"prompt", "metadata", "source"}`."""

    def __init__(self, rows: list[dict[str, Any]], path: str, fmt: str):
        self.rows = rows
        self.path = path  # the file read (a folder `path` resolved by split)
        self.format = fmt

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.rows[index]

    @property
    def prompts(self) -> list[str]:
        return [row["prompt"] for row in self.rows]

    def __repr__(self) -> str:
        return f"PromptDataset({len(self)} prompts, format={self.format!r}, path={self.path!r})"


def collate_prompts(rows: list[dict[str, Any]]) -> dict[str, list]:
    """A batch of prompt rows as `{"prompts": [str], "metadata": [dict]}`; metadata are copies, so a reward that
    edits its metadata does not change the dataset."""
    return {
        "prompts": [row["prompt"] for row in rows],
        "metadata": [copy.deepcopy(row.get("metadata") or {}) for row in rows],
    }


def load_prompt_list(data) -> tuple[PromptDataset, DataReport]:
    """Read and validate `data` (the `[data]` section, `cosmos_train.config.PromptListData`).

    With `max_prompts`, reading stops at that many good prompts (later lines are not read).
    Raises a one-line `DataError` for unusable data, including a list with no usable prompt."""
    path, fmt = resolve_prompt_source(data.path, data.format, data.split)
    max_prompts = getattr(data, "max_prompts", None)
    normalize = {"txt": _text_row, "geneval": _geneval_row, "jsonl": _jsonl_row}[fmt]
    kept = 0

    def counted(record: Any) -> dict[str, Any]:
        nonlocal kept
        row = normalize(record)
        kept += 1
        return row

    def records() -> Iterator[tuple[str, Any]]:
        for source, record in _lines(path, parse_json=fmt != "txt"):
            if max_prompts is not None and kept >= max_prompts:
                return
            yield source, record

    rows, report = collect_rows(records(), counted, path, data.skip_bad, noun="prompts")
    return PromptDataset(rows, path, fmt), report


def resolve_prompt_source(path: str, fmt: str = "auto", split: str = "train") -> tuple[str, str]:
    """The prompt file and its format for `[data] path` (a file, or a folder resolved by `split`) and `format`."""
    if fmt != "auto" and fmt not in FORMATS:
        raise DataError(f"{path}: unknown prompt format {fmt!r}; expected auto, {', '.join(FORMATS)}")
    root = Path(path)
    if root.is_dir():
        names = _split_names(split, fmt)
        found = [name for name in names if (root / name).is_file()]
        if not found:
            splits = _splits_in(root)
            here = f" (splits here: {', '.join(splits)})" if splits else " (no .txt or .jsonl prompt files)"
            raise DataError(f"{path}: no {_either(names)} for split {split!r}{here}")
        if len(found) > 1:
            raise DataError(f"{path}: both {found[0]} and {found[1]} hold split {split!r}; set [data] format")
        file = root / found[0]
    elif root.is_file():
        file = root
    else:
        raise DataError(f"{path}: no such file or folder")
    if fmt == "auto":
        fmt = _format_of(file.name)
        if fmt is None:
            raise DataError(
                f"{file}: cannot tell the prompt format from the name (expected .txt, *{_GENEVAL_SUFFIX} "
                "or .jsonl); set [data] format"
            )
    return str(file), fmt


def _format_of(name: str) -> str | None:
    lower = name.lower()
    if lower.endswith(_GENEVAL_SUFFIX):
        return "geneval"
    if lower.endswith(".jsonl"):
        return "jsonl"
    if lower.endswith(".txt"):
        return "txt"
    return None


def _split_names(split: str, fmt: str) -> list[str]:
    names = {
        "txt": [f"{split}.txt"],
        "geneval": [f"{split}{_GENEVAL_SUFFIX}"],
        "jsonl": [f"{split}.jsonl", f"{split}{_GENEVAL_SUFFIX}"],
    }
    if fmt == "auto":
        return [f"{split}.txt", f"{split}{_GENEVAL_SUFFIX}", f"{split}.jsonl"]
    return names[fmt]


def _splits_in(root: Path) -> list[str]:
    splits = set()
    for file in root.iterdir():
        if not file.is_file():
            continue
        name = file.name
        for suffix in (_GENEVAL_SUFFIX, ".jsonl", ".txt"):
            if name.endswith(suffix):
                splits.add(name[: -len(suffix)])
                break
    return sorted(splits)


def _either(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


# --- reading ----------------------------------------------------------------------------------------------


def _lines(path: str, parse_json: bool) -> Iterator[tuple[str, Any]]:
    """`(FILE:LINE, text or parsed JSON or BadRecord)` for each non-blank line. Lines end at LF, CRLF or CR; a
    leading UTF-8 BOM is dropped; a line that is not UTF-8 is a bad line, not a bad file."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a folder, expected a file") from None
    except OSError as error:
        raise DataError(f"{path}: cannot read ({error.strerror or type(error).__name__})") from None
    raw = raw.removeprefix(b"\xef\xbb\xbf")
    for number, line in enumerate(raw.splitlines(), start=1):
        source = f"{path}:{number}"
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as error:
            yield source, BadRecord(f"not UTF-8 text (byte {error.start + 1})")
            continue
        if not text.strip():
            continue
        if not parse_json:
            yield source, text
            continue
        try:
            yield source, json.loads(text)
        except json.JSONDecodeError as error:
            yield source, BadRecord(f"invalid JSON ({error.msg} at column {error.colno})")


def _text_row(line: str) -> dict[str, Any]:
    return {"prompt": line.strip(), "metadata": {}}


def _jsonl_row(record: Any) -> dict[str, Any]:
    if not isinstance(record, dict):
        raise BadRecord(f"expected an object, got {_kind(record)}")
    if "prompt" not in record:
        raise BadRecord("no 'prompt'")
    prompt = record["prompt"]
    if not isinstance(prompt, str):
        raise BadRecord(f"'prompt' is not text ({_kind(prompt)})")
    if not prompt.strip():
        raise BadRecord("empty 'prompt'")
    return {"prompt": prompt.strip(), "metadata": {k: v for k, v in record.items() if k != "prompt"}}


def _geneval_row(record: Any) -> dict[str, Any]:
    row = _jsonl_row(record)
    metadata = row["metadata"]
    if "tag" not in metadata:
        raise BadRecord("no 'tag' (a GenEval record has tag, include and prompt)")
    if not isinstance(metadata["tag"], str) or not metadata["tag"]:
        raise BadRecord(f"'tag' is not a non-empty string ({metadata['tag']!r})")
    if "include" not in metadata:
        raise BadRecord("no 'include' (a GenEval record has tag, include and prompt)")
    _objects(metadata["include"], "include", required=True)
    if metadata.get("exclude") is not None:
        _objects(metadata["exclude"], "exclude", required=False)
    return row


def _objects(value: Any, key: str, required: bool) -> None:
    """GenEval object specs: `[{"class": str, "count"?: int >= 0, "color"?: str, "position"?: [str, int]}]`."""
    if not isinstance(value, list):
        raise BadRecord(f"'{key}' is not a list ({_kind(value)})")
    if required and not value:
        raise BadRecord(f"'{key}' is empty")
    for index, item in enumerate(value):
        where = f"{key}[{index}]"
        if not isinstance(item, dict):
            raise BadRecord(f"{where} is not an object ({_kind(item)})")
        name = item.get("class")
        if not isinstance(name, str) or not name:
            raise BadRecord(f"{where} has no 'class' name")
        count = item.get("count")
        if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 0):
            raise BadRecord(f"{where}.count is not a whole number ({count!r})")
        color = item.get("color")
        if color is not None and not isinstance(color, str):
            raise BadRecord(f"{where}.color is not a string ({color!r})")
        position = item.get("position")
        if position is not None and not (
            isinstance(position, list)
            and len(position) == 2
            and isinstance(position[0], str)
            and isinstance(position[1], int)
            and not isinstance(position[1], bool)
        ):
            raise BadRecord(f"{where}.position is not [relation, object index] ({position!r})")


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", type(None): "null", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )
