"""`[eval]` of the diffusion RL kinds: held-out prompts sampled by the pipeline's own sampler during training,
scored by the job's rewards, logged, written as samples (`diffusion.media_io.write_samples`) and drawn as curves."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from transformers import TrainerCallback

from ...diffusion.media_io import write_samples
from .advantages import weighted_reward

if TYPE_CHECKING:
    from .trainer import DiffusionRLTrainer


def score_media(rewards: list, media, prompts: list[str], metadata: list[dict]) -> dict[str, torch.Tensor]:
    """{reward name: float64 scores} of uint8 media (`B x H x W x 3` or `B x T x H x W x 3`)."""
    has_metadata = any(metadata)
    return {
        reward.name: torch.tensor(
            reward(media, prompts, metadata if has_metadata else None), dtype=torch.float64
        )
        for reward in rewards
    }


class RLEvaluation(TrainerCallback):
    """`[eval]`: before training, every `every` optimizer steps and at the end, the held-out prompts sampled by the
    pipeline's own sampler (deterministic: sample i from seed + i, `samples_per_prompt` per prompt; the EMA weights
    when kept; CFG at `[eval] guidance_scale`, whose default the algorithm's `[eval]` section declares as its
    reference's, else the pipeline's own), scored by `[eval] rewards` (default: the job's). Each process samples
    a contiguous share; the main process logs `eval/reward` (the weighted sum), `eval/<reward>` and, when the
    prompts carry a GenEval `tag`, `eval/reward/<tag>` per task; it writes the samples and scores under
    `output_dir/eval/step_N/`, and at the end `output_dir/curves.png` (train and eval reward per step)."""

    def __init__(self, trainer: DiffusionRLTrainer, section, rewards: list):
        from ...data import load_prompt_list

        self.trainer, self.section, self.rewards = trainer, section, rewards
        prompts, _ = load_prompt_list(section)
        self.rows = [prompts[i] for i in range(len(prompts)) for _ in range(section.samples_per_prompt)]
        self.history: list[tuple[int, float]] = []
        self.started, self.evaluating = time.perf_counter(), 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        self.started, self.evaluating = time.perf_counter(), 0.0
        if state.global_step == 0:  # the starting point of the curve (a resumed run has it already)
            self.evaluate(0)

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.section.every == 0:
            self.evaluate(state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        if not self.history or self.history[-1][0] != state.global_step:
            self.evaluate(state.global_step)
        if state.is_world_process_zero:
            write_curves(Path(args.output_dir) / "curves.png", state.log_history)

    @torch.no_grad()
    def evaluate(self, step: int) -> float:
        from accelerate.utils import gather_object

        began = time.perf_counter()
        trainer, section = self.trainer, self.section
        accelerator = trainer.accelerator
        rows = self.rows
        # A contiguous share per process, padded to equal lengths so that sharded models run the same forwards.
        share = math.ceil(len(rows) / accelerator.num_processes)
        start = accelerator.process_index * share
        mine = list(range(start, min(start + share, len(rows))))
        padded = mine + [mine[-1] if mine else 0] * (share - len(mine))
        height, width, frames = trainer.size
        uint8 = trainer.generate_samples(
            [rows[i]["prompt"] for i in padded],
            height=height,
            width=width,
            num_frames=frames,
            num_inference_steps=section.sampling_steps,
            guidance_scale=section.guidance_scale,
            seed=section.seed + start,
        )[: len(mine)]
        scores = score_media(
            self.rewards, uint8, [rows[i]["prompt"] for i in mine], [rows[i]["metadata"] for i in mine]
        )
        results = gather_object(
            [
                (index, {name: values[k].item() for name, values in scores.items()}, uint8[k])
                for k, index in enumerate(mine)
            ]
        )
        results.sort(key=lambda result: result[0])
        per_reward = {
            name: torch.tensor([r[1][name] for r in results], dtype=torch.float64) for name in scores
        }
        total = weighted_reward(per_reward, {reward.name: reward.weight for reward in self.rewards})
        logs = {"eval/reward": total.mean().item()} | {
            f"eval/{n}": v.mean().item() for n, v in per_reward.items()
        }
        # Seconds of training so far in this process, evaluations left out: learning against wall-clock.
        logs["eval/train_seconds"] = round(began - self.started - self.evaluating, 3)
        tags = [rows[r[0]]["metadata"].get("tag") for r in results]
        for tag in dict.fromkeys(t for t in tags if isinstance(t, str)):
            logs[f"eval/reward/{tag}"] = total[[t == tag for t in tags]].mean().item()
        # Trainer.log clears a train log scheduled for this step (`on_log`): keep it scheduled.
        scheduled = trainer.control.should_log
        trainer.log(logs)
        trainer.control.should_log = scheduled
        self.history.append((step, logs["eval/reward"]))
        if trainer.args.should_save:
            write_samples(
                Path(trainer.args.output_dir) / "eval" / f"step_{step}",
                np.stack([r[2] for r in results]),
                [
                    {"prompt": rows[r[0]]["prompt"]}
                    | r[1]
                    | {"reward": total[k].item()}
                    | ({"tag": tags[k]} if tags[k] else {})
                    for k, r in enumerate(results)
                ],
                fps=trainer.adapter.generate_kwargs.get("fps", 8),
            )
        self.evaluating += time.perf_counter() - began
        return logs["eval/reward"]


def write_curves(
    path: Path,
    log_history: list[dict],
    curves: tuple[tuple[str, str], ...] = (("reward", "train reward"), ("eval/reward", "eval reward")),
    ylabel: str = "reward (weighted sum)",
) -> Path | None:
    """Logged values per optimizer step as a PNG, one line per (log key, label) of `curves`: by default the train
    reward (`reward`) and the eval reward (`eval/reward`)."""
    lines = [
        ([(entry["step"], entry[key]) for entry in log_history if key in entry], label, key)
        for key, label in curves
    ]
    if not any(points for points, _, _ in lines):
        return None
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(6, 4), dpi=100)
    for points, label, key in lines:
        if points:  # evaluations as points on a line, training logs as a line
            axes.plot(*zip(*points, strict=True), "o-" if key.startswith("eval/") else "-", label=label)
    axes.set_xlabel("optimizer step")
    axes.set_ylabel(ylabel)
    axes.legend()
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)
    return path
