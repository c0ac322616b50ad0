"""The flow-matching SFT job (`kind = "diffusion-sft"`): its schema, and its mapping onto transformers'
`TrainingArguments`.

`[train]` takes `TrainingArguments` fields verbatim. `[diffusion]` holds what they lack: the timestep
density, the loss weighting, the EMA, text dropout, the video conditioning mix and validation samples.
`[model] name_or_path` is a diffusers pipeline (hub id or folder); its `_class_name` picks the adapter.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ...config import CONDITIONING_MODES, ActivationBatch, PairData, Section
from ..diffusion.schema import DiffusionJob, DiffusionTrainSection


class DiffusionSection(Section):
    """`[diffusion]`: flow-matching choices `TrainingArguments` lacks (diffusers.training_utils names)."""

    timestep_density: Literal["logit_normal", "mode", "uniform"] = Field(
        "logit_normal", description="How training noise levels are drawn (before the model's time shift)."
    )
    logit_mean: float = Field(0.0, description="logit_normal: the mean of the normal.")
    logit_std: float = Field(1.0, gt=0, description="logit_normal: the std of the normal.")
    mode_scale: float = Field(1.29, description="mode: the density's scale.")
    loss_weighting: Literal["none", "sigma_sqrt", "cosmap"] = Field(
        "none", description="Per-sample loss weights (diffusers' compute_loss_weighting_for_sd3)."
    )
    ema_decay: float | None = Field(
        None, gt=0, lt=1, description="Keep an EMA of the trained weights (used for validation and export)."
    )
    text_dropout: float = Field(0.0, ge=0, lt=1, description="Drop the caption this often (for CFG).")
    conditioning_mix: dict[str, float] = Field(
        default_factory=lambda: {"t2v": 1.0},
        description="Video families: how often each mode (t2v, i2v, v2v) is trained; normalised.",
    )
    max_sequence_length: int | None = Field(None, gt=0, description="Text tokens (default: the pipeline's).")
    validation_prompts: list[str] = Field(
        default_factory=list, description="Prompts of the validation samples."
    )
    validation_steps: int | None = Field(None, gt=0, description="Generate validation samples every N steps.")
    validation_inference_steps: int = Field(20, gt=0, description="Sampler steps of the validation samples.")
    validation_guidance_scale: float | None = Field(None, ge=0, description="Default: the pipeline's.")
    validation_seed: int = Field(0, ge=0, description="Prompt i samples with seed validation_seed + i.")

    @field_validator("conditioning_mix")
    @classmethod
    def _known_modes(cls, mix: dict[str, float]) -> dict[str, float]:
        for mode, weight in mix.items():
            if mode not in CONDITIONING_MODES:
                raise ValueError(
                    f"unknown conditioning mode '{mode}'; expected {', '.join(CONDITIONING_MODES)}"
                )
            if not isinstance(weight, int | float) or weight < 0:
                raise ValueError(f"weight of '{mode}' must be a number >= 0 (got {weight!r})")
        if not any(mix.values()):
            raise ValueError("needs at least one mode with a positive weight")
        return mix

    @model_validator(mode="after")
    def _validation_needs_prompts(self):
        if self.validation_steps and not self.validation_prompts:
            raise ValueError("validation_steps is set but validation_prompts is empty")
        return self


class DiffusionSFTJob(DiffusionJob):
    data: PairData
    diffusion: DiffusionSection = Field(DiffusionSection(), description=DiffusionSection.__doc__)
    train: DiffusionTrainSection

    def ema_decay(self) -> float | None:
        return self.diffusion.ema_decay

    def sample_size(self, family, pipeline_size=(None, None, None), max_side=None):
        return self.data.height, self.data.width, self.data.num_frames

    def activation_batch(
        self, args: Any, family: Any = None, configured: tuple | None = None
    ) -> ActivationBatch:
        size = (self.data.height, self.data.width, self.data.num_frames)
        return ActivationBatch(
            args.per_device_train_batch_size, size=size, text_tokens=self.diffusion.max_sequence_length
        )
