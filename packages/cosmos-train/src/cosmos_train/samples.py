"""Small sample datasets that ship with cosmos-train (used by the quickstart, tests and docs)."""

from __future__ import annotations

from pathlib import Path

# Wheels, sdists and editable installs all carry the package's copy. The repo's `examples/data/shapes` and
# `examples/data/pairs` are plain copies (the example jobs name them by relative paths, and a copied examples/
# folder must keep working); a test checks they are equal.
SAMPLE_DATA = Path(__file__).parent / "_sample_data"


def shapes_dir() -> Path:
    """The `shapes` toy set: 12 PNGs, a short clip, `llava.json`, `chat.jsonl` and `text.jsonl`."""
    folder = SAMPLE_DATA / "shapes"
    if not (folder / "llava.json").is_file():
        raise FileNotFoundError(f"the shapes sample is missing from {folder}")
    return folder


def pairs_dir() -> Path:
    """The `pairs` toy set for diffusion training: 8 coloured-shape PNGs (32x32), each with a
    `{"prompt": ...}` JSON sharing its basename (`[data] format = "folder"`)."""
    folder = SAMPLE_DATA / "pairs"
    if not (folder / "0001.json").is_file():
        raise FileNotFoundError(f"the pairs sample is missing from {folder}")
    return folder
