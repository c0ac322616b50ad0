"""The DiffusionNFT job (`kind = "nft"`): its schema, and its mapping onto transformers' `TrainingArguments`.

`[rollout]` sets the sampling (K samples per prompt, steps, solver, size); `[nft]` the algorithm's own values,
with the defaults of the official code (NVlabs/DiffusionNFT `config/nft.py`; `docs/diffusion-algorithms.md`). One
rollout feeds `[rollout] updates_per_rollout` optimizer steps (1, as the reference; `diffusion_rl/schema.py`).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from ...config import SOLVERS, Section
from ..diffusion_rl.schema import (
    DiffusionRLJob,
    DiffusionRolloutSection,
    RLEvalSection,
    ema_warmup_field,
    eval_field,
)

ADV_MODES = ("all", "positive_only", "negative_only", "one_only", "binary")


class NFTRolloutSection(DiffusionRolloutSection):
    """`[rollout]` for DiffusionNFT: a deterministic ODE solver on the pipeline's noise grid, guidance off."""

    solver: Literal[SOLVERS] | None = Field(
        None,
        description="The rollouts' ODE solver: dpm2 (DPM-Solver++(2M), one model call a step), euler, heun (two "
        "calls a step) or pipeline (its own scheduler). Default: the family's, as the references (dpm2 for SD3 "
        "and Cosmos, euler for SANA).",
    )


class NFTEvalSection(RLEvalSection):
    """`[eval]` for DiffusionNFT: without guidance, as the reference evaluates (`config/nft.py` sets
    `sample.guidance_scale = 1.0`, which `scripts/train_nft_sd3.py`'s evaluation samples with)."""

    guidance_scale: float = Field(
        1.0,
        ge=1.0,
        description="Classifier-free guidance; 1 is off (DiffusionNFT evaluates without, as it samples).",
    )


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
        description="EMA of the trained weights for evaluation and export (not the old policy); its decay ramps "
        "up as min((1 + step) / (10 + step), ema_decay) (`ema_warmup`).",
    )
    ema_warmup: bool = ema_warmup_field()
    adv_mode: Literal[ADV_MODES] = Field(
        "all",
        description="Which advantages train: all; positive_only / negative_only (the others count as 0); "
        "one_only (1 where positive, else 0); binary (their sign).",
    )
    global_std: bool = Field(
        True,
        description="Divide advantages by the std of every process's rewards (numpy's, ddof 0), as the reference; "
        "false: by each prompt group's own std (cosmos-rl).",
    )
    reward_clip: float | None = Field(
        None,
        gt=0,
        description="Clip each reward and their weighted sum to +-this first (cosmos-rl's remote calculator: 5); "
        "unset: the raw weighted sum, as the reference.",
    )


class NFTJob(DiffusionRLJob):
    rollout: NFTRolloutSection = NFTRolloutSection()
    eval: NFTEvalSection | None = eval_field()
    nft: NFTSection = NFTSection()

    # cosmos-rl's NFT configs where they differ from DiffusionNFT's (SD3) defaults: `configs/cosmos-predict2-5/
    # cosmos-predict2-5-2b-720-nft.toml` (kl_beta 1, n_generation 12), `configs/sana/sana-image-nft.toml` and
    # `sana-video-nft.toml` (LoRA r 4 / alpha 4; video: n_generation 8). A job's own values win.
    family_defaults: ClassVar[dict[str, dict[str, dict[str, Any]]]] = {
        "Cosmos2_5_PredictBasePipeline": {"nft": {"kl_beta": 1.0}, "rollout": {"samples_per_prompt": 12}},
        "SanaPipeline": {"lora": {"r": 4, "alpha": 4}},
        "SanaVideoPipeline": {"lora": {"r": 4, "alpha": 4}, "rollout": {"samples_per_prompt": 8}},
    }

    @model_validator(mode="after")
    def _guidance_off(self):
        if self.rollout.guidance_scale != 1.0:
            raise ValueError(
                "[rollout] guidance_scale: DiffusionNFT samples without classifier-free guidance; set it to 1.0"
            )
        return self

    def ema_decay(self) -> float | None:
        return self.nft.ema_decay

    def ema_warmup(self) -> bool:
        return self.nft.ema_warmup

    def kl_beta(self) -> float:
        return self.nft.kl_beta

    def weight_copies(self) -> tuple[str, ...]:
        return (*super().weight_copies(), "old_policy")  # the lagged policy that samples the rollouts

    def train_timesteps(self) -> int:
        return max(1, int(self.rollout.sampling_steps * self.nft.timestep_fraction))
