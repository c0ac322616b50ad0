"""Crash-safe trainer checkpoints.

The HF Trainer writes `checkpoint-N/` in place, so a run killed mid-save leaves a folder that looks
like a checkpoint. Every complete checkpoint therefore gets a marker file, written last and
atomically after all ranks finished writing; resume only ever considers marked folders.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

COMPLETE_MARKER = "COMPLETE"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def mark_complete(checkpoint: str | Path, step: int) -> None:
    checkpoint = Path(checkpoint)
    partial = checkpoint / f".{COMPLETE_MARKER}.partial"
    with open(partial, "w") as handle:
        json.dump({"global_step": step}, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(partial, checkpoint / COMPLETE_MARKER)


def is_complete(checkpoint: str | Path) -> bool:
    return (Path(checkpoint) / COMPLETE_MARKER).is_file()


def latest_complete_checkpoint(output_dir: str | Path) -> Path | None:
    """The highest-step `checkpoint-N` under `output_dir` that finished writing, or None."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return None
    steps = []
    for child in output_dir.iterdir():
        match = _CHECKPOINT.match(child.name)
        if match and child.is_dir() and is_complete(child):
            steps.append((int(match.group(1)), child))
    return max(steps)[1] if steps else None
