"""The DDRL job (`kind = "ddrl"`, Ye et al. 2025): its schema, with cosmos-rl's DDRL defaults
(`configs/cosmos-predict2-5/*-ddrl.toml`, `cosmos_rl/policy/config/wfm` `RLConfig`).

DDRL reads DATA, not a prompt list: `[data]` is the diffusion-SFT data section (a folder of pairs, the
Cosmos-Predict2.5 `videos/` + `metas/` layout, or a datasets source). Each rollout takes a batch of data items:
their captions are the prompts, their first latent frame(s) condition the rollouts of video families (0 or 1
frames, drawn per batch from `[ddrl] min/max_num_conditional_frames`), and the same items make the data term.
The rollouts sample at `[data]`'s size. `[ddrl]` holds the algorithm's values; `[train]` defaults to cosmos-rl's
optimizer (lr 1e-5, 50 warm-up steps then constant, weight decay 1e-4, Adam beta2 0.99).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, model_validator

from ...config import PairData, Section
from ..diffusion_rl.schema import DiffusionRLJob, RolloutSection


class DDRLRolloutSection(RolloutSection):
    """`[rollout]` with cosmos-rl's DDRL values: K = 8, 20 steps of the "2ab" sampler, CFG off, one update."""

    samples_per_prompt: int = Field(8, ge=2, description="K samples per data item, normalised as a group.")
    sampling_steps: int = Field(
        20, gt=0, description="Stochastic steps of the 2ab sampler (then one final denoising call)."
    )
    guidance_scale: float = Field(1.0, ge=1.0, description="DDRL samples without guidance; must be 1.")

    @model_validator(mode="before")
    @classmethod
    def _sampled_at_the_datas_size(cls, values):
        sized = [
            key for key in ("height", "width", "num_frames") if isinstance(values, dict) and key in values
        ]
        if sized:
            raise ValueError(
                f"{sized[0]}: DDRL samples at [data]'s size (height, width, num_frames); set it there"
            )
        return values

    @model_validator(mode="after")
    def _guidance_off(self):
        if self.guidance_scale != 1.0:
            raise ValueError("guidance_scale: DDRL samples without classifier-free guidance; set it to 1.0")
        return self


class DDRLSection(Section):
    """`[ddrl]`: DDRL's own values (cosmos-rl's names where it has them)."""

    s_churn: float = Field(
        1.0, ge=0, description="EDM churn of the sampler: eta = min(s_churn / (N + 1), sqrt(1.2) - 1)."
    )
    clip_range: float = Field(1e-4, gt=0, lt=1, description="The ratio is clipped to 1 +- this (clip_ratio).")
    adv_clip_max: float = Field(5.0, gt=0, description="Advantages are clipped to +-this.")
    kl_beta: float = Field(
        0.0,
        ge=0,
        description="Weight of mean |mu_theta - mu_ref|^2 to the frozen base; DDRL replaces it with data.",
    )
    train_steps: list[int] | None = Field(
        None,
        min_length=1,
        description="Train exactly these sampler steps (default: every other one, train_on).",
    )
    train_step_stride: int = Field(
        2, gt=0, description="Train steps 0, stride, 2 * stride, ... (cosmos-rl's train_on)."
    )
    data_beta: float = Field(
        0.01, ge=0, description="Weight of the EDM-weighted data term on the rollout's data."
    )
    use_rl_sigma_and_noise: bool = Field(
        True,
        description="The data term noises the data at the trained step's level with the rollout's initial noise.",
    )
    data_on_first_only: bool = Field(
        False,
        description="The data term only at the sampler's first step (index 0), not at every trained step.",
    )
    caption_dropout: float = Field(
        0.2,
        ge=0,
        lt=1,
        description="The data term zeroes a row's text embedding this often (its conditioner's).",
    )
    min_num_conditional_frames: int = Field(
        0,
        ge=0,
        description="Video families: the fewest clean leading latent frames conditioning a data item.",
    )
    max_num_conditional_frames: int = Field(1, ge=0, description="Video families: the most (0 t2v, 1 i2v).")
    exp_reward: bool = Field(False, description="Advantages A become -exp(-A) (cosmos-rl's exp_reward).")
    use_same_seed: bool = Field(
        False,
        description="One initial noise per data item's K rollouts (cosmos-rl's DDRL configs: false, each rollout "
        "its own noise).",
    )
    loss_scale: float = Field(
        10.0, gt=0, description="The whole loss is multiplied by this (cosmos-rl's 10)."
    )
    ema_decay: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="Keep an EMA of the trained weights for evaluation and export (default: none, export the "
        "trained weights).",
    )

    @model_validator(mode="after")
    def _steps_and_frames(self):
        if self.min_num_conditional_frames > self.max_num_conditional_frames:
            raise ValueError(
                f"min_num_conditional_frames {self.min_num_conditional_frames} > max_num_conditional_frames "
                f"{self.max_num_conditional_frames}"
            )
        steps = self.train_steps
        if steps is not None and (any(step < 0 for step in steps) or len(set(steps)) != len(steps)):
            raise ValueError("train_steps must be distinct step indices >= 0")
        return self

    def trained_steps(self, sampling_steps: int) -> list[int]:
        if self.train_steps is not None:
            return sorted(self.train_steps)
        return list(range(0, sampling_steps, self.train_step_stride))


class DDRLJob(DiffusionRLJob):
    data: PairData = Field(
        description="The data: captions are the prompts, and the data term's images or videos."
    )
    rollout: DDRLRolloutSection = DDRLRolloutSection()
    ddrl: DDRLSection = DDRLSection()

    train_defaults: ClassVar[dict[str, Any]] = {
        "learning_rate": 1e-5,
        "lr_scheduler_type": "constant_with_warmup",
        "warmup_steps": 50,
        "weight_decay": 1e-4,
        "adam_beta2": 0.99,
        "max_grad_norm": 1.0,
    }

    @model_validator(mode="after")
    def _steps_fit(self):
        steps = self.rollout.sampling_steps
        if max(self.ddrl.trained_steps(steps)) >= steps:
            raise ValueError(
                f"[ddrl] train_steps {max(self.ddrl.trained_steps(steps))} is past the last sampler step "
                f"({steps - 1}, [rollout] sampling_steps = {steps})"
            )
        return self

    def train_timesteps(self) -> int:
        return len(self.ddrl.trained_steps(self.rollout.sampling_steps))

    def ema_decay(self) -> float | None:
        return self.ddrl.ema_decay

    def kl_beta(self) -> float:
        return self.ddrl.kl_beta

    size_keys: ClassVar[tuple[str, str]] = ("[data] height", "[data] width")

    def sample_size(
        self, family: Any, pipeline_size: tuple = (None, None, None), max_side: int | None = None
    ):
        """The rollouts sample at `[data]`'s size (its frames for a video family)."""
        return self.data.height, self.data.width, self.data.num_frames if family.video else None
