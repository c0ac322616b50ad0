"""Every error cosmos-train shows is one line: this keeps library messages, which can run to pages, to their first."""

from __future__ import annotations


def first_line(error: BaseException | str, limit: int = 300) -> str:
    """The first line of `error`'s message (its type's name when the message is empty), at most `limit`
    characters."""
    text = str(error).strip()
    if not text:
        return type(error).__name__ if isinstance(error, BaseException) else ""
    return text.splitlines()[0].strip()[:limit]
