"""Step time of `cosmos-train diffusion-sft` with cached latents and text embeddings (`[data] cache = true`)
against encoding each batch on the fly (`cache = false`).

    uv run python benchmarks/latent_cache.py [--steps 10] [--warmup 3] [--rounds 5]

Both sides are the real trainer (`run_diffusion_sft`, full fine-tuning, batch 4, one thread) on the same
SD3 pipeline and the same 16 pairs of 64x64 PNG images. The tiny pipeline's encoders are too small for
encoding to matter, so this one has bigger ones (`TEXT`, `VAE`; random weights):
- two CLIP text encoders with projections: hidden 256, 4 layers, 4 heads, MLP 1024 (3.3M parameters each);
- T5 encoder: d_model 512, d_ff 2048, 6 layers, 8 heads (19M), 32 tokens (`max_sequence_length`);
- VAE: block_out_channels (32, 64), 2 layers per block, 2x downsampling (64x64 images -> 4x32x32 latents);
- the MMDiT of `diffusion_sft_overhead.py` (4 joint blocks, width 192) with joint_attention_dim 512 and
  pooled_projection_dim 512 to take these encoders' outputs.

On the fly, each step decodes and resizes 4 PNGs, runs both CLIPs and T5 on 4 captions and the VAE encoder
on 4 images (no grad), then the transformer's forward/backward and the optimizer. Cached, each step reads
4 small safetensors files instead. The cache is written before the rounds (its one-time cost is measured
separately, per item, and reported with the break-even point); each round then hits it.

Steady-state step time is measured by a `TrainerCallback` after `--warmup` steps. The two sides alternate
over `--rounds` (order flipped each round); the ratio is the median of per-round cached / on-the-fly time.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch
from _common import median, write_results
from diffusion_sft_overhead import (
    BATCH,
    MAX_SEQUENCE_LENGTH,
    PAIRS,
    SIZE,
    TRANSFORMER,
    parameters,
    save_pipeline,
    trainer_steps,
    write_job,
    write_pairs,
)

TEXT = {
    "clip_hidden": 256,
    "clip_layers": 4,
    "t5_d_model": 512,
    "t5_d_ff": 2048,
    "t5_layers": 6,
    "t5_heads": 8,
}
VAE = {"block_out_channels": (32, 64), "layers_per_block": 2}


def component_sizes(model_dir: Path) -> dict[str, int]:
    from cosmos_train.diffusion.adapter import AdapterOptions
    from cosmos_train.diffusion.loading import load_adapter

    pipeline = load_adapter(str(model_dir), AdapterOptions()).pipeline
    names = ("text_encoder", "text_encoder_2", "text_encoder_3", "vae", "transformer")
    return {name: parameters(getattr(pipeline, name)) for name in names}


def cache_build(model_dir: Path, job_path: Path, cache_dir: Path) -> dict:
    """Write the cache from scratch (every item a miss): seconds per item, encoding and writing."""
    from cosmos_train.data.pairs import load_pairs
    from cosmos_train.diffusion.adapter import AdapterOptions
    from cosmos_train.diffusion.latent_cache import cache_pairs
    from cosmos_train.diffusion.loading import load_adapter
    from cosmos_train.jobs import read_job

    config = read_job(job_path).config
    adapter = load_adapter(str(model_dir), AdapterOptions(max_sequence_length=MAX_SEQUENCE_LENGTH))
    dataset, _ = load_pairs(config.data, video=False)
    start = time.perf_counter()
    cached = cache_pairs(dataset, adapter, cache_dir)
    elapsed = time.perf_counter() - start
    assert cached.cache.misses == len(dataset) + 1, cached.cache.misses  # the items and the empty prompt
    return {"items": len(dataset), "total_s": elapsed, "per_item_s": elapsed / len(dataset)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)

    rounds = []
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        model_dir = save_pipeline(scratch / "model", TRANSFORMER, text=TEXT, vae=VAE)
        sizes = component_sizes(model_dir)
        data = write_pairs(scratch / "pairs")
        cache_dir = scratch / "cache"
        train = {"max_steps": args.steps + args.warmup}
        build = cache_build(
            model_dir, write_job(scratch / "build", model_dir, data, True, cache_dir, train), cache_dir
        )
        print(
            f"cache build: {build['per_item_s'] * 1000:.1f} ms per item ({build['items']} items)", flush=True
        )
        for round_ in range(args.rounds):
            jobs = {
                "cached": write_job(scratch / f"cached-{round_}", model_dir, data, True, cache_dir, train),
                "on_the_fly": write_job(scratch / f"fly-{round_}", model_dir, data, False, None, train),
            }
            order = ["cached", "on_the_fly"] if round_ % 2 == 0 else ["on_the_fly", "cached"]
            measured = {side: trainer_steps(jobs[side], args.steps, args.warmup) for side in order}
            rounds.append(measured)
            print(
                f"round {round_}: cached {measured['cached']['step_s']:.3f} s/step, "
                f"on the fly {measured['on_the_fly']['step_s']:.3f} s/step, "
                f"ratio {measured['cached']['step_s'] / measured['on_the_fly']['step_s']:.3f}",
                flush=True,
            )
    cached = median([r["cached"]["step_s"] for r in rounds])
    fly = median([r["on_the_fly"]["step_s"] for r in rounds])
    ratios = [r["cached"]["step_s"] / r["on_the_fly"]["step_s"] for r in rounds]
    saved_per_item = (fly - cached) / BATCH
    results = {
        "setup": {
            "parameters": sizes,
            "transformer": {
                **TRANSFORMER,
                "joint_attention_dim": TEXT["t5_d_model"],
                "pooled_projection_dim": 2 * TEXT["clip_hidden"],
            },
            "text_encoders": TEXT,
            "vae": {**VAE, "latent_channels": 4, "downsampling": 2},
            "images": f"{PAIRS} PNG pairs of {SIZE}x{SIZE} (latents 4x{SIZE // 2}x{SIZE // 2})",
            "text_tokens": {"clip": 77, "t5": MAX_SEQUENCE_LENGTH},
            "batch": BATCH,
            "steps_timed_per_round": args.steps,
            "warmup_steps": args.warmup,
        },
        "rounds": args.rounds,
        "per_round": [
            {
                "cached_step_s": round(r["cached"]["step_s"], 4),
                "on_the_fly_step_s": round(r["on_the_fly"]["step_s"], 4),
            }
            for r in rounds
        ],
        "cached": {"step_s": round(cached, 5), "steps_per_s": round(1 / cached, 3)},
        "on_the_fly": {"step_s": round(fly, 5), "steps_per_s": round(1 / fly, 3)},
        "ratios_per_round": [round(r, 3) for r in ratios],
        "ratio_cached_over_on_the_fly": round(median(ratios), 3),
        "cache_build": {k: round(v, 4) if isinstance(v, float) else v for k, v in build.items()},
        # The cache pays for itself once each item has been seen this many times (epochs).
        "break_even_epochs": round(build["per_item_s"] / saved_per_item, 2) if saved_per_item > 0 else None,
    }
    print(f"cached      {results['cached']}")
    print(f"on the fly  {results['on_the_fly']}")
    print(
        f"ratio (cached / on-the-fly time per step), median of rounds = {results['ratio_cached_over_on_the_fly']}"
    )
    print(f"cache build {results['cache_build']}, break-even after {results['break_even_epochs']} epochs")
    write_results("latent_cache", results)


if __name__ == "__main__":
    main()
