"""What the online diffusion RL trainers (DiffusionNFT, FlowGRPO, DDRL) share, on `DiffusionTrainer`.

One rollout feeds one or more optimizer steps, told the way TRL's GRPOTrainer tells it:
1. `_prepare_inputs` takes a batch of prompts; at the start of each rollout it samples K images or videos per
   prompt (`rollout`, written by each algorithm) on the pipeline's own noise grid (`grid`), decodes and scores them
   with the job's rewards (`score`), turns the scores into advantages (`advantages`, each algorithm's form of
   `group_advantages`), and cuts the result into micro-batches (`micro_batches`): chunks of samples, each at its
   trained timesteps, chunk after chunk, so that several updates per rollout split it by samples. Every call
   returns the next micro-batch, so the Trainer's gradient accumulation covers a whole number of chunks;
2. `compute_loss` (each algorithm's) trains on one micro-batch.
Rewards, advantages, evaluation (`RLEvaluation`), the EMA, checkpoints, exports and logging are shared here and in
`diffusion_base.py`; `run_diffusion_rl` runs any of them (the job's kind names the trainer class).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

from ...diffusion.sampling import Guidance, NoiseGrid, noise_grid, to_uint8_media
from ...diffusion.weights import ParameterCopy
from ...jobs import Job
from ..common import train_and_save
from ..diffusion.trainer import DiffusionTrainer, load_for_training
from .advantages import group_advantages_across, weighted_reward

logger = logging.getLogger(__name__)


class DiffusionRLTrainer(DiffusionTrainer):
    """Rollout -> rewards -> advantages -> micro-batches, on transformers' `Trainer`. Subclasses take the job's
    config (`job`, a `DiffusionRLJob`) and write `rollout(prompts, metadata, batch)`, `micro_batches(rollout)`
    (`sample_chunks` cuts the rollout) and `compute_loss`, and may change `advantages(scores)`. The job says
    which weight copies are kept (`weight_copies`: its EMA, the KL reference) and how a rollout is cut
    (`rollout_chunks`, `micro_batches_per_update`), for the trainer and `estimate-memory` alike."""

    def __init__(
        self, adapter, rewards: list, job, train_dataset, args, eval_rewards: list | None = None, **kwargs
    ):
        updates = job.rollout.updates_per_rollout
        copies = job.weight_copies()
        super().__init__(
            adapter,
            train_dataset=RolloutPrompts(train_dataset, args, updates),
            args=args,
            ema_decay=job.ema_decay(),
            weight_copies=copies,
            **kwargs,
        )
        # The frozen base for a KL term: a LoRA reaches it by disabling its adapters, full fine-tuning keeps a copy.
        self.reference_copy = None
        if "reference" in copies:
            self.reference_copy = self.keep(ParameterCopy(adapter.transformer), "reference")
        self.chunks = job.rollout_chunks()
        self.micro_batches_per_rollout = job.micro_batches_per_update() * updates
        self.rewards = rewards
        self.rollout_config = job.rollout
        self.group_size = job.rollout.samples_per_prompt
        self.size = rl_sample_size(adapter, job.rollout)
        self._grids: dict[int, NoiseGrid] = {}
        self._buffer: list[dict[str, Any]] = []
        self._metrics: dict[str, list[float]] = defaultdict(list)
        with torch.no_grad():
            self.unconditional = adapter.encode_prompts([adapter.negative_prompt])
        self.evaluation = None
        if job.eval is not None:
            self.evaluation = RLEvaluation(self, job.eval, eval_rewards or rewards)
            self.add_callback(self.evaluation)

    # --- the rollout step ------------------------------------------------------------------------------

    @classmethod
    def training_data(cls, job, adapter, args) -> tuple[Any, Any]:
        """The dataset and collator a rollout draws its prompts from (`job`: the job's config): the prompt list."""
        from ...data import collate_prompts, load_prompt_list

        prompts, report = load_prompt_list(job.data)
        logger.info("training on %d prompts (%d skipped)", report.kept, report.skipped)
        return prompts, collate_prompts

    def _prepare_inputs(self, inputs: dict[str, Any]) -> dict[str, Any]:
        if not self._buffer:
            prompts = [p for p in inputs["prompts"] for _ in range(self.group_size)]
            metadata = [m for m in inputs["metadata"] for _ in range(self.group_size)]
            rollout = self.rollout(prompts, metadata, inputs)
            rollout["advantages"] = self.advantages(
                self.score(rollout.pop("latents_for_reward"), prompts, metadata)
            )
            self._buffer = self.micro_batches(rollout)
            expected = self.micro_batches_per_rollout
            if len(self._buffer) != expected:  # an algorithm whose `micro_batches` disagrees with its schema
                raise RuntimeError(
                    f"{type(self).__name__}.micro_batches gave {len(self._buffer)} micro-batches, but its job's "
                    f"micro_batches_per_update() x updates_per_rollout is {expected}"
                )
        return self._buffer.pop(0)

    def rollout(self, prompts: list[str], metadata: list[dict], batch: dict[str, Any]) -> dict[str, Any]:
        """Sample one image/video per prompt row (rows repeat each of `batch`'s prompts K times). Returns at least
        `latents_for_reward` (clean latents to decode and score) and what `micro_batches` needs."""
        raise NotImplementedError

    def advantages(self, scores: dict[str, torch.Tensor]) -> torch.Tensor:
        """One advantage per row from each reward's scores (`score`): by default the references' form, the raw
        weighted sum normalised within each prompt group by the global std."""
        return self.group_advantages(weighted_reward(scores, self.reward_weights()), global_std=True)

    def micro_batches(self, rollout: dict[str, Any]) -> list[dict[str, Any]]:
        raise NotImplementedError

    @contextlib.contextmanager
    def reference(self):
        """The frozen base model (for a KL term, no-grad forwards only), as a context giving the module to call."""
        transformer = self.adapter.transformer
        if self.reference_copy is not None:
            with self.reference_copy.swapped_in():
                yield transformer
            return
        transformer.disable_adapters()
        try:
            yield transformer
        finally:
            transformer.enable_adapters()

    def grid(self, steps: int) -> NoiseGrid:
        """The pipeline's own noise grid for `steps` sampler steps at the rollout size (`sampling.noise_grid`)."""
        if steps not in self._grids:
            self._grids[steps] = noise_grid(self.adapter, steps, self.latent_shape())
        return self._grids[steps]

    def latent_shape(self) -> tuple[int, ...]:
        return self.adapter.latent_shape(*self.size)

    def noise(self, rows: int, same_per_group: bool = False) -> torch.Tensor:
        """Initial noise for `rows` samples (the global RNG, so a resumed run draws the same); `same_per_group`
        gives each prompt's K samples one noise (FlowGRPO's `same_latent`, DDRL's `use_same_seed`)."""
        shape, device = self.latent_shape(), self.adapter.device
        if same_per_group:
            return torch.randn(rows // self.group_size, *shape, device=device).repeat_interleave(
                self.group_size, 0
            )
        return torch.randn(rows, *shape, device=device)

    def guidance(self, rows: int) -> Guidance:
        scale = self.rollout_config.guidance_scale
        if scale == 1.0:
            return Guidance()
        unconditional = {k: v.expand(rows, *v.shape[1:]) for k, v in self.unconditional.items()}
        return Guidance(scale, unconditional, batched=self.rollout_config.batched_guidance)

    def conditioning(self, prompts: list[str]) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            return self.adapter.encode_prompts(prompts)

    def sample_chunks(self, rows: int, keep: torch.Tensor | None = None) -> list[torch.Tensor]:
        """The rollout's samples (those in `keep`, default all), shuffled, as the job's number of chunks
        (`rollout_chunks`): index tensors, sizes differing by at most one (the references' shuffled split)."""
        kept = torch.arange(rows) if keep is None else keep
        order = kept[torch.randperm(len(kept))]
        return list(torch.tensor_split(order, self.chunks))

    # --- rewards ---------------------------------------------------------------------------------------

    @torch.no_grad()
    def score(
        self, latents: torch.Tensor, prompts: list[str], metadata: list[dict]
    ) -> dict[str, torch.Tensor]:
        """Decode and score with every reward: {reward name: float64 scores per row}. The rows are decoded in parts
        of `sampling_batch_size` (default: all at once), and each part is submitted to every reward as soon as it
        is decoded: a remote reward's service scores it while the next part decodes."""
        size = self.rollout_config.sampling_batch_size or len(latents)
        has_metadata = any(metadata)
        pending = {reward.name: [] for reward in self.rewards}
        for start in range(0, len(latents), size):
            rows = slice(start, start + size)
            media = to_uint8_media(self.adapter.decode_latents(latents[rows])).cpu().numpy()
            for reward in self.rewards:
                part_metadata = metadata[rows] if has_metadata else None
                pending[reward.name].append(reward.submit(media, prompts[rows], part_metadata))
        scores = {
            name: torch.tensor([v for collect in parts for v in collect()[name]], dtype=torch.float64)
            for name, parts in pending.items()
        }
        for name, values in scores.items():
            self._metrics[f"rewards/{name}"].append(values.mean().item())
        total = weighted_reward(scores, self.reward_weights())
        self._metrics["reward"].append(total.mean().item())
        self._metrics["reward_std"].append(total.std(correction=0).item())
        return scores

    def reward_weights(self) -> dict[str, float]:
        return {reward.name: reward.weight for reward in self.rewards}

    def group_advantages(self, rewards: torch.Tensor, global_std: bool) -> torch.Tensor:
        """`group_advantages` over this process's rows, the global std over every process's rewards."""
        advantages = group_advantages_across(self.accelerator, rewards, self.group_size, global_std)
        return advantages.float().to(self.adapter.device)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if not any(key.startswith("eval/") for key in logs):  # an evaluation logs its own values alone
            for key, values in self._metrics.items():
                logs[key] = sum(values) / len(values)
            self._metrics.clear()
        super().log(logs, start_time)


def score_media(rewards: list, media, prompts: list[str], metadata: list[dict]) -> dict[str, torch.Tensor]:
    """{reward name: float64 scores} of uint8 media (`B x H x W x 3` or `B x T x H x W x 3`)."""
    has_metadata = any(metadata)
    return {
        reward.name: torch.tensor(
            reward(media, prompts, metadata if has_metadata else None), dtype=torch.float64
        )
        for reward in rewards
    }


def rl_sample_size(adapter, rollout) -> tuple[int, int, int | None]:
    """(height, width, frames) of the rollouts: `[rollout]`'s, else the family's RL size (`rl_sample_defaults`),
    else the pipeline's own default."""
    height, width, frames = adapter.default_size()
    defaults = adapter.rl_sample_defaults
    return (
        getattr(rollout, "height", None) or defaults.get("height", height),
        getattr(rollout, "width", None) or defaults.get("width", width),
        getattr(rollout, "num_frames", None) or frames,
    )


class RolloutPrompts(torch.utils.data.Dataset):
    """The prompts (or DDRL's data items), repeated so that every epoch holds whole rollouts on every process.

    The Trainer draws one batch per micro-step, but a rollout samples only at its first micro-step (the others train
    on its micro-batches). Repeating each item `updates_per_rollout x gradient_accumulation_steps` times, padded to
    whole batches on every process, keeps every epoch a whole number of rollouts, and the
    shuffled repeats keep items drawn uniformly."""

    def __init__(self, prompts, args, updates_per_rollout: int = 1):
        self.prompts = prompts
        per_step = args.per_device_train_batch_size * max(args.world_size, 1)
        rollouts = math.ceil(
            len(prompts) / per_step
        )  # each uses one batch of items, and U x accumulation micro-steps
        self.length = rollouts * updates_per_rollout * per_step * args.gradient_accumulation_steps

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        return self.prompts[index % len(self.prompts)]


# ---------------------------------------------------------------------------------------------------------
# Evaluation during training


class RLEvaluation(TrainerCallback):
    """`[eval]`: before training, every `every` optimizer steps and at the end, the held-out prompts sampled by the
    pipeline's own sampler (deterministic: sample i from seed + i, `samples_per_prompt` per prompt; the EMA weights
    when kept; the pipeline's CFG unless set), scored by `[eval] rewards` (default: the job's). Each process samples
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
        with trainer.weights_for_export():
            media = trainer.adapter.generate(
                [rows[i]["prompt"] for i in padded],
                height,
                width,
                frames,
                num_inference_steps=section.sampling_steps,
                guidance_scale=section.guidance_scale,
                seed=section.seed + start,
            )
        uint8 = (media * 255).round().to(torch.uint8)
        uint8 = uint8.permute(0, 2, 3, 1) if uint8.dim() == 4 else uint8.permute(0, 1, 3, 4, 2)
        uint8 = uint8[: len(mine)].cpu().numpy()
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
            write_eval_samples(
                Path(trainer.args.output_dir) / "eval" / f"step_{step}",
                [rows[r[0]]["prompt"] for r in results],
                [r[2] for r in results],
                [
                    r[1] | {"reward": total[k].item()} | ({"tag": tags[k]} if tags[k] else {})
                    for k, r in enumerate(results)
                ],
                fps=trainer.adapter.generate_kwargs.get("fps", 8),
            )
        self.evaluating += time.perf_counter() - began
        return logs["eval/reward"]


def write_eval_samples(
    folder: Path, prompts: list[str], media: list, scores: list[dict], fps: float = 8
) -> None:
    """An image grid (`grid.png`) or one MP4 per prompt, with `samples.json` (prompt and scores per sample)."""
    folder.mkdir(parents=True, exist_ok=True)
    stacked = torch.from_numpy(__import__("numpy").stack(media))
    if stacked.dim() == 4:  # B x H x W x 3
        from torchvision.utils import save_image

        save_image(stacked.permute(0, 3, 1, 2).float() / 255, folder / "grid.png", nrow=min(len(media), 8))
    else:  # B x T x H x W x 3
        from ...diffusion.media_io import write_mp4

        for index, frames in enumerate(stacked):
            write_mp4(folder / f"{index:03d}.mp4", frames.permute(0, 3, 1, 2).float() / 255, fps=fps)
    samples = [{"prompt": prompt, **score} for prompt, score in zip(prompts, scores, strict=True)]
    (folder / "samples.json").write_text(json.dumps(samples, indent=1))


def write_curves(path: Path, log_history: list[dict]) -> Path | None:
    """The train reward (`reward`) and the eval reward (`eval/reward`) per optimizer step, as a PNG."""
    train = [(entry["step"], entry["reward"]) for entry in log_history if "reward" in entry]
    evaluation = [(entry["step"], entry["eval/reward"]) for entry in log_history if "eval/reward" in entry]
    if not train and not evaluation:
        return None
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(6, 4), dpi=100)
    for points, label, style in ((train, "train reward", "-"), (evaluation, "eval reward", "o-")):
        if points:
            axes.plot(*zip(*points, strict=True), style, label=label)
    axes.set_xlabel("optimizer step")
    axes.set_ylabel("reward (weighted sum)")
    axes.legend()
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)
    return path


# ---------------------------------------------------------------------------------------------------------
# Running a job


def run_diffusion_rl(job: Job, callbacks: list | None = None) -> DiffusionRLTrainer:
    """Run a diffusion RL job with its kind's trainer class; the trained pipeline (or LoRA) is under
    `output_dir/safetensors/`."""
    trainer = build_diffusion_rl_trainer(job, callbacks)
    train_and_save(trainer, job)
    return trainer


def build_diffusion_rl_trainer(job: Job, callbacks: list | None = None) -> DiffusionRLTrainer:
    """The job's rewards, pipeline, prompts and trainer, ready to train (rewards first: a reward that cannot load
    fails before the model does)."""
    from ...diffusion.adapter import AdapterOptions
    from ...diffusion.loading import pipeline_adapter_class
    from ...rewards import build_media_rewards, reward_specs

    config = job.config
    trainer_class = job.kind.trainer_class()
    rewards = build_media_rewards(reward_specs(config.rewards), search_path=Path(job.source).parent)
    eval_rewards = None
    if config.eval is not None and config.eval.rewards is not None:
        eval_rewards = build_media_rewards(
            reward_specs(config.eval.rewards), search_path=Path(job.source).parent
        )
    family = pipeline_adapter_class(config.model)
    adapter, lora = load_for_training(job, AdapterOptions(max_sequence_length=config.text_tokens(family)))
    dataset, collate = trainer_class.training_data(config, adapter, job.args)
    return trainer_class(
        adapter,
        rewards,
        config,
        lora=lora,
        args=job.args,
        train_dataset=dataset,
        data_collator=collate,
        callbacks=callbacks,
        eval_rewards=eval_rewards,
    )
