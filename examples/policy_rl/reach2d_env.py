"""This example's environment: Reach2D (`benchmarks/domains/reach2d`), the toy robot domain the shipped policy was
trained on. A job names any gymnasium environment the same way: `[env] factory = "module:callable"`, a module on
`sys.path` or beside the job file."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # the repository's toy domains

from domains.reach2d.env import Reach2DEnv


def make_env(**kwargs) -> Reach2DEnv:
    return Reach2DEnv(**kwargs)
