"""Import a benchmark script (`benchmarks/<name>.py`) as a module, so a test runs its recipe as it ships.

`benchmarks/` is on every test's `sys.path` (pytest's `pythonpath` in the root pyproject.toml): a script finds its
`_common`, and tests import the toy domains as the scripts do (`from domains.geneval_mini import ...`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_benchmark", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def with_a_flipped_byte(folder: Path, file: str, copy: Path) -> Path:
    """`folder` copied to `copy`, with the last byte of its `file` flipped: a base that is not the measured one."""
    import shutil

    shutil.copytree(folder, copy)
    data = bytearray((copy / file).read_bytes())
    data[-1] ^= 1
    (copy / file).write_bytes(bytes(data))
    return copy
