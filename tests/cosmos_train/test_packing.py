"""Padding-free packing computes the same loss as padded batches on the same data."""

import pytest
from sft_helpers import losses, write_job, write_ragged_chats

from cosmos_train import tiny_models as tiny
from cosmos_train.algorithms.sft.trainer import run_sft
from cosmos_train.jobs import read_job


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
    trainer = run_sft(job)
    return losses(trainer)[0], trainer


def test_packed_loss_equals_padded_loss(tmp_path):
    model = tiny.save_tiny_text_lm(tmp_path / "lm")
    data = write_ragged_chats(tmp_path / "ragged.jsonl", count=24)
    padded, padded_trainer = _first_loss(tmp_path / "padded", model, data, packing=False)
    packed, packed_trainer = _first_loss(tmp_path / "packed", model, data, packing=True)
    # Packing really happened: fewer, longer rows than conversations.
    assert len(packed_trainer.train_dataset) < len(padded_trainer.train_dataset) == 24
    assert packed == pytest.approx(padded, rel=1e-4)


def test_segment_sdpa_matches_each_sequence_run_alone():
    """The packed-row kernel equals running every sequence by itself; padded batches are untouched."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from cosmos_train import attention

    config = Qwen3Config(
        vocab_size=64,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        use_cache=False,
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).eval()
    lengths = [7, 30, 1, 12]
    ids = torch.randint(0, 64, (1, sum(lengths)))
    positions = torch.cat([torch.arange(n) for n in lengths])[None]
    with torch.no_grad():
        alone = torch.cat([model(input_ids=chunk).logits for chunk in ids.split(lengths, dim=1)], dim=1)
        model.set_attn_implementation(attention.NAME)
        packed = model(input_ids=ids, position_ids=positions).logits
        torch.testing.assert_close(packed, alone, rtol=1e-5, atol=1e-5)
        padded_ids = torch.randint(0, 64, (2, 9))
        mask = torch.ones_like(padded_ids)
        mask[1, 5:] = 0
        segment = model(input_ids=padded_ids, attention_mask=mask).logits
        model.set_attn_implementation("sdpa")
        torch.testing.assert_close(segment, model(input_ids=padded_ids, attention_mask=mask).logits)
