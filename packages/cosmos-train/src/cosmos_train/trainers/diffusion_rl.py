"""What the online diffusion RL trainers (DiffusionNFT, FlowGRPO, DDRL) share, on `DiffusionTrainer`.

One optimizer step is one rollout, told the way TRL's GRPOTrainer tells it:
1. `_prepare_inputs` takes a batch of prompts; at the start of each step it samples K images or videos per
   prompt (`rollout`, written by each algorithm), decodes and scores them with the job's rewards, turns the
   rewards into group-normalised advantages, and cuts the result into micro-batches (`micro_batches`);
   every call returns the next micro-batch, so the Trainer's gradient accumulation covers one rollout;
2. `compute_loss` (each algorithm's) trains on one micro-batch.
Rewards, advantages, the EMA, checkpoints, exports and logging are shared here and in `diffusion_common`.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import math
from collections import defaultdict
from typing import Any, Literal

import torch
from pydantic import Field, field_validator
from transformers import TrainingArguments

from ..config import ConfigError, LoraSection, PromptListData, Section
from ..diffusion.sampling import SOLVERS, Guidance, to_uint8_media
from ..rewards import RewardSpec, check_reward
from .diffusion_common import DiffusionTrainer
from .diffusion_config import PipelineSection
from .grpo_config import RewardEntry

logger = logging.getLogger(__name__)

REWARD_CLIP = 5.0  # each reward, and their weighted sum, is clipped to +-5 (`diffusion-rl.md`)


class RolloutSection(Section):
    """`[rollout]`: how samples are drawn and scored (defaults: DiffusionNFT's, `diffusion-rl.md`)."""

    samples_per_prompt: int = Field(24, ge=2, description="K samples per prompt, normalised as a group.")
    sampling_steps: int = Field(10, gt=0, description="Sampler steps per rollout sample.")
    solver: Literal[SOLVERS] = Field(
        "heun", description="Deterministic ODE solver (DiffusionNFT's rollouts)."
    )
    guidance_scale: float = Field(1.0, ge=1.0, description="Classifier-free guidance; 1 is off.")
    height: int | None = Field(None, gt=0, description="Default: the pipeline's own default size.")
    width: int | None = Field(None, gt=0)
    num_frames: int | None = Field(None, gt=0, description="Video families; default: the pipeline's.")
    train_batch_size: int = Field(8, gt=0, description="Samples per training forward (a micro-batch).")
    global_std: bool = Field(False, description="Normalise advantages by the batch's std, not the group's.")
    max_sequence_length: int | None = Field(None, gt=0, description="Text tokens (default: the pipeline's).")
    updates_per_rollout: int = Field(
        1, gt=0, description="Optimizer steps per rollout; its micro-batches are split evenly between them."
    )


def check_media_rewards(rewards: dict[str, Any]) -> dict[str, Any]:
    for name, entry in rewards.items():
        check_reward(name, None if isinstance(entry, float) else dict(entry.model_extra or {}), media=True)
    return rewards


def reward_specs(rewards: dict[str, float | RewardEntry]) -> list[RewardSpec]:
    return [
        RewardSpec(name, entry, {})
        if isinstance(entry, float)
        else RewardSpec(name, entry.weight, dict(entry.model_extra or {}))
        for name, entry in rewards.items()
    ]


class DiffusionRLSections(Section):
    """The sections every diffusion RL job has, besides its algorithm's own and `[train]`."""

    model: PipelineSection
    lora: LoraSection | None = None
    data: PromptListData
    rewards: dict[str, float | RewardEntry] = Field(min_length=1)
    rollout: RolloutSection = RolloutSection()

    _check_rewards = field_validator("rewards")(
        classmethod(lambda cls, rewards: check_media_rewards(rewards))
    )


def group_advantages(rewards: torch.Tensor, group_size: int, global_std: bool = False) -> torch.Tensor:
    """(R - mean of the prompt's K samples) / (std + 1e-4); rows are grouped K by K, in order."""
    groups = rewards.reshape(-1, group_size)
    std = rewards.std() if global_std else groups.std(dim=1, keepdim=True)
    return ((groups - groups.mean(dim=1, keepdim=True)) / (std + 1e-4)).reshape(-1)


class DiffusionRLTrainer(DiffusionTrainer):
    """Rollout -> rewards -> advantages -> micro-batches, on transformers' `Trainer`. Subclasses write
    `rollout(prompts, metadata)`, `micro_batches(rollout)` and `compute_loss`."""

    def __init__(
        self,
        adapter,
        rewards: list,
        rollout: RolloutSection,
        train_dataset,
        args,
        kl_beta: float = 0.0,
        **kwargs,
    ):
        super().__init__(adapter, train_dataset=RolloutPrompts(train_dataset, args), args=args, **kwargs)
        # The frozen base for a KL term: a LoRA reaches it by disabling its adapters, full fine-tuning keeps a copy.
        self.base_copy = None
        if kl_beta > 0 and self.lora is None:
            self.base_copy = copy.deepcopy(adapter.transformer).requires_grad_(False).eval()
        self.rewards = rewards
        self.rollout_config = rollout
        height, width, frames = adapter.default_size()
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

    def reference(self):
        """The frozen base model (for a KL term), as a context giving the module to call."""
        if self.base_copy is not None:
            return contextlib.nullcontext(self.base_copy)
        return adapters_disabled(self.adapter.transformer)

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


@contextlib.contextmanager
def adapters_disabled(transformer):
    transformer.disable_adapters()
    try:
        yield transformer
    finally:
        transformer.enable_adapters()


def micro_batch_count(rows: int, batch_size: int, steps: int) -> int:
    """Micro-batches per rollout: `steps` training timesteps for each chunk of `batch_size` rows."""
    return steps * math.ceil(rows / batch_size)


def rollout_micro_batches(job, train_timesteps: int, source: str) -> int:
    """The gradient accumulation of one optimizer step: a rollout's micro-batches over its updates. Raises
    ConfigError (one line) when they do not split evenly, or checkpoints would fall inside a rollout."""
    defaults = {f.name: f.default for f in dataclasses.fields(TrainingArguments)}
    prompts = job.train.per_device_train_batch_size or defaults["per_device_train_batch_size"]
    rows = prompts * job.rollout.samples_per_prompt
    count = micro_batch_count(rows, job.rollout.train_batch_size, train_timesteps)
    updates = job.rollout.updates_per_rollout
    if count % updates:
        raise ConfigError(
            f"{source}: [rollout] updates_per_rollout = {updates} must divide the rollout's {count} micro-batches "
            f"(trained timesteps x chunks of train_batch_size samples)"
        )
    save_steps = job.train.save_steps
    # save_steps below 1 is a fraction of the run, which lands where it may: refuse it with several updates.
    if updates > 1 and save_steps is not None and (save_steps < 1 or int(save_steps) % updates):
        raise ConfigError(
            f"{source}: [train] save_steps = {save_steps:g} must be a multiple of [rollout] updates_per_rollout = {updates}, "
            "so checkpoints fall between rollouts (resume restarts at a rollout)"
        )
    return count // updates
