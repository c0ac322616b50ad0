"""The DiffusionNFT job (`kind = "nft"`): its schema, and its mapping onto transformers' `TrainingArguments`.

`[rollout]` sets the sampling (K samples per prompt, steps, solver, size); `[nft]` the algorithm's own
values, with the paper's defaults (`diffusion-rl.md`). One optimizer step is one rollout: `[train]
per_device_train_batch_size` is the number of prompts per step and device, and the gradient accumulation
covering the rollout's micro-batches is set by the job.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator
from transformers import TrainingArguments

from ..config import JobSchema, Section
from .diffusion_config import DiffusionTrainSection, diffusion_training_arguments
from .diffusion_rl import DiffusionRLSections, rollout_micro_batches


class NFTSection(Section):
    """`[nft]`: DiffusionNFT's own values."""

    beta: float = Field(
        1.0, gt=0, description="Mixing of the implicit positive/negative policies (0.1 for OCR)."
    )
    kl_beta: float = Field(1e-4, ge=0, description="Weight of the KL term to the frozen base model.")
    adv_clip_max: float = Field(
        5.0, gt=0, description="Advantages are clipped to +-this, then mapped to [0, 1]."
    )
    timestep_fraction: float = Field(
        0.99, gt=0, le=1, description="Share of the sampler's timesteps trained."
    )
    decay_type: Literal[0, 1, 2] = Field(
        1, description="How the old (sampling) policy lags: 0 none, 1 min(0.001 step, 0.5), 2 OCR's schedule."
    )
    ema_decay: float | None = Field(
        0.9,
        gt=0,
        lt=1,
        description="EMA of the trained weights for evaluation and export (not the old policy).",
    )


class NFTJob(JobSchema, DiffusionRLSections):
    kind: Literal["nft"] = "nft"
    nft: NFTSection = NFTSection()
    train: DiffusionTrainSection

    @model_validator(mode="after")
    def _guidance_off(self):
        if self.rollout.guidance_scale != 1.0:
            raise ValueError(
                "DiffusionNFT samples without classifier-free guidance: set [rollout] guidance_scale = 1.0"
            )
        return self

    def train_timesteps(self) -> int:
        return max(1, int(self.rollout.sampling_steps * self.nft.timestep_fraction))

    def training_arguments(self, source: str) -> TrainingArguments:
        return diffusion_training_arguments(
            self,
            source,
            {"gradient_accumulation_steps": rollout_micro_batches(self, self.train_timesteps(), source)},
        )
