"""Reading records, shared by every data loader: the readers of JSONL, LLaVA JSON and `datasets` sources (each
yields `(source, record or BadRecord)`), and `collect_rows`, which turns records into rows with one-line errors
(`"{source}: {reason}"`) or, with `skip_bad`, skips and counts them in a `DataReport`."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cosmos_train.errors import DataError, first_line

logger = logging.getLogger("cosmos_train.data")


@dataclass
class DataReport:
    """What `load_conversations` read: records seen, kept and skipped, and one line per problem."""

    total: int = 0
    kept: int = 0
    skipped: int = 0
    problems: list[str] = field(default_factory=list)


class BadRecord(Exception):
    """A record-level problem; the message is the reason, the caller prefixes the source."""


Normalize = Callable[[Any, Path, "str | None", dict[str, object]], dict[str, Any]]


def read_rows(data, normalize: Normalize, noun: str = "records") -> tuple[list[dict[str, Any]], DataReport]:
    """Read `data`'s records and `normalize(record, media_root, system_prompt, checked)` each into a row
    (with its `source`); a bad record is a `DataError`, or skipped and counted with `skip_bad`."""
    if data.format == "jsonl":
        records, root = jsonl_records(data.path), Path(data.path).parent
    elif data.format == "llava":
        records, root = llava_records(data.path), Path(data.path).parent
    elif data.format == "hf":
        records, root = hf_records(data), Path.cwd()
    else:
        raise DataError(f"{data.path}: unknown data format {data.format!r}")
    media_root = Path(data.media_dir) if data.media_dir else root
    checked: dict[str, object] = {}  # media path -> problem, so a file shared by records is read once
    return collect_rows(
        records,
        lambda record: normalize(record, media_root, data.system_prompt, checked),
        data.path,
        data.skip_bad,
        noun,
    )


def collect_rows(
    records: Iterable[tuple[str, Any]],
    normalize: Callable[[Any], dict[str, Any]],
    path: str,
    skip_bad: bool,
    noun: str = "records",
) -> tuple[list[dict[str, Any]], DataReport]:
    """Rows from `(source, record or BadRecord)` pairs: a record whose reader or `normalize` raised `BadRecord`
    is a one-line `DataError` `"{source}: {reason}"`, or skipped and counted with `skip_bad`."""
    report = DataReport()
    rows: list[dict[str, Any]] = []
    for source, record in records:
        report.total += 1
        try:
            if isinstance(record, BadRecord):
                raise record
            row = normalize(record)
        except BadRecord as bad:
            problem = f"{source}: {bad}"
            if not skip_bad:
                raise DataError(problem) from None
            report.skipped += 1
            report.problems.append(problem)
            continue
        row["source"] = source
        rows.append(row)
        report.kept += 1

    if report.skipped:
        logger.warning(
            "skipped %d of %d records (first: %s)", report.skipped, report.total, report.problems[0]
        )
    if not rows:
        detail = f" (skipped {report.skipped}; first: {report.problems[0]})" if report.problems else ""
        raise DataError(f"{path}: no usable {noun}{detail}")
    return rows, report


def open_text(path: str):
    try:
        return open(path, encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a folder, expected a file") from None


def jsonl_records(path: str) -> Iterator[tuple[str, Any]]:
    with open_text(path) as lines:
        try:
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                try:
                    yield f"{path}:{number}", json.loads(line.rstrip("\r\n"))
                except json.JSONDecodeError as error:
                    yield (
                        f"{path}:{number}",
                        BadRecord(f"invalid JSON ({error.msg} at column {error.colno})"),
                    )
        except UnicodeDecodeError:
            raise DataError(f"{path}: not UTF-8 text") from None


def llava_records(path: str) -> Iterator[tuple[str, Any]]:
    with open_text(path) as file:
        try:
            records = json.load(file)
        except json.JSONDecodeError as error:
            raise DataError(
                f"{path}:{error.lineno}: invalid JSON ({error.msg} at column {error.colno})"
            ) from None
        except UnicodeDecodeError:
            raise DataError(f"{path}: not UTF-8 text") from None
    if not isinstance(records, list):
        raise DataError(f"{path}: expected a JSON list of records, got {type(records).__name__}")
    for index, record in enumerate(records):
        yield f"{path}[{index}]", record


def hf_dataset(data):
    import datasets

    folder = Path(data.path)
    if folder.is_dir() and any((folder / name).exists() for name in ("dataset_dict.json", "state.json")):
        loaded = datasets.load_from_disk(str(folder))
        if isinstance(loaded, datasets.DatasetDict):
            if data.split not in loaded:
                raise DataError(f"{data.path}: no split {data.split!r} (has: {', '.join(loaded)})")
            loaded = loaded[data.split]
        return loaded
    try:
        return datasets.load_dataset(data.path, split=data.split)
    except Exception as error:  # hub, network and builder errors alike: report them in one line
        raise DataError(f"{data.path}: cannot load dataset ({first_line(error)})") from None


def hf_records(data) -> Iterator[tuple[str, Any]]:
    # Arrow rows are the stored values: image columns arrive as {"bytes", "path"} without decoding pixels.
    index = 0
    for table in hf_dataset(data).with_format("arrow").iter(batch_size=256):
        for row in table.to_pylist():
            yield f"{data.path}[{index}]", row
            index += 1
