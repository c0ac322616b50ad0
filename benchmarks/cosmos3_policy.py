"""Cosmos3 action post-training on a procedural robot domain (Reach2D, `domains/reach2d`): does `action-sft` teach a
small Cosmos3 a policy, forward dynamics and inverse dynamics from a LeRobot dataset?

    python benchmarks/cosmos3_policy.py [--quick] [--seed N] [--seeds K] [--out FILE] [--ship]
    python benchmarks/cosmos3_policy.py --combine A.json B.json C.json      # seeds run apart, one report

Per seed:
1. Reach2D episodes (seeded: the scripted expert reaching the red target) are written as a LeRobot v3.0 dataset,
   with disjoint held-out episodes.
2. A small Cosmos3 with action heads is built (seeded; `domain_sizes`); its VAE is first trained as an autoencoder on
   the domain's windows and its latent statistics measured on them (a random tiny VAE's latents barely move with the
   scene, and its decoder inverts nothing).
3. Each mode trains with the real CLI (`cosmos-train action-sft`) from that model; the exports are evaluated:
   - policy: held-out open-loop action error of the chunk it samples, against the untrained model and against
     repeating the last action; closed-loop success in the gymnasium environment on the held-out episodes' starts,
     against the untrained model;
   - forward dynamics: the future frames it generates from the first frame and the true actions, against the true
     frames, and against repeating the first frame;
   - inverse dynamics: the actions it samples from the true frames, against the true ones, and against the mean
     action.

Writes JSON (`untrained` and `policy`: closed-loop `success` and held-out `action_error`; `forward_dynamics`:
`frame_error`, `baseline_frame_error`; `inverse_dynamics`: `action_error`, `baseline_action_error`; each the mean
over seeds, with `_spread` and `_per_seed`; `runs`: every seed's record) and a PNG. `--seed` changes the domain's
episodes, the model's initialisation and the evaluation's start states. 3 seeds or more (or `--combine`) write
`benchmarks/results/cosmos3_policy.json`; fewer, or `--quick`, write under `results/partial/`. `--ship` copies the
first seed's policy to `benchmarks/cosmos3_policy/policy/`, which `tests/cosmos_train/test_cosmos3_policy_learning.py`
runs in closed loop.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from _common import default_out, run_job, write_payload

CAMERA, STATE, ACTION = "observation.images.top", "observation.state", "action"
SHIPPED = Path(__file__).resolve().parent / "cosmos3_policy" / "policy"  # seed 0's policy, for the test
DOMAIN = "pusht"  # a Cosmos3 domain whose width (2) upstream knows: Reach2D's actions are 2-D velocities
CHUNK = 8
CURVE_POINTS = 3  # policy exports evaluated along training (and the untrained model: step 0)
SIZE = 128
COLORS = ("red",)


def domain_sizes():
    """The transformer's sizes: TINY's layout, wider and deeper, with rotary frequencies that tell positions in a
    4 x 4 grid of tokens apart (TINY's head gives the width axis 0.02 rad per position at Cosmos3's theta: a model
    blind to where the target is; measured, its policy never beat the mean action). Real Cosmos3's 128-wide heads
    turn 0.6-0.8 rad per position; head_dim 32 at theta 1000 turns 0.65 and 0.42 on height and width."""
    from transformers_cosmos3.testing import Sizes

    return Sizes(hidden=128, head_dim=32, heads=4, kv_heads=2, layers=4, intermediate=384,
                 mrope_section=(6, 5, 5), rope_theta=1000.0)  # fmt: skip


def untrained_transformer(seed: int):
    """The benchmark's untrained transformer for `seed` (as `domain_model` builds it)."""
    from diffusers_cosmos3.testing import build_tokenizer, build_transformer

    return build_transformer(build_tokenizer(), action=True, seed=seed, sizes=domain_sizes())


def domain_model(folder: Path, dataset: Path, seed: int, vae_steps: int) -> Path:
    """The tiny Cosmos3 with action heads, its VAE first trained as an autoencoder on the domain's training windows (a
    random tiny VAE barely moves its latents with the scene, and its decoder inverts nothing, so neither frames nor
    actions could be learned through it; one trained on single frames only cannot reconstruct a moving window), then
    its latent mean and std measured on the windows, as a real VAE's `latents_mean` / `latents_std` are measured on
    its data."""
    from cosmos_train.data.lerobot import ActionSpec, LeRobotFolder
    from diffusers_cosmos3.actions import ActionSettings, conditioning_latents
    from diffusers_cosmos3.testing import build_pipeline

    pipe = build_pipeline(action=True, seed=seed, sizes=domain_sizes())
    torch.manual_seed(seed)
    data, spec = (
        LeRobotFolder(dataset),
        ActionSpec(cameras=(CAMERA,), action_columns=(ACTION,), chunk_size=CHUNK),
    )
    split = json.loads((dataset / "split.json").read_text())
    clips = np.stack(
        [data.read_window(spec, e, s).frames for e, s in data.windows(spec, split["train"], stride=4)]
    )
    clips = torch.from_numpy(clips).permute(0, 4, 1, 2, 3).float() / 127.5 - 1  # [N, 3, T, H, W] in [-1, 1]
    vae = pipe.vae.train()
    optimizer = torch.optim.AdamW(vae.parameters(), lr=2e-3)
    # Reconstruction with a light KL, of a true window and of a first frame held still (what a policy's and forward
    # dynamics' conditioning encodes).
    for _ in range(vae_steps):
        batch = clips[torch.randint(len(clips), (2,))]
        batch[1] = batch[1, :, :1]
        posterior = vae.encode(batch).latent_dist
        loss = ((vae.decode(posterior.sample()).sample - batch) ** 2).mean() + 1e-6 * posterior.kl().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    vae.eval().requires_grad_(False)
    print(f"  autoencoder: reconstruction error {loss.item():.4f} after {vae_steps} steps", flush=True)
    settings = ActionSettings("policy", CHUNK, DOMAIN, 2, data.fps, resolution_tier=256)
    with torch.no_grad():
        latents = torch.stack(
            [
                conditioning_latents(pipe, data.read_window(spec, e, 0).frames, settings)[0]
                for e in split["train"]
            ]
        )
    pipe.vae.register_to_config(
        latents_mean=latents.mean(dim=(0, 2, 3, 4)).tolist(),
        latents_std=latents.std(dim=(0, 2, 3, 4)).tolist(),
    )
    pipe.save_pretrained(folder)
    return folder


def job(mode: str, model: Path, dataset: Path, episodes: list[int], out: Path, steps: int, seed: int) -> str:
    """One mode's job: full fine-tuning from the calibrated model, 8 windows a step, the state row for the policy."""
    state = mode == "policy"
    return f"""kind = "action-sft"
[model]
name_or_path = "{model}"
[data]
path = "{dataset}"
cameras = ["{CAMERA}"]
action_columns = ["{ACTION}"]
state_columns = {json.dumps([STATE] if state else [])}
episodes = {json.dumps(episodes)}
stride = 2
cache = true
[action]
mode = "{mode}"
chunk_size = {CHUNK}
domain = "{DOMAIN}"
use_state = {str(state).lower()}
resolution_tier = 256
action_heads = "fresh"
caption_dropout = 0.0
[train]
output_dir = "{out}"
max_steps = {steps}
per_device_train_batch_size = 8
learning_rate = 1e-3
max_grad_norm = 1000.0
logging_steps = 25
save_steps = {steps // CURVE_POINTS if state else steps}
report_to = "none"
seed = {seed}
"""


def main() -> None:
    args = options()
    if args.combine:
        runs = [run for path in args.combine for run in json.loads(path.read_text())["runs"]]
        seeds = [run["seed"] for run in runs]
        if len(set(seeds)) != len(seeds):
            raise SystemExit(f"seeds {seeds}: a seed appears in more than one file")
    else:
        runs = [run_seed(seed, args) for seed in range(args.seed, args.seed + args.seeds)]
    payload = summary(runs)
    write_payload(args.out, payload)
    plot(args.out.with_suffix(".png"), payload)
    print(table(payload))
    if args.ship:
        work = args.out.with_name(args.out.stem + ".runs") / f"seed{runs[0]['seed']}"
        ship(work / "policy" / "safetensors" / f"step_{runs[0]['steps']}", runs[0])


def run_seed(seed: int, args) -> dict:
    """One seed: its domain, its model, the three modes trained and evaluated."""
    from domains.reach2d import write_dataset

    work = args.out.with_name(args.out.stem + ".runs") / f"seed{seed}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    print(f"seed {seed}:", flush=True)
    dataset = write_dataset(
        work / "reach2d", seed=seed, train_count=args.train_episodes, held_out_count=args.held_out_episodes,
        size=SIZE, colors=COLORS,
    )  # fmt: skip
    split = json.loads((dataset / "split.json").read_text())
    started = time.perf_counter()
    model = domain_model(work / "model", dataset, seed, args.vae_steps)
    payload: dict = {"seed": seed, "steps": args.steps, "chunk_size": CHUNK, "size": SIZE}
    payload["train_seconds"] = {"autoencoder": round(time.perf_counter() - started, 1)}
    payload["episodes"] = {
        "train_episodes": args.train_episodes,
        "held_out_episodes": args.held_out_episodes,
        "closed_loop_episodes": args.closed_loop_episodes,
    }
    exports = {}
    for mode in ("policy", "forward_dynamics", "inverse_dynamics"):
        folder = work / mode
        folder.mkdir()
        steps = args.steps if mode == "policy" else args.dynamics_steps
        (folder / "job.toml").write_text(job(mode, model, dataset, split["train"], folder, steps, seed))
        started = time.perf_counter()
        history = run_job("action-sft", folder / "job.toml", mode)
        exports[mode] = folder / "safetensors"
        payload.setdefault("train_seconds", {})[mode] = round(time.perf_counter() - started, 1)
        payload.setdefault("losses", {})[mode] = [e["loss"] for e in history if "loss" in e]
        print(f"  {mode}: trained in {payload['train_seconds'][mode]:.0f} s", flush=True)
    payload |= evaluate(exports, model, dataset, split, args)
    return payload


# What `summary` averages over seeds: (section, key).
FIGURES = (
    ("untrained", "success"), ("untrained", "action_error"),
    ("policy", "success"), ("policy", "action_error"), ("policy", "copy_last_action_error"),
    ("forward_dynamics", "frame_error"), ("forward_dynamics", "baseline_frame_error"),
    ("forward_dynamics", "autoencoder_floor"), ("forward_dynamics", "raw_repeat_first_error"),
    ("forward_dynamics", "moving_frame_error"), ("forward_dynamics", "baseline_moving_frame_error"),
    ("inverse_dynamics", "action_error"), ("inverse_dynamics", "baseline_action_error"),
)  # fmt: skip


def summary(runs: list[dict]) -> dict:
    """Each figure's mean over seeds, with its spread (the sample standard deviation; 0 for one seed) and each
    seed's value; the closed-loop gain (policy - untrained success) the same way; every seed's full record."""
    payload: dict = {"seeds": [run["seed"] for run in runs]}
    for section, key in FIGURES:
        values = [run[section][key] for run in runs]
        payload.setdefault(section, {})[key] = statistics.fmean(values)
        payload[section][f"{key}_spread"] = statistics.stdev(values) if len(values) > 1 else 0.0
        payload[section][f"{key}_per_seed"] = values
    gains = [run["policy"]["success"] - run["untrained"]["success"] for run in runs]
    payload["success_gain"] = statistics.fmean(gains)
    payload["success_gain_spread"] = statistics.stdev(gains) if len(gains) > 1 else 0.0
    payload["runs"] = runs
    return payload


def table(payload: dict) -> str:
    """The README's table: each figure as mean ± spread over the seeds."""

    def cell(section: str, key: str) -> str:
        return f"{payload[section][key]:.3f} ± {payload[section][key + '_spread']:.3f}"

    return "\n".join(
        [
            f"seeds {payload['seeds']}",
            "| | closed-loop success | held-out action error (MSE) | baseline |",
            "|---|---|---|---|",
            f"| untrained | {cell('untrained', 'success')} | {cell('untrained', 'action_error')} | |",
            f"| policy | {cell('policy', 'success')} | {cell('policy', 'action_error')} | copy last action "
            f"{cell('policy', 'copy_last_action_error')} |",
            f"| inverse dynamics | | {cell('inverse_dynamics', 'action_error')} | mean action "
            f"{cell('inverse_dynamics', 'baseline_action_error')} |",
            f"| forward dynamics | frame MSE {cell('forward_dynamics', 'frame_error')} | | repeat first frame "
            f"{cell('forward_dynamics', 'baseline_frame_error')} (autoencoder's floor "
            f"{cell('forward_dynamics', 'autoencoder_floor')}; repeated exactly "
            f"{cell('forward_dynamics', 'raw_repeat_first_error')}) |",
            f"| forward dynamics, changing pixels | frame MSE {cell('forward_dynamics', 'moving_frame_error')} | | "
            f"repeat first frame {cell('forward_dynamics', 'baseline_moving_frame_error')} |",
        ]
    )


def ship(policy_export: Path, run: dict) -> None:
    """Copy a seed's policy export to `SHIPPED`, with what it was measured at (the test reads both)."""
    shutil.rmtree(SHIPPED, ignore_errors=True)
    shutil.copytree(policy_export, SHIPPED)
    record = {key: run[key] for key in ("seed", "steps", "chunk_size", "size")} | run["episodes"]
    record |= {"untrained_success": run["untrained"]["success"], "policy_success": run["policy"]["success"]}
    weights = sorted(p.relative_to(SHIPPED).as_posix() for p in SHIPPED.rglob("*.safetensors"))
    record["sha256"] = {name: hashlib.sha256((SHIPPED / name).read_bytes()).hexdigest() for name in weights}
    (SHIPPED / "benchmark_record.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"shipped {policy_export} to {SHIPPED}")


def evaluate(exports: dict, model: Path, dataset: Path, split: dict, args) -> dict:
    from domains.reach2d.env import Reach2DEnv, rollout, success_rate

    from cosmos_train.data.lerobot import ActionSpec, LeRobotFolder

    data = LeRobotFolder(dataset)
    spec = ActionSpec(cameras=(CAMERA,), action_columns=(ACTION,), state_columns=(STATE,), chunk_size=CHUNK)
    windows = data.windows(spec, split["held_out"], stride=4)
    seeds = split["seeds"]["held_out"][: args.closed_loop_episodes]
    steps = sorted(int(folder.name.split("_")[1]) for folder in exports["policy"].glob("step_*"))
    curve = []
    for step in [0, *steps]:
        if step == 0:
            policy = load_policy(exports["policy"] / f"step_{steps[-1]}", untrained_from=model)
        else:
            policy = load_policy(exports["policy"] / f"step_{step}")
        call = act(policy)
        point = {
            "step": step,
            "action_error": action_error(call, data, spec, windows),
            "success": success_rate(call, seeds, size=SIZE, colors=COLORS, execute=CHUNK // 2),
        }
        curve.append(point)
        print(f"  policy at step {step}: {point}", flush=True)
    result = {
        "untrained": {k: curve[0][k] for k in ("success", "action_error")},
        "policy": {k: curve[-1][k] for k in ("success", "action_error")} | {"curve": curve},
    }
    last = []
    for episode, start in windows:
        if start == 0:
            continue
        window = data.read_window(spec, episode, start)
        previous = data.read_window(spec, episode, start - 1).actions[0]
        last.append(float(((np.repeat(previous[None], CHUNK, 0) - window.actions) ** 2).mean()))
    result["policy"]["copy_last_action_error"] = statistics.fmean(last)
    env = Reach2DEnv(size=SIZE, colors=COLORS)
    shown = rollout(env, act(policy), seeds[0], CHUNK // 2)
    result["policy"]["shown_episode"] = {"seed": seeds[0], "success": shown["success"],
                                         "states": shown["states"].tolist()}  # fmt: skip
    final = exports["forward_dynamics"] / f"step_{args.dynamics_steps}"
    result["forward_dynamics"] = forward_dynamics_errors(final, data, spec, windows)
    final = exports["inverse_dynamics"] / f"step_{args.dynamics_steps}"
    result["inverse_dynamics"] = inverse_dynamics_errors(final, data, spec, windows, split)
    return result


def load_policy(export: Path, untrained_from: Path | None = None):
    """The policy of an export; with `untrained_from`, the untrained model (that folder's pipeline) sampled with
    the export's settings."""
    from diffusers_cosmos3.actions import Cosmos3ActionPolicy

    policy = Cosmos3ActionPolicy.from_pretrained(export, num_inference_steps=10, enable_safety_checker=False)
    if untrained_from is not None:
        policy.pipe = type(policy.pipe).from_pretrained(untrained_from, enable_safety_checker=False)
    policy.pipe.set_progress_bar_config(disable=True)
    return policy


def act(policy):
    """`policy` as Reach2D's closed loop calls it, seeded the same at every call, actions clipped to the box."""

    def call(image, state, task):
        return policy(image, task, state=state, generator=torch.Generator().manual_seed(0)).clip(-1, 1)

    return call


def action_error(call, data, spec, windows) -> float:
    """Mean squared error of the sampled chunk against the expert's, over the held-out windows (open loop)."""
    errors = []
    for episode, start in windows:
        window = data.read_window(spec, episode, start)
        errors.append(
            float(((call(window.frames[0], window.state, window.task) - window.actions) ** 2).mean())
        )
    return statistics.fmean(errors)


def forward_dynamics_errors(export: Path, data, spec, windows) -> dict:
    """Mean squared pixel error (in [0, 1]) of the generated future frames against the true ones; the baseline
    repeats the first frame through the same autoencoder (its reconstruction error, `autoencoder_floor` on the true
    frames, bounds every generated frame: pixel-exact repetition, `raw_repeat_first_error`, would compare a
    reconstruction with the truth itself)."""
    from diffusers import Cosmos3OmniPipeline
    from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import CosmosActionCondition
    from PIL import Image

    pipe = Cosmos3OmniPipeline.from_pretrained(export, enable_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    settings = json.loads((export / "action_settings.json").read_text())["settings"]

    def through_autoencoder(frames: np.ndarray) -> np.ndarray:
        video = torch.from_numpy(frames).permute(3, 0, 1, 2)[None].float() / 127.5 - 1
        with torch.no_grad():
            decoded = pipe.vae.decode(pipe.vae.encode(video).latent_dist.mode()).sample
        return ((decoded[0].clamp(-1, 1) + 1) / 2).permute(1, 2, 3, 0).numpy()

    def moving(frames: np.ndarray, truth: np.ndarray) -> float:
        """The error over the pixels that change from the first true frame (where the tip left and went)."""
        changed = np.abs(truth[1:] - truth[:1]).max(-1) > 0.1
        return (
            float(((frames[1:] - truth[1:]) ** 2).mean(-1)[changed].mean()) if changed.any() else float("nan")
        )

    errors, baseline, floor, raw, errors_moving, baseline_moving = [], [], [], [], [], []
    for episode, start in windows:
        window = data.read_window(spec, episode, start)
        truth = window.frames.astype(np.float32) / 255
        repeated = through_autoencoder(np.repeat(window.frames[:1], len(truth), 0))
        baseline.append(float(((repeated[1:] - truth[1:]) ** 2).mean()))
        baseline_moving.append(moving(repeated, truth))
        floor.append(float(((through_autoencoder(window.frames)[1:] - truth[1:]) ** 2).mean()))
        raw.append(float(((truth[:1] - truth[1:]) ** 2).mean()))
        video = pipe(
            prompt=window.task,
            action=CosmosActionCondition(
                "forward_dynamics", CHUNK, DOMAIN, 256, raw_actions=torch.from_numpy(window.actions),
                image=Image.fromarray(window.frames[0]),
            ),
            num_inference_steps=10, guidance_scale=1.0, fps=settings["fps"], use_system_prompt=False,
            output_type="np", generator=torch.Generator().manual_seed(0),
        ).video  # fmt: skip
        frames = np.asarray(video, dtype=np.float32)
        frames = frames[0] if frames.ndim == 5 else frames  # [T, H, W, 3] in [0, 1]
        if frames.shape != truth.shape:
            raise RuntimeError(f"forward dynamics made frames {frames.shape}, the window has {truth.shape}")
        errors.append(float(((frames[1:] - truth[1:]) ** 2).mean()))
        errors_moving.append(moving(frames, truth))
    return {
        "frame_error": statistics.fmean(errors),
        "baseline_frame_error": statistics.fmean(baseline),
        # Over the changing pixels only (windows where the tip moves): whether the tip is drawn where it went.
        "moving_frame_error": float(np.nanmean(errors_moving)),
        "baseline_moving_frame_error": float(np.nanmean(baseline_moving)),
        "autoencoder_floor": statistics.fmean(floor),
        "raw_repeat_first_error": statistics.fmean(raw),
    }


def inverse_dynamics_errors(export: Path, data, spec, windows, split) -> dict:
    """Mean squared error of the actions it samples from the true frames, and of the training set's mean action."""
    from diffusers_cosmos3.actions import Cosmos3ActionPolicy

    policy = Cosmos3ActionPolicy.from_pretrained(export, num_inference_steps=10, enable_safety_checker=False)
    train_actions = np.concatenate(
        [data.read_window(spec, e, 0, frames=False).actions for e in split["train"]]
    )
    mean = train_actions.mean(0)
    errors, baseline = [], []
    for episode, start in windows:
        window = data.read_window(spec, episode, start)
        chunk = policy(list(window.frames), window.task, generator=torch.Generator().manual_seed(0))
        errors.append(float(((chunk - window.actions) ** 2).mean()))
        baseline.append(float(((mean[None] - window.actions) ** 2).mean()))
    return {"action_error": statistics.fmean(errors), "baseline_action_error": statistics.fmean(baseline)}


def plot(path: Path, payload: dict) -> None:
    """Success and open-loop error against policy steps (each seed), the open-loop errors against their baselines,
    and a strip of the first seed's shown closed-loop episode with the executed actions drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from domains.reach2d.world import World, render

    fig = plt.figure(figsize=(13, 6.2))
    grid = fig.add_gridspec(2, 6)
    success, errors, ratios = (
        fig.add_subplot(grid[0, :2]),
        fig.add_subplot(grid[0, 2:4]),
        fig.add_subplot(grid[0, 4:]),
    )
    for run in payload["runs"]:
        curve = run["policy"]["curve"]
        steps = [point["step"] for point in curve]
        success.plot(steps, [point["success"] for point in curve], "o-", color="#c83c28", alpha=0.7)
        errors.plot(steps, [point["action_error"] for point in curve], "o-", color="#2860c8", alpha=0.7)
    copy_last = payload["policy"]["copy_last_action_error"]
    errors.axhline(copy_last, color="k", ls="--", lw=0.8, label="copy last action")
    success.set(xlabel="policy step", ylabel="closed-loop success (held out)", ylim=(0, 1), title="policy")
    errors.set(xlabel="policy step", ylabel="held-out action MSE", title="policy, open loop")
    errors.legend(fontsize=7)
    bars = {
        "policy": ("policy", "action_error", "copy_last_action_error"),
        "FD frames": ("forward_dynamics", "frame_error", "baseline_frame_error"),
        "ID actions": ("inverse_dynamics", "action_error", "baseline_action_error"),
    }
    ratio = [payload[s][k] / payload[s][b] for s, k, b in bars.values()]
    ratios.bar(list(bars), ratio, color="#5a5")
    ratios.axhline(1.0, color="k", lw=0.8)
    ratios.set(ylabel="held-out error / baseline's", title="open loop, mean over seeds")
    shown = payload["runs"][0]["policy"]["shown_episode"]
    states = np.asarray(shown["states"])
    world = World.sample(shown["seed"], COLORS)
    for column, index in enumerate(np.linspace(0, len(states) - 1, 6).astype(int)):
        ax = fig.add_subplot(grid[1, column])
        ax.imshow(render(world, states[index], SIZE))
        trail = states[: index + 1] * SIZE
        ax.plot(trail[:, 0], trail[:, 1], "-", color="w", lw=1)
        if index + 1 < len(states):
            move = (states[index + 1] - states[index]) * SIZE * 4
            ax.arrow(*(states[index] * SIZE), *move, color="yellow", width=0.8, head_width=4)
        ax.set_title(
            f"t = {index}" + (" (reached)" if shown["success"] and index == len(states) - 1 else ""),
            fontsize=8,
        )
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def options(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer episodes and steps (a smoke run)")
    parser.add_argument(
        "--seed", type=int, default=0, help="the first seed: the domain's episodes, the model, the starts"
    )
    parser.add_argument("--seeds", type=int, help="how many seeds from --seed (default 3; quick: 1)")
    parser.add_argument("--steps", type=int, help="the policy's optimizer steps (3000; quick: 240)")
    parser.add_argument(
        "--dynamics-steps", type=int, help="forward and inverse dynamics' steps (1500; quick: 200)"
    )
    parser.add_argument(
        "--combine", type=Path, nargs="+", metavar="JSON",
        help="no training: one report from result files of separate runs (one seed each, say)",
    )  # fmt: skip
    parser.add_argument(
        "--ship", action="store_true", help="copy the first seed's policy to cosmos3_policy/policy/"
    )
    parser.add_argument(
        "--out", type=Path,
        help="the JSON (default: results/cosmos3_policy.json for 3 seeds or more, or --combine; else partial/)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    args.seeds = args.seeds or (1 if args.quick else 3)
    args.steps = args.steps or (240 if args.quick else 3000)
    args.dynamics_steps = args.dynamics_steps or (200 if args.quick else 1500)
    args.vae_steps = 300 if args.quick else 1200
    args.train_episodes, args.held_out_episodes = (16, 4) if args.quick else (64, 16)
    args.closed_loop_episodes = 4 if args.quick else 16
    published = bool(args.combine) or (not args.quick and args.seeds >= 3)
    # The jobs name paths under it, which a relative --out would make relative to each job's own file.
    args.out = (args.out or default_out("cosmos3_policy", published=published)).resolve()
    return args


if __name__ == "__main__":
    main()
