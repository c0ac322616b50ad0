"""Padding-free packing computes the same loss as padded batches on the same data."""

import pytest
from sft_helpers import losses, write_job, write_ragged_chats

from cosmos_train import tiny
from cosmos_train.jobs import read_job
from cosmos_train.trainers.sft_trainer import run_sft


def _first_loss(folder, model, data, packing):
    folder.mkdir()
    # One batch holds the whole dataset and nothing is updated: the logged loss is the mean over every
    # assistant token, whatever the batch layout.
    job_path = write_job(
        folder,
        model,
        lora=False,
        train={
            "max_steps": 1,
            "learning_rate": 0.0,
            "per_device_train_batch_size": 24,
            "save_strategy": "no",
        },
    )
    job = read_job(
        job_path,
        [
            f'data.path="{data}"',
            'data.format="jsonl"',
            f"data.packing={str(packing).lower()}",
            "data.max_length=1024",
        ],
    )
    trainer = run_sft(job.config, job.source)
    return losses(trainer)[0], trainer


def test_packed_loss_equals_padded_loss(tmp_path):
    model = tiny.save_tiny_text_lm(tmp_path / "lm")
    data = write_ragged_chats(tmp_path / "ragged.jsonl", count=24)
    padded, padded_trainer = _first_loss(tmp_path / "padded", model, data, packing=False)
    packed, packed_trainer = _first_loss(tmp_path / "packed", model, data, packing=True)
    # Packing really happened: fewer, longer rows than conversations.
    assert len(packed_trainer.train_dataset) < len(padded_trainer.train_dataset) == 24
    assert packed == pytest.approx(padded, rel=1e-4)
