"""Latency of one Cosmos3 policy call (`Cosmos3ActionPolicy` / `sample_action_chunk`): the first frame encoded alone
against the `chunk_size + 1` frames upstream's pipeline encodes (the first frame repeated), for the same chunk.

    uv run python benchmarks/cosmos3_policy_call.py [--rounds 5] [--steps 10] [--tier 256]

The Reach2D benchmark's model (`cosmos3_policy.domain_sizes`, random weights, float32, one thread): a 128 x 128
frame on the 256 tier's canvas, chunk 8 with a state row, 10 sampler steps, as its closed loop calls it. The two
sides alternate in each round; the ratio is the median over rounds of per-round time ratios.
`tests/diffusers_cosmos3/test_actions.py` pins the chunk against upstream's pipeline and counts the frames encoded.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from _common import median, timed, write_results
from cosmos3_policy import CHUNK, DOMAIN, domain_sizes


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="sampler steps per call")
    parser.add_argument("--tier", type=int, default=256, help="the action resolution tier (canvas)")
    args = parser.parse_args()
    torch.set_num_threads(1)

    from diffusers_cosmos3 import actions
    from diffusers_cosmos3.testing import build_pipeline

    pipe = build_pipeline(action=True, seed=0, sizes=domain_sizes())
    pipe.set_progress_bar_config(disable=True)
    settings = actions.ActionSettings(
        "policy", CHUNK, DOMAIN, 2, 10.0, resolution_tier=args.tier, use_state=True
    )
    frame = np.random.default_rng(0).integers(0, 256, (128, 128, 3), dtype=np.uint8)
    encode = actions.conditioning_latents

    def call(first_frame_only: bool):
        # The baseline encodes every frame, as upstream's pipeline does; the sampler is the same.
        actions.conditioning_latents = lambda pipe, frames, settings, **_: encode(
            pipe, frames, settings, first_frame_only=first_frame_only
        )
        try:
            return actions.sample_action_chunk(
                pipe, settings, frame, "reach the red disc", state=[0.5, 0.5],
                num_inference_steps=args.steps, generator=torch.Generator().manual_seed(0),
            )  # fmt: skip
        finally:
            actions.conditioning_latents = encode

    call(True), call(False)  # warm-up
    rows = []
    for round_ in range(args.rounds):
        first_seconds, first_chunk = timed(lambda: call(True))
        all_seconds, all_chunk = timed(lambda: call(False))
        difference = (first_chunk - all_chunk).abs().max().item()
        rows.append(
            {"first_frame": first_seconds, "all_frames": all_seconds, "max_chunk_difference": difference}
        )
        print(f"round {round_}: first frame {first_seconds:.3f} s, all frames {all_seconds:.3f} s "
              f"(speed-up {all_seconds / first_seconds:.2f}x; chunks differ by {difference:.1e})", flush=True)  # fmt: skip
    speedup = median([r["all_frames"] / r["first_frame"] for r in rows])
    print(f"policy call: {median([r['first_frame'] for r in rows]):.3f} s against {median([r['all_frames'] for r in rows]):.3f} s; median speed-up {speedup:.2f}x")  # fmt: skip
    write_results(
        "cosmos3_policy_call",
        {"steps": args.steps, "tier": args.tier, "chunk": CHUNK, "rounds": rows, "median_speedup": speedup},
    )


if __name__ == "__main__":
    main()
