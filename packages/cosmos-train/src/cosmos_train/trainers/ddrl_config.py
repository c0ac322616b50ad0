"""The DDRL job (`kind = "ddrl"`, Ye et al. 2025): FlowGRPO's job with cosmos-rl's DDRL defaults, plus real data.

`[ddrl]` takes every `[flow_grpo]` key (defaults: kl_beta 0, every other of the 20 SDE steps trained) and the
data term's own: `data_beta` (0.01) times the flow-matching loss on a batch of `[real_data]` (the diffusion-SFT
data section: a folder of pairs, the Cosmos-Predict2.5 `videos/` + `metas/` layout, or a datasets source),
`use_rl_sigma_and_noise`, `data_on_first_only`, and the t2v / i2v mixture of the data term for video
families through `min_num_conditional_frames` / `max_num_conditional_frames` (0 / 1). `[rollout]` defaults
to K = 8, 20 steps and CFG off, as cosmos-rl's DDRL config.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from ..config import PairData
from ..diffusion.adapter import CONDITIONING_MODES, AdapterOptions
from .flow_grpo_config import FlowGRPOSection, SDEPolicyJob, SDERolloutSection


class DDRLRolloutSection(SDERolloutSection):
    """`[rollout]` with cosmos-rl's DDRL defaults: K = 8, 20 SDE steps, CFG off."""

    samples_per_prompt: int = Field(8, ge=2, description="K samples per prompt, normalised as a group.")
    sampling_steps: int = Field(20, gt=0, description="SDE steps per rollout sample.")
    guidance_scale: float = Field(
        1.0, ge=1.0, description="Classifier-free guidance; DDRL samples without (1)."
    )


class DDRLSection(FlowGRPOSection):
    """`[ddrl]`: FlowGRPO's values with DDRL's defaults, and the data term's."""

    kl_beta: float = Field(
        0.0, ge=0, description="Reverse KL to the frozen base; DDRL replaces it with data."
    )
    train_step_stride: int | None = Field(
        2, gt=0, description="Train steps 0, 2, 4, ... (cosmos-rl's train_on)."
    )
    data_beta: float = Field(0.01, ge=0, description="Weight of the flow-matching loss on [real_data].")
    use_rl_sigma_and_noise: bool = Field(
        True, description="The data loss uses the micro-batch's rollout sigma and initial noise."
    )
    data_on_first_only: bool = Field(
        False, description="Add the data loss only on each chunk's first trained step (not on every step)."
    )
    min_num_conditional_frames: int = Field(
        0,
        ge=0,
        le=2,
        description="The data term's fewest clean frames: 0 t2v, 1 i2v, 2 v2v (video families).",
    )
    max_num_conditional_frames: int = Field(1, ge=0, le=2, description="The data term's most clean frames.")

    @model_validator(mode="after")
    def _frames_range(self):
        if self.min_num_conditional_frames > self.max_num_conditional_frames:
            raise ValueError(
                f"min_num_conditional_frames {self.min_num_conditional_frames} > max_num_conditional_frames "
                f"{self.max_num_conditional_frames}"
            )
        return self

    def conditioning_mix(self) -> dict[str, float]:
        """Each number of conditional frames in [min, max] equally often, as the adapters' mix (0 clean frames is
        t2v, 1 i2v, 2 v2v)."""
        counts = range(self.min_num_conditional_frames, self.max_num_conditional_frames + 1)
        return {CONDITIONING_MODES[count]: 1.0 for count in counts}


class DDRLJob(SDEPolicyJob):
    algorithm_section = "ddrl"
    rollout: DDRLRolloutSection = DDRLRolloutSection()
    ddrl: DDRLSection = DDRLSection()
    real_data: PairData | None = Field(None, description="The data term's image/video + caption pairs.")

    def adapter_options(self) -> AdapterOptions:
        """The data term's t2v / i2v mixture (rollouts sample text-to-image/video)."""
        return AdapterOptions(
            conditioning_mix=self.ddrl.conditioning_mix(),
            max_sequence_length=self.rollout.max_sequence_length,
        )

    def check_data(self, source: str) -> None:
        super().check_data(source)
        if self.real_data is not None:
            from ..data import load_pairs

            load_pairs(self.real_data, video=self.model.adapter_class().video)

    @model_validator(mode="after")
    def _data_for_the_data_term(self):
        if self.ddrl.data_beta > 0 and self.real_data is None:
            raise ValueError("[ddrl] data_beta > 0 needs a [real_data] section (path, height, width)")
        return self
