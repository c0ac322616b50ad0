"""Rollout time of GRPO with shared-prompt rollouts against TRL's default generation, K = 8 samples per prompt.

TRL's transformers path prefills every prompt K times (vision tower included); `[rollout] shared_prompt`
prefills it once and repeats its KV cache. The prompts are multimodal and long, mostly vision (N images of
64 tokens each), and the completions 64 tokens, as in video question answering. A Qwen3-VL with a ~10M
parameter text tower keeps compute, not Python overhead, dominant on this 2-core CPU.

Both sides run the same trainer's `_generate` (tokenize, generate, decode) on the same batch (2 prompts x 8),
alternating which goes first over several rounds; the figure is the median per-round ratio, per prompt
length. Writes benchmarks/results/grpo_shared_prompt.json.

    python benchmarks/grpo_shared_prompt.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
from pathlib import Path

import numpy as np
import torch
from _common import median, timed, write_results
from PIL import Image

from cosmos_train.algorithms.grpo.trainer import build_grpo_trainer
from cosmos_train.jobs import read_job
from cosmos_train.tiny_models import save_tiny_vlm
from transformers_cosmos3.testing import Sizes

SIZES = Sizes(
    hidden=256, head_dim=32, heads=8, kv_heads=4, layers=4, intermediate=768, mrope_section=(6, 5, 5)
)
IMAGES_PER_PROMPT = (4, 16, 32)  # ~290, ~1,100 and ~2,150 prompt tokens
GROUP, PROMPTS, COMPLETION = 8, 2, 64


def write_job(folder: Path, model: Path, images: int) -> Path:
    rng = np.random.default_rng(images)
    paths = []
    for index in range(images * PROMPTS):
        path = folder / f"image-{images}-{index}.png"
        Image.fromarray(rng.integers(0, 255, (128, 128, 3), dtype=np.uint8)).save(path)
        paths.append(str(path))
    prompts = folder / f"prompts-{images}.jsonl"
    with prompts.open("w") as out:
        for p in range(PROMPTS):
            record = {
                "prompt": "Describe what changes across these frames.",
                "images": paths[p * images : (p + 1) * images],
            }
            out.write(json.dumps(record) + "\n")
    job = folder / f"job-{images}.toml"
    job.write_text(
        f'kind = "grpo"\n[model]\nname_or_path = "{model}"\n[data]\nformat = "jsonl"\npath = "{prompts}"\n'
        "[rewards]\nlength = { weight = 1.0, max_words = 10 }\n"
        f'[train]\noutput_dir = "{folder / "run"}"\nper_device_train_batch_size = {GROUP * PROMPTS}\n'
        f'num_generations = {GROUP}\nmax_completion_length = {COMPLETION}\nreport_to = "none"\n'
        # Full-length completions on both sides: the comparison is about the prefill, not early stops.
        f"generation_kwargs = {{ min_new_tokens = {COMPLETION} }}\n"
    )
    return job


def measure(trainer, prompts: list, rounds: int) -> tuple[dict[bool, list[float]], list[float], int]:
    """Seconds per `_generate` call with and without sharing, alternating which runs first each round."""
    times: dict[bool, list[float]] = {True: [], False: []}
    ratios, prompt_tokens = [], 0
    for round_index in range(rounds + 1):  # round 0 warms up both sides and is not counted
        order = (True, False) if round_index % 2 else (False, True)
        elapsed = {}
        for shared in order:
            trainer.rollout = trainer.rollout.model_copy(update={"shared_prompt": shared})
            elapsed[shared], (prompt_ids, completion_ids, *_) = timed(lambda: trainer._generate(prompts))
            assert all(len(ids) == COMPLETION for ids in completion_ids)
            prompt_tokens = len(prompt_ids[0])
        if round_index:
            for shared in (True, False):
                times[shared].append(elapsed[shared])
            ratios.append(elapsed[False] / elapsed[True])
    return times, ratios, prompt_tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    torch.manual_seed(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model = save_tiny_vlm(folder / "qwen3-vl", sizes=SIZES)
        for images in IMAGES_PER_PROMPT:
            trainer = build_grpo_trainer(read_job(write_job(folder, model, images)))
            batch = [trainer.train_dataset[p] for p in range(PROMPTS) for _ in range(GROUP)]
            prompts = [trainer._decoded_prompt(row) for row in batch]
            times, ratios, prompt_tokens = measure(trainer, prompts, args.rounds)
            row = {
                "images_per_prompt": images,
                "prompt_tokens": prompt_tokens,
                "trl_default_s": median(times[False]),
                "shared_prompt_s": median(times[True]),
                "speedup_median": median(ratios),
                "speedups": ratios,
            }
            rows.append(row)
            print(
                f"{prompt_tokens:5d} prompt tokens: TRL default {row['trl_default_s']:.2f} s, shared prompt "
                f"{row['shared_prompt_s']:.2f} s, median speedup {row['speedup_median']:.2f}x",
                flush=True,
            )
    write_results(
        "grpo_shared_prompt",
        {
            "setup": {
                "model": "Qwen3-VL, text tower hidden 256 x 4 layers, tiny ViT",
                "prompts": PROMPTS,
                "samples_per_prompt": GROUP,
                "completion_tokens": COMPLETION,
                "rounds": args.rounds,
            },
            "results": rows,
        },
    )


if __name__ == "__main__":
    main()
