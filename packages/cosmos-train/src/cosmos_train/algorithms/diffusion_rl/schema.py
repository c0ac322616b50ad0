"""What every diffusion RL job (DiffusionNFT, FlowGRPO, DDRL) shares: its sections, its `[train]` defaults, and the
gradient accumulation that makes one rollout a whole number of optimizer steps.

`[model]` is a diffusers pipeline, `[data]` the prompts (DDRL: data whose captions are the prompts), `[rewards]`
image/video rewards and their weights, `[rollout]` how samples are drawn and cut into micro-batches, `[eval]`
held-out prompts scored during training; each algorithm adds its own section. `[train]` takes `TrainingArguments`
names: `per_device_train_batch_size` is the number of prompts per rollout and process, and the gradient
accumulation covering the rollout's micro-batches is set by the job.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from ...config import ActivationBatch, LoraSection, PromptListData, RewardTable, Section
from ..diffusion.schema import NOT_CONFIGURED, DiffusionJob, DiffusionTrainSection

# DiffusionNFT's and FlowGRPO's optimizer (`config/base.py`, `config/nft.py`): AdamW at a CONSTANT 3e-4.
REFERENCE_OPTIMIZER: dict[str, Any] = {
    "learning_rate": 3e-4,
    "lr_scheduler_type": "constant",
    "weight_decay": 1e-4,
    "max_grad_norm": 1.0,
}


class RolloutSection(Section):
    """`[rollout]`: how samples are drawn and cut into training micro-batches (defaults: DiffusionNFT's)."""

    samples_per_prompt: int = Field(24, ge=2, description="K samples per prompt, normalised as a group.")
    sampling_steps: int = Field(10, gt=0, description="Sampler steps per rollout sample.")
    guidance_scale: float = Field(1.0, ge=1.0, description="Classifier-free guidance; 1 is off.")
    batched_guidance: bool = Field(
        True,
        description="With guidance, the conditional and unconditional rows in one transformer call, as the "
        "pipelines (same velocity); false: two calls, for less peak memory.",
    )
    max_sequence_length: int | None = Field(
        None,
        gt=0,
        description="Text tokens (default: the family's RL length, 128 for SD3, else the pipeline's).",
    )
    train_batch_size: int = Field(
        8, gt=0, description="Samples per training forward: each rollout is cut into chunks of this many."
    )
    updates_per_rollout: int = Field(
        1,
        gt=0,
        description="Optimizer steps per rollout; its chunks of samples are split evenly between them.",
    )
    sampling_batch_size: int | None = Field(
        None,
        gt=0,
        description="Rows per transformer call while sampling a rollout, and per VAE decode before scoring "
        "(default: the whole rollout at once); lower it so a large samples_per_prompt fits. The same samples.",
    )


class DiffusionRolloutSection(RolloutSection):
    """`[rollout]` of jobs on a prompt list, which also sets the sample size."""

    height: int | None = Field(
        None,
        gt=0,
        description="Sample height (default: the family's RL size, 512 for SD3 as the references, but never above "
        "the pipeline's own size or what its transformer can position-embed; else the pipeline's own).",
    )
    width: int | None = Field(None, gt=0, description="Sample width (default: as height).")
    num_frames: int | None = Field(
        None, gt=0, description="Video families: frames (default: the pipeline's)."
    )


class RLLoraSection(LoraSection):
    """`[lora]` for diffusion RL: the references' rank 32, alpha 64, on the family's attention (and MLP) modules."""

    r: int = Field(32, gt=0, description="The adapters' rank (DiffusionNFT, FlowGRPO: 32).")
    alpha: int = Field(
        64, gt=0, description="Scale numerator: the update is (alpha / r) B A (the references: 64)."
    )
    target_modules: list[str] | Literal["all-linear"] | None = Field(
        default=None,
        description="Default: the family's, as the references (SD3: both attention streams; SANA: attn1 and attn2; "
        "Cosmos: attention and MLP).",
    )


class RLEvalSection(PromptListData):
    """`[eval]`: held-out prompts, sampled deterministically by the pipeline's own sampler (with the EMA weights when
    kept) every `every` optimizer steps and at the end, scored by the job's rewards: `eval/reward` and
    `eval/<reward>` in the logs, samples under `output_dir/eval/step_N/`, `output_dir/curves.png` at the end.
    An algorithm whose reference evaluates at another guidance subclasses it with that `guidance_scale` default."""

    split: str = Field("test", min_length=1, description="For a folder: which split's file to read.")
    every: int = Field(10, gt=0, description="Evaluate every this many optimizer steps (and at the end).")
    sampling_steps: int = Field(40, gt=0, description="Sampler steps (the references evaluate at 40).")
    guidance_scale: float | None = Field(
        None, ge=1.0, description="Classifier-free guidance (default: the pipeline's own)."
    )
    seed: int = Field(0, ge=0, description="Sample i samples from seed + i, the same at every evaluation.")
    samples_per_prompt: int = Field(1, gt=0, description="Samples per prompt (GenEval draws 4).")
    rewards: RewardTable | None = Field(
        None,
        description="Rewards that score the evaluation, e.g. a strict form of the training reward (default: the "
        "job's). With GenEval metadata, each task's mean is logged too (eval/reward/<tag>).",
    )


def ema_warmup_field() -> Any:
    """The `ema_warmup` field of an RL algorithm's section (beside its `ema_decay`)."""
    return Field(
        True,
        description="Ramp the EMA's decay up as min((1 + step) / (10 + step), ema_decay), the references' (it averages "
        "about (step + 10) / 9 steps: 4 at step 24); false: ema_decay from the first step, an average over about "
        "1 / (1 - ema_decay) steps for a short run.",
    )


def eval_field() -> Any:
    """The `eval` field of a diffusion RL job (absent: no evaluation); an algorithm with its own `[eval]` section
    re-declares it: `eval: TheEvalSection | None = eval_field()`."""
    return Field(
        None,
        description="Held-out prompts sampled by the pipeline's own sampler and scored by the job's rewards, before "
        "training, every `every` steps and at the end (logs eval/reward, writes output_dir/eval/step_N/ and "
        "output_dir/curves.png).",
    )


class DiffusionRLJob(DiffusionJob):
    """The sections every diffusion RL job has; each algorithm adds its own and says how many timesteps a
    sample trains on (`train_timesteps`)."""

    lora: RLLoraSection | None = Field(
        None, description="A PEFT LoRA on the transformer; absent: full fine-tuning."
    )
    data: PromptListData
    rewards: RewardTable = Field(min_length=1, description="Image/video rewards and their weights.")
    rollout: DiffusionRolloutSection = DiffusionRolloutSection()
    eval: RLEvalSection | None = eval_field()
    train: DiffusionTrainSection

    train_defaults: ClassVar[dict[str, Any]] = REFERENCE_OPTIMIZER
    size_keys: ClassVar[tuple[str, str]] = ("[rollout] height", "[rollout] width")

    def train_timesteps(self) -> int:
        """Training timesteps per sample and rollout."""
        raise NotImplementedError

    def kl_beta(self) -> float:
        """The weight of a KL term to the frozen base (0: none), from the algorithm's own section."""
        return 0.0

    def weight_copies(self) -> tuple[str, ...]:
        # The frozen base of a KL term: a LoRA reaches it by disabling its adapters, full fine-tuning keeps a copy.
        reference = ("reference",) if self.kl_beta() > 0 and self.lora is None else ()
        return super().weight_copies() + reference

    def rollout_chunks(self) -> int:
        """The chunks of at most `[rollout] train_batch_size` samples each rollout (of this process) is cut into."""
        from transformers import TrainingArguments

        defaults = {f.name: f.default for f in dataclasses.fields(TrainingArguments)}
        prompts = self.train.per_device_train_batch_size or defaults["per_device_train_batch_size"]
        return math.ceil(prompts * self.rollout.samples_per_prompt / self.rollout.train_batch_size)

    def micro_batches_per_update(self) -> int:
        """The gradient accumulation of one optimizer step: its share of the rollout's chunks, each at every trained
        timestep. The trainer cuts each rollout into exactly `updates_per_rollout` times this many micro-batches."""
        return self.rollout_chunks() // self.rollout.updates_per_rollout * self.train_timesteps()

    def forced_arguments(self) -> dict[str, Any]:
        return {"gradient_accumulation_steps": self.micro_batches_per_update()}

    def sample_size(
        self, family: Any, pipeline_size: tuple = (None, None, None), max_side: int | None = None
    ) -> tuple:
        """(height, width, frames) of the rollouts (`rl_sample_size`)."""
        return rl_sample_size(self.rollout, family, pipeline_size, max_side)

    def text_tokens(self, family: Any) -> int | None:
        """`[rollout]`'s text length, else the family's RL length (`rl_sample_defaults`), else None (the
        pipeline's own)."""
        if self.rollout.max_sequence_length is not None:
            return self.rollout.max_sequence_length
        return family.rl_sample_defaults.get("max_sequence_length")

    def activation_batch(
        self, args: Any, family: Any = None, configured: tuple | None = None
    ) -> ActivationBatch:
        height, width, frames = self.sample_size(family, *(configured or NOT_CONFIGURED))
        size = (height or 512, width or height or 512, frames)
        return ActivationBatch(self.rollout.train_batch_size, size=size, text_tokens=self.text_tokens(family))

    @model_validator(mode="after")
    def _rollouts_split_evenly(self):
        chunks, updates = self.rollout_chunks(), self.rollout.updates_per_rollout
        if chunks % updates:
            raise ValueError(
                f"[rollout] updates_per_rollout = {updates} must divide the rollout's {chunks} chunks of "
                f"train_batch_size samples (per_device_train_batch_size x samples_per_prompt / train_batch_size)"
            )
        save_steps = self.train.save_steps
        # save_steps below 1 is a fraction of the run, which lands where it may: refuse it with several updates.
        if updates > 1 and save_steps is not None and (save_steps < 1 or int(save_steps) % updates):
            raise ValueError(
                f"[train] save_steps = {save_steps:g} must be a multiple of [rollout] updates_per_rollout = "
                f"{updates}, so checkpoints fall between rollouts (resume restarts at a rollout)"
            )
        return self


def rl_sample_size(
    rollout: RolloutSection,
    family: Any,
    pipeline_size: tuple = (None, None, None),
    max_side: int | None = None,
) -> tuple:
    """(height, width, frames) of the rollouts: `[rollout]`'s (width defaulting to height), else the family's RL
    size (`rl_sample_defaults`: 512 for SD3, as the references) but never above the pipeline's own size
    (`pipeline_size`, its default) nor above what its transformer can take (`max_side`); None where unknown."""
    pipeline_height, pipeline_width, pipeline_frames = pipeline_size
    defaults = family.rl_sample_defaults

    def default(key: str, pipeline_value: int | None) -> int | None:
        chosen = defaults.get(key) or pipeline_value
        known = [value for value in (chosen, pipeline_value, max_side) if value]
        return min(known) if chosen else chosen

    height = getattr(rollout, "height", None)
    width = getattr(rollout, "width", None) or height
    return (
        height or default("height", pipeline_height),
        width or default("width", pipeline_width),
        getattr(rollout, "num_frames", None) or pipeline_frames,
    )
