"""Cosmos3 action post-training on a procedural robot domain (Reach2D, `domains/reach2d`): does `action-sft` teach a
tiny Cosmos3 a policy, forward dynamics and inverse dynamics from a LeRobot dataset?

    python benchmarks/cosmos3_policy.py [--quick] [--seed N] [--out FILE]

1. Reach2D episodes (seeded: the scripted expert reaching the named target) are written as a LeRobot v3.0 dataset,
   with disjoint held-out episodes.
2. A tiny Cosmos3 with action heads is built (seeded); its VAE is first trained as an autoencoder on the domain's
   frames and its latent statistics measured on them (a random tiny VAE's latents barely move with the scene, and
   its decoder inverts nothing).
3. Each mode trains with the real CLI (`cosmos-train action-sft`) from that model; the exports are evaluated:
   - policy: held-out open-loop action error of the chunk it samples, against the untrained model and against
     repeating the last action; closed-loop success in the gymnasium environment over seeded episodes, against the
     untrained model;
   - forward dynamics: the future frames it generates from the first frame and the true actions, against the true
     frames, and against repeating the first frame;
   - inverse dynamics: the actions it samples from the true frames, against the true ones, and against the mean
     action.

Writes JSON (`untrained` and `policy`: closed-loop `success` and held-out `action_error`; `forward_dynamics`:
`frame_error`, `baseline_frame_error`; `inverse_dynamics`: `action_error`, `baseline_action_error`) and a PNG.
`--seed` changes the domain's episodes and the evaluation's start states. A run of the published design writes
`benchmarks/results/cosmos3_policy.json`; `--quick` writes under `results/partial/`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from _common import default_out, run_job, write_payload

CAMERA, STATE, ACTION = "observation.images.top", "observation.state", "action"
DOMAIN = "pusht"  # a Cosmos3 domain whose width (2) upstream knows: Reach2D's actions are 2-D velocities
CHUNK = 8
SIZE = 128
COLORS = ("red",)


def domain_model(folder: Path, dataset: Path, seed: int, vae_steps: int) -> Path:
    """The tiny Cosmos3 with action heads, its VAE first trained as an autoencoder on the domain's training frames (a
    random tiny VAE barely moves its latents with the scene, and its decoder inverts nothing, so neither frames nor
    actions could be learned through it), then its latent mean and std measured on the windows, as a real VAE's
    `latents_mean` / `latents_std` are measured on its data."""
    from cosmos_train.data.lerobot import ActionSpec, LeRobotFolder
    from diffusers_cosmos3.actions import ActionSettings, conditioning_latents
    from diffusers_cosmos3.testing import build_pipeline

    torch.manual_seed(seed)
    pipe = build_pipeline(action=True, seed=seed)
    data, spec = (
        LeRobotFolder(dataset),
        ActionSpec(cameras=(CAMERA,), action_columns=(ACTION,), chunk_size=CHUNK),
    )
    split = json.loads((dataset / "split.json").read_text())
    frames = np.concatenate([data.read_window(spec, e, 0).frames for e in split["train"]])
    pixels = torch.from_numpy(frames).permute(0, 3, 1, 2).float() / 127.5 - 1  # [N, 3, H, W] in [-1, 1]
    vae = pipe.vae.train()
    optimizer = torch.optim.AdamW(vae.parameters(), lr=2e-3)
    for _ in range(vae_steps):  # 1-frame videos, reconstruction with a light KL
        batch = pixels[torch.randint(len(pixels), (8,))][:, :, None]
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
save_steps = {steps}
report_to = "none"
seed = {seed}
"""


def main() -> None:
    from domains.reach2d import write_dataset

    args = options()
    work = args.out.with_name(args.out.stem + ".runs")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    dataset = write_dataset(
        work / "reach2d", seed=args.seed, train_count=args.train_episodes, held_out_count=args.held_out_episodes,
        size=SIZE, colors=COLORS,
    )  # fmt: skip
    split = json.loads((dataset / "split.json").read_text())
    model = domain_model(work / "model", dataset, args.seed, args.vae_steps)
    payload: dict = {"seed": args.seed, "steps": args.steps, "chunk_size": CHUNK, "size": SIZE}
    exports = {}
    for mode in ("policy", "forward_dynamics", "inverse_dynamics"):
        folder = work / mode
        folder.mkdir()
        (folder / "job.toml").write_text(
            job(mode, model, dataset, split["train"], folder, args.steps, args.seed)
        )
        started = time.perf_counter()
        history = run_job("action-sft", folder / "job.toml", mode)
        exports[mode] = folder / "safetensors" / f"step_{args.steps}"
        payload.setdefault("train_seconds", {})[mode] = round(time.perf_counter() - started, 1)
        payload.setdefault("losses", {})[mode] = [e["loss"] for e in history if "loss" in e]
        print(f"  {mode}: trained in {payload['train_seconds'][mode]:.0f} s", flush=True)
    payload |= evaluate(exports, model, dataset, split, args)
    write_payload(args.out, payload)
    plot(args.out.with_suffix(".png"), payload)
    print(json.dumps({k: v for k, v in payload.items() if k not in ("losses",)}, indent=1))


def evaluate(exports: dict, model: Path, dataset: Path, split: dict, args) -> dict:
    from domains.reach2d.env import success_rate

    from cosmos_train.data.lerobot import ActionSpec, LeRobotFolder
    from diffusers_cosmos3.actions import Cosmos3ActionPolicy

    data = LeRobotFolder(dataset)
    spec = ActionSpec(cameras=(CAMERA,), action_columns=(ACTION,), state_columns=(STATE,), chunk_size=CHUNK)
    windows = data.windows(spec, split["held_out"], stride=4)
    trained = Cosmos3ActionPolicy.from_pretrained(
        exports["policy"], num_inference_steps=10, enable_safety_checker=False
    )
    untrained = Cosmos3ActionPolicy(
        type(trained.pipe).from_pretrained(model, enable_safety_checker=False),
        trained.settings,
        num_inference_steps=10,
    )

    def act(policy):
        def call(image, state, task):
            return policy(image, task, state=state, generator=torch.Generator().manual_seed(0)).clip(-1, 1)

        return call

    def action_error(call) -> float:
        errors = []
        for episode, start in windows:
            window = data.read_window(spec, episode, start)
            errors.append(
                float(((call(window.frames[0], window.state, window.task) - window.actions) ** 2).mean())
            )
        return statistics.fmean(errors)

    seeds = split["seeds"]["held_out"][: args.closed_loop_episodes]
    result = {}
    for name, policy in (("untrained", untrained), ("policy", trained)):
        result[name] = {
            "action_error": action_error(act(policy)),
            "success": success_rate(act(policy), seeds, size=SIZE, colors=COLORS, execute=CHUNK // 2),
        }
        print(f"  {name}: {result[name]}", flush=True)
    last = []
    for episode, start in windows:
        if start == 0:
            continue
        window = data.read_window(spec, episode, start)
        previous = data.read_window(spec, episode, start - 1).actions[0]
        last.append(float(((np.repeat(previous[None], CHUNK, 0) - window.actions) ** 2).mean()))
    result["policy"]["copy_last_action_error"] = statistics.fmean(last)
    result["forward_dynamics"] = forward_dynamics_errors(exports["forward_dynamics"], data, spec, windows)
    result["inverse_dynamics"] = inverse_dynamics_errors(
        exports["inverse_dynamics"], data, spec, windows, split
    )
    return result


def forward_dynamics_errors(export: Path, data, spec, windows) -> dict:
    """Mean squared pixel error (in [0, 1]) of the generated future frames, and of repeating the first frame."""
    from diffusers import Cosmos3OmniPipeline
    from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import CosmosActionCondition
    from PIL import Image

    pipe = Cosmos3OmniPipeline.from_pretrained(export, enable_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    settings = json.loads((export / "action_settings.json").read_text())["settings"]
    errors, baseline = [], []
    for episode, start in windows:
        window = data.read_window(spec, episode, start)
        truth = window.frames.astype(np.float32) / 255
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
        frames = frames[: len(truth), : truth.shape[1], : truth.shape[2]]
        errors.append(float(((frames[1:] - truth[1 : len(frames)]) ** 2).mean()))
        baseline.append(float(((truth[:1] - truth[1:]) ** 2).mean()))
    return {"frame_error": statistics.fmean(errors), "baseline_frame_error": statistics.fmean(baseline)}


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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
    for mode, losses in payload["losses"].items():
        axes[0].plot(np.arange(1, len(losses) + 1) * 25, losses, label=mode)
    axes[0].set(xlabel="step", ylabel="training loss", title="loss")
    axes[0].legend(fontsize=7)
    names = ["untrained", "policy"]
    axes[1].bar(names, [payload[n]["success"] for n in names], color=["#999", "#c83c28"])
    axes[1].set(ylabel="closed-loop success", ylim=(0, 1), title="Reach2D policy")
    bars = {
        "policy": (payload["policy"]["action_error"], payload["policy"]["copy_last_action_error"]),
        "FD frames": (
            payload["forward_dynamics"]["frame_error"],
            payload["forward_dynamics"]["baseline_frame_error"],
        ),
        "ID actions": (
            payload["inverse_dynamics"]["action_error"],
            payload["inverse_dynamics"]["baseline_action_error"],
        ),
    }
    x = np.arange(len(bars))
    axes[2].bar(x - 0.2, [v[0] / v[1] for v in bars.values()], 0.4, label="trained / baseline")
    axes[2].axhline(1.0, color="k", lw=0.8)
    axes[2].set_xticks(x, list(bars))
    axes[2].set(ylabel="held-out error / baseline's", title="open loop")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def options(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer episodes and steps (a smoke run)")
    parser.add_argument(
        "--seed", type=int, default=0, help="the domain's episodes and the evaluation's starts"
    )
    parser.add_argument("--steps", type=int, help="optimizer steps per mode (1500; quick: 200)")
    parser.add_argument(
        "--out", type=Path, help="the JSON (default: results/cosmos3_policy.json, quick: partial/)"
    )
    args = parser.parse_args(argv)
    args.steps = args.steps or (200 if args.quick else 1500)
    args.vae_steps = 300 if args.quick else 1500
    args.train_episodes, args.held_out_episodes = (16, 4) if args.quick else (64, 16)
    args.closed_loop_episodes = 4 if args.quick else 16
    args.out = args.out or default_out("cosmos3_policy", published=not args.quick)
    return args


if __name__ == "__main__":
    main()
