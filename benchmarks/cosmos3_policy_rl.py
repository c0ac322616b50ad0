"""Closed-loop RL of a Cosmos3 policy (`cosmos-train policy-rl`): can DiffusionNFT, FlowGRPO and DDRL improve a policy
that a flawed expert taught, on the outcomes of its own episodes in Reach2D (`domains/reach2d`)? README, "Closed-loop RL
of a Cosmos3 policy", has the table.

The base (`benchmarks/cosmos3_policy_rl/base`, hash-checked; `--build-base` rebuilds it) is the SFT policy of
`cosmos-train action-sft` on 256 demonstrations of a *distracted expert*: red and green targets, every task "reach
the red target", and in `expert.DISTRACTED` (0.4) of its demonstrations, drawn per episode, the expert goes to the
green one. The choice is a coin flip the layout cannot predict, so the policy learns both targets as modes of its
action distribution, and a start's K episodes disagree: a systematic mistake that a success reward can tell apart.
(On 64 demonstrations the policy made the choice a function of the layout instead, and its episodes of one start
all went the same way: README.) Its transformer starts from the seed's untrained one, its autoencoder is
`cosmos3_policy`'s shipped one. `--flaw slow` uses (and `--build-base` builds, into results/partial/) the base of a
*slow* expert instead (`expert.SLOW_PACE`: straight at the red target at 0.6 of the expert's speed), `--flaw coin_flip`
that of a *coin-flip* expert (`expert.COIN_FLIP`: the distracted expert at half its demonstrations).

Each algorithm trains the base in full, from the same start, on training start states (reset seeds the SFT data
never used), K episodes per start, each episode scored by success plus a dense progress term (`REWARD`); the same
budget of optimizer steps (so of rollouts), with held-out starts evaluated along the way (`[eval]`: one
deterministic episode each). Reported: held-out success at the budget (mean and spread over seeds), and the
environment steps and seconds to reach the target (base + 0.2). DDRL's data term reads the demonstrations the base
learnt from (`demonstrations`: the distracted expert's, so its data pulls towards the flaw as well as the base).

    python benchmarks/cosmos3_policy_rl.py [--quick] [--seed N] [--seeds 3] [--steps N] [--flaw F] [--out FILE]
        [--algorithms nft,flow_grpo,ddrl]
    python benchmarks/cosmos3_policy_rl.py [--flaw F] --build-base     # the flawed expert's SFT policy (~20 min)
    python benchmarks/cosmos3_policy_rl.py --combine A.json B.json [--out FILE]

Writes JSON (`sft`: the base's held-out `success`; `nft`, `flow_grpo`, `ddrl`: `success` at the budget, its `_spread` and
`_per_seed`, `by_step` (mean and spread at every evaluated step), `env_steps_to_target` and `seconds_to_target`,
every run's curve) and a PNG of the curves (against optimizer steps, environment steps and seconds).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import time
from pathlib import Path

from _common import RESULTS, default_out, first_reaching, plot_curves, run_job, write_payload
from domains.reach2d.expert import COIN_FLIP, DISTRACTED, SLOW_PACE

SHIPPED = Path(__file__).resolve().parent / "cosmos3_policy_rl" / "base"
SIZE, CHUNK = 128, 8
# The flawed experts a base can learn from (`--flaw`): the environment's targets and goal, the demonstrations' flaw
# (`domains.reach2d.dataset.episode`'s arguments) and their number. `distracted` is the shipped base's; a `slow`
# base is built by `--flaw slow --build-base` into results/partial/ (not shipped).
FLAWS = {
    "distracted": {
        "env": {"colors": ["red", "green"], "goal": "red"},
        "data": {"distracted": DISTRACTED},
        "demonstrations": 256,
    },
    "coin_flip": {
        "env": {"colors": ["red", "green"], "goal": "red"},
        "data": {"distracted": COIN_FLIP},
        "demonstrations": 256,
    },
    "slow": {"env": {"colors": ["red"]}, "data": {"pace": SLOW_PACE}, "demonstrations": 64},
}
SHIPPED_FLAW = "distracted"
EXECUTE = CHUNK // 2  # actions run per policy call before it plans again (as cosmos3_policy evaluates)
TRAIN_STARTS = (10_000_000, 10_000_512)  # reset seeds of the training starts: not among the SFT data's
HELD_OUT = (20_000_000, 20_000_048)  # the held-out starts
GAIN = 0.2  # the target: the base's held-out success + this
ALGORITHMS = {"nft": "nft", "flow_grpo": "flow-grpo", "ddrl": "ddrl"}
# The episode's score: success, plus a dense term (how much of the way to the named target it closed), so that K
# episodes of one start that all fail (or all succeed) still rank.
REWARD = {"success_weight": 1.0, "progress_weight": 0.5}
# Start states per rollout, episodes per start (K): 64 episodes a rollout, 128 of its ~340 policy calls trained. On 16
# episodes (4 x 4, 32 calls, this benchmark's earlier recipe) one rollout's gradient is mostly noise (pairwise cosine
# between rollouts' about 0.06): NFT needed a KL to the base to hold (without it seed 1 collapsed), and with it
# plateaued near +0.1 on fresh starts (README).
RECIPE = (16, 4)
TRAIN_SAMPLES = 128
BUDGET = 36  # optimizer steps (= rollouts) per run: about 43,000 environment steps
EVERY = 4  # held-out evaluation every this many steps
# Per algorithm, its section's values and the learning rate. Full fine-tuning at the references' 3e-4 (a LoRA's rate)
# wrecks the policy within a few steps (FlowGRPO: held-out success 0.44 -> 0.31 in 4). NFT at 5e-5 on 64-episode
# rollouts without a KL climbs on every seed to 36 steps (on 144 fresh starts, 20,001,000 on, where this setting was
# chosen: 0.37 -> 0.64 / 0.67 / 0.65); with cosmos-rl's KL (`kl_beta = 1`) it held at 0.44 to 0.49 to 48 steps, and
# at 1.5e-4 it wandered (README). NFT trains 3 of the 10 noise levels (a third of the references' time per step).
# Advantages are divided by each start's own std (`global_std = false`; NFT seed 0 at step 8: 0.60, against 0.42 by
# the rollout's std on 16-episode rollouts). The EMA (what [eval] scores) is updated every step for both, so that both
# curves show the current weights (FlowGRPO's reference: every 8).
FLOW_GRPO_FAST = {"clip_range": 0.2, "sde_window": 2, "noise_level": 0.7, "global_std": False, "ema_every": 1}
SETTINGS = {
    "nft": {
        "section": {
            "beta": 1.0,
            "kl_beta": 0.0,
            "timestep_fraction": 0.3,
            "decay_type": 1,
            "global_std": False,
        },
        "lr": 5e-5,
    },
    # FlowGRPO-Fast without a KL, a start's K episodes sharing each call's initial noise (`same_latent`), so that
    # they differ by the window's SDE noise alone, the part the log-probs credit. On the 144 fresh starts (seed 0, 24
    # steps): 0.37 -> 0.47, against 0.42 with independent noise and 0.49 at 1.5e-4 (after a fall to 0.24 at 12).
    "flow_grpo": {"section": {"kl_beta": 0.0, "same_latent": True, **FLOW_GRPO_FAST}, "lr": 5e-5},
    # DDRL: FlowGRPO's setting above with the data term on the base's own SFT demonstrations (the distracted
    # expert's, `demonstrations`), 8 windows a micro-batch (as many as its policy samples). data_beta: cosmos-rl's;
    # 0.05 (the clipped term's gradient norm at the base) did no better on the earlier recipe (README).
    "ddrl": {
        "section": {"data_beta": 0.01, "data_batch_size": 8, "same_latent": True, **FLOW_GRPO_FAST},
        "lr": 5e-5,
    },
}


def _toml_lines(values: dict) -> str:
    return "\n".join(f"{k} = {json.dumps(v)}" for k, v in values.items())


def job(algorithm: str, base: Path, out: Path, steps: int, seed: int, starts: int, samples: int, every: int,
        held_out: tuple[int, int], flaw: str = SHIPPED_FLAW, on_start: bool = True,
        train_samples: int = TRAIN_SAMPLES, overrides: dict | None = None) -> str:  # fmt: skip
    """The job's TOML; `overrides` replaces keys of the algorithm's section in SETTINGS."""
    settings = SETTINGS[algorithm]
    env = ", ".join(f"{k} = {json.dumps(v)}" for k, v in {"size": SIZE, **FLAWS[flaw]["env"]}.items())
    section, reward = _toml_lines({**settings["section"], **(overrides or {})}), _toml_lines(REWARD)
    data = ""
    if algorithm == "ddrl":  # its data term: the demonstrations the base learnt from, windows as it saw them
        folder, episodes = demonstrations(flaw)
        data = f"""[data]
path = "{folder}"
cameras = ["observation.images.top"]
action_columns = ["action"]
state_columns = ["observation.state"]
episodes = {json.dumps(episodes)}
stride = 2
cache = true
"""
    return f"""kind = "policy-rl"
[model]
name_or_path = "{base}"
[env]
factory = "domains.reach2d.env:Reach2DEnv"
kwargs = {{ {env} }}
execute = {EXECUTE}
progress_key = "distance"
vectorization = "sync"  # 64 copies on 2 cores: one process steps them (Reach2D steps in about 1.5 ms) rather than 64
[rollout]
seeds = "{TRAIN_STARTS[0]}:{TRAIN_STARTS[1]}"
samples_per_start = {samples}
sampling_steps = 10
train_samples = {train_samples}
train_batch_size = 8
[reward]
{reward}
[rl]
algorithm = "{ALGORITHMS[algorithm]}"
[{algorithm}]
{section}
{data}[eval]
seeds = "{held_out[0]}:{held_out[1]}"
every = {every}
on_start = {json.dumps(on_start)}
[train]
output_dir = "{out}"
max_steps = {steps}
per_device_train_batch_size = {starts}
learning_rate = {settings["lr"]}
logging_steps = 1
save_steps = {steps}
report_to = "none"
seed = {seed}
"""


def base_folder(flaw: str) -> Path:
    return SHIPPED if flaw == SHIPPED_FLAW else RESULTS / "partial" / f"cosmos3_policy_rl_base_{flaw}"


def build_base(folder: Path, flaw: str = SHIPPED_FLAW, seed: int = 0, steps: int = 3000) -> Path:
    """The flawed expert's SFT policy: `cosmos3_policy`'s recipe (its job, its shipped autoencoder) on the `flaw`
    expert's demonstrations (FLAWS)."""
    import cosmos3_policy as sft
    from diffusers import Cosmos3OmniPipeline
    from domains.reach2d import write_dataset

    data, demonstrations = FLAWS[flaw]["data"], FLAWS[flaw]["demonstrations"]
    # The dataset and the SFT run (not tracked).
    work = RESULTS / "partial" / f"cosmos3_policy_rl_build_{flaw}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    dataset = write_dataset(work / "reach2d", seed=seed, train_count=demonstrations, held_out_count=16, size=SIZE,
                            **FLAWS[flaw]["env"], **data)  # fmt: skip
    split = json.loads((dataset / "split.json").read_text())
    pipe = Cosmos3OmniPipeline.from_pretrained(sft.SHIPPED, enable_safety_checker=False)
    pipe.register_modules(transformer=sft.untrained_transformer(seed))
    pipe.save_pretrained(work / "model")
    (work / "policy").mkdir()
    (work / "policy" / "job.toml").write_text(sft.job("policy", work / "model", dataset, split["train"],
                                                      work / "policy", steps, seed))  # fmt: skip
    started = time.perf_counter()
    run_job("action-sft", work / "policy" / "job.toml", "the flawed expert's policy")
    record = {"seed": seed, "steps": steps, "flaw": flaw, **data, "train_episodes": demonstrations,
              "train_seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
    return ship_base(work / "policy" / "safetensors" / f"step_{steps}", folder, record)


def demonstrations(flaw: str = SHIPPED_FLAW) -> tuple[Path, list[int]]:
    """DDRL's data: the demonstrations the base learnt from (`build_base`'s dataset, written again from the base's
    record, its seed and count, into results/partial/ when missing: about 4 minutes), and their episode indexes."""
    record = check_base(base_folder(flaw))
    folder = RESULTS / "partial" / f"cosmos3_policy_rl_demonstrations_{flaw}"
    if not (folder / "split.json").is_file():
        from domains.reach2d import write_dataset

        building = folder.with_name(folder.name + ".building")
        shutil.rmtree(building, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)
        write_dataset(building, seed=record["seed"], train_count=record["train_episodes"], held_out_count=16,
                      size=SIZE, **FLAWS[flaw]["env"], **FLAWS[flaw]["data"])  # fmt: skip
        building.rename(folder)  # whole or absent: a run never reads half a dataset
    return folder, json.loads((folder / "split.json").read_text())["train"]


def ship_base(export: Path, folder: Path, record: dict) -> Path:
    """Copy a policy export to `folder` with `record` and its weights' SHA-256 sums (`check_base` reads them)."""
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(export, folder)
    weights = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.safetensors"))
    record["sha256"] = {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in weights}
    (folder / "benchmark_record.json").write_text(json.dumps(record, indent=1) + "\n")
    return folder


def check_base(folder: Path) -> dict:
    record = json.loads((folder / "benchmark_record.json").read_text())
    for name, digest in record["sha256"].items():
        if hashlib.sha256((folder / name).read_bytes()).hexdigest() != digest:
            raise SystemExit(f"{folder / name} is not the base the figures were measured on (--build-base)")
    return record


def run(algorithm: str, seed: int, args) -> dict:
    """One algorithm at one seed: its job trained by the real CLI; its held-out curve."""
    folder = args.out.with_name(args.out.stem + ".runs") / f"{algorithm}-seed{seed}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "job.toml").write_text(
        job(
            algorithm,
            base_folder(args.flaw),
            folder,  # the job's output beside it, where run_job reads its checkpoint
            args.steps,
            seed,
            args.starts,
            args.samples,
            args.every,
            args.held_out,
            args.flaw,
            train_samples=args.train_samples,
        )
    )
    started = time.perf_counter()
    history = run_job("policy-rl", folder / "job.toml", f"{algorithm} seed {seed}")
    seconds = time.perf_counter() - started
    curve = json.loads((folder / "eval.json").read_text())
    train = [e for e in history if "reward" in e]
    print(
        f"  {algorithm} seed {seed}: success {curve[0]['success']:.3f} -> {curve[-1]['success']:.3f} in {seconds:.0f} s",
        flush=True,
    )
    return {"algorithm": algorithm, "seed": seed, "seconds": round(seconds, 1), "curve": curve,
            "train": [{k: e[k] for k in ("step", "reward", "success", "episode_length", "env_steps") if k in e} for e in train]}  # fmt: skip


def summary(runs: list[dict], steps: int) -> dict:
    base = statistics.fmean(run["curve"][0]["success"] for run in runs)
    payload: dict = {"sft": {"success": base}, "target": base + GAIN, "steps": steps, "settings": SETTINGS,
                     "runs": runs}  # fmt: skip
    for algorithm in ALGORITHMS:
        mine = [run for run in runs if run["algorithm"] == algorithm]
        if not mine:
            continue
        finals = [run["curve"][-1]["success"] for run in mine]
        gains = [run["curve"][-1]["success"] - run["curve"][0]["success"] for run in mine]
        reach = [first_reaching(run["curve"], base + GAIN, "train_env_steps", "success") for run in mine]
        seconds = [first_reaching(run["curve"], base + GAIN, "train_seconds", "success") for run in mine]
        payload[algorithm] = {
            "success": statistics.fmean(finals),
            "success_spread": statistics.stdev(finals) if len(finals) > 1 else 0.0,
            "success_per_seed": finals,
            "gain": statistics.fmean(gains),
            "gain_spread": statistics.stdev(gains) if len(gains) > 1 else 0.0,
            "by_step": by_step(mine),
            "env_steps_to_target": reach,
            "seconds_to_target": seconds,
            "seconds": [run["seconds"] for run in mine],
        }
    return payload


def by_step(runs: list[dict]) -> list[dict]:
    """Held-out success at every evaluated step, over the seeds: a gain before the budget (the learning test's)."""
    per_step: dict[int, list[float]] = {}
    for run in runs:
        for point in run["curve"]:
            per_step.setdefault(point["step"], []).append(point["success"])
    return [{"step": step, "success": statistics.fmean(values), "seeds": len(values),
             "success_spread": statistics.stdev(values) if len(values) > 1 else 0.0}
            for step, values in sorted(per_step.items())]  # fmt: skip


def main() -> None:
    args = options()
    if args.build_base:
        print(f"built {build_base(base_folder(args.flaw), args.flaw)}")
        return
    if args.combine:
        runs = [run for path in args.combine for run in json.loads(path.read_text())["runs"]]
    else:
        check_base(base_folder(args.flaw))
        runs = [run(algorithm, seed, args) for seed in range(args.seed, args.seed + args.seeds)
                for algorithm in args.algorithms]  # fmt: skip
    payload = summary(runs, args.steps)
    write_payload(args.out, payload)
    curves = {name: [run["curve"] for run in runs if run["algorithm"] == name] for name in ALGORITHMS}
    plot_curves(args.out.with_suffix(".png"), {k: v for k, v in curves.items() if v},
                {"nft": "#c83c28", "flow_grpo": "#2860c8", "ddrl": "#2a9d5c"},
                (("step", "optimizer step"), ("train_env_steps", "training environment steps"),
                 ("train_seconds", "training seconds")),
                ("success", "held-out closed-loop success"), payload["sft"]["success"], payload["target"])  # fmt: skip
    print(table(payload))


def table(payload: dict) -> str:
    lines = ["| policy | held-out success | gain | env steps to target |", "|---|---|---|---|",
             f"| SFT (flawed expert) | {payload['sft']['success']:.3f} | | |"]  # fmt: skip
    for algorithm in ALGORITHMS:
        if algorithm in payload:
            part = payload[algorithm]
            lines.append(f"| {algorithm} | {part['success']:.3f} ± {part['success_spread']:.3f} | "
                         f"{part['gain']:+.3f} ± {part['gain_spread']:.3f} | {part['env_steps_to_target']} |")  # fmt: skip
    return "\n".join(lines)


def options(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 steps, few starts")
    parser.add_argument("--seed", type=int, default=0, help="the first training seed")
    parser.add_argument("--seeds", type=int, help="how many seeds from --seed (default 3; quick: 1)")
    parser.add_argument(
        "--steps", type=int, help=f"optimizer steps per run, the fixed budget (default {BUDGET}; quick: 2)"
    )
    parser.add_argument(
        "--algorithms", default=",".join(ALGORITHMS), help=f"comma-separated: {', '.join(ALGORITHMS)}"
    )
    parser.add_argument(
        "--build-base", action="store_true", help="rebuild the --flaw's base (the flawed expert's SFT policy)"
    )
    parser.add_argument(
        "--flaw", choices=sorted(FLAWS), default=SHIPPED_FLAW,
        help=f"the flawed expert: {SHIPPED_FLAW} (the shipped base) or another (built by --build-base, not shipped)",
    )  # fmt: skip
    parser.add_argument(
        "--combine", type=Path, nargs="+", metavar="JSON", help="no training: one report from runs apart"
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="the JSON (default: results/cosmos3_policy_rl.json for 3 seeds, else partial/)",
    )
    args = parser.parse_args(argv)
    args.seeds = args.seeds or (1 if args.quick else 3)
    args.steps = args.steps or (2 if args.quick else BUDGET)
    args.algorithms = [a for a in args.algorithms.split(",") if a]
    unknown = [a for a in args.algorithms if a not in ALGORITHMS]
    if unknown:
        parser.error(f"--algorithms: unknown {unknown}; known: {', '.join(ALGORITHMS)}")
    args.starts, args.samples = (2, 4) if args.quick else RECIPE
    args.train_samples = 16 if args.quick else TRAIN_SAMPLES
    args.every = 1 if args.quick else EVERY
    args.held_out = (HELD_OUT[0], HELD_OUT[0] + 8) if args.quick else HELD_OUT
    published = bool(args.combine) or (
        not args.quick and args.seeds >= 3 and len(args.algorithms) == len(ALGORITHMS)
    )
    name = "cosmos3_policy_rl" + ("" if args.flaw == SHIPPED_FLAW else f"_{args.flaw}")
    args.out = (args.out or default_out(name, published=published)).resolve()
    return args


if __name__ == "__main__":
    main()
