"""One batched policy call of `cosmos-train policy-rl` (`CosmosPolicy.sample`: every running episode's chunk in one
transformer call per sampler step) with the frozen reasoner's caption keys and values replayed from the reasoner
cache, against the full sequence every step (the caption is most of a call's tokens).

    uv run python benchmarks/cosmos3_policy_rl_sampling.py [--rounds 5] [--episodes 16] [--steps 10]

The shipped Reach2D base (`cosmos3_policy_rl/base`, float32, one thread), one call per held-out start as a rollout
makes it (the start's frame and state, the task's caption), 10 Euler steps. The two sides alternate in each round;
the ratio is the median over rounds of per-round time ratios. `tests/cosmos_train/test_policy_rl.py` pins the
chunks to the full sequence's.
"""

from __future__ import annotations

import argparse

import torch
from _common import median, timed, write_results
from cosmos3_policy_rl import FLAWS, HELD_OUT, SHIPPED, SHIPPED_FLAW, SIZE, check_base


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--episodes", type=int, default=16, help="policy calls in the batch (running episodes)"
    )
    parser.add_argument("--steps", type=int, default=10, help="sampler steps per call")
    args = parser.parse_args()
    torch.set_num_threads(1)

    from diffusers import Cosmos3OmniPipeline
    from domains.reach2d.env import Reach2DEnv

    from cosmos_train.algorithms.policy_rl.policy import CosmosPolicy
    from diffusers_cosmos3.batched import Cosmos3ReasonerCache

    check_base(SHIPPED)
    pipe = Cosmos3OmniPipeline.from_pretrained(SHIPPED, enable_safety_checker=False)
    pipe.transformer.requires_grad_(False)  # as policy-rl trains it: the reasoner frozen
    policy = CosmosPolicy(pipe, CosmosPolicy.settings_record(SHIPPED))
    env = Reach2DEnv(size=SIZE, **FLAWS[SHIPPED_FLAW]["env"])
    calls = []
    for seed in range(HELD_OUT[0], HELD_OUT[0] + args.episodes):
        observation, info = env.reset(seed=seed)
        calls.append(policy.call(observation["image"], info["task"], observation["state"]))
    sigmas, cache = policy.sigmas(args.steps), Cosmos3ReasonerCache()
    tokens = len(calls[0].ids)

    def sample(cached: bool):
        policy.reasoner_cache = cache if cached else None
        return policy.sample(pipe.transformer, calls, sigmas, generator=torch.Generator().manual_seed(0))

    sample(True), sample(False)  # warm-up (fills the cache)
    rows = []
    for round_ in range(args.rounds):
        cached_seconds, cached = timed(lambda: sample(True))
        full_seconds, full = timed(lambda: sample(False))
        difference = (cached["actions"] - full["actions"]).abs().max().item()
        rows.append({"cached": cached_seconds, "full": full_seconds, "max_action_difference": difference})
        print(f"round {round_}: cached {cached_seconds:.3f} s, full {full_seconds:.3f} s "
              f"(speed-up {full_seconds / cached_seconds:.2f}x; actions differ by {difference:.1e})", flush=True)  # fmt: skip
    speedup = median([r["full"] / r["cached"] for r in rows])
    print(f"{args.episodes} calls x {args.steps} steps: {median([r['cached'] for r in rows]):.3f} s against "
          f"{median([r['full'] for r in rows]):.3f} s; median speed-up {speedup:.2f}x")  # fmt: skip
    write_results(
        "cosmos3_policy_rl_sampling",
        {"episodes": args.episodes, "steps": args.steps, "caption_tokens": tokens, "rounds": rows,
         "median_speedup": speedup},
    )  # fmt: skip


if __name__ == "__main__":
    main()
