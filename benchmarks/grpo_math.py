"""Learning that counts for language models: GRPO and its variants from a model that our own SFT taught,
scored by greedy exact-match on held-out arithmetic problems.

The base (`benchmarks/grpo_math/base`, 3.4 MB, hash-checked) is a tiny Qwen3 that `cosmos-train sft` taught
two-digit addition from a flawed teacher, who answers in the right format but forgets every carry in 60% of its
answers (`domains.arithmetic.base.build_base`): greedy, it gets about a third of the held-out problems right.
Each variant trains it in full from the same start, on the 7,900 train prompts, for the same number of optimizer
steps, rewarded by `exact_match` on the answer tag; the job's `[eval]` answers the 200 held-out problems greedily
before training and every `--every` steps.

Variants (TRL's losses, our dynamic sampling):
- `grpo`     loss_type "grpo", per-group std scaling (DeepSeekMath);
- `dapo`     loss_type "dapo", clip-higher 0.28, dynamic sampling (zero-spread groups replaced by fresh ones);
- `dr_grpo`  loss_type "dr_grpo", no std scaling (Dr. GRPO);
- `gspo`     sequence-level importance ratios clipped to [1 - 3e-4, 1 + 4e-4] (GSPO);
- `grpo` once more with `[rollout] shared_prompt = false`, for the wall-clock of shared-prompt rollouts.

    python benchmarks/grpo_math.py [--quick] [--seed N] [--seeds 3] [--steps N] [--out FILE] [--rebuild-base]

Writes JSON (`sft`, and `grpo`, `dapo`, `dr_grpo`, `gspo` with their held-out `accuracy` at the budget over seeds,
steps and generated tokens to the target; `shared_prompt` with both wall-clocks) and `<out>.png` (held-out
accuracy against optimizer steps and against generated tokens).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path

from _common import RESULTS, default_out, first_reaching, plot_curves, run_job, write_payload
from domains.arithmetic.base import build_base, check_base, load_problems

SHIPPED = Path(__file__).resolve().parent / "grpo_math" / "base"
VARIANTS = {
    "grpo": 'loss_type = "grpo"\nscale_rewards = "group"\n',
    "dapo": 'loss_type = "dapo"\nepsilon_high = 0.28\n',
    "dr_grpo": 'loss_type = "dr_grpo"\nscale_rewards = "none"\n',
    "gspo": 'loss_type = "grpo"\nimportance_sampling_level = "sequence"\nepsilon = 3e-4\nepsilon_high = 4e-4\n',
}
ROLLOUT = {"dapo": "dynamic_sampling = true\n", "grpo_no_shared_prompt": "shared_prompt = false\n"}
COLORS = {"grpo": "#285ac8", "dapo": "#c83c28", "dr_grpo": "#28a050", "gspo": "#a028a0"}
LEARNING_RATE = 1e-4
PROMPTS_PER_STEP = 8
SAMPLES_PER_PROMPT = 8  # DeepSeekMath's and DAPO's groups are 64 and 16; 8 keeps a CPU step short
STEPS_PER_GENERATION = (
    2  # each rollout feeds two optimizer steps, so the second is off-policy and clipping acts
)


def job(variant: str, base: Path, folder: Path, seed: int, steps: int, every: int, lr: float) -> str:
    """One run's job file. Scaled from the papers: full fine-tuning at lr 1e-4 (the base has 0.9M parameters;
    the papers use 1e-6 on billions; on early-stopped bases 1e-3 collapsed and 1e-5 barely moved them), 8 prompts
    x 8 samples per optimizer step, two steps per rollout, no KL (beta 0, as DAPO, Dr. GRPO and GSPO train),
    temperature 1, completions up to 24 tokens."""
    algorithm = "grpo" if variant == "grpo_no_shared_prompt" else variant
    return f"""\
kind = "grpo"

[model]
name_or_path = "{base}"

[data]
format = "jsonl"
path = "{base / "data" / "train.jsonl"}"

[rewards]
exact_match = {{ weight = 1.0, answer_tag = "answer" }}
format = {{ weight = 0.0, think_tag = "" }}       # logged, not rewarded

[rollout]
{ROLLOUT.get(variant, "")}
[eval]
format = "jsonl"
path = "{base / "data" / "test.jsonl"}"
every = {every}
batch_size = 200

[train]
output_dir = "{folder}"
{VARIANTS[algorithm]}learning_rate = {lr}
lr_scheduler_type = "constant"
max_steps = {steps}
per_device_train_batch_size = {PROMPTS_PER_STEP * SAMPLES_PER_PROMPT}
steps_per_generation = {STEPS_PER_GENERATION}
num_generations = {SAMPLES_PER_PROMPT}
max_completion_length = 24
temperature = 1.0
beta = 0.0
logging_steps = 1
save_steps = {steps}
report_to = "none"
disable_tqdm = true
seed = {seed}
"""


def run(variant: str, base: Path, work: Path, seed: int, steps: int, every: int, lr: float) -> dict:
    """Train one variant (the real CLI, in a child process) and read its evaluations back."""
    folder = work / f"{variant}-seed{seed}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "job.toml").write_text(job(variant, base, folder, seed, steps, every, lr))
    started = time.perf_counter()
    history = run_job("grpo", folder / "job.toml", f"{variant} seed {seed}")
    curve, tokens = [], 0
    for entry in history:
        tokens = entry.get("generated_tokens", tokens)
        if "eval_rewards/exact_match/mean" in entry:
            accuracy = entry["eval_rewards/exact_match/mean"]
            curve.append({"step": entry["step"], "generated_tokens": tokens, "accuracy": accuracy})
    result = {
        "curve": curve,
        "train_seconds": sum(
            e.get("step_time", 0.0) for e in history
        ),  # TRL's, per step: evaluations excluded
        "dropped_groups": sum(e.get("dynamic_sampling/dropped_groups", 0.0) for e in history),
        # The most extra rounds one batch needed to fill with groups with spread (the run stops past 9).
        "most_extra_rounds": max((e.get("dynamic_sampling/extra_rounds", 0.0) for e in history), default=0.0),
    }
    print(
        f"  {variant:22s} seed {seed}: held-out {curve[0]['accuracy']:.3f} -> {curve[-1]['accuracy']:.3f} in "
        f"{curve[-1]['step']} steps, {tokens} generated tokens, {result['train_seconds']:.0f} s training "
        f"({time.perf_counter() - started:.0f} s in all)",
        flush=True,
    )
    return result


def summarise(runs: list[dict], target: float) -> dict:
    """Held-out accuracy at the budget (mean and spread over seeds), steps and tokens to `target`."""
    finals = [run["curve"][-1]["accuracy"] for run in runs]
    return {
        "accuracy": statistics.fmean(finals),
        "accuracy_per_seed": finals,
        "spread": statistics.stdev(finals) if len(finals) > 1 else 0.0,
        "steps": runs[0]["curve"][-1]["step"],
        "steps_to_target": [first_reaching(r["curve"], target, "step", "accuracy") for r in runs],
        "generated_tokens_to_target": [
            first_reaching(r["curve"], target, "generated_tokens", "accuracy") for r in runs
        ],
        "train_seconds": [r["train_seconds"] for r in runs],
        "dropped_groups": [r["dropped_groups"] for r in runs],
        "most_extra_rounds": [r["most_extra_rounds"] for r in runs],
        "curves": [r["curve"] for r in runs],
    }


def resolve_base(rebuild: bool) -> Path:
    """The shipped base, hash-checked; with --rebuild-base, built again from its recorded recipe first."""
    if rebuild:
        recipe = json.loads((SHIPPED / "build.json").read_text())
        build_base(
            SHIPPED,
            load_problems(SHIPPED),
            seed=recipe["seed"],
            sft_problems=recipe["sft_problems"],
            slip=recipe["slip"],
            sft_steps=recipe["sft_steps"],
            learning_rate=recipe["learning_rate"],
            work=RESULTS / "grpo_math_base.work",
        )
    check_base(SHIPPED)
    return SHIPPED


def options(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, with the quick and full runs' defaults filled in."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="1 seed, 20 steps per variant (about 2 min)")
    parser.add_argument("--seed", type=int, default=0, help="the first training seed")
    parser.add_argument("--seeds", type=int, help="training seeds per variant, for the spread (3; quick: 1)")
    parser.add_argument("--steps", type=int, help="optimizer steps per run, the fixed budget (40; quick: 20)")
    parser.add_argument("--every", type=int, help="evaluate every this many steps (2; quick: 4)")
    parser.add_argument("--lr", type=float, default=LEARNING_RATE, help="learning rate of every variant")
    parser.add_argument("--gain", type=float, default=0.3, help="target: the SFT base's accuracy plus this")
    parser.add_argument("--rebuild-base", action="store_true", help="rebuild the SFT base model first")
    parser.add_argument("--base", type=Path, help="another base model folder (as build_base writes it)")
    parser.add_argument(
        "--out",
        type=Path,
        help="the JSON to write (default: results/grpo_math.json for the 3-seed run, results/partial/ otherwise)",
    )
    args = parser.parse_args(argv)
    args.seeds = args.seeds or (1 if args.quick else 3)
    args.steps = args.steps or (20 if args.quick else 40)
    args.every = args.every or (4 if args.quick else 2)
    args.out = (args.out or default_out("grpo_math", published=not args.quick and args.seeds >= 3)).resolve()
    return args


def main() -> None:
    args = options()
    base = args.base or resolve_base(args.rebuild_base)
    work = args.out.with_name(args.out.stem + ".runs")
    shutil.rmtree(work, ignore_errors=True)
    seeds = list(range(args.seed, args.seed + args.seeds))
    runs: dict[str, list] = {name: [] for name in [*VARIANTS, "grpo_no_shared_prompt"]}
    print(f"base {base}; seeds {seeds}; {args.steps} steps per run", flush=True)
    for seed in seeds:  # interleaved: the machine's drift touches every variant alike
        for variant in runs:
            runs[variant].append(run(variant, base, work, seed, args.steps, args.every, args.lr))

    starts = [r["curve"][0]["accuracy"] for variant_runs in runs.values() for r in variant_runs]
    sft = statistics.fmean(starts)
    target = sft + args.gain
    results = {name: summarise(runs[name], target) for name in VARIANTS}
    on, off = results["grpo"]["train_seconds"], [r["train_seconds"] for r in runs["grpo_no_shared_prompt"]]
    plot_curves(
        args.out.with_suffix(".png"),
        {name: results[name]["curves"] for name in VARIANTS},
        COLORS,
        (("step", "optimizer steps"), ("generated_tokens", "generated tokens")),
        ("accuracy", "held-out exact match (greedy)"),
        sft,
        target,
    )
    payload = {
        "seeds": seeds,
        "budget_steps": args.steps,
        "learning_rate": args.lr,
        "target": target,
        "sft": {"accuracy": sft},
        **results,
        "shared_prompt": {
            "on_seconds": on,
            "off_seconds": off,
            "off_over_on": statistics.median(b / a for a, b in zip(on, off, strict=True)),
            "accuracy_off": summarise(runs["grpo_no_shared_prompt"], target)["accuracy"],
        },
    }
    write_payload(args.out, payload)
    print(table(payload))


def table(payload: dict) -> str:
    """The README's table: the SFT base and each variant at the budget, steps and tokens to the target."""

    def listed(values: list, form: str) -> str:
        return ", ".join("-" if v is None else format(v, form) for v in values)

    lines = [
        "| model | held-out accuracy | steps to target | generated tokens to target | training s |",
        "|---|---|---|---|---|",
        f"| SFT base | {payload['sft']['accuracy']:.3f} | | | |",
    ]
    for name in VARIANTS:
        entry = payload[name]
        lines.append(
            f"| {name} | {entry['accuracy']:.3f} ± {entry['spread']:.3f} | {listed(entry['steps_to_target'], 'd')} | "
            f"{listed(entry['generated_tokens_to_target'], 'd')} | {listed(entry['train_seconds'], '.0f')} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
