"""SHA-256 sums of a folder's files (`SHA256SUMS`, as `sha256sum` writes it): the shipped base models of the
benchmarks carry them, so a run can prove it used the weights the published figures were measured on."""

from __future__ import annotations

import hashlib
from pathlib import Path

SUMS = "SHA256SUMS"


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != SUMS)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_sums(folder: str | Path) -> Path:
    folder = Path(folder)
    lines = [f"{_sha256(p)}  {p.relative_to(folder).as_posix()}" for p in _files(folder)]
    (folder / SUMS).write_text("\n".join(lines) + "\n")
    return folder / SUMS


def check_sums(folder: str | Path, rebuild: str) -> None:
    """Raise ValueError naming the first file whose SHA-256 differs from `SHA256SUMS` (or that is missing or
    extra); `rebuild` says how to build the folder again."""
    folder = Path(folder)
    if not (folder / SUMS).is_file():
        raise ValueError(f"{folder}: no {SUMS}; rebuild with {rebuild}")
    expected = dict(line.split("  ", 1)[::-1] for line in (folder / SUMS).read_text().splitlines() if line)
    present = {p.relative_to(folder).as_posix() for p in _files(folder)}
    for name in sorted(present | set(expected)):
        if name not in expected:
            raise ValueError(f"{folder / name}: not listed in {SUMS}")
        if name not in present:
            raise ValueError(f"{folder / name}: missing (listed in {SUMS})")
        if _sha256(folder / name) != expected[name]:
            raise ValueError(f"{folder / name}: SHA-256 differs from {SUMS}")
