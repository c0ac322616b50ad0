"""The FlowGRPO job (`kind = "flow-grpo"`): its schema, and its mapping onto transformers' `TrainingArguments`.

`[rollout]` sets the sampling (K samples per prompt, SDE steps, CFG, size); `[flow_grpo]` the algorithm's own
values, with the defaults of the official code (yifan123/flow_grpo `config/grpo.py`; `docs/diffusion-algorithms.md`):
noise level 0.7, clip range 1e-4, KL 0.04 in the reference's scaling, CFG 4.5, two optimizer updates per rollout.

Which SDE steps train (`[flow_grpo]`, at most one of these set):
- `timestep_fraction` (the default, 0.99): the first floor(N x fraction) steps, in order (the last never trains);
- `train_steps = [0, 2, 4]`: exactly these step indices (0 is the first, noisiest step);
- `train_step_stride = 2`: every other step, [0, 2, ..., N - 2];
- `sde_window = 2` (FlowGRPO-Fast): the SDE runs only on a window of this many consecutive steps starting in the
  early half (a random start in [0, N // 2 - window]), the deterministic ODE elsewhere; the window's steps train.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ...config import Section
from ..diffusion_rl.schema import (
    DiffusionRLJob,
    DiffusionRolloutSection,
    RLEvalSection,
    ema_warmup_field,
    eval_field,
)

STEP_CHOICES = ("timestep_fraction", "train_steps", "train_step_stride", "sde_window")


class SDERolloutSection(DiffusionRolloutSection):
    """`[rollout]` for FlowGRPO: SDE steps with per-step log-probs, CFG (the paper's 4.5), two updates a rollout."""

    guidance_scale: float = Field(
        4.5,
        ge=1.0,
        description="Classifier-free guidance, applied identically in the rollout and the training recompute; "
        "1 is off.",
    )
    updates_per_rollout: int = Field(
        2,
        gt=0,
        description="Optimizer steps per rollout, its chunks of samples split evenly between them (the reference: "
        "2, so the clipped ratio acts on the second).",
    )


class FlowGRPOEvalSection(RLEvalSection):
    """`[eval]` for FlowGRPO: at the reference's CFG 4.5 (`scripts/train_sd3.py`'s evaluation samples with
    `config.sample.guidance_scale`, 4.5 in `config/grpo.py`, and `noise_level=0`: the deterministic ODE, as the
    pipeline's own sampler)."""

    guidance_scale: float = Field(
        4.5,
        ge=1.0,
        description="Classifier-free guidance (FlowGRPO evaluates at its rollouts' 4.5; set both when changing "
        "[rollout] guidance_scale); 1 is off.",
    )


class FlowGRPOSection(Section):
    """`[flow_grpo]`: FlowGRPO's own values."""

    noise_level: float = Field(0.7, gt=0, description="a in sigma_t = a * sqrt(t / (1 - t)).")
    clip_range: float = Field(1e-4, gt=0, lt=1, description="The GRPO ratio is clipped to 1 +- this.")
    adv_clip_max: float = Field(5.0, gt=0, description="Advantages are clipped to +-this.")
    kl_beta: float = Field(
        0.04, ge=0, description="Weight of the KL to the frozen base (0.01 for PickScore); 0 turns it off."
    )
    kl_form: Literal["reference", "exact"] = Field(
        "reference",
        description="reference: |mu - mu_ref|^2 / (2 sigma_t^2) with sigma_t WITHOUT sqrt(dt), as the official code "
        "(so kl_beta means the paper's); exact: the Gaussian KL of the step, 1 / |dt| times that.",
    )
    timestep_fraction: float = Field(
        0.99, gt=0, le=1, description="Train the first floor(N x this) SDE steps, in order."
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
        description="FlowGRPO-Fast: SDE on a window of this many consecutive steps starting in the early half, "
        "ODE elsewhere; the window's steps are trained.",
    )
    drop_zero_advantage: bool = Field(
        True,
        description="Leave out samples whose advantage is 0 (a group of equal rewards), re-adding a few at random so "
        "the chunks stay even, as the reference.",
    )
    same_latent: bool = Field(
        False,
        description="One initial noise per prompt group (the reference's option); policy-rl: a start's K episodes "
        "begin each policy call from the same noise, so they differ by the SDE's noise alone.",
    )
    global_std: bool = Field(
        True,
        description="Divide advantages by the std of every process's rewards (numpy's, ddof 0), as the reference; "
        "false: by each prompt group's own std.",
    )
    reward_clip: float | None = Field(
        None,
        gt=0,
        description="Clip each reward and their weighted sum to +-this first; unset: the raw weighted sum.",
    )
    ema_decay: float | None = Field(
        0.9,
        gt=0,
        lt=1,
        description="EMA of the trained weights for evaluation and export; its decay ramps up as "
        "min((1 + step) / (10 + step), ema_decay) (`ema_warmup`).",
    )
    ema_warmup: bool = ema_warmup_field()
    ema_every: int = Field(
        8, gt=0, description="Update the EMA every this many optimizer steps (the reference: 8)."
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

    def trained_steps(self, sampling_steps: int) -> list[int] | None:
        """The trained step indices, the same for every sample (None for FlowGRPO-Fast: its window's)."""
        if self.sde_window is not None:
            return None
        if self.train_steps is not None:
            return sorted(self.train_steps)
        if self.train_step_stride is not None:
            return list(range(0, sampling_steps, self.train_step_stride))
        return list(range(max(1, int(sampling_steps * self.timestep_fraction))))

    def trained_step_count(self, sampling_steps: int) -> int:
        steps = self.trained_steps(sampling_steps)
        return self.sde_window if steps is None else len(steps)

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


class FlowGRPOJob(DiffusionRLJob):
    rollout: SDERolloutSection = SDERolloutSection()
    eval: FlowGRPOEvalSection | None = eval_field()
    flow_grpo: FlowGRPOSection = FlowGRPOSection()

    @model_validator(mode="after")
    def _steps_fit(self):
        try:
            self.flow_grpo.check_steps(self.rollout.sampling_steps)
        except ValueError as error:
            raise ValueError(f"[flow_grpo] {error}") from None
        return self

    def ema_decay(self) -> float | None:
        return self.flow_grpo.ema_decay

    def ema_warmup(self) -> bool:
        return self.flow_grpo.ema_warmup

    def kl_beta(self) -> float:
        return self.flow_grpo.kl_beta

    def train_timesteps(self) -> int:
        return self.flow_grpo.trained_step_count(self.rollout.sampling_steps)
