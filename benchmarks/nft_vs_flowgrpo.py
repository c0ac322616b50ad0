"""DiffusionNFT against FlowGRPO, head to head: the same tiny pipeline, reward, prompts, LoRA and sampling
budget (K samples per prompt, prompts per rollout, sampler steps on the pipeline's grid, no CFG), each with its
reference's own solver and update schedule (NFT: the family's deterministic solver, one update per rollout;
FlowGRPO: its SDE, two updates per rollout), in one run.

Reports, for each algorithm and seed, the rollouts and wall seconds to reach a reward target (the untrained reward
plus `--gain`), interleaving the two algorithms seed by seed; the median ratios FlowGRPO / NFT; the model calls
per rollout sample (transformer forwards in the rollout over its samples); and a reward-curve PNG. One torch
thread.

    python benchmarks/nft_vs_flowgrpo.py [--family sd3] [--rollouts 40] [--seeds 3] [--gain 0.02]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from _common import RESULTS, write_results
from PIL import Image, ImageDraw

REPO = Path(__file__).resolve().parents[1]
PROMPTS = REPO / "examples" / "data" / "prompts" / "colors.txt"
COLORS = {"nft": (200, 60, 40), "flow-grpo": (40, 90, 200)}

SHARED = """
[model]
name_or_path = "{model}"
[lora]
r = 16
alpha = 32
[data]
path = "{prompts}"
[rewards]
brightness = 1.0
[rollout]
samples_per_prompt = 4
sampling_steps = 4
guidance_scale = 1.0
train_batch_size = 8
height = 32
width = 32
max_sequence_length = 16
[train]
output_dir = "{output}"
learning_rate = 1e-2
max_steps = {optimizer_steps}
per_device_train_batch_size = 4
logging_steps = 1
save_strategy = "no"
report_to = "none"
disable_tqdm = true
seed = {seed}
"""
# Each algorithm's own section: the paper's values, with the same KL-free budget on both sides.
OWN = {
    "nft": 'kind = "nft"\n[nft]\nkl_beta = 0.0\n',
    "flow-grpo": 'kind = "flow-grpo"\n[flow_grpo]\nkl_beta = 0.0\ntimestep_fraction = 0.99\n',
}


class Clock:
    """Wall seconds at the end of each optimizer step (a TrainerCallback)."""

    def __init__(self):
        from transformers import TrainerCallback

        clock = self

        class Callback(TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs):
                clock.start = time.perf_counter()

            def on_step_end(self, args, state, control, **kwargs):
                clock.ends.append(time.perf_counter() - clock.start)

        self.start, self.ends, self.callback = 0.0, [], Callback()


UPDATES = {"nft": 1, "flow-grpo": 2}  # optimizer steps per rollout, each reference's


def run(algorithm: str, model: Path, rollouts: int, seed: int, folder: Path) -> dict:
    from cosmos_train.algorithms.common import train_and_save
    from cosmos_train.algorithms.diffusion_rl.trainer import build_diffusion_rl_trainer
    from cosmos_train.jobs import read_job

    job_path = folder / f"{algorithm}-{seed}.toml"
    updates = UPDATES[algorithm]
    text = SHARED.format(
        model=model,
        prompts=PROMPTS,
        output=folder / f"{algorithm}-{seed}",
        optimizer_steps=rollouts * updates,
        seed=seed,
    )
    job_path.write_text(OWN[algorithm] + text)
    job = read_job(job_path)
    assert job.config.rollout.updates_per_rollout == updates
    clock = Clock()
    trainer = build_diffusion_rl_trainer(job, callbacks=[clock.callback])
    rows = [0]  # samples through the transformer, counted by a forward hook

    def count(module, args, kwargs, output):
        latents = args[0] if args else kwargs["hidden_states"]
        rows[0] += latents.shape[0]

    trainer.adapter.transformer.register_forward_hook(count, with_kwargs=True)
    calls_per_sample = []
    rollout = trainer.rollout

    def counted(prompts, metadata, batch):
        before = rows[0]
        result = rollout(prompts, metadata, batch)
        calls_per_sample.append((rows[0] - before) / len(prompts))
        return result

    trainer.rollout = counted
    train_and_save(trainer, job)
    rewards = [entry["reward"] for entry in trainer.state.log_history if "reward" in entry]
    seconds = clock.ends[updates - 1 :: updates]  # at the end of each rollout's last update
    return {"rewards": rewards, "seconds": seconds, "calls_per_sample": statistics.median(calls_per_sample)}


def to_target(result: dict, target: float) -> tuple[int | None, float | None]:
    """The first rollout whose 3-rollout running mean of the reward reaches `target`, and its wall time."""
    rewards = result["rewards"]
    for step in range(3, len(rewards) + 1):
        if statistics.mean(rewards[step - 3 : step]) >= target:
            return step, result["seconds"][step - 1]
    return None, None


def plot(curves: dict[str, list[list[float]]], target: float, path: Path) -> None:
    """Reward per step, one thin line per seed and a thick median, with the target as a grey line."""
    width, height, margin = 640, 400, 50
    values = [v for runs in curves.values() for run in runs for v in run] + [target]
    low, high = min(values), max(values)
    steps = max(len(run) for runs in curves.values() for run in runs)
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)

    def xy(step: int, value: float) -> tuple[float, float]:
        x = margin + (width - 2 * margin) * step / max(steps - 1, 1)
        y = height - margin - (height - 2 * margin) * (value - low) / max(high - low, 1e-9)
        return x, y

    draw.rectangle([margin, margin, width - margin, height - margin], outline="black")
    draw.line([xy(0, target), xy(steps - 1, target)], fill=(150, 150, 150), width=1)
    for name, runs in curves.items():
        for run in runs:
            draw.line([xy(i, v) for i, v in enumerate(run)], fill=COLORS[name] + (0,), width=1)
        median_curve = [statistics.median(run[i] for run in runs if i < len(run)) for i in range(steps)]
        draw.line([xy(i, v) for i, v in enumerate(median_curve)], fill=COLORS[name], width=3)
    draw.text((margin, 10), "reward per step (thick: median of seeds); grey: target", fill="black")
    for row, name in enumerate(curves):
        draw.text((width - 170, 12 + 14 * row), name, fill=COLORS[name])
    draw.text((margin, height - margin + 8), f"step 1 .. {steps}", fill="black")
    draw.text((5, margin), f"{high:.3f}", fill="black")
    draw.text((5, height - margin - 10), f"{low:.3f}", fill="black")
    image.save(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="sd3")
    parser.add_argument("--rollouts", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--gain", type=float, default=0.02, help="target = untrained reward + gain")
    options = parser.parse_args()
    torch.set_num_threads(1)
    sys.path.insert(0, str(REPO / "packages" / "cosmos-train" / "src"))
    from cosmos_train.tiny_models.pipelines import save_tiny_pipeline

    results: dict[str, list[dict]] = {"nft": [], "flow-grpo": []}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        model = save_tiny_pipeline(options.family, folder / "pipeline")
        for seed in range(options.seeds):  # interleaved: the machine's load hits both sides alike
            for algorithm in results:
                results[algorithm].append(run(algorithm, model, options.rollouts, seed, folder))
                print(algorithm, seed, [round(r, 4) for r in results[algorithm][-1]["rewards"]], flush=True)

    # The untrained reward: both algorithms' first rollout samples the base model with the same seed.
    start = statistics.mean(r["rewards"][0] for runs in results.values() for r in runs)
    target = start + options.gain
    summary = {}
    for algorithm, runs in results.items():
        reached = [to_target(run, target) for run in runs]
        summary[algorithm] = {
            "rollouts_to_target": [step for step, _ in reached],
            "seconds_to_target": [round(s, 2) if s is not None else None for _, s in reached],
            "seconds_per_rollout": statistics.median(
                run["seconds"][-1] / len(run["seconds"]) for run in runs
            ),
            "model_calls_per_rollout_sample": statistics.median(run["calls_per_sample"] for run in runs),
            "final_reward": statistics.median(statistics.mean(run["rewards"][-3:]) for run in runs),
        }

    def ratio(key: str) -> float | None:
        pairs = [
            (g, n)
            for g, n in zip(summary["flow-grpo"][key], summary["nft"][key], strict=True)
            if g is not None and n is not None
        ]
        return statistics.median(g / n for g, n in pairs) if pairs else None

    png = RESULTS / "nft_vs_flowgrpo.png"
    RESULTS.mkdir(parents=True, exist_ok=True)
    plot({name: [run["rewards"] for run in runs] for name, runs in results.items()}, target, png)
    for algorithm, figures in summary.items():
        print(algorithm, figures)
    print(
        f"median FlowGRPO/NFT: rollouts {ratio('rollouts_to_target')}, seconds {ratio('seconds_to_target')}"
    )
    write_results(
        "nft_vs_flowgrpo",
        {
            "family": options.family,
            "reward": "brightness",
            "budget": {
                "samples_per_prompt": 4,
                "prompts_per_rollout": 4,
                "sampling_steps": 4,
                "cfg": 1.0,
                "lora_r": 16,
            },
            "rollouts": options.rollouts,
            "updates_per_rollout": UPDATES,
            "seeds": options.seeds,
            "untrained_reward": start,
            "target": target,
            "algorithms": summary,
            "curves": {name: [run["rewards"] for run in runs] for name, runs in results.items()},
            "median_ratio_flowgrpo_over_nft": {
                "rollouts_to_target": ratio("rollouts_to_target"),
                "seconds_to_target": ratio("seconds_to_target"),
            },
            "unreached_is_none": True,
            "plot": str(png.relative_to(REPO)),
        },
    )


if __name__ == "__main__":
    main()
