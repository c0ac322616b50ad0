"""One wave of a `cosmos-train policy-rl` rollout: every running episode's current frame encoded and its chunk
sampled (10 Euler steps), then its frames rendered by the environment, as this toolkit runs it against the way it
ran before: the frames encoded one autoencoder call each, the transformer's batch packed anew at every sampler step,
and Reach2D's discs sampled over the whole picture.

    uv run python benchmarks/cosmos3_policy_rl_wave.py [--rounds 7] [--episodes 16] [--steps 10]

The shipped Reach2D base (float32, one thread, the reasoner cache on), one call per held-out start (its frame, state
and caption), and the frames of `EXECUTE` environment steps per episode. The two sides alternate in each round; the
ratio is the median over rounds of per-round time ratios. The sides' chunks are compared (they must be equal up to
the autoencoder's batched convolutions), and the two renderers' pictures (bit-equal).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from _common import median, timed, write_results
from cosmos3_policy_rl import EXECUTE, FLAWS, HELD_OUT, SHIPPED, SHIPPED_FLAW, SIZE, check_base


def whole_picture_coverage(size: int, center: np.ndarray, radius: float, supersample: int) -> np.ndarray:
    """The baseline renderer's disc coverage: every sub-pixel point of the picture tested."""
    points = (np.arange(size * supersample) + 0.5) / (size * supersample)
    inside = ((points[None, :] - center[0]) ** 2 + (points[:, None] - center[1]) ** 2) <= radius**2
    return inside.reshape(size, supersample, size, supersample).mean(axis=(1, 3))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--episodes", type=int, default=16, help="running episodes in the wave")
    parser.add_argument("--steps", type=int, default=10, help="sampler steps per call")
    args = parser.parse_args()
    torch.set_num_threads(1)

    from diffusers import Cosmos3OmniPipeline
    from domains.reach2d import world
    from domains.reach2d.env import Reach2DEnv

    import diffusers_cosmos3.batched as batched
    from cosmos_train.algorithms.policy_rl.policy import CosmosPolicy

    check_base(SHIPPED)
    pipe = Cosmos3OmniPipeline.from_pretrained(SHIPPED, enable_safety_checker=False)
    pipe.transformer.requires_grad_(False)  # as policy-rl trains it: the reasoner frozen
    policy = CosmosPolicy(pipe, CosmosPolicy.settings_record(SHIPPED), batched.Cosmos3ReasonerCache())
    envs = [Reach2DEnv(size=SIZE, **FLAWS[SHIPPED_FLAW]["env"]) for _ in range(args.episodes)]
    starts = [env.reset(seed=seed) for env, seed in zip(envs, range(HELD_OUT[0], HELD_OUT[1]), strict=False)]
    frames = [observation["image"] for observation, _ in starts]
    states = [observation["state"] for observation, _ in starts]
    tasks = [info["task"] for _, info in starts]
    sigmas = policy.sigmas(args.steps)
    repack, coverage = batched.repack, world._coverage

    def wave(batched_side: bool):
        batched.repack = (
            repack
            if batched_side
            else lambda pipeline, like, samples: batched.pack_samples(pipeline, samples)
        )
        world._coverage = coverage if batched_side else whole_picture_coverage
        try:
            if batched_side:
                calls = policy.calls(frames, tasks, states)
            else:
                calls = [policy.call(f, t, s) for f, t, s in zip(frames, tasks, states, strict=True)]
            generators = [torch.Generator().manual_seed(i) for i in range(len(calls))]
            chunks = policy.to_env_units(
                policy.sample(pipe.transformer, calls, sigmas, generator=generators)["actions"]
            )
            pictures = []
            for env, chunk in zip(envs, chunks, strict=True):
                tip = env.world.tip
                for action in chunk[:EXECUTE]:
                    tip = world.step(tip, action)
                    pictures.append(world.render(env.world, tip, SIZE))
            return chunks, pictures
        finally:
            batched.repack, world._coverage = repack, coverage

    wave(True), wave(False)  # warm-up (fills the reasoner cache)
    rows = []
    for round_ in range(args.rounds):
        new_seconds, (new_chunks, new_pictures) = timed(lambda: wave(True))
        old_seconds, (old_chunks, old_pictures) = timed(lambda: wave(False))
        difference = float(np.abs(new_chunks - old_chunks).max())
        same_pictures = all(np.array_equal(a, b) for a, b in zip(new_pictures, old_pictures, strict=True))
        rows.append({"batched": new_seconds, "per_call": old_seconds, "max_action_difference": difference,
                     "pictures_equal": same_pictures})  # fmt: skip
        print(f"round {round_}: batched {new_seconds:.3f} s, per call {old_seconds:.3f} s (speed-up "
              f"{old_seconds / new_seconds:.2f}x; actions differ by {difference:.1e}, pictures equal: {same_pictures})",
              flush=True)  # fmt: skip
    speedup = median([r["per_call"] / r["batched"] for r in rows])
    print(f"a wave of {args.episodes} episodes ({args.steps} steps, {EXECUTE} frames each): "
          f"{median([r['batched'] for r in rows]):.3f} s against {median([r['per_call'] for r in rows]):.3f} s; "
          f"median speed-up {speedup:.2f}x")  # fmt: skip
    write_results(
        "cosmos3_policy_rl_wave",
        {"episodes": args.episodes, "steps": args.steps, "frames_per_episode": EXECUTE, "rounds": rows,
         "median_speedup": speedup},
    )  # fmt: skip


if __name__ == "__main__":
    main()
