"""The SFT job (`kind = "sft"`, the default): its schema, and its mapping onto TRL's `SFTConfig`.

`[train]` takes `SFTConfig` fields verbatim, type- and range-checked. The other sections own a few
`SFTConfig` fields (`[data] max_length` and `packing`, `[launch] backend`); `[train]` may not
contradict them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from ...config import (
    ActivationBatch,
    ConversationData,
    JobSchema,
    LoraSection,
    ModelSection,
    build_training_arguments,
    trainer_section,
)
from ...launch import backend_arguments, device_defaults

if TYPE_CHECKING:
    from trl import SFTConfig

SFTTrainSection = trainer_section(
    "trl:SFTConfig",
    name="SFTTrainSection",
    overrides={
        "output_dir": (str, ...),
        # true resumes from the latest *complete* checkpoint in output_dir (see checkpoints.py).
        "resume_from_checkpoint": (bool, None),
    },
)


class SFTJob(JobSchema):
    model: ModelSection
    lora: LoraSection | None = Field(None, description="A PEFT LoRA; absent: full fine-tuning.")
    data: ConversationData
    train: SFTTrainSection

    def activation_batch(
        self, args: Any, family: Any = None, configured: tuple | None = None
    ) -> ActivationBatch:
        return ActivationBatch(args.per_device_train_batch_size, args.max_length or self.data.max_length)

    def training_arguments(self, source: str, launch: bool = True) -> SFTConfig:
        from trl import SFTConfig

        forced: dict[str, Any] = {
            "max_length": self.data.max_length,
            "packing": self.data.packing,
            "padding_free": self.data.packing,
            # Our data layer masks the loss (`[data] train_on`) from any prefix-preserving chat template;
            # TRL's switch would try to swap the template for one with generation markers.
            "assistant_only_loss": False,
            "model_init_kwargs": None,
            # VLM batches are built from the raw conversations by our collator, which needs every column.
            "remove_unused_columns": False,
            **(backend_arguments(self.launch.backend) if launch else {}),
        }
        if self.data.packing:
            forced["packing_strategy"] = "bfd"
        return build_training_arguments(
            SFTConfig,
            self.train,
            source,
            forced=forced,
            defaults=device_defaults(self.launch.backend),
            exclude=("resume_from_checkpoint",),
        )
