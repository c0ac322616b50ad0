"""What the online diffusion RL trainers (DiffusionNFT, FlowGRPO, DDRL) share, on `DiffusionTrainer`.

One optimizer step is one rollout, told the way TRL's GRPOTrainer tells it:
1. `_prepare_inputs` takes a batch of prompts; at the start of each step it samples K images or videos per
   prompt (`rollout`, written by each algorithm), decodes and scores them with the job's rewards, turns the
   rewards into group-normalised advantages, and cuts the result into micro-batches (`micro_batches`);
   every call returns the next micro-batch, so the Trainer's gradient accumulation covers one rollout;
2. `compute_loss` (each algorithm's) trains on one micro-batch.
Rewards, advantages, the EMA, checkpoints, exports and logging are shared here and in `diffusion_base.py`;
`run_diffusion_rl` runs any of them (the job's kind names the trainer class).
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from ..diffusion.sampling import Guidance, to_uint8_media
from ..diffusion.weights import ParameterCopy
from ..jobs import Job
from .common import train_and_save
from .diffusion_base import DiffusionTrainer, load_for_training

logger = logging.getLogger(__name__)

REWARD_CLIP = 5.0  # each reward, and their weighted sum, is clipped to +-5 (cosmos-rl's remote calculator)


def group_advantages(rewards: torch.Tensor, group_size: int, global_std: bool = False) -> torch.Tensor:
    """(R - mean of the prompt's K samples) / (std + 1e-4); rows are grouped K by K, in order."""
    groups = rewards.reshape(-1, group_size)
    std = rewards.std() if global_std else groups.std(dim=1, keepdim=True)
    return ((groups - groups.mean(dim=1, keepdim=True)) / (std + 1e-4)).reshape(-1)


class DiffusionRLTrainer(DiffusionTrainer):
    """Rollout -> rewards -> advantages -> micro-batches, on transformers' `Trainer`. Subclasses take the job's
    config (`job`, a `DiffusionRLJob`) and write `rollout(prompts, metadata)`, `micro_batches(rollout)` and
    `compute_loss`."""

    def __init__(self, adapter, rewards: list, job, train_dataset, args, kl_beta: float = 0.0, **kwargs):
        super().__init__(adapter, train_dataset=RolloutPrompts(train_dataset, args), args=args, **kwargs)
        # The frozen base for a KL term: a LoRA reaches it by disabling its adapters, full fine-tuning keeps a copy.
        self.reference_copy = None
        if kl_beta > 0 and self.lora is None:
            self.reference_copy = ParameterCopy(adapter.transformer)
        self.rewards = rewards
        self.rollout_config = job.rollout
        height, width, frames = adapter.default_size()
        rollout = job.rollout
        self.size = (rollout.height or height, rollout.width or width, rollout.num_frames or frames)
        self._buffer: list[dict[str, Any]] = []
        self._metrics: dict[str, list[float]] = defaultdict(list)
        with torch.no_grad():
            self.unconditional = adapter.encode_prompts([""])

    # --- the rollout step ------------------------------------------------------------------------------

    def _prepare_inputs(self, inputs: dict[str, Any]) -> dict[str, Any]:
        if not self._buffer:
            prompts = [p for p in inputs["prompts"] for _ in range(self.rollout_config.samples_per_prompt)]
            metadata = [m for m in inputs["metadata"] for _ in range(self.rollout_config.samples_per_prompt)]
            rollout = self.rollout(prompts, metadata)
            rollout["advantages"] = self.score(rollout.pop("latents_for_reward"), prompts, metadata)
            self._buffer = self.micro_batches(rollout)
            expected = self.args.gradient_accumulation_steps * self.rollout_config.updates_per_rollout
            if len(self._buffer) != expected:
                raise RuntimeError(f"a rollout gave {len(self._buffer)} micro-batches, not {expected}")
        return self._buffer.pop(0)

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

    def rollout(self, prompts: list[str], metadata: list[dict]) -> dict[str, Any]:
        """Sample one image/video per prompt row (rows repeat each prompt K times). Returns at least
        `latents_for_reward` (clean latents to decode and score) and what `micro_batches` needs."""
        raise NotImplementedError

    def micro_batches(self, rollout: dict[str, Any]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def noise(self, rows: int) -> torch.Tensor:
        height, width, frames = self.size
        return torch.randn(
            rows, *self.adapter.latent_shape(height, width, frames), device=self.adapter.device
        )

    def guidance(self, rows: int) -> Guidance:
        scale = self.rollout_config.guidance_scale
        if scale == 1.0:
            return Guidance()
        return Guidance(scale, {k: v.expand(rows, *v.shape[1:]) for k, v in self.unconditional.items()})

    def conditioning(self, prompts: list[str]) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            return self.adapter.encode_prompts(prompts)

    # --- rewards ---------------------------------------------------------------------------------------

    @torch.no_grad()
    def score(self, latents: torch.Tensor, prompts: list[str], metadata: list[dict]) -> torch.Tensor:
        """Decode, score with every reward, combine (clipped weighted sum) and normalise per prompt group."""
        media = to_uint8_media(self.adapter.decode_latents(latents)).cpu().numpy()
        has_metadata = any(metadata)
        total = torch.zeros(len(prompts), dtype=torch.float64)
        for reward in self.rewards:
            values = torch.tensor(
                reward(media, prompts, metadata if has_metadata else None), dtype=torch.float64
            )
            self._metrics[f"rewards/{reward.name}"].append(values.mean().item())
            total += reward.weight * values.clamp(-REWARD_CLIP, REWARD_CLIP)
        total = total.clamp(-REWARD_CLIP, REWARD_CLIP)
        self._metrics["reward"].append(total.mean().item())
        self._metrics["reward_std"].append(total.std().item())
        return (
            group_advantages(total, self.rollout_config.samples_per_prompt, self.rollout_config.global_std)
            .float()
            .to(latents.device)
        )

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        for key, values in self._metrics.items():
            logs[key] = sum(values) / len(values)
        self._metrics.clear()
        super().log(logs, start_time)


class RolloutPrompts(torch.utils.data.Dataset):
    """The prompts, repeated so that every epoch holds whole rollouts on every process.

    The Trainer draws one batch of prompts per micro-step, but a rollout samples only at the first
    micro-step of each optimizer step (the others train on its micro-batches). Repeating each prompt
    `gradient_accumulation_steps` times, padded to whole batches on every process, keeps every epoch a
    whole number of optimizer steps, and the shuffled repeats keep prompts drawn uniformly."""

    def __init__(self, prompts, args):
        self.prompts = prompts
        per_step = args.per_device_train_batch_size * max(args.world_size, 1)
        steps = math.ceil(len(prompts) / per_step)
        self.length = steps * per_step * args.gradient_accumulation_steps

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        return self.prompts[index % len(self.prompts)]


def run_diffusion_rl(job: Job, callbacks: list | None = None) -> DiffusionRLTrainer:
    """Run a diffusion RL job with its kind's trainer class; the trained pipeline (or LoRA) is under
    `output_dir/safetensors/`."""
    trainer = build_diffusion_rl_trainer(job, callbacks)
    train_and_save(trainer, job)
    return trainer


def build_diffusion_rl_trainer(job: Job, callbacks: list | None = None) -> DiffusionRLTrainer:
    """The job's rewards, pipeline, prompts and trainer, ready to train (rewards first: a reward that cannot load
    fails before the model does)."""
    from ..data import collate_prompts, load_prompt_list
    from ..rewards import build_media_rewards, reward_specs

    config = job.config
    rewards = build_media_rewards(reward_specs(config.rewards), search_path=Path(job.source).parent)
    adapter, lora = load_for_training(job)
    prompts, report = load_prompt_list(config.data)
    logger.info("training on %d prompts (%d skipped)", report.kept, report.skipped)
    return job.kind.trainer_class()(
        adapter,
        rewards,
        config,
        lora=lora,
        args=job.args,
        train_dataset=prompts,
        data_collator=collate_prompts,
        callbacks=callbacks,
    )
