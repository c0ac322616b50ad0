"""Crash-safe trainer checkpoints.

The HF Trainer writes `checkpoint-N/` in place, so a run killed mid-save leaves a folder that looks
like a checkpoint. Every complete checkpoint therefore gets a marker file, written last and
atomically after all ranks finished writing; resume only ever considers marked folders whose safetensors
headers read, and says which it passed over.
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


def unreadable_weights(folder: str | Path) -> tuple[Path, str] | None:
    """The first `*.safetensors` file in `folder` (not its subfolders: a run's folder holds its checkpoints) whose
    header does not read (a truncated or corrupt file), with why; None when all read. Reads each file's header and
    tensor table only (safetensors' `safe_open`): cheap, and never unpickles anything."""
    from safetensors import safe_open

    for path in sorted(Path(folder).glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt") as handle:
                handle.keys()
        except Exception as error:  # SafetensorError, OSError: the file cannot be used
            return path, str(error).splitlines()[0] if str(error) else type(error).__name__
    return None


def resumable_checkpoint(output_dir: str | Path) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The highest-step `checkpoint-N` under `output_dir` that finished writing and whose weights read (or None),
    and the later ones passed over, each with why (no COMPLETE marker: its save was interrupted; or a weights file
    that does not read)."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return None, []
    found = []
    for child in output_dir.iterdir():
        match = _CHECKPOINT.match(child.name)
        if match and child.is_dir():
            found.append((int(match.group(1)), child))
    skipped = []
    for _, checkpoint in sorted(found, reverse=True):
        if not is_complete(checkpoint):
            skipped.append((checkpoint, f"no {COMPLETE_MARKER} marker (its save did not finish)"))
            continue
        bad = unreadable_weights(checkpoint)
        if bad is not None:
            skipped.append((checkpoint, f"unreadable {bad[0]} ({bad[1]})"))
            continue
        return checkpoint, skipped
    return None, skipped


def latest_complete_checkpoint(output_dir: str | Path) -> Path | None:
    """The highest-step `checkpoint-N` under `output_dir` that finished writing and whose weights read, or None."""
    return resumable_checkpoint(output_dir)[0]
