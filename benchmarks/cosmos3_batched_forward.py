"""Samples/s of the batched Cosmos3 training forward + backward against upstream's per-sample loop.

    uv run python benchmarks/cosmos3_batched_forward.py [--rounds 5]

One upstream `Cosmos3OmniTransformer` (random weights, float32, one thread) at a size where compute
dominates, batch 8 with the SFT mix (t2v, i2v, v2v, t2i), frozen reasoner and a trained generator, as in
Cosmos3 SFT. Variants, timed in interleaved rounds:

- `per_sample`: upstream's forward one sample per call, backward per sample (gradient accumulation);
- `segments`: `batched_forward`, one SDPA per sample and pathway;
- `mask`: `batched_forward` with one SDPA per pathway and a block-diagonal boolean mask;
- `cached`: `segments` replaying the reasoner keys/values from `Cosmos3ReasonerCache` (same prompts,
  new noise: what repeated timesteps per prompt or RL give).

Ratios are medians over rounds of per-round samples/s ratios. Goal: segments/per_sample >= 1.5.
`tests/diffusers_cosmos3/test_batched_forward.py` checks that all variants give the same outputs and
gradients as the per-sample forward.
"""

from __future__ import annotations

import argparse

import torch
from _common import median, timed, write_results

BATCH = 8
# (prompt, latent frames, latent h, latent w, clean frames): 70% t2v, 20% i2v, 10% v2v, plus a t2i image.
MIX = [
    ("a dog running through a park at dusk, leaves blowing in the wind", (5, 12, 12), ()),
    ("waves rolling onto a rocky beach", (5, 12, 12), ()),
    ("a red car driving along a mountain road", (5, 12, 12), ()),
    ("a chef slicing vegetables in a busy kitchen", (5, 12, 12), ()),
    ("timelapse of clouds over a city skyline", (5, 12, 12), ()),
    ("a robot arm picking up a cube", (5, 12, 12), (0,)),
    ("a cat jumping onto a sofa", (5, 12, 12), (0,)),
    ("a portrait of an old fisherman", (1, 12, 12), ()),
]


def build(sizes):
    from diffusers_cosmos3 import testing as tiny

    pipeline = tiny.build_pipeline()
    pipeline.transformer = tiny.build_transformer(pipeline.text_tokenizer, sizes=sizes).train()
    transformer = pipeline.transformer
    transformer.requires_grad_(False)
    for name, parameter in transformer.named_parameters():  # the generator tower trains
        if any(key in name for key in ("_moe_gen", "add_", "to_add_out", "norm_added", "proj_", "time_")):
            parameter.requires_grad_(True)
    return pipeline


def make_samples(pipeline, seed):
    from diffusers_cosmos3.batched import Cosmos3TrainingSample

    generator = torch.Generator().manual_seed(seed)
    channels = pipeline.transformer.config.latent_channel
    samples = []
    for prompt, (frames, h, w), clean in MIX:
        pixel_frames = 1 if frames == 1 else (frames - 1) * 4 + 1
        ids, _ = pipeline.tokenize_prompt(prompt, num_frames=pixel_frames, height=h * 16, width=w * 16)
        x0 = torch.randn(channels, frames, h, w, generator=generator)
        eps = torch.randn(channels, frames, h, w, generator=generator)
        sigma = float(torch.rand((), generator=generator))
        samples.append(Cosmos3TrainingSample(ids, x0, sigma * eps + (1 - sigma) * x0, sigma * 1000, clean))
    return samples


def loss_of(pred, sample):
    noisy = sample.noisy_frames()
    target = sample.noisy - sample.x0  # stands in for eps - x0
    return (pred[0][:, noisy] - target[:, noisy]).square().mean()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(1)

    from diffusers_cosmos3.batched import (
        Cosmos3ReasonerCache,
        batched_forward,
        pack_samples,
        per_sample_forward,
    )
    from transformers_cosmos3.testing import Sizes

    sizes = Sizes(
        hidden=args.hidden,
        head_dim=64,
        heads=args.hidden // 64,
        kv_heads=max(1, args.hidden // 128),
        layers=args.layers,
        intermediate=3 * args.hidden,
        mrope_section=(12, 10, 10),
    )
    pipeline = build(sizes)
    transformer = pipeline.transformer
    samples = make_samples(pipeline, seed=0)
    packed = pack_samples(pipeline, samples)
    cache = Cosmos3ReasonerCache()
    with torch.no_grad():
        batched_forward(transformer, packed, cache=cache)  # fill the cache once

    def per_sample():
        for sample in samples:
            loss_of(per_sample_forward(transformer, pipeline, [sample])[0], sample).backward()

    def batched(attention="segments", use_cache=None):
        def step():
            # Packing is part of the step: the trainer packs every batch.
            preds = batched_forward(transformer, pack_samples(pipeline, samples), attention, use_cache)
            sum(loss_of(p, s) for p, s in zip(preds, samples, strict=True)).backward()

        return step

    variants = {
        "per_sample": per_sample,
        "segments": batched("segments"),
        "mask": batched("mask"),
        "cached": batched("segments", cache),
    }
    for step in variants.values():  # warm-up
        step()
    times = {name: [] for name in variants}
    for round_index in range(args.rounds):
        for name, step in variants.items():
            transformer.zero_grad(set_to_none=True)
            seconds, _ = timed(step)
            times[name].append(seconds)
        print(f"round {round_index}: " + ", ".join(f"{n} {t[-1] * 1000:.0f} ms" for n, t in times.items()))

    ratios = {
        name: round(median([ref / t for ref, t in zip(times["per_sample"], times[name], strict=True)]), 3)
        for name in variants
        if name != "per_sample"
    }
    text_tokens, vision_tokens = sum(packed.und_lengths), sum(packed.gen_lengths)
    result = {
        "batch": BATCH,
        "rounds": args.rounds,
        "sizes": vars(sizes) | {"mrope_section": list(sizes.mrope_section)},
        "parameters": sum(p.numel() for p in transformer.parameters()),
        "text_tokens": text_tokens,
        "vision_tokens": vision_tokens,
        "step_ms_median": {name: round(median(t) * 1000, 1) for name, t in times.items()},
        "samples_per_s_median": {name: round(BATCH / median(t), 2) for name, t in times.items()},
        "speedup_vs_per_sample_median": ratios,
        "goal": "segments / per_sample >= 1.5",
    }
    print(result)
    write_results("cosmos3_batched_forward", result)


if __name__ == "__main__":
    main()
