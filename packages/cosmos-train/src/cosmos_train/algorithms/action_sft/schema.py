"""The Cosmos3 action SFT job (`kind = "action-sft"`): a robot policy, forward dynamics or inverse dynamics post-trained
from a LeRobot dataset, as cosmos-framework's action recipes train them; `[train]` takes `TrainingArguments`.

`[data]` names the dataset's cameras and columns (`LeRobotData`); `[action]` the mode, the chunk, the embodiment
domain and the loss weights. The generator tower trains in full, as the reference trains it (`keys_to_select`), or
as a LoRA (`[lora]`, the generator's attention and MLP by default); the reasoner stays frozen. The action heads
always train in full, at `action_lr_multiplier` times the rate; a LoRA export keeps them beside the LoRA.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from ...config import ActivationBatch, LeRobotData, Section
from ..diffusion.schema import DiffusionJob, DiffusionTrainSection

# The largest canvas of each resolution tier (height, width), for the memory estimate: upstream's
# `_ACTION_RESOLUTION_BINS` (a test compares them).
TIER_LARGEST_CANVAS = {256: (320, 256), 480: (640, 640), 704: (960, 960), 720: (960, 960)}

ACTION_MODES = ("policy", "forward_dynamics", "inverse_dynamics", "joint")


class ActionSection(Section):
    """`[action]`: what the model learns from each window, and how the loss weighs it."""

    mode: Literal["policy", "forward_dynamics", "inverse_dynamics", "joint"] = Field(
        "policy",
        description="policy: future frames and actions from the first frame and the task; forward_dynamics: frames "
        "from the first frame and the actions; inverse_dynamics: actions from the frames; joint: one of the three "
        "per sample, uniformly (cosmos-framework's).",
    )
    chunk_size: int = Field(
        16, gt=0, description="Actions per window (the window has chunk_size + 1 frames)."
    )
    domain: str | int = Field(
        description="The embodiment: a Cosmos3 domain name (libero, droid_lerobot, ...) or its id, which picks "
        "the rows of the domain-aware action projections."
    )
    fps: float | None = Field(
        None,
        gt=0,
        description="Frame rate the actions are placed at and the caption states (default: the dataset's).",
    )
    raw_action_dim: int | None = Field(
        None,
        gt=0,
        description="The action width the loss reads (default: the dataset's, after representation).",
    )
    use_state: bool = Field(
        False,
        description="Put the state (the [data] state_columns) as a clean row before the actions, at offset 0 "
        "(cosmos-framework's DROID policy).",
    )
    resolution_tier: Literal[256, 480, 704, 720] = Field(
        480, description="The canvas tier frames are fitted into (downscaled, never upscaled, then padded)."
    )
    view_point: Literal["ego_view", "third_person_view", "wrist_view", "concat_view"] | None = Field(
        "ego_view", description="The caption's framing sentence (none: left out)."
    )
    video_loss_weight: float = Field(
        10.0, ge=0, description="Weight of the video velocity loss (the recipes': 10)."
    )
    action_loss_weight: float = Field(
        10.0, ge=0, description="Weight of the action velocity loss (the recipes': 10)."
    )
    caption_dropout: float = Field(
        0.1, ge=0, lt=1, description="Train this often on the empty caption, for classifier-free guidance."
    )
    action_lr_multiplier: float = Field(
        5.0,
        gt=0,
        description="The action heads' learning rate over [train] learning_rate (the reference's 5x).",
    )
    action_heads: Literal["load", "fresh"] = Field(
        "load",
        description="load: start from the checkpoint's action heads (forward dynamics recipe); fresh: "
        "re-initialise them as cosmos-framework does (its policy recipes).",
    )
    ema_decay: float | None = Field(
        None, gt=0, lt=1, description="Keep an EMA of the trained weights (used for export)."
    )

    @model_validator(mode="after")
    def _something_to_learn(self):
        if self.video_loss_weight == 0 and self.action_loss_weight == 0:
            raise ValueError("video_loss_weight and action_loss_weight are both 0: nothing would train")
        if self.mode == "forward_dynamics" and self.video_loss_weight == 0:
            raise ValueError("forward_dynamics learns only video: video_loss_weight must be above 0")
        if self.mode == "inverse_dynamics" and self.action_loss_weight == 0:
            raise ValueError("inverse_dynamics learns only actions: action_loss_weight must be above 0")
        return self


class ActionSFTJob(DiffusionJob):
    data: LeRobotData
    action: ActionSection
    train: DiffusionTrainSection

    pipeline_classes: ClassVar[tuple[str, ...]] = ("Cosmos3OmniPipeline",)
    # cosmos-framework's optimizer for its action recipes: AdamW betas (0.9, 0.99), eps 1e-8, weight decay 0.05,
    # gradient clipping at 1.
    train_defaults: ClassVar[dict[str, Any]] = {
        "adam_beta2": 0.99,
        "adam_epsilon": 1e-8,
        "weight_decay": 0.05,
        "max_grad_norm": 1.0,
    }

    @model_validator(mode="after")
    def _sections_agree(self):
        if self.action.use_state and not self.data.state_columns:
            raise ValueError("[action] use_state needs [data] state_columns")
        needed = {"single": 1, "wrist_over_pair": 3}.get(self.data.layout)
        if needed is not None and len(self.data.cameras) != needed:
            raise ValueError(
                f"[data] layout = {self.data.layout!r} takes {needed} camera(s), got {len(self.data.cameras)}"
            )
        if self.data.layout == "side_by_side" and len(self.data.cameras) < 2:
            raise ValueError("[data] layout = 'side_by_side' takes at least 2 cameras")
        return self

    def ema_decay(self) -> float | None:
        return self.action.ema_decay

    def sample_size(self, family, pipeline_size=(None, None, None), max_side=None):
        height, width = TIER_LARGEST_CANVAS[self.action.resolution_tier]
        return height, width, self.action.chunk_size + 1

    def activation_batch(
        self, args: Any, family: Any = None, configured: tuple | None = None
    ) -> ActivationBatch:
        return ActivationBatch(args.per_device_train_batch_size, size=self.sample_size(family))

    def fully_trained_parameters(self) -> str | None:
        from diffusers_cosmos3.actions import ACTION_HEAD  # the action heads, as the trainer trains them

        return ACTION_HEAD.pattern

    def action_domain(self) -> str | int:
        return self.action.domain

    def lerobot_request(self) -> dict[str, Any]:
        """What the dataset must hold for this job, as `cosmos_train.data.lerobot.ActionSpec`'s fields."""
        data = self.data
        return {
            "cameras": tuple(data.cameras),
            "action_columns": tuple(data.action_columns),
            "state_columns": tuple(data.state_columns) if self.action.use_state else (),
            "chunk_size": self.action.chunk_size,
            "layout": data.layout,
            "representation": data.representation,
            "normalization": data.normalization,
            "tolerance_s": data.tolerance_s,
        }
