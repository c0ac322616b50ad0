"""Small sample datasets that ship with cosmos-train (used by the quickstart, tests and docs)."""

from __future__ import annotations

from pathlib import Path

# The package folder is the one copy: wheels, sdists and editable installs all carry it, and the
# repo's `examples/data/shapes` is a symlink to it (for the example jobs' relative paths).
SAMPLE_DATA = Path(__file__).parent / "_sample_data"


def shapes_dir() -> Path:
    """The `shapes` toy set: 12 PNGs, a short clip, `llava.json`, `chat.jsonl` and `text.jsonl`."""
    folder = SAMPLE_DATA / "shapes"
    if not (folder / "llava.json").is_file():
        raise FileNotFoundError(f"the shapes sample is missing from {folder}")
    return folder
