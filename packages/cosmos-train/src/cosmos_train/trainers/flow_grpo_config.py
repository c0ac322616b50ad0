"""The FlowGRPO job (`kind = "flow-grpo"`): its schema, and its mapping onto transformers' `TrainingArguments`.

`[rollout]` sets the sampling (K samples per prompt, SDE steps, CFG, size); `[flow_grpo]` the algorithm's own
values, with the paper's defaults (`docs/diffusion-algorithms.md`): noise level 0.7, clip range 1e-4, KL 0.04,
CFG 4.5. One optimizer step is one rollout (`diffusion_rl_config.py`).

Which SDE steps train (`[flow_grpo]`, at most one of these set):
- `timestep_fraction` (FlowGRPO's default, 0.99): each chunk of samples trains a random share of the steps;
- `train_steps = [0, 2, 4]`: exactly these step indices (0 is the first, noisiest step);
- `train_step_stride = 2`: every other step, [0, 2, ..., N - 2] (DDRL's default);
- `sde_window = 2` (FlowGRPO-Fast): the SDE runs only on a random window of this many consecutive steps per
  rollout, the deterministic ODE elsewhere, and the window's steps are the ones trained.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator

from ..config import Section
from .diffusion_rl_config import DiffusionRLJob, DiffusionRolloutSection

STEP_CHOICES = ("timestep_fraction", "train_steps", "train_step_stride", "sde_window")


class SDERolloutSection(DiffusionRolloutSection):
    """`[rollout]` for FlowGRPO-style sampling: SDE steps with per-step log-probs, CFG allowed (the paper's 4.5)."""

    guidance_scale: float = Field(
        4.5,
        ge=1.0,
        description="Classifier-free guidance, applied identically in the rollout and the training recompute; "
        "1 is off.",
    )


class FlowGRPOSection(Section):
    """`[flow_grpo]`: FlowGRPO's own values."""

    noise_level: float = Field(0.7, gt=0, description="a in sigma_t = a * sqrt(t / (1 - t)).")
    clip_range: float = Field(1e-4, gt=0, lt=1, description="The GRPO ratio is clipped to 1 +- this.")
    adv_clip_max: float = Field(5.0, gt=0, description="Advantages are clipped to +-this.")
    kl_beta: float = Field(
        0.04, ge=0, description="Weight of the KL to the frozen base (0.01 for PickScore); 0 turns it off."
    )
    timestep_fraction: float = Field(
        0.99,
        gt=0,
        le=1,
        description="Share of the SDE steps each chunk of samples trains (random per chunk).",
    )
    train_steps: list[int] | None = Field(
        None, min_length=1, description="Train exactly these SDE step indices (0 = the first, noisiest step)."
    )
    train_step_stride: int | None = Field(
        None, gt=0, description="Train steps 0, stride, 2 * stride, ... (2: every other step)."
    )
    sde_window: int | None = Field(
        None,
        gt=0,
        description="FlowGRPO-Fast: SDE on a random window of this many consecutive steps, ODE elsewhere; "
        "the window's steps are trained.",
    )
    ema_decay: float | None = Field(
        0.9, gt=0, lt=1, description="EMA of the trained weights for evaluation and export."
    )

    @model_validator(mode="after")
    def _one_step_choice(self):
        chosen = [name for name in STEP_CHOICES if name in self.model_fields_set and getattr(self, name)]
        if len(chosen) > 1:
            raise ValueError(f"set at most one of {', '.join(STEP_CHOICES)} (got {', '.join(chosen)})")
        if self.train_steps is not None:
            if any(step < 0 for step in self.train_steps):
                raise ValueError("train_steps must be step indices >= 0")
            if len(set(self.train_steps)) != len(self.train_steps):
                raise ValueError("train_steps has repeated steps")
        return self

    def step_choice(self) -> str:
        """Which of `STEP_CHOICES` decides the trained steps (the one set, else the kind's default)."""
        if self.sde_window is not None:
            return "sde_window"
        if self.train_steps is not None:
            return "train_steps"
        if self.train_step_stride is not None and "timestep_fraction" not in self.model_fields_set:
            return "train_step_stride"
        return "timestep_fraction"

    def trained_step_count(self, sampling_steps: int) -> int:
        choice = self.step_choice()
        if choice == "sde_window":
            return self.sde_window
        if choice == "train_steps":
            return len(self.train_steps)
        if choice == "train_step_stride":
            return len(range(0, sampling_steps, self.train_step_stride))
        return max(1, int(sampling_steps * self.timestep_fraction))

    def check_steps(self, sampling_steps: int) -> None:
        if self.train_steps is not None and max(self.train_steps) >= sampling_steps:
            raise ValueError(
                f"train_steps {max(self.train_steps)} is past the last SDE step "
                f"({sampling_steps - 1}, [rollout] sampling_steps = {sampling_steps})"
            )
        if self.sde_window is not None and self.sde_window > sampling_steps:
            raise ValueError(
                f"sde_window {self.sde_window} is longer than [rollout] sampling_steps ({sampling_steps})"
            )


class SDEPolicyJob(DiffusionRLJob):
    """What FlowGRPO and DDRL jobs share; each kind adds its algorithm section and names it `algorithm`."""

    rollout: SDERolloutSection = SDERolloutSection()

    algorithm_section: ClassVar[str]  # the algorithm's section name

    @property
    def algorithm(self) -> FlowGRPOSection:
        return getattr(self, self.algorithm_section)

    @model_validator(mode="after")
    def _steps_fit(self):
        try:
            self.algorithm.check_steps(self.rollout.sampling_steps)
        except ValueError as error:
            raise ValueError(f"[{self.algorithm_section}] {error}") from None
        return self

    def train_timesteps(self) -> int:
        return self.algorithm.trained_step_count(self.rollout.sampling_steps)


class FlowGRPOJob(SDEPolicyJob):
    algorithm_section = "flow_grpo"
    flow_grpo: FlowGRPOSection = FlowGRPOSection()
