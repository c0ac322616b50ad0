"""Classifier-free guidance as one batched transformer call ([conditional; unconditional] rows, as the
pipelines batch it, `sampling.velocity`) against two calls (`[rollout] batched_guidance = false`).

    uv run python benchmarks/cfg_batching.py [--steps 10] [--rounds 5] [--batches 2 8]

Each side samples a guided rollout (CFG 4.5, FlowGRPO's default) with `sampling.ode_sample` (Euler on the
pipeline's noise grid) from the same noise and prompts, no grad, one thread. The pipeline is the tiny SD3 one
with the bigger MMDiT of `diffusion_sft_overhead.py` (`TRANSFORMER`: 4 joint blocks, 4 heads of 48, width 192,
about 5M parameters) at 64x64 (32x32 latents: 256 image tokens + 77 CLIP + 32 T5 text tokens), so compute
dominates: a guided step takes about 0.1 s at batch 2 and 0.45 s at batch 8. Text is encoded once, outside the
timing. Both sides give the same samples up to float32 rounding: the batched rollout equals bit for bit the
two-call one run on the batch taken twice (checked; a matmul over another row count may round differently,
which guidance 4.5 over the steps amplifies on these random weights, so the difference from the two-call
rollout itself is recorded too).

The two sides alternate over `--rounds` (order flipped each round) at each batch size (prompts per rollout);
the ratio is the median of the per-round ratios batched / two-call time per rollout (below 1: batching is
faster).

On a CPU the batched call does the same arithmetic as the two calls, so it can only save the per-call overhead
(Python, dispatch, small-matrix inefficiency), which is small next to the compute here: on a shared 2-core CPU
(`results/cfg_batching.json`, 7 rounds) it came out even at batch 2 (ratio 1.01) and about 10% slower at batch
8 (1.10; one call over 16 rows has twice the intermediates, such as attention scores; not profiled further).
On a GPU a small batch leaves the device underused, so one call of twice the rows costs little more than the
rows alone: the gain is larger there, and largest at small batch (not measured here: this run had no GPU).
`[rollout] batched_guidance = false` gives back the lower peak memory of two calls.
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
from diffusion_sft_overhead import MAX_SEQUENCE_LENGTH, SIZE, TRANSFORMER, parameters, save_pipeline

SCALE = 4.5
PROMPTS = [
    "a red square on a white background",
    "a green circle on a white background",
    "a blue square on a white background",
    "a yellow circle on a white background",
]


def load(model_dir: Path):
    from cosmos_train.diffusion.adapter import AdapterOptions
    from cosmos_train.diffusion.loading import load_adapter

    adapter = load_adapter(str(model_dir), AdapterOptions(max_sequence_length=MAX_SEQUENCE_LENGTH))
    adapter.transformer.eval()
    return adapter


def setup(adapter, batch: int, steps: int):
    """Noise, conditioning, the unconditional rows and the grid of a `batch`-prompt rollout."""
    from cosmos_train.diffusion.sampling import noise_grid

    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(batch)]
    shape = adapter.latent_shape(SIZE, SIZE)
    noise = torch.randn(batch, *shape, generator=torch.Generator().manual_seed(batch))
    with torch.no_grad():
        conditioning = adapter.encode_prompts(prompts)
        unconditional = adapter.encode_prompts([adapter.negative_prompt])
    unconditional = {k: v.expand(batch, *v.shape[1:]) for k, v in unconditional.items()}
    return noise, conditioning, unconditional, noise_grid(adapter, steps, shape)


def rollout(adapter, inputs, batched: bool) -> tuple[float, torch.Tensor, int]:
    """Seconds for one guided rollout, its samples, and the transformer calls it made."""
    from cosmos_train.diffusion.sampling import Guidance, ode_sample

    noise, conditioning, unconditional, grid = inputs
    guidance = Guidance(SCALE, unconditional, batched=batched)
    calls = [0]
    handle = adapter.transformer.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    try:
        start = time.perf_counter()
        with torch.no_grad():
            samples = ode_sample(adapter, adapter.transformer, noise, conditioning, grid, "euler", guidance)
        elapsed = time.perf_counter() - start
    finally:
        handle.remove()
    return elapsed, samples, calls[0]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=10, help="Sampler steps per rollout.")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, nargs="+", default=[2, 8], help="Prompts per rollout.")
    args = parser.parse_args()
    torch.set_num_threads(1)

    sides = {"batched": True, "two_calls": False}
    with tempfile.TemporaryDirectory() as scratch:
        adapter = load(save_pipeline(Path(scratch) / "model", TRANSFORMER))
    results = {
        "setup": {
            "transformer": {**TRANSFORMER, "parameters": parameters(adapter.transformer)},
            "latents": f"4x{SIZE // 2}x{SIZE // 2} ({SIZE}x{SIZE} images)",
            "text_tokens": {"clip": 77, "t5": MAX_SEQUENCE_LENGTH},
            "guidance_scale": SCALE,
            "solver": "euler",
            "steps_per_rollout": args.steps,
            "dtype": "float32",
            "device": "cpu",
        },
        "rounds": args.rounds,
        "batches": {},
    }
    for batch in args.batches:
        inputs = setup(adapter, batch, args.steps)
        samples, calls = {}, {}
        for side, batched in sides.items():  # warm-up, and the outputs to compare
            _, samples[side], calls[side] = rollout(adapter, inputs, batched)
        # The batched call runs twice the rows, and a float32 matmul may block its sums differently for
        # another row count (relative ~1e-5 per call with these random weights, amplified by guidance 4.5
        # over the steps). So it must equal, bit for bit, the two-call rollout of the batch taken twice.
        noise, conditioning, unconditional, grid = inputs

        def twice(rows: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            return {k: torch.cat([v, v]) for k, v in rows.items()}

        doubled = (torch.cat([noise, noise]), twice(conditioning), twice(unconditional), grid)
        assert torch.equal(samples["batched"], rollout(adapter, doubled, False)[1][:batch])
        difference = (samples["batched"] - samples["two_calls"]).abs().max().item()
        relative = difference / samples["two_calls"].abs().max().item()
        per_round = []
        for round_ in range(args.rounds):
            order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
            measured = {side: rollout(adapter, inputs, sides[side])[0] for side in order}
            per_round.append(measured)
            print(
                f"batch {batch} round {round_}: batched {measured['batched']:.3f} s, "
                f"two calls {measured['two_calls']:.3f} s, "
                f"ratio {measured['batched'] / measured['two_calls']:.3f}",
                flush=True,
            )
        ratios = [r["batched"] / r["two_calls"] for r in per_round]
        entry = {
            "transformer_calls_per_rollout": calls,
            "batched_equals_two_calls_on_twice_the_rows": True,  # bit for bit (asserted)
            "max_abs_difference_from_two_calls": difference,
            "max_difference_from_two_calls_relative_to_max_sample": relative,
            "per_round": [{side: round(r[side], 4) for side in sides} for r in per_round],
            **{
                side: {
                    "rollout_s": round(median([r[side] for r in per_round]), 4),
                    "step_s": round(median([r[side] for r in per_round]) / args.steps, 5),
                }
                for side in sides
            },
            "ratios_per_round": [round(r, 3) for r in ratios],
            "ratio_batched_over_two_calls": round(median(ratios), 3),
        }
        results["batches"][str(batch)] = entry
        print(
            f"batch {batch}: batched {entry['batched']}, two calls {entry['two_calls']}, "
            f"ratio (batched / two calls, median of rounds) = {entry['ratio_batched_over_two_calls']}",
            flush=True,
        )
    write_results("cfg_batching", results)


if __name__ == "__main__":
    main()
