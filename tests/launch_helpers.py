"""Launching cosmos-train jobs as real multi-process runs on CPU (gloo), for the tests that need them."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from sft_helpers import REPO

from cosmos_train.launch import ACCELERATE_CONFIG

BIN = Path(sys.executable).parent
TIMEOUT = 900


def launch_env() -> dict[str, str]:
    return os.environ | {
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",  # two processes on two cores
        "DS_ACCELERATOR": "cpu",
        "TORCH_EXTENSIONS_DIR": str(REPO / ".torch_extensions"),  # DeepSpeed builds its CPU comm op here
        "_TYPER_STANDARD_TRACEBACK": "1",  # plain tracebacks from each rank, for readable failures
    }


def error_tail(stderr: str) -> str:
    """The end of a run's stderr, led by its error lines (a launcher's own report can bury them)."""
    errors = [
        line
        for line in stderr.splitlines()
        if re.match(r"^(\[rank\d+\]: )?(\w+(Error|Exception)\b|error:)", line)
    ]
    return "\n".join(["error lines:", *errors[-10:], "stderr tail:", stderr[-3000:]])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(command: list, discard_output: bool = False) -> subprocess.Popen:
    """A launch in a session of its own, so that a hung launcher can be stopped with every rank it started; its
    output piped for `finish`, or discarded (a run nobody reads would block once the pipe is full)."""
    output = subprocess.DEVNULL if discard_output else subprocess.PIPE
    return subprocess.Popen(
        [str(c) for c in command],
        stdout=output,
        stderr=output,
        text=True,
        env=launch_env(),
        start_new_session=True,
    )


def kill_all(process: subprocess.Popen) -> None:
    """SIGKILL a launch and every process it started, as a crash of the machine would: torchrun starts each rank
    in a session of its own, so killing the launcher's session alone leaves the ranks training."""
    import psutil

    launcher = psutil.Process(process.pid)
    for child in [*launcher.children(recursive=True), launcher]:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    process.wait(timeout=60)


def finish(process: subprocess.Popen, label: str) -> tuple[str, str]:
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"{label}: no result after {TIMEOUT}s\n{error_tail(stderr)}")
    assert process.returncode == 0, f"{label} failed (exit {process.returncode}):\n{error_tail(stderr)}"
    return stdout, stderr


def two_processes() -> list:
    """The shipped accelerate config, on 2 processes of this machine."""
    return [
        BIN / "accelerate", "launch", "--config_file", ACCELERATE_CONFIG, "--num_processes", 2, "--main_process_port", free_port(),
        "-m", "cosmos_train",
    ]  # fmt: skip
