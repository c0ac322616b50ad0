"""Tokens/s of padding-free packing against padded batches, on a ragged text dataset.

    uv run python benchmarks/packing.py [--conversations 400]

The same tiny Qwen3-style text LM trains one epoch on the same conversations (lengths spread over
~10-250 tokens) twice through `cosmos-train sft`: `data.packing = false` (padded batches) and
`data.packing = true` (TRL's best-fit-decreasing packing, padding-free with position ids). Tokens/s
counts real tokens only. Goal: packed/padded >= 1.5. `tests/cosmos_train/test_packing.py` checks
that both give the same loss on the same data.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from _common import write_results

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from sft_helpers import write_job, write_ragged_chats

BATCH = 8
MAX_LENGTH = 1024


def train(model_dir: Path, data: Path, folder: Path, packing: bool) -> dict:
    from cosmos_train.algorithms.sft.trainer import run_sft
    from cosmos_train.jobs import read_job

    folder.mkdir()
    job_path = write_job(
        folder,
        model_dir,
        lora=False,
        train={
            "num_train_epochs": 1,
            "max_steps": -1,
            "learning_rate": 1e-4,
            "per_device_train_batch_size": BATCH,
            "save_strategy": "no",
            "logging_steps": 10_000,
            "disable_tqdm": True,
            "gradient_checkpointing": False,
        },
    )
    job = read_job(
        job_path,
        [
            f'data.path="{data}"',
            'data.format="jsonl"',
            f"data.packing={str(packing).lower()}",
            f"data.max_length={MAX_LENGTH}",
        ],
    )
    trainer = run_sft(job)
    runtime = trainer.state.log_history[-1]["train_runtime"]
    tokens = sum(len(ids) for ids in trainer.train_dataset["input_ids"])
    rows = len(trainer.train_dataset)
    return {
        "runtime_s": round(runtime, 3),
        "real_tokens": tokens,
        "rows": rows,
        "steps": trainer.state.global_step,
        "tokens_per_s": round(tokens / runtime, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--conversations", type=int, default=400)
    args = parser.parse_args()

    from cosmos_train import tiny_models as tiny

    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        model_dir = tiny.save_tiny_text_lm(
            scratch / "lm",
            sizes=tiny.Sizes(hidden=256, head_dim=32, heads=8, kv_heads=4, layers=4, intermediate=768),
        )
        data = write_ragged_chats(scratch / "ragged.jsonl", args.conversations, max_words=60)
        padded = train(model_dir, data, scratch / "padded", packing=False)
        packed = train(model_dir, data, scratch / "packed", packing=True)
    assert padded["real_tokens"] == packed["real_tokens"], "both runs must see the same tokens"
    results = {
        "padded": padded,
        "packed": packed,
        "speedup_tokens_per_s": round(packed["tokens_per_s"] / padded["tokens_per_s"], 3),
        "goal": "packed/padded >= 1.5",
    }
    print(f"padded {padded}")
    print(f"packed {packed}")
    print(f"speedup (tokens/s) = {results['speedup_tokens_per_s']}")
    write_results("packing", results)


if __name__ == "__main__":
    main()
