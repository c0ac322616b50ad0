"""Small sample datasets that ship with cosmos-train (used by the quickstart, tests and docs)."""

from __future__ import annotations

from pathlib import Path


def shapes_dir() -> Path:
    """The `shapes` toy set: 12 PNGs, a short clip, `llava.json` and `chat.jsonl`.

    Wheels carry it inside the package; an editable install reads it from the repo's `examples/`.
    """
    packaged = Path(__file__).parent / "_sample_data" / "shapes"
    repo = Path(__file__).resolve().parents[4] / "examples" / "data" / "shapes"
    for folder in (packaged, repo):
        if (folder / "llava.json").is_file():
            return folder
    raise FileNotFoundError(f"the shapes sample is missing (looked in {packaged} and {repo})")
