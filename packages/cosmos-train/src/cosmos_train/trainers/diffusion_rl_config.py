"""What every diffusion RL job (DiffusionNFT, FlowGRPO, DDRL) shares: its sections, and the gradient accumulation
that makes one optimizer step one rollout.

`[model]` is a diffusers pipeline, `[data]` a prompt list, `[rewards]` image/video rewards and their weights,
`[rollout]` how samples are drawn and scored; each algorithm adds its own section. `[train]` takes
`TrainingArguments` names: `per_device_train_batch_size` is the number of prompts per step and process, and the
gradient accumulation covering the rollout's micro-batches is set by the job.
"""

from __future__ import annotations

import dataclasses
import math

from pydantic import Field, field_validator
from transformers import TrainingArguments

from ..config import ConfigError, JobSchema, LoraSection, PipelineSection, PromptListData, Section
from ..diffusion.adapter import AdapterOptions
from ..rewards import RewardTable, check_reward_table
from .diffusion_config import DiffusionTrainSection, diffusion_training_arguments


class DiffusionRolloutSection(Section):
    """`[rollout]`: how samples are drawn and scored (defaults: DiffusionNFT's)."""

    samples_per_prompt: int = Field(24, ge=2, description="K samples per prompt, normalised as a group.")
    sampling_steps: int = Field(10, gt=0, description="Sampler steps per rollout sample.")
    guidance_scale: float = Field(1.0, ge=1.0, description="Classifier-free guidance; 1 is off.")
    height: int | None = Field(None, gt=0, description="Sample height (default: the pipeline's own).")
    width: int | None = Field(None, gt=0, description="Sample width (default: the pipeline's own).")
    num_frames: int | None = Field(
        None, gt=0, description="Video families: frames (default: the pipeline's)."
    )
    train_batch_size: int = Field(8, gt=0, description="Samples per training forward (a micro-batch).")
    global_std: bool = Field(False, description="Normalise advantages by the batch's std, not the group's.")
    max_sequence_length: int | None = Field(None, gt=0, description="Text tokens (default: the pipeline's).")
    updates_per_rollout: int = Field(
        1, gt=0, description="Optimizer steps per rollout; its micro-batches are split evenly between them."
    )


class DiffusionRLJob(JobSchema):
    """The sections every diffusion RL job has; each algorithm adds its own and says how many timesteps a
    sample trains on (`train_timesteps`)."""

    model: PipelineSection
    lora: LoraSection | None = Field(
        None, description="A PEFT LoRA on the transformer; absent: full fine-tuning."
    )
    data: PromptListData
    rewards: RewardTable = Field(min_length=1, description="Image/video rewards and their weights.")
    rollout: DiffusionRolloutSection = DiffusionRolloutSection()
    train: DiffusionTrainSection

    @field_validator("rewards")
    @classmethod
    def _known_rewards(cls, rewards: RewardTable) -> RewardTable:
        return check_reward_table(rewards, media=True)

    def train_timesteps(self) -> int:
        """Training timesteps per sample and rollout."""
        raise NotImplementedError

    def adapter_options(self) -> AdapterOptions:
        return AdapterOptions(max_sequence_length=self.rollout.max_sequence_length)

    def check_data(self, source: str) -> None:
        from ..data import load_prompt_list

        load_prompt_list(self.data)

    def training_arguments(self, source: str) -> TrainingArguments:
        accumulation = rollout_micro_batches(self, self.train_timesteps(), source)
        return diffusion_training_arguments(self, source, {"gradient_accumulation_steps": accumulation})


def micro_batch_count(rows: int, batch_size: int, steps: int) -> int:
    """Micro-batches per rollout: `steps` training timesteps for each chunk of `batch_size` rows."""
    return steps * math.ceil(rows / batch_size)


def rollout_micro_batches(job: DiffusionRLJob, train_timesteps: int, source: str) -> int:
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
