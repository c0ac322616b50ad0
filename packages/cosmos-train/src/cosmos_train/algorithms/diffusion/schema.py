"""What every diffusion job (flow-matching SFT and the RL kinds) declares: a diffusers pipeline, a LoRA or full
fine-tuning, and `[train]` as transformers' `TrainingArguments`, whose batches hold pixels and prompts rather than
model inputs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field

from ...config import JobSchema, LoraSection, PipelineSection, build_training_arguments, trainer_section
from ...launch import backend_arguments, device_defaults

if TYPE_CHECKING:
    from transformers import TrainingArguments

# `DiffusionAdapter.configured_size` when the pipeline's configs are not at hand: nothing known.
NOT_CONFIGURED = ((None, None, None), None)

DiffusionTrainSection = trainer_section(
    "transformers:TrainingArguments",
    name="DiffusionTrainSection",
    overrides={
        "output_dir": (str, ...),
        "resume_from_checkpoint": (bool, None),
    },
)


class DiffusionJob(JobSchema):
    """The sections every diffusion job has; each kind adds its data, its own section, and
    `train: DiffusionTrainSection` last (fields keep their declaration order in the job reference)."""

    model: PipelineSection
    lora: LoraSection | None = Field(
        None, description="A PEFT LoRA on the transformer; absent: full fine-tuning."
    )

    # The keys that set the size it samples or trains at, for messages.
    size_keys: ClassVar[tuple[str, str]] = ("[data] height", "[data] width")

    def sample_size(
        self, family: Any, pipeline_size: tuple = (None, None, None), max_side: int | None = None
    ) -> tuple[int | None, int | None, int | None]:
        """(height, width, frames) the job samples or trains at, given its family (the adapter class), the
        pipeline's own size and the largest side its transformer takes (`DiffusionAdapter.configured_size`)."""
        raise NotImplementedError

    def ema_decay(self) -> float | None:
        """The decay of the EMA of the trained weights the job keeps (None: none), from the kind's own section."""
        return None

    def ema_warmup(self) -> bool:
        """Whether the EMA's decay ramps up as the references' (`ExponentialAverage`)."""
        return True

    def weight_copies(self) -> tuple[str, ...]:
        return ("ema",) if self.ema_decay() else ()

    def fully_trained_parameters(self) -> str | None:
        """A pattern of the transformer's parameter names that train in full beside the LoRA or the family's
        choice (None: none), for the memory estimate."""
        return None

    def forced_arguments(self) -> dict[str, Any]:
        """`TrainingArguments` values the job's other sections own (`[train]` may not contradict them)."""
        return {}

    def training_arguments(self, source: str, launch: bool = True) -> TrainingArguments:
        from transformers import TrainingArguments

        forced = {
            "remove_unused_columns": False,
            **(backend_arguments(self.launch.backend) if launch else {}),
            **self.forced_arguments(),
        }
        return build_training_arguments(
            TrainingArguments,
            self.train,
            source,
            forced=forced,
            defaults=device_defaults(self.launch.backend) | self.train_defaults,
            # A diffusers model is no transformers PreTrainedModel: the trainer turns diffusers' own
            # gradient checkpointing on instead.
            exclude=("resume_from_checkpoint", "gradient_checkpointing"),
        )
