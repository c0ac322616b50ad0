"""Why a Reach2D policy fails: K stochastic episodes per held-out start of `cosmos3_policy_rl.py` (the flow ODE, each
episode its own noise), and per episode whether it succeeded, which target the tip ended nearest, how far from the
named one, and how fast the tip moved (its step length, and the part of it towards the named target, over the steps
taken farther than a target's radius from it). The expert's step is `expert.SPEEDS` x `world.MAX_STEP` (0.035 to
0.05). README, "Closed-loop RL of a Cosmos3 policy", quotes it on the base and on an NFT export.

    python benchmarks/cosmos3_policy_rl_diagnose.py [EXPORT ...] [--episodes K] [--starts A:B] [--out FILE]

EXPORT: policy exports (default: the shipped base). Writes JSON, one entry per export (default: results/partial/).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np
import torch
from _common import default_out, write_payload
from cosmos3_policy_rl import EXECUTE, FLAWS, HELD_OUT, SHIPPED, SHIPPED_FLAW, SIZE
from domains.reach2d.env import Reach2DEnv
from domains.reach2d.world import TARGET_RADIUS, distance


def episodes(export: Path, count: int, seeds: list[int]) -> list[dict]:
    """`count` stochastic episodes per start, every running episode's chunk sampled in one batch."""
    from diffusers import Cosmos3OmniPipeline

    from cosmos_train.algorithms.policy_rl.policy import CosmosPolicy
    from diffusers_cosmos3.batched import Cosmos3ReasonerCache

    pipe = Cosmos3OmniPipeline.from_pretrained(export, enable_safety_checker=False)
    pipe.transformer.requires_grad_(False)
    pipe.set_progress_bar_config(disable=True)
    policy = CosmosPolicy(pipe, CosmosPolicy.settings_record(export), Cosmos3ReasonerCache())
    sigmas = policy.sigmas(10)
    found = []
    for k in range(count):
        envs = [Reach2DEnv(size=SIZE, **FLAWS[SHIPPED_FLAW]["env"]) for _ in seeds]
        observations = [env.reset(seed=seed)[0] for env, seed in zip(envs, seeds, strict=True)]
        generators = [torch.Generator().manual_seed(1_000 * k + i) for i in range(len(seeds))]
        # Per episode: (step length, its part towards the goal) for the steps begun outside the goal's disc.
        steps = [[] for _ in seeds]
        running = list(range(len(seeds)))
        while running:
            calls = [
                policy.call(observations[i]["image"], envs[i].task, observations[i]["state"]) for i in running
            ]
            sample = policy.sample(
                pipe.transformer, calls, sigmas, generator=[generators[i] for i in running]
            )
            ended = set()
            for i, chunk in zip(running, policy.to_env_units(sample["actions"]), strict=True):
                env = envs[i]
                for action in chunk[:EXECUTE]:
                    before, goal = env.tip.copy(), env.world.goal_position
                    observations[i], _, terminated, truncated, _ = env.step(action)
                    if distance(before, goal) > TARGET_RADIUS:
                        moved = env.tip - before
                        towards = (goal - before) / np.linalg.norm(goal - before)
                        steps[i].append((float(np.linalg.norm(moved)), float(moved @ towards)))
                    if terminated or truncated:
                        ended.add(i)
                        break
            running = [i for i in running if i not in ended]
        for env, taken in zip(envs, steps, strict=True):
            nearest = min(
                zip(env.world.targets, env.world.colors, strict=True), key=lambda t: distance(env.tip, t[0])
            )[1]
            found.append({
                "success": bool(env.world.reached(env.tip)), "steps": env.steps,
                "ended_nearest_goal": nearest == env.world.colors[env.world.goal],
                "final_distance": distance(env.tip, env.world.goal_position),
                "step_length": float(np.mean([s for s, _ in taken])) if taken else 0.0,
                "towards_goal": float(np.mean([t for _, t in taken])) if taken else 0.0,
            })  # fmt: skip
    return found


def summary(found: list[dict]) -> dict:
    failed = [e["final_distance"] for e in found if not e["success"]]
    nearest = [e for e in found if e["ended_nearest_goal"]]
    succeeded = [e["steps"] for e in found if e["success"]]
    return {
        "episodes": len(found),
        "success": statistics.fmean(e["success"] for e in found),
        "ended_nearest_goal": len(nearest) / len(found),
        "success_when_ended_nearest_goal": statistics.fmean(e["success"] for e in nearest)
        if nearest
        else None,
        "failed_final_distance_median": statistics.median(failed) if failed else None,
        "success_steps_median": statistics.median(succeeded) if succeeded else None,
        "step_length": statistics.fmean(e["step_length"] for e in found),
        "towards_goal": statistics.fmean(e["towards_goal"] for e in found),
    }


def starts(text: str) -> list[int]:
    """`--starts A:B`, parsed as a job's `seeds` are."""
    from cosmos_train.algorithms.policy_rl.schema import seed_list

    try:
        return seed_list(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "exports", nargs="*", type=Path, default=[SHIPPED], help="policy exports (default: the base)"
    )
    parser.add_argument("--episodes", type=int, default=2, help="stochastic episodes per start")
    parser.add_argument(
        "--starts",
        type=starts,
        default=f"{HELD_OUT[0]}:{HELD_OUT[1]}",
        help="reset seeds A:B, B excluded (default: the benchmark's held-out starts)",
    )
    parser.add_argument("--out", type=Path, default=default_out("cosmos3_policy_rl_diagnose", False))
    args = parser.parse_args()
    torch.set_num_threads(1)
    seeds = args.starts
    payload = {"benchmark": "cosmos3_policy_rl_diagnose", "starts": [seeds[0], seeds[-1] + 1], "episodes_per_start": args.episodes,
               "policies": {}}  # fmt: skip
    for export in args.exports:
        payload["policies"][str(export)] = found = summary(episodes(export.resolve(), args.episodes, seeds))
        print(export, {k: round(v, 4) if isinstance(v, float) else v for k, v in found.items()})
    write_payload(args.out, payload)


if __name__ == "__main__":
    main()
