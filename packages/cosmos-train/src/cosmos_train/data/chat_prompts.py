"""Prompt data for RL (GRPO): JSONL prompts, LLaVA-style records with images or video, `datasets` data.

A record is one of:
- `{"prompt": "text", ...}`: a plain-text prompt (completions are then plain text too);
- `{"prompt": [messages], ...}`: a chat prompt, content as a string or typed parts as in SFT data;
- `{"conversations": [...]}` / `{"messages": [...]}`: an SFT-style conversation whose final assistant turn,
  if any, is the reference answer (the `solution` column, unless the record has one).
Media come from `image(s)` / `video(s)` keys (LLaVA `<image>` / `<video>` tags or typed placeholders mark
where). Every other key is an extra column that reaches the reward functions as it is.

Rows: `prompt`, `prompt_images` and `prompt_videos` (absolute paths, or embedded image structs, in
placeholder order), `source` and the extra columns. Problems are reported like SFT's (`loading.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cosmos_train.data.conversations import normalize_conversation
from cosmos_train.data.records import BadRecord, DataReport, read_rows
from cosmos_train.errors import DataError, first_line

# Keys a record uses for its prompt and media, and the columns the loader writes: not extra columns.
_STRUCTURE = {"prompt", "conversations", "messages", "images", "image", "videos", "video"}
_RESERVED = {"prompt_images", "prompt_videos", "source"}
SOLUTION = "solution"


def load_prompts(data) -> tuple[Any, DataReport]:
    """`data` is the `[data]` section of an RL job (`grpo_config.PromptData`); returns a `datasets.Dataset`
    and the `DataReport`."""
    rows, report = read_rows(data, _prompt_row, noun="prompts")
    return _to_dataset(rows, data.path), report


def _prompt_row(record: Any, media_root: Path, system_prompt: str | None, checked: dict) -> dict[str, Any]:
    if not isinstance(record, dict):
        raise BadRecord(f"expected an object, got {type(record).__name__}")
    reserved = sorted(_RESERVED & set(record))
    if reserved:
        raise BadRecord(f"'{reserved[0]}' is a column the loader writes; rename that key")
    extras = {key: value for key, value in record.items() if key not in _STRUCTURE}
    media = {
        key: record[key] for key in ("images", "image", "videos", "video") if record.get(key) is not None
    }
    prompt = record.get("prompt")
    if prompt is not None:
        if isinstance(prompt, str) and not media and not system_prompt:
            return {"prompt": prompt, "prompt_images": [], "prompt_videos": [], **extras}
        if isinstance(prompt, str):
            prompt = [{"role": "user", "content": prompt}]
        if not isinstance(prompt, list):
            raise BadRecord(f"'prompt' is neither text nor a list of messages ({type(prompt).__name__})")
        row = normalize_conversation(
            {"messages": prompt, **media}, media_root, system_prompt, checked, require_assistant=False
        )
    elif record.get("conversations") is not None or record.get("messages") is not None:
        row = normalize_conversation(record, media_root, system_prompt, checked, require_assistant=False)
        answer = []
        while row["messages"] and row["messages"][-1]["role"] == "assistant":
            answer.insert(0, _text(row["messages"].pop()))
        if answer and SOLUTION not in extras:
            extras[SOLUTION] = "\n".join(answer)
    else:
        raise BadRecord("no 'prompt', 'conversations' or 'messages'")
    if not any(message["role"] == "user" for message in row["messages"]):
        raise BadRecord("the prompt has no user turn")
    return {
        "prompt": row["messages"],
        "prompt_images": row["images"],
        "prompt_videos": row["videos"],
        **extras,
    }


def _text(message: dict[str, Any]) -> str:
    return "".join(part.get("text") or "" for part in message["content"] if part["type"] == "text")


def _to_dataset(rows: list[dict[str, Any]], path: str):
    from datasets import Dataset

    chat = [row for row in rows if not isinstance(row["prompt"], str)]
    if chat and len(chat) != len(rows):  # one column type: plain prompts become one user turn
        for row in rows:
            if isinstance(row["prompt"], str):
                row["prompt"] = [{"role": "user", "content": [{"type": "text", "text": row["prompt"]}]}]
    if any(isinstance(image, dict) for row in rows for image in row["prompt_images"]):
        for row in rows:
            row["prompt_images"] = [
                i if isinstance(i, dict) else {"path": i, "bytes": None} for i in row["prompt_images"]
            ]
    columns = list(dict.fromkeys(key for row in rows for key in row))  # a column any record has
    try:
        return Dataset.from_list([{key: row.get(key) for key in columns} for row in rows])
    except Exception as error:  # pyarrow: a column whose type differs between records
        raise DataError(
            f"{path}: extra columns must have one type across records ({first_line(error)})"
        ) from None
