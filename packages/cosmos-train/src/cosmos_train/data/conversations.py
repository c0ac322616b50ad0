"""Read LLaVA JSON, typed-message JSONL or `datasets` data into one normalized conversation dataset.

Every record is validated in a single cheap pass (structure, roles, media present and decodable, media
placeholders matching media). A problem is one line, `"{source}: {reason}"`, where the source is
`FILE:LINE` (JSONL, 1-based) or `FILE[INDEX]` (LLaVA JSON and `datasets`, 0-based).
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

from cosmos_train.data.media import image_problem, video_problem
from cosmos_train.data.records import BadRecord, DataReport, read_rows
from cosmos_train.errors import DataError

logger = logging.getLogger("cosmos_train.data")

ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}
MEDIA = ("image", "video")
# In LLaVA text a newline next to a tag only separates it from the words; typed parts need no separator.
_TAG = re.compile(r"\n?<(image|video)>\n?")
_MISSING = object()  # checked-media marker for a file that does not exist


def load_conversations(data) -> tuple[Any, DataReport]:
    """Load `data` (the `[data]` section, `cosmos_train.algorithms.sft.schema.ConversationData`) as a `datasets.Dataset` plus a `DataReport`.

    Columns: `messages` (roles system/user/assistant; content is a list of `{"type": "text", "text"}`,
    `{"type": "image"}` or `{"type": "video"}` parts, the media parts without payload), `images` and
    `videos` (absolute paths in placeholder order) and `source`.
    """
    rows, report = read_rows(data, normalize_conversation)
    return _to_dataset(rows), report


def _to_dataset(rows: list[dict[str, Any]]):
    from datasets import Dataset, Features, Image, List, Value

    # Images decoded inside a `datasets` source stay embedded (an `Image` column) rather than being written out.
    embedded = any(isinstance(image, dict) for row in rows for image in row["images"])
    if embedded:
        for row in rows:
            row["images"] = [i if isinstance(i, dict) else {"path": i, "bytes": None} for i in row["images"]]
    part = {"type": Value("string"), "text": Value("string")}
    features = Features(
        {
            "messages": List({"role": Value("string"), "content": List(part)}),
            "images": List(Image()) if embedded else List(Value("string")),
            "videos": List(Value("string")),
            "source": Value("string"),
        }
    )
    return Dataset.from_list(rows, features=features)


def to_text_messages(messages: list[dict[str, Any]], source: str | None = None) -> list[dict[str, Any]]:
    """Typed-part messages as plain `{"role", "content": str}` messages, for text-only models."""
    converted = []
    for message in messages:
        content = message["content"]
        if not isinstance(content, str):
            texts = []
            for part in content:
                if part["type"] in MEDIA:
                    raise DataError(
                        f"{source or 'record'}: has {part['type']} content but the model is text-only"
                    )
                texts.append(part["text"])
            content = "".join(texts)
        converted.append({"role": message["role"], "content": content})
    return converted


# --- readers: each yields (source, record or BadRecord) -------------------------------------------------


# --- normalization --------------------------------------------------------------------------------------


def normalize_conversation(
    record: Any,
    media_root: Path,
    system_prompt: str | None,
    checked: dict[str, object],
    require_assistant: bool = True,
) -> dict[str, Any]:
    if not isinstance(record, dict):
        raise BadRecord(f"expected an object, got {type(record).__name__}")
    if record.get("messages") is not None:
        key, parse_turn = "messages", _typed_turn
    elif record.get("conversations") is not None:
        key, parse_turn = "conversations", _llava_turn
    else:
        raise BadRecord("no 'conversations' or 'messages'")
    turns = record[key]
    if not isinstance(turns, list):
        raise BadRecord(f"'{key}' is not a list")
    if not turns:
        raise BadRecord("empty conversation")
    messages = [parse_turn(turn, f"{key}[{n}]") for n, turn in enumerate(turns)]
    if require_assistant and not any(message["role"] == "assistant" for message in messages):
        raise BadRecord("no assistant turn")

    tagged = key == "conversations"
    _place_media(messages, "image", _listed(record, "images", "image"), tagged)
    _place_media(messages, "video", _listed(record, "videos", "video"), tagged)
    for message in messages:
        kinds = {part["type"] for part in message["content"]} & set(MEDIA)
        if kinds and message["role"] != "user":
            raise BadRecord(f"{sorted(kinds)[0]} in a {message['role']} turn (media go in user turns)")
    if system_prompt and not any(message["role"] == "system" for message in messages):
        messages.insert(0, {"role": "system", "content": [{"type": "text", "text": system_prompt}]})

    media: dict[str, list] = {"image": [], "video": []}
    for message in messages:
        for part in message["content"]:
            if part["type"] in MEDIA:
                media[part["type"]].append(_resolve(part["type"], part.pop("src"), media_root, checked))
                part["text"] = None  # the stored parts share one struct type
    return {"messages": messages, "images": media["image"], "videos": media["video"]}


def _role(value: Any, where: str) -> str:
    role = ROLES.get(value) if isinstance(value, str) else None
    if role is None:
        raise BadRecord(f"unknown role {value!r} in {where}")
    return role


def _llava_turn(turn: Any, where: str) -> dict[str, Any]:
    if not isinstance(turn, dict):
        raise BadRecord(f"{where} is not an object")
    role = _role(turn.get("from", turn.get("role")), where)
    value = turn.get("value", turn.get("content"))
    if not isinstance(value, str):
        raise BadRecord(f"{where} has no text 'value'")
    parts: list[dict[str, Any]] = []
    for index, piece in enumerate(_TAG.split(value)):
        if index % 2:  # odd pieces are the captured tag names
            parts.append({"type": piece, "src": None})
        elif piece:
            parts.append({"type": "text", "text": piece})
    return {"role": role, "content": parts}


def _typed_turn(turn: Any, where: str) -> dict[str, Any]:
    if not isinstance(turn, dict):
        raise BadRecord(f"{where} is not an object")
    role = _role(turn.get("role"), where)
    content = turn.get("content")
    if isinstance(content, str):
        return {"role": role, "content": [{"type": "text", "text": content}] if content else []}
    if not isinstance(content, list):
        raise BadRecord(f"{where} has no 'content'")
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            if not isinstance(part.get("text"), str):
                raise BadRecord(f"{where} has a text part without 'text'")
            parts.append({"type": "text", "text": part["text"]})
        elif kind in MEDIA:
            # Datasets stored as Arrow give every part every key, so an absent payload is a None value.
            source = part.get(kind) if part.get(kind) is not None else part.get("path")
            parts.append({"type": kind, "src": source})
        else:
            raise BadRecord(f"unknown content type {kind!r} in {where}")
    return {"role": role, "content": parts}


def _listed(record: dict[str, Any], plural: str, singular: str) -> list[Any]:
    value = record.get(plural)
    if value is None:
        value = record.get(singular)
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


def _place_media(messages: list[dict[str, Any]], kind: str, items: list[Any], tagged: bool) -> None:
    """Fill payload-less placeholders from the record's media list; with no placeholder, lead the first user turn."""
    holes = [
        part
        for message in messages
        for part in message["content"]
        if part["type"] == kind and part["src"] is None
    ]
    if not holes and items:
        first_user = next((message for message in messages if message["role"] == "user"), None)
        if first_user is None:
            raise BadRecord(f"has {kind}s but no user turn to put them in")
        leading = [part for part in first_user["content"] if part["type"] in MEDIA]
        first_user["content"][len(leading) : len(leading)] = [{"type": kind, "src": item} for item in items]
        return
    if len(holes) != len(items):
        noun = f"<{kind}> tag" if tagged else f"{kind} placeholder"
        raise BadRecord(f"{len(holes)} {noun}(s) but {len(items)} {kind}(s)")
    for part, item in zip(holes, items, strict=True):
        part["src"] = item


def _resolve(kind: str, source: Any, media_root: Path, checked: dict[str, object]) -> Any:
    """The absolute path (or embedded image struct) of one media item, after checking it is usable."""
    if kind == "image" and isinstance(source, dict):  # a `datasets` Image value: {"bytes", "path"}
        if source.get("bytes"):
            problem = image_problem(source["bytes"])
            if problem:
                raise BadRecord(f"corrupt image {source.get('path') or '(embedded)'}: {problem}")
            return {"bytes": source["bytes"], "path": source.get("path")}
        source = source.get("path")
    if not isinstance(source, str) or not source:
        raise BadRecord(f"{kind} entry is not a file path ({type(source).__name__})")
    path = os.path.abspath(os.path.join(media_root, source))
    if path not in checked:
        if not os.path.isfile(path):
            checked[path] = _MISSING
        else:
            checked[path] = image_problem(path) if kind == "image" else video_problem(path)
    problem = checked[path]
    if problem is _MISSING:
        raise BadRecord(f"missing {kind} {source}")
    if problem:
        raise BadRecord(f"corrupt {kind} {source}: {problem}")
    return path
