"""Killed runs resume where they stopped, to the same weights; a half-written checkpoint is never picked."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from sft_helpers import cli, tensorboard_steps, write_job

from cosmos_train.checkpoints import is_complete, latest_complete_checkpoint, mark_complete
from transformers_cosmos3 import testing as tiny

TRAIN = {"max_steps": 16, "save_steps": 4, "learning_rate": 5e-3, "per_device_train_batch_size": 2}


def test_latest_complete_checkpoint_ignores_unmarked_folders(tmp_path):
    for step in (2, 4, 6):
        (tmp_path / f"checkpoint-{step}").mkdir()
    mark_complete(tmp_path / "checkpoint-2", 2)
    mark_complete(tmp_path / "checkpoint-4", 4)
    (tmp_path / "checkpoint-10").write_text("a file, not a folder")
    assert latest_complete_checkpoint(tmp_path) == tmp_path / "checkpoint-4"
    assert not is_complete(tmp_path / "checkpoint-6")
    assert latest_complete_checkpoint(tmp_path / "missing") is None


@pytest.mark.slow
def test_sigkill_then_resume_gives_bit_equal_weights(tmp_path):
    model = tiny.save_tiny_cosmos3_reasoner(tmp_path / "model")

    reference_dir = tmp_path / "reference"
    reference_dir.mkdir()
    done = cli("sft", "--config", write_job(reference_dir, model, train=TRAIN))
    assert done.returncode == 0, done.stderr[-3000:]
    reference = load_file(reference_dir / "run" / "adapter_model.safetensors")

    # Each process logs its losses to a TensorBoard folder of its own: what the resumed one ran.
    killed_dir = tmp_path / "killed"
    killed_dir.mkdir()
    job = write_job(
        killed_dir, model, train=TRAIN | {"resume_from_checkpoint": True, "report_to": "tensorboard"}
    )
    first_log, resumed_log = killed_dir / "tb-first", killed_dir / "tb-resumed"
    exe = Path(sys.executable).with_name("cosmos-train")
    process = subprocess.Popen(
        [exe, "sft", "--config", job],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=os.environ | {"TENSORBOARD_LOGGING_DIR": str(first_log)},
    )
    run = killed_dir / "run"
    deadline = time.monotonic() + 600
    while not is_complete(run / "checkpoint-8") and time.monotonic() < deadline:
        assert process.poll() is None, "training ended before it could be killed"
        time.sleep(0.02)
    assert process.poll() is None, "training ended before it could be killed"
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    assert not (run / "adapter_model.safetensors").exists()  # the run really did not finish
    assert tensorboard_steps(first_log)[:8] == list(range(1, 9))

    # A checkpoint cut off mid-write: newer than every complete one, with a truncated weights file.
    half_written = run / "checkpoint-12"
    half_written.mkdir(exist_ok=True)
    (half_written / "adapter_model.safetensors").write_bytes(b"\x00" * 7)
    assert latest_complete_checkpoint(run) == run / "checkpoint-8"

    resumed = cli("sft", "--config", job, env=os.environ | {"TENSORBOARD_LOGGING_DIR": str(resumed_log)})
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming from {run / 'checkpoint-8'}" in resumed.stderr
    # Only the remaining steps ran: a fresh seeded start would also reach the reference weights.
    assert tensorboard_steps(resumed_log) == list(range(9, TRAIN["max_steps"] + 1))
    final = load_file(run / "adapter_model.safetensors")
    assert final.keys() == reference.keys()
    for name in reference:
        assert torch.equal(final[name], reference[name]), name
